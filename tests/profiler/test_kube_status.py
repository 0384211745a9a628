"""What the profiler writes into a TrialRun's status when the API server refuses it: a 403 attributed to RBAC or to
admission control from the server's own wording, a temporary failure shown with its retry, patches the server stores
as sent, and kopf told not to post Events (the ClusterRole grants none). The same paths run against the real API
server in tests/kube/test_profiler_operator.py."""

from __future__ import annotations

from datetime import UTC, datetime

import kopf
import pytest

from profiler.controller import NamespaceForbiddenError, RefusedBy, forbidden_message, refused_by, retry_status
from profiler.kube import configure_kopf, patchable

# The API server's 403 messages, as k8s.io/apiserver writes them: the authorizer's (responsewriters.Forbidden), a
# validating webhook's denial (webhook/errors.ToStatusErr), a ValidatingAdmissionPolicy's, and a built-in admission
# plugin's (ResourceQuota).
RBAC = (
    'jobs.batch is forbidden: User "system:serviceaccount:gpuadvisor:gpuadvisor-profiler" cannot create resource '
    '"jobs" in API group "batch" in the namespace "ml"'
)
WEBHOOK = 'admission webhook "policy.example.com" denied the request: GPU Jobs need a cost-center label'
POLICY = (
    "jobs.batch \"t-t000\" is forbidden: ValidatingAdmissionPolicy 'gpu-quota' with binding 'gpu-quota-ml' denied "
    "request: too many GPUs"
)
QUOTA = 'jobs.batch "t-t000" is forbidden: exceeded quota: gpu, requested: count/jobs.batch=1, limited: 0'


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (RBAC, RefusedBy.RBAC),
        (WEBHOOK, RefusedBy.ADMISSION_WEBHOOK),
        (POLICY, RefusedBy.ADMISSION_POLICY),
        (QUOTA, RefusedBy.ADMISSION),
    ],
)
def test_a_403_is_attributed_from_the_servers_wording(message: str, expected: RefusedBy) -> None:
    assert refused_by(f"create job t-t000: HTTP 403 {message}") is expected


def test_only_an_rbac_refusal_points_at_the_trial_namespace_roles() -> None:
    rbac = forbidden_message("ml", NamespaceForbiddenError(f"list jobs in ml: HTTP 403 {RBAC}"))
    assert rbac.startswith("trials may not run in namespace 'ml'")
    assert "An admin allows a namespace with deploy/trial-namespace" in rbac
    webhook = forbidden_message("ml", NamespaceForbiddenError(f"create job t-t000: HTTP 403 {WEBHOOK}"))
    assert webhook.startswith("the cluster's admission control refused a trial Job in namespace 'ml'")
    assert "GPU Jobs need a cost-center label" in webhook
    assert "admission webhook 'policy.example.com' decides" in webhook
    assert "deploy/trial-namespace will not help" in webhook
    policy = forbidden_message("ml", NamespaceForbiddenError(f"create job t-t000: HTTP 403 {POLICY}"))
    assert "admission policy 'gpu-quota' decides" in policy
    quota = forbidden_message("ml", NamespaceForbiddenError(f"create job t-t000: HTTP 403 {QUOTA}"))
    assert "an admission plugin of the API server decides" in quota


def test_a_retry_shows_in_the_status_and_sets_pending_only_without_a_phase() -> None:
    next_try = datetime(2026, 11, 28, 5, 0, 1, tzinfo=UTC)
    problem = "create job t-t000: HTTP 503 the cluster is overloaded"
    fresh = retry_status(problem, attempt=3, next_try=next_try, status=None)
    assert fresh == {
        "phase": "Pending",
        "message": f"waiting to retry (attempt 3 failed, next try at 2026-11-28T05:00:01Z): {problem}",
        "retry": {"attempts": 3, "nextTryTime": "2026-11-28T05:00:01Z", "message": problem},
    }
    running = retry_status(problem, attempt=1, next_try=next_try, status={"phase": "Running", "trials": []})
    assert "phase" not in running
    assert running["retry"]["attempts"] == 1


def test_a_patch_keeps_no_null_keys_at_any_depth_but_keeps_null_list_items() -> None:
    status = {
        "phase": "Running",
        "retry": None,
        "trials": [
            {"trial": "t000", "gpuModel": None, "throughputs": [None, 5.0], "summaries": [{"power_watts": None}]}
        ],
    }
    assert patchable(status) == {
        "phase": "Running",
        "trials": [{"trial": "t000", "throughputs": [None, 5.0], "summaries": [{}]}],
    }


def test_kopf_is_told_not_to_post_events() -> None:
    settings = kopf.OperatorSettings()
    assert settings.posting.enabled
    configure_kopf(settings)
    assert not settings.posting.enabled
