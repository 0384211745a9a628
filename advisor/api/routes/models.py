"""The model registry as the service sees it, and training in the background (bearer token)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, HTTPException, status
from sqlalchemy.exc import SQLAlchemyError

from advisor.api.deps import Ctx, DbSession, TokenFirstRoute, TrainingAuthorized
from advisor.api.errors import ERROR_RESPONSES, documented
from advisor.api.schemas import ModelsOut, ModelVersionOut, ServedModelOut, TrainingJobOut, TrainRequest
from advisor.serving import TrainingJob
from profiler.store import repo

router = APIRouter(prefix="/v1/models", tags=["models"], route_class=TokenFirstRoute, responses=ERROR_RESPONSES)


def _job_out(job: TrainingJob) -> TrainingJobOut:
    return TrainingJobOut(
        id=job.id,
        kinds=list(job.kinds),
        state=job.state,
        status_url=f"/v1/models/train/{job.id}",
        created_at=job.created_at.isoformat(),
        finished_at=job.finished_at.isoformat() if job.finished_at else None,
        results=job.results,
        error=job.error,
    )


@router.get("", response_model=ModelsOut, responses=documented(503))
def list_models(session: DbSession, ctx: Ctx) -> ModelsOut:
    """Every registered version (newest last per kind) and what answers each scoring question right now.

    503 when the store cannot be read (scoring goes on with whatever was loaded).
    """
    try:
        rows = repo.list_model_versions(session=session)
    except SQLAlchemyError as e:
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE, f"model registry unreadable: {e.__class__.__name__}"
        ) from e
    versions = [
        ModelVersionOut(
            kind=v.kind,
            version=v.version,
            promoted=v.promoted,
            artifact_path=v.artifact_path,
            metrics=v.metrics,
            created_at=v.created_at.isoformat(),
            promoted_at=v.promoted_at.isoformat() if v.promoted_at else None,
        )
        for v in rows
    ]
    served = {kind: ServedModelOut(**info) for kind, info in ctx.models.served().items()}
    return ModelsOut(
        versions=versions, serving=ctx.predictors.names(), served=served, answers=ctx.models.answers.snapshot()
    )


@router.post(
    "/train",
    response_model=TrainingJobOut,
    status_code=status.HTTP_202_ACCEPTED,
    dependencies=[TrainingAuthorized],
    responses=documented(401, 409, 503),
)
def start_training(ctx: Ctx, body: Annotated[TrainRequest | None, Body()] = None) -> TrainingJobOut:
    """Train the given kinds (all without a body) on the store's data in the background; poll `status_url`.

    409 while another training is running.
    """
    body = body or TrainRequest()
    try:
        job = ctx.training.start(tuple(dict.fromkeys(body.kinds)), force=body.force)
    except RuntimeError as e:
        raise HTTPException(status.HTTP_409_CONFLICT, str(e)) from e
    return _job_out(job)


@router.get("/train/{job_id}", response_model=TrainingJobOut, responses=documented(404))
def training_status(job_id: str, ctx: Ctx) -> TrainingJobOut:
    """State of one training job: queued, running, succeeded (with each kind's version and metrics) or failed."""
    job = ctx.training.get(job_id)
    if job is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"job_id: no training job {job_id!r}")
    return _job_out(job)
