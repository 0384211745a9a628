"""What one client may cost the advisor: memory per request, time per request, connections.

Anyone who can reach the advisor's port can send it bodies, and parsing a scheduler body takes many times its size
in memory (issue 40 measured about 14x on `/extender/prioritize`: 100 concurrent 20 MB bodies took 21.8 GB and the
kernel killed the process). So the bound is built in, not hoped for:

* `MemoryBudget`: every request body reserves `PARSE_EXPANSION` times its size from one budget before it is read
  (its declared Content-Length, else chunk by chunk as it arrives) and gives it back when the answer is sent. A body
  that does not fit is answered 503 with `Retry-After` and the connection closed, unread. Large bodies may take at
  most `LARGE_SHARE` of the budget, so a flood of them never starves the small ones (kube-scheduler with
  `nodeCacheCapable`, `/v1/score`, `/v1/allocate`).
* `ConnectionLimits`: a deadline for the request head (a client that sends nothing, or its headers a byte at a time,
  is closed), a cap on its size, a deadline for the body, and a cap on open connections (one past it is answered
  503 and closed at once, without a log line per connection); they are applied below the app, on the connection,
  by `advisor.api.transport.guard`.

The figures behind the defaults are in docs/operations.md ("Limits") and bench/hostile_bodies.py.
"""

from __future__ import annotations

import logging
import resource
from dataclasses import dataclass

from advisor.settings import LARGE_SHARE, PARSE_EXPANSION, AdvisorSettings

log = logging.getLogger(__name__)

LARGE_BODY_BYTES = 1024 * 1024
"""A body above this is large: only kube-scheduler without `nodeCacheCapable` and Volcano send such (a 5,000-node
`NodeNames` request is 66 KB, docs/operations.md)."""
RETRY_AFTER_SECONDS = 1
FD_RESERVE = 64
"""Descriptors kept for what is not a client connection (the store, the ingest workers' channels, log files)."""


class MemoryBudget:
    """Bytes of parse memory the request bodies in flight may hold together. Each request's reservation is the body
    size it was granted (0 before its first); used from the event loop only."""

    def __init__(self, budget_bytes: int, *, large_share: float = LARGE_SHARE) -> None:
        self.budget_bytes = budget_bytes
        self.large_budget_bytes = int(budget_bytes * large_share)
        self.held_bytes = 0
        self.large_held_bytes = 0

    @staticmethod
    def _cost(body_bytes: int) -> tuple[int, int]:
        """(bytes of the budget, bytes of its large share) a body of `body_bytes` holds."""
        need = body_bytes * PARSE_EXPANSION
        return need, need if body_bytes > LARGE_BODY_BYTES else 0

    def grow(self, granted_bytes: int, body_bytes: int) -> bool:
        """Let a request granted `granted_bytes` of body hold `body_bytes`; False (nothing changed) when that does
        not fit now."""
        total, large = self._cost(body_bytes)
        had_total, had_large = self._cost(granted_bytes)
        if self.held_bytes - had_total + total > self.budget_bytes:
            return False
        if large and self.large_held_bytes - had_large + large > self.large_budget_bytes:
            return False
        self.held_bytes += total - had_total
        self.large_held_bytes += large - had_large
        return True

    def release(self, granted_bytes: int) -> None:
        total, large = self._cost(granted_bytes)
        self.held_bytes -= total
        self.large_held_bytes -= large


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """Per-connection deadlines and the cap on open connections (`advisor serve`; docs/operations.md)."""

    header_timeout_seconds: float
    body_timeout_seconds: float
    max_connections: int
    max_header_bytes: int = 64 * 1024


def connection_cap(wanted: int, soft_limit: int | None = None) -> int:
    """`wanted`, lowered to what this process's descriptor limit allows: the cap must bite before `accept` fails."""
    if soft_limit is None:
        soft_limit, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft_limit == resource.RLIM_INFINITY or soft_limit <= 0:
        return wanted
    return max(1, min(wanted, soft_limit - FD_RESERVE))


def connection_limits(settings: AdvisorSettings) -> ConnectionLimits:
    """The per-connection deadlines and the connection cap (lowered to the descriptor limit) of the settings, for
    the serving process and its ingest workers alike."""
    return ConnectionLimits(
        header_timeout_seconds=settings.header_timeout_seconds,
        body_timeout_seconds=settings.body_timeout_seconds,
        max_connections=connection_cap(settings.max_connections),
    )
