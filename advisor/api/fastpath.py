"""Answers for the scheduler's hottest JSON routes ahead of FastAPI's routing, with the routes' own code.

kube-scheduler calls `/extender/prioritize` for every pod and `/v1/score` callers ask about hundreds of nodes at a
time; FastAPI's routing, dependency resolution and response handling cost about a fifth of such a call. `JsonFastPath`
answers a valid request to one of those paths itself, through the same function the route calls. Anything else — a
body that is not JSON of the route's model, a content type FastAPI would not read as JSON, any error while answering
(a 404 for an unknown node, say) — goes on to the app with the body replayed, and is answered there exactly as it
always was; each kind of fall-back (a path and why: the content type, or the class of what the answer raised) is
logged once, so a fast path that stopped answering shows in the log. It sits inside the body limit and the timing
middleware and names the route for the latter, so limits and latency metrics are the route's own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import anyio.to_thread
import msgspec
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from advisor.api.context import AppContext
from advisor.api.errors import replaying
from advisor.api.limits import LARGE_BODY_BYTES

log = logging.getLogger(__name__)

_DECODE = msgspec.json.Decoder().decode


def decode_json(body: bytes) -> Any:
    """The body as JSON, for an answer here: msgspec's decoder, ~5x faster than `errors.parse_json` on a
    prioritize body. It raises on everything `parse_json` refuses (invalid UTF-8, NaN and Infinity, numbers that
    overflow a float, unpaired surrogate escapes; integers past 64 bits too), so the route answers those with its
    own 422; what it accepts decodes to the values `json.loads` gives (tests/advisor/test_fastpath.py)."""
    return _DECODE(body)


Answer = Callable[[bytes, AppContext], bytes]
"""A route's whole answer (JSON) to a raw body; raises on anything the route would not answer with a 200."""


def json_content(scope: Scope) -> bool:
    """Whether FastAPI would read the body as JSON: no content type, or application/json (or a +json type)."""
    for name, value in scope["headers"]:
        if name == b"content-type":
            media: bytes = value.split(b";", 1)[0].strip().lower()
            return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))
    return True


def route_named(routes: list[BaseRoute], path: str) -> BaseRoute:
    """The route of a router serving `path` (what the timing middleware reads its template from)."""
    return next(r for r in routes if getattr(r, "path", None) == path)


class JsonFastPath:
    """ASGI middleware: `POST` to a path of `answers` answered by its `Answer` when that succeeds, else by the app."""

    def __init__(self, app: ASGIApp, *, ctx: AppContext, answers: Mapping[str, tuple[BaseRoute, Answer]]) -> None:
        self.app = app
        self.ctx = ctx
        self.answers = answers
        self._fell_back: set[tuple[str, str]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = self.answers.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if found is None:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message: Message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        route, answer = found
        result = None
        why = "not a JSON content type"
        if json_content(scope):
            try:
                if len(body) > LARGE_BODY_BYTES:  # a parse of a second or more: /healthz and the rest go on meanwhile
                    result = await anyio.to_thread.run_sync(answer, body, self.ctx)
                else:
                    result = answer(body, self.ctx)
            except Exception as e:  # whatever it is, the app answers it as it always has
                why = type(e).__name__
        if result is None:
            self._note_fall_back(scope["path"], why)
            await self.app(scope, replaying(body, receive), send)
            return
        scope["route"] = route
        headers = [(b"content-length", str(len(result)).encode()), (b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": result})

    def _note_fall_back(self, path: str, why: str) -> None:
        """Log the first fall-back of each kind (a bad request's 4xx falls back too, so not every one)."""
        if (path, why) not in self._fell_back:
            self._fell_back.add((path, why))
            log.info(
                "fast path for %s fell back to the ordinary route (%s); later ones like it are not logged", path, why
            )
