"""Settings of the advisor service. Built in entrypoints and the app factory, never at import time."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from profiler.settings import DEFAULT_DB_URL


class AdvisorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUADVISOR_", extra="ignore")

    db_url: str = DEFAULT_DB_URL
    api_token: str | None = None
    model_dir: Path = Path("./.gpuadvisor/models")
    staleness_seconds: float = Field(default=30.0, gt=0)
    strict_staleness: bool = False
    no_kube: bool = False
    weight_packing: float = Field(default=1.0, ge=0)
    weight_affinity: float = Field(default=1.0, ge=0)
    weight_interference: float = Field(default=1.0, ge=0)
    weight_jct: float = Field(default=1.0, ge=0)
    unknown_node_score: float = Field(default=50.0, ge=0, le=100)
