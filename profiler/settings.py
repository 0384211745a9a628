"""Settings of the profiler (controller, recorder, local runner) and of the store it owns."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from profiler.results import DEFAULT_MAX_SPREAD_RATIO
from profiler.summary import DEFAULT_MIN_OVERLAP_SECONDS, DEFAULT_MIN_OVERLAP_SHARE, DEFAULT_STEADY_SECONDS, OverlapRule

DEFAULT_DB_URL = "sqlite:///./gpuadvisor.db"
DEFAULT_MAX_TRIAL_DURATION_SECONDS = 1800
# deploy/profiler/deployment.yaml probes this port and path.
DEFAULT_LIVENESS_ENDPOINT = "http://0.0.0.0:8081/healthz"  # 8081: not the advisor's 8080, for both on one host


class ProfilerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUADVISOR_", extra="ignore")

    db_url: str = DEFAULT_DB_URL
    namespace: str = "gpuadvisor"
    max_trial_duration_seconds: int = Field(default=DEFAULT_MAX_TRIAL_DURATION_SECONDS, gt=0)
    warmup_fraction: float = Field(default=0.2, ge=0.0, lt=1.0)
    reconcile_interval_seconds: float = Field(default=10.0, gt=0)
    sample_interval_seconds: float = Field(default=0.5, gt=0)
    # Trial timing (docs/profiler.md, "Timing trials"): a local trial is stopped after this much steady time (a
    # pair: both sides past their warm-ups together) unless its spec says `steadySeconds`.
    steady_seconds: float = Field(default=DEFAULT_STEADY_SECONDS, gt=0)
    # A pair that ran together past both warm-ups for less than this (seconds, share of the trial) fails.
    min_overlap_seconds: float = Field(default=DEFAULT_MIN_OVERLAP_SECONDS, ge=0)
    min_overlap_share: float = Field(default=DEFAULT_MIN_OVERLAP_SHARE, ge=0, le=1)
    # Repeats differing by more than this share of their median: the result is flagged and not trained on.
    max_spread_ratio: float = Field(default=DEFAULT_MAX_SPREAD_RATIO, gt=0)
    history_source: str = Field(default="k8s", min_length=1)
    # Image of the bundled reference workloads that new workloads are co-run with (`profiler.spec.reference_partners`).
    reference_image: str = Field(default="gpuadvisor-workloads", min_length=1)
    # Width multiplier of the reference partners' models (`python -m profiler.workloads --scale`): raise it on a
    # GPU the scale-1 models leave mostly idle (an H100 ran them at 0.12-0.53 SM utilisation).
    reference_scale: int = Field(default=1, ge=1)
    # Where `profiler run` (kopf) serves its liveness probe; "" serves none.
    liveness_endpoint: str = DEFAULT_LIVENESS_ENDPOINT

    @field_validator("liveness_endpoint")
    @classmethod
    def _http_endpoint(cls, value: str) -> str:
        # kopf would only fail on a bad endpoint once the operator runs, in a background task.
        if not value:
            return value
        try:
            parts = urlsplit(value)
            port = parts.port
        except ValueError as e:
            raise ValueError(f"expected http://HOST:PORT/PATH, got {value!r}: {e}") from e
        if parts.scheme != "http" or not parts.hostname or port is None or not parts.path.startswith("/"):
            raise ValueError(f"expected http://HOST:PORT/PATH (or empty to serve none), got {value!r}")
        return value

    def overlap_rule(self) -> OverlapRule:
        return OverlapRule(min_seconds=self.min_overlap_seconds, min_share=self.min_overlap_share)
