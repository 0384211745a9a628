"""Request dependencies as `Annotated` aliases, so routes declare what they need in one word."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Request, status
from sqlalchemy.orm import Session

from advisor.api.auth import token_problem
from advisor.api.context import AppContext


async def get_ctx(request: Request) -> AppContext:
    """The app's context. `async` (though trivial) so FastAPI does not hop to the thread pool to call it."""
    ctx: AppContext = request.app.state.ctx
    return ctx


def get_session(ctx: Annotated[AppContext, Depends(get_ctx)]) -> Iterator[Session]:
    with ctx.sessions() as session:
        yield session


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
