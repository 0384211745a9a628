"""Telemetry tied to its node: with `GPUADVISOR_TELEMETRY_AUTH=serviceaccount` a snapshot is taken only for the node
its sender's credential belongs to (issue 40).

Each collector pushes with its pod's own ServiceAccount token (a projected token bound to the pod, audience
`GPUADVISOR_TELEMETRY_AUDIENCE`); the API server's TokenReview says whether it is valid, whose it is and which node
the pod runs on (`advisor.cluster.kube.TokenReviewer`). A token that is not a collector's is a 401; a snapshot for
another node than the token's is a 403, so holding one node's credential lets one write that node's state and no
other. Reviews are cached per token (by its SHA-256) for `ttl_seconds`, so ingest at 1,000 snapshots/s costs the API
server one review per collector a minute; at most `max_reviews_in_flight` run at once (an unknown token is a review),
beyond them a push is answered 503 and retried next cycle.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable

import anyio.to_thread

REVIEW_TTL_SECONDS = 60.0
MAX_CACHED_TOKENS = 50_000  # ten times the 5,000 nodes the advisor is built for; each entry ~150 bytes
MAX_REVIEWS_IN_FLIGHT = 4


class ReviewUnavailableError(Exception):
    """The API server could not review a token now (or too many reviews are running): answer 503, retry later."""


class NodeCredentials:
    """Node names of collector tokens, reviewed by `review` (token → node, None for no collector's token; raises
    on an API failure) and cached. Used from the event loop; reviews run in worker threads."""

    def __init__(
        self,
        review: Callable[[str], str | None],
        *,
        ttl_seconds: float = REVIEW_TTL_SECONDS,
        max_entries: int = MAX_CACHED_TOKENS,
        max_reviews_in_flight: int = MAX_REVIEWS_IN_FLIGHT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._review = review
        self._ttl = ttl_seconds
        self._max_entries = max_entries
        self._max_in_flight = max_reviews_in_flight
        self._clock = clock
        self._cache: OrderedDict[bytes, tuple[float, str | None]] = OrderedDict()
        self._in_flight = 0

    async def node_of(self, token: str) -> str | None:
        """The node `token` speaks for (None: it is no collector's token); `ReviewUnavailableError` when that cannot
        be told now."""
        key = hashlib.sha256(token.encode()).digest()
        now = self._clock()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        if self._in_flight >= self._max_in_flight:
            raise ReviewUnavailableError("too many token reviews in flight")
        self._in_flight += 1
        try:
            node = await anyio.to_thread.run_sync(self._review, token)
        except Exception as e:
            raise ReviewUnavailableError(f"the token could not be reviewed: {e}") from e
        finally:
            self._in_flight -= 1
        self._cache[key] = (self._clock() + self._ttl, node)
        self._cache.move_to_end(key)
        while len(self._cache) > self._max_entries:
            self._cache.popitem(last=False)
        return node


def bearer(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, else None."""
    scheme, _, token = (authorization or "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None
