"""Settings of the profiler (controller, recorder, local runner) and of the store it owns."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_DB_URL = "sqlite:///./gpuadvisor.db"
DEFAULT_MAX_TRIAL_DURATION_SECONDS = 1800


class ProfilerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUADVISOR_", extra="ignore")

    db_url: str = DEFAULT_DB_URL
    namespace: str = "gpuadvisor"
    max_trial_duration_seconds: int = Field(default=DEFAULT_MAX_TRIAL_DURATION_SECONDS, gt=0)
    warmup_fraction: float = Field(default=0.2, ge=0.0, lt=1.0)
    reconcile_interval_seconds: float = Field(default=10.0, gt=0)
    sample_interval_seconds: float = Field(default=0.5, gt=0)
    history_source: str = Field(default="k8s", min_length=1)
