"""A trial Job runs whatever image its requester chose (issue 40): it gets no ServiceAccount token and meets Pod
Security's `restricted` profile — non-root, no privilege escalation, every capability dropped, RuntimeDefault
seccomp — on every side of every trial."""

from __future__ import annotations

from profiler.manifests import job_manifest
from profiler.spec import parse_trialrun
from profiler.trials import expand
from tests.profiler.specs import VALID


def test_every_trial_job_is_restricted_and_carries_no_api_credential() -> None:
    run = parse_trialrun(VALID)
    jobs = [
        job_manifest(run, "uid-1", trial, side, gpu_products=None)
        for trial in expand(run.spec)
        for side in range(len(trial.sides))
    ]
    assert len(jobs) > 1
    for job in jobs:
        pod = job["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in pod["containers"]:
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False
            assert security["capabilities"] == {"drop": ["ALL"]}
            assert security["runAsNonRoot"] is True
