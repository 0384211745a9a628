"""Request dependencies as `Annotated` aliases, so routes declare what they need in one word."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Request, status
from sqlalchemy.orm import Session

from advisor.api.context import AppContext
from advisor.settings import AdvisorSettings


async def get_ctx(request: Request) -> AppContext:
    """The app's context. `async` (though trivial) so FastAPI does not hop to the thread pool to call it."""
    ctx: AppContext = request.app.state.ctx
    return ctx


def get_session(ctx: Annotated[AppContext, Depends(get_ctx)]) -> Iterator[Session]:
    with ctx.sessions() as session:
        yield session


def token_problem(settings: AdvisorSettings, authorization: str | None) -> str | None:
    """Why `authorization` may not write, or None when it may: it carries the configured bearer token, or no token
    is configured and unauthenticated writes are explicitly allowed."""
    expected = settings.api_token
    if not expected:
        if settings.allow_unauthenticated_writes:
            return None
        return (
            "Authorization: this advisor has no API token configured (GPUADVISOR_API_TOKEN), so it takes no writes; "
            "configure one (or GPUADVISOR_ALLOW_UNAUTHENTICATED_WRITES=true on a test stack)"
        )
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(given.strip().encode(), expected.encode()):
        return "Authorization: a valid `Bearer` token (GPUADVISOR_API_TOKEN) is required"
    return None


async def require_token(
    ctx: Annotated[AppContext, Depends(get_ctx)],
    authorization: Annotated[str | None, Header(description="`Bearer <GPUADVISOR_API_TOKEN>`")] = None,
) -> None:
    """Reject the request (401) unless it carries the configured bearer token (`token_problem`)."""
    problem = token_problem(ctx.settings, authorization)
    if problem is not None:
        raise HTTPException(
            status_code=status.HTTP_401_UNAUTHORIZED, detail=problem, headers={"WWW-Authenticate": "Bearer"}
        )


Ctx = Annotated[AppContext, Depends(get_ctx)]
DbSession = Annotated[Session, Depends(get_session)]
Authorized = Depends(require_token)
