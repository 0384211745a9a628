"""The project's Kubernetes error tree, in a module of its own that imports nothing: every layer raises or catches
these (`collector.kube`, `profiler.kube`, `advisor.cluster.kube` translate the client's errors into them with
`collector.kube.kube_error`, chaining the vendor error as `__cause__`), and a caller that only catches them need not
load the kubernetes client.

`KubeError` splits into `KubeTemporaryError` (retrying may help: the API server unreachable, overloaded, timing out)
and `KubePermanentError` (it will not: forbidden, not found, invalid, no credentials).
"""

from __future__ import annotations

TEMPORARY_STATUSES = frozenset({0, 408, 429, 500, 502, 503, 504})
"""HTTP statuses worth retrying (0: no response at all); any other failed status is permanent."""


class KubeError(Exception):
    """A failed Kubernetes API call or client set-up; `temporary` ones may succeed when retried."""

    temporary = False


class KubeTemporaryError(KubeError):
    """Retrying may help: the API server was unreachable, overloaded or timed out."""

    temporary = True


class KubePermanentError(KubeError):
    """Retrying will not help: the request was refused (forbidden, not found, invalid) or cannot be made."""


class KubeUnavailableError(KubePermanentError):
    """No way to reach the Kubernetes API (no in-cluster service account, no kubeconfig)."""


def error_kind(status: int | None) -> type[KubeError]:
    """The error class of a failed call that got HTTP `status` (None or 0: no response)."""
    return KubeTemporaryError if (status or 0) in TEMPORARY_STATUSES else KubePermanentError
