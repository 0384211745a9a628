"""Bad requests answered as 4xx that name the field, never a 5xx or an echo of the input.

FastAPI's defaults fail a scheduler in three ways this module closes: the body is parsed with `json.loads`, which takes
`NaN`, `Infinity` and `1e400` as floats that later fail to serialise (a 500); its 422 echoes the offending input (a
10 MB body comes back as a 10 MB error, a NaN makes it a 500); and nothing bounds the body's size. So:

* `StrictJsonRoute` parses request bodies as strict UTF-8 JSON with finite numbers; anything else is a 422 whose
  `loc` is the path of the offending value (a key or string with invalid UTF-8, a non-finite number).
* Every 422 has the documented `HTTPValidationError` shape (`detail`: a list of `{loc, msg, type}`, the message
  prefixed with the field's dotted path), at most `MAX_ERRORS` entries, without the input.
* `BodyLimit` answers 413 with one line once a body grows past its route's limit, before FastAPI reads it.
* Every other error is `{"detail": "<one line>"}` (`ErrorOut`); store outages are 503 with the reason.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import anyio.to_thread
from fastapi import FastAPI, HTTPException, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, Field
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from advisor.api.limits import LARGE_BODY_BYTES, RETRY_AFTER_SECONDS, MemoryBudget
from advisor.cluster.pods import PodSpecError
from profiler.store import db

log = logging.getLogger(__name__)

# A client that gets everything wrong learns enough from the first few; the rest would only grow the answer.
MAX_ERRORS = 20
# Longest message kept in an error (pydantic's own stay far below; this bounds what an exception may carry).
MAX_MESSAGE_CHARS = 300

Loc = tuple[str | int, ...]


class ErrorOut(BaseModel):
    """Every 4xx/5xx other than 422: one line saying what is wrong (and for a field, which one)."""

    detail: str = Field(description="What went wrong, naming the field or setting concerned.")


class FieldError(BaseModel):
    loc: list[str | int] = Field(description='Where in the request: `["body", "pod", "gpus"]`, `["query", ...]`.')
    msg: str = Field(description="What is wrong with it, prefixed with the field's dotted path.")
    type: str = Field(description="Machine-readable kind of the error (pydantic's error type).")


class ValidationErrorOut(BaseModel):
    """A 422: the request parsed as HTTP but its content is wrong; one entry per wrong field (at most 20)."""

    detail: list[FieldError]


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    422: {"model": ValidationErrorOut, "description": "A field is missing, malformed or out of range."},
    413: {"model": ErrorOut, "description": "The body is larger than this route takes."},
}


def _printable(part: str | int) -> str | int:
    """A location part or message as it can be answered: surrogates (undecodable bytes of the body, or unpaired
    `\\udXXX` escapes) replaced by U+FFFD, which UTF-8 can encode."""
    if isinstance(part, str) and not part.isascii() and any("\ud800" <= ch <= "\udfff" for ch in part):
        return "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in part)
    return part


def documented(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for a route's own error codes, each `{"detail": "..."}` (`ErrorOut`)."""
    return {code: {"model": ErrorOut, "description": _WHY[code]} for code in codes}


_WHY = {
    401: "No valid bearer token (or none configured and unauthenticated writes not allowed).",
    404: "The named node, run or job is not known.",
    409: "Conflicts with what is running or exists.",
    503: "A backend this instance needs (the store, the Kubernetes API) is unavailable; the reason is given.",
}


def field_error(loc: Sequence[str | int], msg: str, kind: str = "value_error") -> dict[str, Any]:
    """One `FieldError` as JSON, its message prefixed with the field's path (without the leading `body`)."""
    where = [_printable(part) for part in loc]
    path = ".".join(str(part) for part in (where[1:] if where and where[0] in {"body", "query", "path"} else where))
    text = msg if not path else f"{path}: {msg}"
    return {"loc": where, "msg": str(_printable(text[:MAX_MESSAGE_CHARS])), "type": kind}


def unprocessable(errors: Sequence[dict[str, Any]]) -> JSONResponse:
    return JSONResponse({"detail": list(errors[:MAX_ERRORS])}, status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)


def pydantic_errors(errors: Sequence[Any], prefix: Loc = ()) -> list[dict[str, Any]]:
    """pydantic's errors as `FieldError`s: without the input (which may be huge, or NaN) and its context."""
    return [
        field_error((*prefix, *e["loc"]), str(e["msg"]), str(e["type"]))
        for e in errors[:MAX_ERRORS]
        if isinstance(e, dict)
    ]


def message_error(message: str, prefix: Loc = ("body",)) -> dict[str, Any]:
    """A `FieldError` from a message of the house form `field.path: what is wrong` (`PodSpecError`, `SpecError`).

    The path stays one `loc` element as written: it is relative to the pod or resource, wherever that sits in the
    body, and its keys may hold dots themselves (`limits.nvidia.com/gpu`)."""
    head, sep, rest = message.partition(": ")
    if sep and head and " " not in head:
        return field_error((*prefix, head), rest)
    return field_error(prefix, message)


# --------------------------------------------------------------------------------------------------------------------
# Strict JSON


class BodyError(ValueError):
    """A request body that is not strict JSON; `loc` is where (as far as it can be told)."""

    def __init__(self, loc: Loc, msg: str, kind: str) -> None:
        super().__init__(msg)
        self.loc = loc
        self.msg = msg
        self.kind = kind

    def as_error(self) -> dict[str, Any]:
        return field_error(self.loc, self.msg, self.kind)


def _walk(value: Any, loc: Loc = ("body",)) -> Iterator[tuple[Loc, Any]]:
    """Every key and leaf of a parsed JSON document with its location, depth first, without recursion (a deeply
    nested body must not exhaust the stack here either)."""
    stack: list[tuple[Loc, Any]] = [(loc, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, dict):
            for key, child in reversed(list(item.items())):
                yield (*where, key), key
                stack.append(((*where, key), child))
        elif isinstance(item, list):
            stack.extend(reversed([((*where, i), child) for i, child in enumerate(item)]))
        else:
            yield where, item


def _first(value: Any, bad: Callable[[Any], bool]) -> Loc | None:
    return next((loc for loc, leaf in _walk(value) if bad(leaf)), None)


def _has_surrogate(leaf: Any) -> bool:
    """A key or string holding a surrogate: an undecodable byte (surrogateescape) or an unpaired `\\udXXX` escape
    (a valid pair decodes to one character beyond U+FFFF)."""
    return isinstance(leaf, str) and not leaf.isascii() and any("\ud800" <= ch <= "\udfff" for ch in leaf)


def _non_finite(leaf: Any) -> bool:
    return isinstance(leaf, float) and not math.isfinite(leaf)


def parse_json(body: bytes) -> Any:
    """The body as JSON: UTF-8, finite numbers only; `BodyError` says what is wrong and where."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        where: Loc | None = None
        with contextlib.suppress(ValueError, RecursionError):
            where = _first(json.loads(body.decode("utf-8", "surrogateescape")), _has_surrogate)
        raise BodyError(where or ("body",), f"invalid UTF-8 (byte {e.start} of the body)", "utf8_invalid") from None
    non_finite = False

    def on_float(raw: str) -> float:
        nonlocal non_finite
        number = float(raw)
        non_finite = non_finite or not math.isfinite(number)
        return number

    def on_constant(raw: str) -> float:
        nonlocal non_finite
        non_finite = True
        return float(raw)

    try:
        value = json.loads(text, parse_float=on_float, parse_constant=on_constant)
    except json.JSONDecodeError as e:
        raise BodyError(
            ("body",), f"invalid JSON: {e.msg} (line {e.lineno}, column {e.colno})", "json_invalid"
        ) from None
    except (ValueError, RecursionError) as e:  # an integer of more than 4,300 digits; nesting past the stack
        raise BodyError(("body",), f"invalid JSON: {str(e)[:100]}", "json_invalid") from None
    if ("\\ud" in text or "\\uD" in text) and (unpaired := _first(value, _has_surrogate)) is not None:
        # Nothing downstream could encode it again (a 500 on the way out); only bodies with such escapes are walked.
        raise BodyError(unpaired, "invalid Unicode: an unpaired surrogate escape", "unicode_invalid")
    if non_finite:
        raise BodyError(
            _first(value, _non_finite) or ("body",),
            "must be a finite number (NaN, Infinity and overflowing numbers are not)",
            "finite_number",
        )
    return value


class StrictJsonRequest(Request):
    """A request whose `json()` is `parse_json`: FastAPI's body parsing goes through it."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                if len(body) > LARGE_BODY_BYTES:  # off the event loop: the other requests go on meanwhile
                    self._json = await anyio.to_thread.run_sync(parse_json, body)
                else:
                    self._json = parse_json(body)
            except BodyError as e:
                raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=[e.as_error()]) from None
        return self._json


class StrictJsonRoute(APIRoute):
    """The route class of every router: bodies parse strictly (`StrictJsonRequest`)."""

    def get_route_handler(self) -> Callable[[Request], Any]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            response: Response = await handler(StrictJsonRequest(request.scope, request.receive))
            return response

        return strict


# --------------------------------------------------------------------------------------------------------------------
# Body limits


class BodyLimit:
    """ASGI middleware: 413 (one line) once a request body exceeds its route's limit, 503 with Retry-After when the
    memory budget cannot take it now, else the body goes on.

    `limit_of(path)` gives the limit in bytes (None: unlimited, e.g. GET routes have no body). A declared
    Content-Length over the limit is refused before reading; otherwise the body is buffered up to the limit and
    handed on in one piece, so nothing downstream ever holds more. With a `budget` (`advisor.api.limits`) the body
    reserves its parse memory before it is read (the declared length at once, else as it arrives) and holds it until
    the answer is sent; `refused` is told of each body turned away for it.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        limit_of: Callable[[str], int | None],
        budget: MemoryBudget | None = None,
        refused: Callable[[str], None] | None = None,
    ) -> None:
        self.app = app
        self.limit_of = limit_of
        self.budget = budget
        self.refused = refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # noqa: PLR0912 - one pass over a body on the hot path
        limit = self.limit_of(scope["path"]) if scope["type"] == "http" else None
        if limit is None:
            await self.app(scope, receive, send)
            return
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _too_large(scope, receive, send, limit)
            return
        granted = 0
        try:
            if declared is not None and declared.isdigit() and int(declared) > 0:
                if not self._grow(granted, int(declared)):
                    await _busy(scope, receive, send)
                    return
                granted = int(declared)
            chunks: list[bytes] = []
            size = 0
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                chunk = message.get("body", b"")
                if chunk:
                    chunks.append(chunk)
                    size += len(chunk)
                if size > limit:
                    await _too_large(scope, receive, send, limit)
                    return
                if size > granted:
                    if not self._grow(granted, size):
                        await _busy(scope, receive, send)
                        return
                    granted = size
                if not message.get("more_body", False):
                    break
            body = b"".join(chunks)  # one copy (none for a body that came in one chunk): Volcano's are ~14 MB
            del chunks
            await self.app(scope, replaying(body, receive), send)
        finally:
            if granted and self.budget is not None:
                self.budget.release(granted)

    def _grow(self, granted: int, size: int) -> bool:
        if self.budget is None or self.budget.grow(granted, size):
            return True
        if self.refused is not None:
            self.refused("memory_budget")
        return False


def replaying(body: bytes, receive: Receive) -> Receive:
    """An ASGI `receive` for a request whose body was read already: `body` in one message, then the connection's own
    messages (a disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


_CLOSE = {"Connection": "close"}


async def _busy(scope: Scope, receive: Receive, send: Send) -> None:
    """503 for a body the memory budget cannot take now; the connection closes, so its unread rest is not read."""
    detail = "the advisor is parsing as many request bodies as its memory allows; retry"
    headers = {"Retry-After": str(RETRY_AFTER_SECONDS), **_CLOSE}
    response = JSONResponse({"detail": detail}, status_code=status.HTTP_503_SERVICE_UNAVAILABLE, headers=headers)
    await response(scope, receive, send)


async def _too_large(scope: Scope, receive: Receive, send: Send, limit: int) -> None:
    detail = f"body: {scope['path']} takes at most {limit} bytes"
    # closed after the answer: the rest of the body is not worth reading
    response = JSONResponse({"detail": detail}, status_code=status.HTTP_413_CONTENT_TOO_LARGE, headers=_CLOSE)
    await response(scope, receive, send)


# --------------------------------------------------------------------------------------------------------------------
# Handlers


def install_handlers(app: FastAPI) -> None:
    """422s in the documented shape, pod errors as 422, store outages as 503, every other error one line."""

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return unprocessable(pydantic_errors(exc.errors()))

    @app.exception_handler(PodSpecError)
    async def bad_pod(request: Request, exc: PodSpecError) -> JSONResponse:
        return unprocessable([message_error(str(exc))])

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail: Any = exc.detail
        if exc.status_code == status.HTTP_422_UNPROCESSABLE_CONTENT and isinstance(detail, str):
            return unprocessable([message_error(detail)])
        if isinstance(detail, str):
            detail = str(_printable(detail.splitlines()[0][:MAX_MESSAGE_CHARS])) if detail else ""
        return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(SQLAlchemyError)
    async def store_down(request: Request, exc: SQLAlchemyError) -> JSONResponse:
        return _unavailable(f"the store is unavailable: {exc.__class__.__name__}", exc)

    @app.exception_handler(db.StoreError)
    async def store_error(request: Request, exc: db.StoreError) -> JSONResponse:
        return _unavailable(f"the store is unavailable: {str(exc).splitlines()[0]}", exc)


_logged: set[str] = set()


def _unavailable(reason: str, exc: Exception) -> JSONResponse:
    if exc.__class__.__name__ not in _logged:  # once per kind: an outage must not flood the log
        _logged.add(exc.__class__.__name__)
        log.warning("%s (%s); answering 503 until it is back", reason, str(exc).splitlines()[0][:200])
    return JSONResponse({"detail": reason}, status_code=status.HTTP_503_SERVICE_UNAVAILABLE)
