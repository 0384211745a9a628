"""Settings of the profiler (controller, recorder, local runner) and of the store it owns."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_DB_URL = "sqlite:///./gpuadvisor.db"


class ProfilerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUADVISOR_", extra="ignore")

    db_url: str = DEFAULT_DB_URL
    namespace: str = "gpuadvisor"
    max_trial_duration_seconds: int = Field(default=1800, gt=0)
