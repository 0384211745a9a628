"""The TrialRun resource (`gpuadvisor.io/v1alpha1`, kind `TrialRun`): a user's request for trial-run profiles.

One pydantic model serves the CLI (`profile request FILE`), the HTTP API and the controller, so every entry point
rejects the same inputs with the same field path. The CRD's OpenAPI schema (`profiler.crd`) mirrors these rules.
The duration cap is an admin setting, so it is passed in as validation context rather than fixed here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic.alias_generators import to_camel

from profiler.csv_formats import MAX_COUNT

API_GROUP = "gpuadvisor.io"
API_VERSION = "v1alpha1"
KIND = "TrialRun"
PLURAL = "trialruns"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
ENV_NAME = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
SECRET_KEY = r"^[-._a-zA-Z0-9]+$"
DEFAULT_MAX_DURATION_SECONDS = 300
# Three runs of every trial by default: the median of three stands one outlier, and three give a spread. On the
# H100 (docs/gpu-validation.md) single runs of one solo workload differed by up to 27 %, so one run cannot say
# whether a pair's slowdown is the partner's doing or noise.
DEFAULT_REPEATS = 3
MAX_REPEATS = 20
MAX_DURATION_CONTEXT_KEY = "max_duration_seconds"

NonEmptyStr = Annotated[str, Field(min_length=1)]
# At most what the store's INTEGER columns hold (`profiler.csv_formats.MAX_COUNT`): a larger count or batch size is
# refused here, naming the field, rather than by the database after the trials ran.
PositiveInt = Annotated[int, Field(gt=0, le=MAX_COUNT, strict=True)]


class SpecError(ValueError):
    """An invalid TrialRun; `field` is the path of the first bad field (e.g. `spec.matrix.gpuCounts[0]`)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}" if field else problem)
        self.field = field
        self.problem = problem


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)


class SecretKeySelector(_Strict):
    """One key of a Secret in the TrialRun's namespace (Kubernetes' `secretKeyRef`)."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    key: str = Field(min_length=1, max_length=253, pattern=SECRET_KEY)
    optional: bool = Field(default=False, strict=True)


class EnvVarSource(_Strict):
    """Where a variable's value comes from instead of the spec: a Secret only, so an API key never sits in the
    TrialRun (which the advisor stores and shows) and is read by the kubelet when the trial's pod starts."""

    secret_key_ref: SecretKeySelector


class EnvVar(_Strict):
    name: str = Field(min_length=1, pattern=ENV_NAME)
    value: str = ""
    value_from: EnvVarSource | None = None

    @model_validator(mode="after")
    def _one_source(self) -> EnvVar:
        if self.value and self.value_from is not None:
            raise ValueError("give value or valueFrom, not both")
        return self


class Matrix(_Strict):
    """Every combination of these lists is one trial; omitted `gpu_models` means any GPU model."""

    gpu_models: list[NonEmptyStr] | None = Field(default=None, min_length=1)
    gpu_counts: list[PositiveInt] = Field(min_length=1)
    batch_sizes: list[PositiveInt] | None = Field(default=None, min_length=1)


class Partner(_Strict):
    """A workload to share one GPU with: solo runs of both sides and the paired run are measured."""

    workload: str = Field(min_length=1, max_length=253)
    command: list[NonEmptyStr] = Field(min_length=1)
    image: str | None = Field(default=None, min_length=1)
    env: list[EnvVar] = Field(default_factory=list)
    batch_size: PositiveInt | None = None


class TrialRunSpec(_Strict):
    workload: str = Field(min_length=1, max_length=253)
    image: str = Field(min_length=1)
    command: list[NonEmptyStr] = Field(min_length=1)
    env: list[EnvVar] = Field(default_factory=list)
    matrix: Matrix
    colocate_with: list[Partner] = Field(default_factory=list)
    max_duration_seconds: PositiveInt = DEFAULT_MAX_DURATION_SECONDS
    # Every trial is run this many times; results keep the median and the spread.
    repeats: int = Field(default=DEFAULT_REPEATS, ge=1, le=MAX_REPEATS, strict=True)
    # Time-bound trials: the runner stops a trial once it has seen this much steady (for a pair: overlapping)
    # time, so a workload's own step count does not decide what is measured. None: the profiler's setting.
    steady_seconds: float | None = Field(default=None, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _default_within_cap(cls, data: Any, info: ValidationInfo) -> Any:
        """Without an explicit duration the default applies, lowered to the admin's cap when that is smaller."""
        cap = (info.context or {}).get(MAX_DURATION_CONTEXT_KEY)
        if (
            isinstance(data, dict)
            and cap is not None
            and not {"maxDurationSeconds", "max_duration_seconds"} & set(data)
        ):
            return {**data, "maxDurationSeconds": min(DEFAULT_MAX_DURATION_SECONDS, cap)}
        return data

    @field_validator("max_duration_seconds")
    @classmethod
    def _within_admin_cap(cls, value: int, info: ValidationInfo) -> int:
        cap = (info.context or {}).get(MAX_DURATION_CONTEXT_KEY)
        if cap is not None and value > cap:
            raise ValueError(f"must be at most {cap} seconds (the admin's cap), got {value}")
        return value


# The fixed reference set a new workload is co-run with when its TrialRun names no partners (`with_reference_partners`):
# three of the bundled reference workloads (`profiler.workloads`), a CNN, a Transformer encoder and an embedding-heavy
# recommender, with the batch sizes of docs/data/reference-trialruns. The interference model fits each new workload's
# sensitivity and aggressiveness from these pairs (docs/models.md: "--probes 3").
REFERENCE_PARTNERS: tuple[tuple[str, str, int], ...] = (
    ("cnn-bs64", "cnn", 64),
    ("transformer-bs32", "transformer", 32),
    ("recommender-bs256", "recommender", 256),
)
# Each partner trains for up to this long; the runner stops it once it has measured enough steady time together.
REFERENCE_SECONDS = 120


def reference_partners(image: str | None, scale: int = 1) -> list[Partner]:
    """The reference set as `colocateWith` partners, run from `image` (None: the trial's own image), their model
    widths multiplied by `scale` (`python -m profiler.workloads --scale`)."""
    return [
        Partner(
            workload=workload,
            command=[
                "python",
                "-m",
                "profiler.workloads",
                name,
                "--seconds",
                str(REFERENCE_SECONDS),
                "--scale",
                str(scale),
            ],
            image=image,
            batch_size=batch_size,
        )
        for workload, name, batch_size in REFERENCE_PARTNERS
    ]


def with_reference_partners(run: TrialRun, image: str | None, scale: int = 1) -> TrialRun:
    """`run` co-run with the reference set when its spec does not say `colocateWith` at all (an explicit empty list
    keeps it alone); the workload itself is never its own partner."""
    if "colocate_with" in run.spec.model_fields_set:
        return run
    partners = [p for p in reference_partners(image, scale) if p.workload != run.spec.workload]
    return run.model_copy(update={"spec": run.spec.model_copy(update={"colocate_with": partners})})


class Metadata(BaseModel):
    """The parts of Kubernetes object metadata the profiler uses; the server's own fields pass through."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    namespace: str = Field(default="default", min_length=1, max_length=63, pattern=DNS_LABEL)
    uid: str | None = None


class TrialRun(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    api_version: Literal["gpuadvisor.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["TrialRun"]
    metadata: Metadata
    spec: TrialRunSpec
    status: dict[str, Any] | None = None

    def to_manifest(self) -> dict[str, Any]:
        """The resource as the API server stores it (camelCase, without status)."""
        meta: dict[str, Any] = {"name": self.metadata.name, "namespace": self.metadata.namespace}
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": meta,
            "spec": self.spec.model_dump(by_alias=True, exclude_none=True, mode="json"),
        }


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path


def parse_trialrun(data: object, *, max_duration_seconds: int | None = None) -> TrialRun:
    """Validate a TrialRun document; raise `SpecError` naming the first bad field."""
    context = {MAX_DURATION_CONTEXT_KEY: max_duration_seconds}
    try:
        return TrialRun.model_validate(data, context=context)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        problem = first["msg"]
        if first["type"] == "extra_forbidden":
            problem = "unknown field"
        elif first["type"] == "missing":
            problem = "required field is missing"
        elif first["type"] == "value_error":
            problem = str(first.get("ctx", {}).get("error", problem))
        if first["loc"][-2:-1] == ("valueFrom",) and first["type"] in ("extra_forbidden", "missing"):
            problem += " (a trial's env takes its value from a Secret only: valueFrom.secretKeyRef)"
        raise SpecError(_field_path(tuple(first["loc"])), problem) from e


def load_trialrun(path: Path, *, max_duration_seconds: int | None = None) -> TrialRun:
    """Read a TrialRun from a YAML or JSON file (JSON is YAML); `SpecError` for unreadable or invalid files."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8-sig"))
    except OSError as e:
        raise SpecError("", f"cannot read {path}: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise SpecError("", f"{path} is not UTF-8 text (byte {e.start} is {e.object[e.start : e.start + 1]!r})") from e
    except yaml.YAMLError as e:
        raise SpecError("", f"{path} is not valid YAML/JSON: {str(e).splitlines()[0]}") from e
    return parse_trialrun(data, max_duration_seconds=max_duration_seconds)
