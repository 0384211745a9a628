"""One log line for every component: the collector, the profiler, the advisor, its ingest workers and the uvicorn
server inside it all write `2026-11-27T16:45:00.123Z INFO name: message` to stderr — UTC with its zone, so lines
from several machines and components sort and compare as they are. It lives in the lowest layer so every
entry point can use it.
"""

from __future__ import annotations

import logging
import time

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class UtcFormatter(logging.Formatter):
    """`FORMAT` with `asctime` in RFC 3339 UTC to the millisecond (`...T16:45:00.123Z`)."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 — logging's name
        seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        return f"{seconds}.{int(record.msecs):03d}Z"


def configure_logging(level: int | str) -> None:
    """Every log record of this process, uvicorn's included, as one `FORMAT` line on stderr from `level` up. Replaces
    whatever handlers the root logger had; uvicorn must be started with `log_config=None` to keep its records
    flowing here."""
    handler = logging.StreamHandler()
    handler.setFormatter(UtcFormatter(FORMAT))
    if isinstance(level, str):
        level = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    logging.basicConfig(level=level, handlers=[handler], force=True)
