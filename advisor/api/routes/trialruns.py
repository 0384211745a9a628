"""Trial-run requests and results: `GET/POST /v1/trialruns`, `GET /v1/trialruns/{namespace}/{name}`, `GET /v1/profiles`.

Validation is the profiler's own (`profiler.spec`), so the API rejects what the CLI and the CRD reject, naming the
field. A POST creates the TrialRun resource in the cluster, where the profiler controller runs it; an advisor
started without a Kubernetes API cannot run trials and says so (trials then run with `profile request --local`).
"""

from __future__ import annotations

from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Body, Depends, HTTPException, Query, Request, status

from advisor.api.deps import Ctx, DbSession, TokenFirstRoute, TrialRunAuthorized
from advisor.api.errors import ERROR_RESPONSES, documented
from profiler import views
from profiler.settings import ProfilerSettings
from profiler.spec import SpecError, TrialRun, parse_trialrun
from profiler.store import repo

router = APIRouter(prefix="/v1", tags=["profiles"], route_class=TokenFirstRoute, responses=ERROR_RESPONSES)

TRIALRUN_EXAMPLE = {
    "apiVersion": "gpuadvisor.io/v1alpha1",
    "kind": "TrialRun",
    "metadata": {"name": "resnet50-sweep", "namespace": "ml"},
    "spec": {
        "workload": "resnet50-bs64",
        "image": "registry.example/resnet:1",
        "command": ["python", "train.py", "--batch-size", "$(GPUADVISOR_BATCH_SIZE)"],
        "matrix": {"gpuModels": ["H100"], "gpuCounts": [1, 2], "batchSizes": [64]},
        "maxDurationSeconds": 300,
    },
}


class TrialRunSubmitter(Protocol):
    def submit_trialrun(self, run: TrialRun) -> dict[str, Any]: ...


def get_profiler_settings(request: Request) -> ProfilerSettings:
    """The profiler's settings (the trial duration cap), read once per app."""
    settings: ProfilerSettings | None = getattr(request.app.state, "profiler_settings", None)
    if settings is None:
        settings = ProfilerSettings()
        request.app.state.profiler_settings = settings
    return settings


def get_submitter(request: Request, ctx: Ctx) -> TrialRunSubmitter | None:
    """Where TrialRuns go: the cluster's API (client built once per app), or None without Kubernetes."""
    if ctx.settings.no_kube:
        return None
    submitter: TrialRunSubmitter | None = getattr(request.app.state, "trialrun_submitter", None)
    if submitter is None:
        from collector.kube import KubeError, make_api_client
        from profiler.kube import KubeCluster

        try:
            submitter = KubeCluster(make_api_client())
        except KubeError as e:
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail=str(e)) from e
        request.app.state.trialrun_submitter = submitter
    return submitter


@router.get("/trialruns", responses=documented(503))
def list_trialruns(
    session: DbSession, namespace: Annotated[str | None, Query(description="Only runs of this namespace.")] = None
) -> list[dict[str, Any]]:
    """Trial runs known to the store, newest first, with their phase and trial counts."""
    return views.list_runs(session, namespace)


@router.get("/trialruns/{namespace}/{name}", responses=documented(404, 503))
def get_trialrun(namespace: str, name: str, session: DbSession) -> dict[str, Any]:
    """One trial run with its trials, profiles and co-locations; its env values are redacted (`***`): reads need no
    token, and a trial's env may hold an API key."""
    detail = views.run_detail(session, namespace, name)
    if detail is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no trial run {namespace}/{name}")
    return {**detail, "spec": redacted_env(detail["spec"])}


REDACTED = "***"


def redacted_env(spec: Any) -> Any:
    """A stored TrialRun spec with every env `value` (the run's own and each co-located partner's) replaced by
    `REDACTED`; names, and anything that is not a literal value, stay."""
    if not isinstance(spec, dict):
        return spec

    def env(entries: Any) -> Any:
        if not isinstance(entries, list):
            return entries
        return [{**e, "value": REDACTED} if isinstance(e, dict) and e.get("value") else e for e in entries]

    out = {**spec, "env": env(spec.get("env"))} if "env" in spec else dict(spec)
    partners = spec.get("colocateWith")
    if isinstance(partners, list):
        out["colocateWith"] = [
            {**p, "env": env(p.get("env"))} if isinstance(p, dict) and "env" in p else p for p in partners
        ]
    return out


@router.post(
    "/trialruns",
    status_code=status.HTTP_201_CREATED,
    dependencies=[TrialRunAuthorized],
    responses=documented(401, 409, 503),
)
def create_trialrun(
    body: Annotated[
        dict[str, Any], Body(description="A TrialRun resource (docs/design.md §4).", examples=[TRIALRUN_EXAMPLE])
    ],
    session: DbSession,
    settings: Annotated[ProfilerSettings, Depends(get_profiler_settings)],
    submitter: Annotated[TrialRunSubmitter | None, Depends(get_submitter)],
) -> dict[str, Any]:
    """Validate a TrialRun and create it in the cluster for the profiler controller to run."""
    try:
        run = parse_trialrun(body, max_duration_seconds=settings.max_trial_duration_seconds)
    except SpecError as e:
        raise HTTPException(422, detail=str(e)) from e
    if submitter is None:
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            detail="this advisor runs without a Kubernetes API: run trials with `gpuadvisor profile request --local`",
        )
    from collector.kube import KubeError
    from profiler.controller import RefusedBy, refused_by
    from profiler.kube import KubeForbiddenError

    try:
        submitter.submit_trialrun(run)
    except KubeForbiddenError as e:
        namespace = run.metadata.namespace
        if refused_by(str(e)) is RefusedBy.RBAC:
            detail = f"metadata.namespace: trials are not allowed in namespace {namespace!r} ({e})"
        else:  # a webhook or policy refused it: the advisor's permissions are not the cause
            detail = f"the cluster's admission control refused the TrialRun in namespace {namespace!r}: {e}"
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail=detail) from e
    except KubeError as e:
        code = status.HTTP_503_SERVICE_UNAVAILABLE if e.temporary else status.HTTP_409_CONFLICT
        raise HTTPException(code, detail=str(e)) from e
    manifest = run.to_manifest()
    with session.begin():
        repo.save_trial_run(
            session=session,
            namespace=run.metadata.namespace,
            name=run.metadata.name,
            workload=run.spec.workload,
            spec=manifest["spec"],
            message="submitted to the cluster",
        )
    return {**manifest, "status": {"phase": "Pending", "message": "submitted to the cluster"}}


@router.get("/profiles", responses=documented(503))
def list_profiles(
    session: DbSession,
    workload: Annotated[str | None, Query(description="Only this workload.")] = None,
    gpu_model: Annotated[str | None, Query(description="Only this GPU model.")] = None,
) -> dict[str, list[dict[str, Any]]]:
    """Measured and imported profiles, and the co-locations involving the workload (or all of them)."""
    profiles = repo.list_profiles(session=session, workload=workload, gpu_model=gpu_model)
    colocations = [
        c
        for c in repo.list_colocations(session=session, gpu_model=gpu_model)
        if workload is None or workload in (c.workload_a, c.workload_b)
    ]
    return {
        "profiles": [views.profile_dict(p) for p in profiles],
        "colocations": [views.colocation_dict(c) for c in colocations],
    }
