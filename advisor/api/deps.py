"""Request dependencies as `Annotated` aliases, so routes declare what they need in one word."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated, Any

from fastapi import Depends, Header, HTTPException, Request, status
from fastapi.responses import JSONResponse, Response
from sqlalchemy.orm import Session

from advisor.api.auth import WriteScope, token_problem
from advisor.api.context import AppContext
from advisor.api.errors import StrictJsonRoute


async def get_ctx(request: Request) -> AppContext:
    """The app's context. `async` (though trivial) so FastAPI does not hop to the thread pool to call it."""
    ctx: AppContext = request.app.state.ctx
    return ctx


def get_session(ctx: Annotated[AppContext, Depends(get_ctx)]) -> Iterator[Session]:
    with ctx.sessions() as session:
        yield session


def _unauthorized(problem: str) -> HTTPException:
    return HTTPException(
        status_code=status.HTTP_401_UNAUTHORIZED, detail=problem, headers={"WWW-Authenticate": "Bearer"}
    )


async def require_training_token(
    ctx: Annotated[AppContext, Depends(get_ctx)],
    authorization: Annotated[
        str | None, Header(description="`Bearer <GPUADVISOR_TRAINING_TOKEN>` (unset: GPUADVISOR_API_TOKEN)")
    ] = None,
) -> None:
    """Reject the request (401) unless it carries the training token (`token_problem`)."""
    problem = token_problem(ctx.settings, authorization, WriteScope.TRAINING)
    if problem is not None:
        raise _unauthorized(problem)


async def require_trialrun_token(
    ctx: Annotated[AppContext, Depends(get_ctx)],
    authorization: Annotated[
        str | None, Header(description="`Bearer <GPUADVISOR_TRIALRUN_TOKEN>` (unset: GPUADVISOR_API_TOKEN)")
    ] = None,
) -> None:
    """Reject the request (401) unless it carries the trial-run token (`token_problem`)."""
    problem = token_problem(ctx.settings, authorization, WriteScope.TRIALRUNS)
    if problem is not None:
        raise _unauthorized(problem)


_SCOPES: dict[Callable[..., Any], WriteScope] = {
    require_training_token: WriteScope.TRAINING,
    require_trialrun_token: WriteScope.TRIALRUNS,
}


class TokenFirstRoute(StrictJsonRoute):
    """The route class of routers with write routes: a route that depends on `TrainingAuthorized` or
    `TrialRunAuthorized` checks its token before its body is read or parsed, so a caller without it learns nothing
    from validation errors and costs no parse."""

    def get_route_handler(self) -> Callable[[Request], Any]:
        handler = super().get_route_handler()
        scopes = [_SCOPES[d.dependency] for d in self.dependencies if d.dependency in _SCOPES]
        if not scopes:
            return handler
        scope = scopes[0]

        async def token_first(request: Request) -> Response:
            ctx: AppContext = request.app.state.ctx
            problem = token_problem(ctx.settings, request.headers.get("authorization"), scope)
            if problem is not None:
                headers = {"WWW-Authenticate": "Bearer"}
                return JSONResponse({"detail": problem}, status_code=status.HTTP_401_UNAUTHORIZED, headers=headers)
            response: Response = await handler(request)
            return response

        return token_first


Ctx = Annotated[AppContext, Depends(get_ctx)]
DbSession = Annotated[Session, Depends(get_session)]
TrainingAuthorized = Depends(require_training_token)
TrialRunAuthorized = Depends(require_trialrun_token)
