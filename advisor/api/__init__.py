"""The advisor's HTTP API (FastAPI). `create_app` is the only way to build it.

Imported lazily: the ingest worker processes (advisor/api/transport/worker.py) live in this package but need none of
the app (its models, store and routes take seconds and a hundred megabytes to import).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from advisor.api.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from advisor.api.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
