"""The collector's ValidatingAdmissionPolicy, evaluated as the API server would on the collector's writes: its CEL
(matchConditions, variables, validations) run with cel-python against old and new objects of realistic updates."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml

from collector.keys import GPUS_ANNOTATION, TOPOLOGY_ANNOTATION, UTILIZATION_ANNOTATION
from tests.support import upstream
from tests.support.binaries import require_binary

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
COLLECTOR = "system:serviceaccount:gpuadvisor:gpuadvisor-collector"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def policy() -> Obj:
    kubectl = require_binary("kubectl", "`kubectl kustomize deploy` renders the admission policy")
    result = subprocess.run(
        [kubectl, "kustomize", str(DEPLOY)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    (found,) = [d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "ValidatingAdmissionPolicy"]
    spec: Obj = found["spec"]
    return spec


def _evaluate(expression: str, activation: Obj) -> Any:
    env = celpy.Environment()
    program = env.program(env.compile(expression))
    return program.evaluate({k: celpy.json_to_cel(v) for k, v in activation.items()})


def admitted(policy: Obj, old: Obj, new: Obj, *, user: str = COLLECTOR, node: str | None = "n1") -> bool:
    """Whether the API server admits the UPDATE of `old` to `new` (pods or nodes) by `user`, whose token is bound
    to a pod on `node`."""
    resource = "nodes" if new["kind"] == "Node" else "pods"
    request = {
        "userInfo": {"username": user, **({"extra": {NODE_NAME_EXTRA: [node]}} if node else {})},
        "resource": {"group": "", "version": "v1", "resource": resource},
        "operation": "UPDATE",
    }
    activation: Obj = {"request": request, "object": new, "oldObject": old}
    if not all(_evaluate(c["expression"], activation) for c in policy["matchConditions"]):
        return True  # not the collector: the policy does not apply
    variables: Obj = {}
    for variable in policy["variables"]:
        variables[variable["name"]] = _evaluate(variable["expression"], {**activation, "variables": variables})
    scope = {**activation, "variables": variables}
    return all(bool(_evaluate(v["expression"], scope)) for v in policy["validations"])


def _pod() -> Obj:
    pod = upstream.pod(node_name="n1", annotations={"example.com/owner": "team-a", GPUS_ANNOTATION: "GPU-1"})
    pod["kind"] = "Pod"
    return pod


def _node(name: str = "n1") -> Obj:
    node = upstream.node(name)
    node["kind"] = "Node"
    return node


def test_the_collector_may_write_its_annotations_on_its_own_pods_and_node(policy: Obj) -> None:
    old = _pod()
    new = copy.deepcopy(old)
    new["metadata"]["annotations"][UTILIZATION_ANNOTATION] = "0.75"
    del new["metadata"]["annotations"][GPUS_ANNOTATION]
    assert admitted(policy, old, new)
    node = _node()
    annotated = copy.deepcopy(node)
    annotated["metadata"]["annotations"][TOPOLOGY_ANNOTATION] = '{"0-1": "NVLINK"}'
    assert admitted(policy, node, annotated)


@pytest.mark.parametrize(
    "change",
    [
        lambda o: o["metadata"]["annotations"].update({"example.com/owner": "team-b"}),
        lambda o: o["metadata"]["annotations"].pop("example.com/owner"),
        lambda o: o["metadata"]["annotations"].update({"kubernetes.io/anything": "x"}),
        lambda o: o["metadata"]["labels"].update({"gpuadvisor.io/workload": "other"}),
        lambda o: o["metadata"]["ownerReferences"].clear(),
        lambda o: o["metadata"].update({"finalizers": ["example.com/keep"]}),
        lambda o: o["spec"]["tolerations"].clear(),
    ],
)
def test_any_other_change_to_a_pod_is_refused(policy: Obj, change: Any) -> None:
    old = _pod()
    new = copy.deepcopy(old)
    change(new)
    assert not admitted(policy, old, new)
    assert admitted(policy, old, new, user="system:serviceaccount:kube-system:someone-else")


def test_a_node_is_not_cordoned_nor_tainted_nor_relabelled_by_the_collector(policy: Obj) -> None:
    old = _node()
    for change in (
        lambda n: n["spec"].update({"unschedulable": True}),
        lambda n: n["spec"].update({"taints": [{"key": "x", "effect": "NoSchedule"}]}),
        lambda n: n["metadata"]["labels"].update({"nvidia.com/gpu.product": "fake"}),
    ):
        new = copy.deepcopy(old)
        change(new)
        assert not admitted(policy, old, new)


def test_only_its_own_node_and_pods(policy: Obj) -> None:
    old = _node("n2")
    new = copy.deepcopy(old)
    new["metadata"]["annotations"][TOPOLOGY_ANNOTATION] = "{}"
    assert not admitted(policy, old, new)  # another node
    pod = _pod()
    annotated = copy.deepcopy(pod)
    annotated["metadata"]["annotations"][UTILIZATION_ANNOTATION] = "0.1"
    assert not admitted(policy, pod, annotated, node="n2")  # a pod on another node
    assert not admitted(policy, pod, annotated, node=None)  # a token without its node
