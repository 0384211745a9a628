"""The advisor's HTTP API (FastAPI). `create_app` is the only way to build it."""

from __future__ import annotations

from advisor.api.app import create_app

__all__ = ["create_app"]
