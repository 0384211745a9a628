"""Request dependencies as `Annotated` aliases, so routes declare what they need in one word."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from advisor.api.context import AppContext


def get_ctx(request: Request) -> AppContext:
    ctx: AppContext = request.app.state.ctx
    return ctx


def get_session(ctx: Annotated[AppContext, Depends(get_ctx)]) -> Iterator[Session]:
    with ctx.sessions() as session:
        yield session


Ctx = Annotated[AppContext, Depends(get_ctx)]
DbSession = Annotated[Session, Depends(get_session)]
