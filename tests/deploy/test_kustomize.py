"""`kubectl kustomize deploy` renders the whole install, every object validates against the Kubernetes schemas, and
the pieces fit together (selectors, ports, Secrets, RBAC with least privilege, the collector's host access)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from advisor.cluster.pods import GPU_RESOURCE_NAMES
from advisor.placement.mig import MIG_RESOURCE_NAMES
from collector.kubelet_pods import DEFAULT_SOCKET
from profiler.manifests import MANAGER
from profiler.settings import DEFAULT_LIVENESS_ENDPOINT
from tests.support.binaries import require_binary

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
NAMESPACE = "gpuadvisor"
COLLECTOR_NAMESPACE = "gpuadvisor-collector"
# Oldest version the install supports (ValidatingAdmissionPolicy v1) and the newest the validator knows.
KUBERNETES_VERSIONS = ("1.30.0", kubernetes_validate.utils.latest_version())
# Kinds of CRDs from other projects that the validator has no schema for; anything else must validate.
FOREIGN_KINDS = {"ServiceMonitor", "PrometheusRule"}
# Roles (and their bindings) rendered into each namespace where TrialRuns may run (deploy/trial-namespace/)
TRIAL_ROLES = {"gpuadvisor-profiler-trials", "gpuadvisor-advisor-trials"}
TRIAL_POLICY = "gpuadvisor-trials"  # and the NetworkPolicy of the trial pods there

Obj = dict[str, Any]


def _kustomize(directory: Path) -> list[Obj]:
    kubectl = require_binary("kubectl", "`kubectl kustomize deploy` renders the manifests")
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module")
def base_objects() -> list[Obj]:
    """What `kubectl apply -k deploy` installs."""
    return _kustomize(DEPLOY)


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> list[Obj]:
    """The whole install with the Prometheus Operator's objects: the base and the deploy/monitoring component."""
    overlay = tmp_path_factory.mktemp("monitored")
    base = os.path.relpath(DEPLOY, overlay)
    (overlay / "kustomization.yaml").write_text(f"resources: [{base}]\ncomponents: [{base}/monitoring]\n")
    return _kustomize(overlay)


def test_the_base_installs_without_the_prometheus_operator(base_objects: list[Obj], objects: list[Obj]) -> None:
    """Only Kubernetes' own kinds and our CRD's: `kubectl apply -k deploy` works on a cluster without the operator;
    deploy/monitoring adds exactly its ServiceMonitors and PrometheusRule."""
    assert [o for o in base_objects if o["apiVersion"].startswith("monitoring.coreos.com/")] == []
    for obj in base_objects:
        kubernetes_validate.validate(obj, KUBERNETES_VERSIONS[-1], strict=True)  # no kind without a schema
    added = Counter(o["kind"] for o in objects) - Counter(o["kind"] for o in base_objects)
    assert added == Counter({"ServiceMonitor": 2, "PrometheusRule": 1})


def _tested_kubernetes_version() -> str:
    """The Kubernetes release k8s/go.mod pins: the kube-scheduler the tests run, so the one deploy/ should ship."""
    go_mod = (Path(__file__).resolve().parents[2] / "k8s" / "go.mod").read_text()
    (version,) = re.findall(r"^\s*k8s\.io/kubernetes (v[0-9.]+)", go_mod, flags=re.MULTILINE)
    return version


def test_default_images_name_the_upstream_scheduler_and_the_locally_built_image(base_objects: list[Obj]) -> None:
    images = {c["image"] for o in base_objects if "template" in o.get("spec", {}) for c in containers(o)}
    assert images == {"gpuadvisor:0.1.0", f"registry.k8s.io/kube-scheduler:{_tested_kubernetes_version()}"}


def find(objects: list[Obj], kind: str, name: str) -> Obj:
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def pod_spec(workload: Obj) -> Obj:
    spec: Obj = workload["spec"]["template"]["spec"]
    return spec


def containers(workload: Obj) -> list[Obj]:
    spec = pod_spec(workload)
    return [*spec.get("initContainers", []), *spec["containers"]]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_object_validates_against_the_kubernetes_schemas(objects: list[Obj], version: str) -> None:
    skipped: Counter[str] = Counter()
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            assert obj["kind"] in FOREIGN_KINDS, f"no schema for {obj['apiVersion']} {obj['kind']}"
            skipped[obj["kind"]] += 1
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} is invalid for Kubernetes {version}: {e.message}")
    validated = len(objects) - sum(skipped.values())
    assert validated >= 25
    assert set(skipped) == FOREIGN_KINDS, f"custom kinds without a schema (not validated): {dict(skipped)}"


def test_the_install_has_every_part(objects: list[Obj]) -> None:
    find(objects, "Namespace", NAMESPACE)
    find(objects, "CustomResourceDefinition", "trialruns.gpuadvisor.io")
    find(objects, "DaemonSet", "gpuadvisor-collector")
    for name in ("gpuadvisor-advisor", "gpuadvisor-profiler", "gpuadvisor-scheduler"):
        find(objects, "Deployment", name)
    find(objects, "PodDisruptionBudget", "gpuadvisor-advisor")
    for name in ("gpuadvisor-advisor", "gpuadvisor-collector", "gpuadvisor-profiler", "gpuadvisor-scheduler"):
        find(objects, "NetworkPolicy", name)
    find(objects, "ServiceMonitor", "gpuadvisor-collector")
    find(objects, "ServiceMonitor", "gpuadvisor-advisor")
    find(objects, "PrometheusRule", "gpuadvisor")


def test_namespaced_objects_live_in_the_gpuadvisor_namespace(objects: list[Obj]) -> None:
    cluster_scoped = {
        "Namespace",
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    for obj in objects:
        where = obj["metadata"].get("namespace")
        if obj["kind"] in cluster_scoped:
            assert where is None, obj["metadata"]["name"]
        elif obj["kind"] == "RoleBinding" and obj["roleRef"]["name"] == "extension-apiserver-authentication-reader":
            assert where == "kube-system"
        elif obj["metadata"]["name"] in TRIAL_ROLES | {TRIAL_POLICY}:
            assert where == "default", "the base allows trials in the default namespace only"
        elif obj["metadata"]["name"] == "gpuadvisor-collector":
            assert where == COLLECTOR_NAMESPACE, f"{obj['kind']}/gpuadvisor-collector in {where}"
        else:
            assert where == NAMESPACE, f"{obj['kind']}/{obj['metadata']['name']} in {where}"


def test_only_the_collector_namespace_allows_privileged_pods(objects: list[Obj]) -> None:
    """Pod Security (issue 40): the advisor's namespace enforces "restricted"; the collector, which mounts the host's
    /proc, is alone in a namespace that allows it, and every pod spec of gpuadvisor is written to pass "restricted"
    (the real API server's admission is tests/kube/test_deploy_dry_run.py)."""
    levels = {
        o["metadata"]["name"]: o["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
        for o in objects
        if o["kind"] == "Namespace"
    }
    assert levels == {NAMESPACE: "restricted", COLLECTOR_NAMESPACE: "privileged"}
    workloads = [o for o in objects if o["kind"] in {"Deployment", "DaemonSet", "StatefulSet", "Job"}]
    assert {w["metadata"]["name"] for w in workloads if w["metadata"]["namespace"] == COLLECTOR_NAMESPACE} == {
        "gpuadvisor-collector"
    }
    for workload in (w for w in workloads if w["metadata"]["namespace"] == NAMESPACE):
        spec = pod_spec(workload)
        name = workload["metadata"]["name"]
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")), name
        assert not [v for v in spec.get("volumes", []) if "hostPath" in v], name
        for container in spec.get("initContainers", []) + spec["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, (name, container["name"])
            assert context["capabilities"]["drop"] == ["ALL"], (name, container["name"])
            assert not context["capabilities"].get("add"), (name, container["name"])


def _rules(objects: list[Obj], name: str) -> list[Obj]:
    rules: list[Obj] = find(objects, "ClusterRole", name)["rules"]
    return rules


def _verbs(rules: list[Obj], resource: str, group: str = "") -> set[str]:
    return {v for r in rules if resource in r["resources"] and group in r["apiGroups"] for v in r["verbs"]}


def test_rbac_is_least_privilege(objects: list[Obj]) -> None:
    for role in (o for o in objects if o["kind"] in {"ClusterRole", "Role"}):
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] + rule["resources"], role["metadata"]["name"]
            assert "secrets" not in rule["resources"], role["metadata"]["name"]
            assert "escalate" not in rule["verbs"]
            assert "bind" not in rule["verbs"]
    collector = _rules(objects, "gpuadvisor-collector")
    # pods read by name (those the kubelet says hold a GPU), never listed or watched; the node is read while NVML
    # sees no GPU
    assert _verbs(collector, "pods") == {"get", "patch"}
    assert _verbs(collector, "nodes") == {"get", "patch"}
    advisor = _rules(objects, "gpuadvisor-advisor")
    assert {v for r in advisor for v in r["verbs"]} == {"get", "list", "watch", "create"}
    assert _verbs(advisor, "tokenreviews", "authentication.k8s.io") == {"create"}  # the collectors' credentials
    assert _verbs(advisor, "pods") == _verbs(advisor, "nodes") == {"get", "list", "watch"}
    # Dynamic Resource Allocation: the devices of each node and who holds them, read only (advisor/cluster/dra.py)
    for kind in ("resourceslices", "resourceclaims", "resourceclaimtemplates", "deviceclasses"):
        assert _verbs(advisor, kind, "resource.k8s.io") == {"list", "watch"}, kind
    profiler = _rules(objects, "gpuadvisor-profiler")
    assert "patch" in _verbs(profiler, "trialruns/status", "gpuadvisor.io")
    assert not _verbs(profiler, "pods") & {"create", "delete", "patch", "update"}
    # cluster-wide, the profiler may not run Jobs nor read logs: only in the namespaces where trials are allowed
    assert not _verbs(profiler, "jobs", "batch")
    assert not _verbs(profiler, "pods/log")


def _bound_rules(objects: list[Obj], account: str, namespace: str) -> list[Obj]:
    """The rules a ServiceAccount of the install holds in `namespace` through RoleBindings there."""
    roles = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects if o["kind"] == "Role"}
    rules: list[Obj] = []
    for binding in (o for o in objects if o["kind"] == "RoleBinding" and o["metadata"]["namespace"] == namespace):
        subjects = {(s["kind"], s.get("namespace"), s["name"]) for s in binding["subjects"]}
        if ("ServiceAccount", NAMESPACE, account) in subjects and binding["roleRef"]["kind"] == "Role":
            rules += roles[(namespace, binding["roleRef"]["name"])]["rules"]
    return rules


def test_trials_run_only_where_allowed_and_the_advisor_can_submit_them(objects: list[Obj]) -> None:
    profiler = _bound_rules(objects, "gpuadvisor-profiler", "default")
    assert _verbs(profiler, "jobs", "batch") == {"list", "create", "delete"}
    assert _verbs(profiler, "pods/log") == {"get"}
    # the trial Jobs' ownerReferences set blockOwnerDeletion (profiler/manifests.py)
    assert _verbs(profiler, "trialruns/finalizers", "gpuadvisor.io") == {"update"}
    # POST /v1/trialruns creates the TrialRun with the advisor's own ServiceAccount
    assert _verbs(_bound_rules(objects, "gpuadvisor-advisor", "default"), "trialruns", "gpuadvisor.io") == {"create"}
    for namespace in {o["metadata"].get("namespace") for o in objects} - {"default"}:
        assert not _bound_rules(objects, "gpuadvisor-profiler", str(namespace)), namespace
        assert not _bound_rules(objects, "gpuadvisor-advisor", str(namespace)), namespace


def test_an_overlay_allows_trials_in_more_namespaces(tmp_path: Path) -> None:
    rendered = _render_overlay(
        tmp_path,
        "resources: [{base}, trials-ml]\n",
        {"trials-ml": f"namespace: ml\nresources: [{os.path.relpath(DEPLOY / 'trial-namespace', tmp_path / 'x')}]\n"},
    )
    for namespace in ("default", "ml"):
        assert _verbs(_bound_rules(rendered, "gpuadvisor-profiler", namespace), "jobs", "batch") >= {"create"}
        assert _verbs(_bound_rules(rendered, "gpuadvisor-advisor", namespace), "trialruns", "gpuadvisor.io") == {
            "create"
        }
    assert not _bound_rules(rendered, "gpuadvisor-profiler", "kube-system")


def _render_overlay(tmp_path: Path, kustomization: str, extra: dict[str, str] | None = None) -> list[Obj]:
    """`kubectl kustomize` of an overlay in `tmp_path` (`{base}` is the relative path of deploy/), with more
    kustomizations in subdirectories."""
    kubectl = require_binary("kubectl", "`kubectl kustomize` renders overlays of the install")
    base = Path(os.path.relpath(DEPLOY, tmp_path))
    (tmp_path / "kustomization.yaml").write_text(kustomization.format(base=base))
    for name, text in (extra or {}).items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "kustomization.yaml").write_text(text)
    result = subprocess.run(
        [kubectl, "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def test_collector_writes_are_scoped_to_its_own_node(objects: list[Obj]) -> None:
    policy = find(objects, "ValidatingAdmissionPolicy", "gpuadvisor-collector-node-scope")
    binding = find(objects, "ValidatingAdmissionPolicyBinding", "gpuadvisor-collector-node-scope")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    (condition,) = policy["spec"]["matchConditions"]
    assert f"system:serviceaccount:{COLLECTOR_NAMESPACE}:gpuadvisor-collector" in condition["expression"]
    assert find(objects, "DaemonSet", "gpuadvisor-collector")["spec"]["template"]["spec"]["serviceAccountName"] == (
        "gpuadvisor-collector"
    )


def test_collector_reads_the_host_without_extra_privileges(objects: list[Obj]) -> None:
    daemonset = find(objects, "DaemonSet", "gpuadvisor-collector")
    spec = pod_spec(daemonset)
    assert not spec.get("hostPID")
    assert not spec.get("hostNetwork")
    (container,) = spec["containers"]
    security = container["securityContext"]
    assert not security.get("privileged")
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert "add" not in security["capabilities"]
    host_paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert host_paths == {"host-proc": "/proc", "pod-resources": "/var/lib/kubelet/pod-resources"}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert all(mounts[name]["readOnly"] is True for name in host_paths)
    assert f"--proc-root={mounts['host-proc']['mountPath']}" in container["args"]
    # the collector's default socket path is where the kubelet's socket is mounted
    assert str(DEFAULT_SOCKET.parent) == mounts["pod-resources"]["mountPath"]
    # root for the kubelet's root-only socket, and nothing more: no capability at all
    assert (security["runAsUser"], security["runAsNonRoot"]) == (0, False)
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert "nvidia.com/gpu" not in json.dumps(container.get("resources", {})), "the collector must not take a GPU"
    assert {t["key"] for t in spec["tolerations"]} == {"nvidia.com/gpu"}
    assert container["resources"]["requests"]
    assert container["resources"]["limits"]["memory"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"  # a pod without GPU access is not restarted
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"  # but is not Ready


def test_profiler_probes_the_port_and_path_kopf_serves(objects: list[Obj]) -> None:
    served = urlsplit(DEFAULT_LIVENESS_ENDPOINT)
    (container,) = pod_spec(find(objects, "Deployment", "gpuadvisor-profiler"))["containers"]
    assert "GPUADVISOR_LIVENESS_ENDPOINT" not in {e["name"] for e in container.get("env", [])}, "probes use the default"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe in ("startupProbe", "livenessProbe"):
        get = container[probe]["httpGet"]
        assert get["path"] == served.path, probe
        assert ports[get["port"]] == served.port, probe
    liveness = container["livenessProbe"]
    # generous: a slow start belongs to the startup probe, and one slow answer must not restart the operator
    assert liveness["periodSeconds"] * liveness["failureThreshold"] >= 60
    assert "readinessProbe" not in container  # nothing routes traffic to the profiler


def test_the_advisor_is_probed_for_liveness_on_its_liveness_process(objects: list[Obj]) -> None:
    """Issue 40: the kubelet's liveness probe goes to the port of the process of its own (GPUADVISOR_LIVENESS_PORT),
    which a busy serving loop cannot delay; start-up and readiness stay on the serving port."""
    (serving,) = pod_spec(find(objects, "Deployment", "gpuadvisor-advisor"))["containers"]
    ports = {p["name"]: p["containerPort"] for p in serving["ports"]}
    env = {e["name"]: e.get("value") for e in serving["env"]}
    liveness = serving["livenessProbe"]["httpGet"]
    assert (liveness["path"], ports[liveness["port"]]) == ("/healthz", int(env["GPUADVISOR_LIVENESS_PORT"]))
    assert ports[serving["startupProbe"]["httpGet"]["port"]] == ports[serving["readinessProbe"]["httpGet"]["port"]]
    assert ports[serving["readinessProbe"]["httpGet"]["port"]] == 8080


def test_collectors_push_to_every_advisor_replica(objects: list[Obj]) -> None:
    advisor = find(objects, "Deployment", "gpuadvisor-advisor")
    assert advisor["spec"]["replicas"] == 2
    push = find(objects, "Service", "gpuadvisor-advisor-push")
    assert push["spec"]["clusterIP"] == "None"
    (collector,) = pod_spec(find(objects, "DaemonSet", "gpuadvisor-collector"))["containers"]
    (url,) = [a.split("=", 1)[1] for a in collector["args"] if a.startswith("--advisor-url=")]
    assert url == f"http://gpuadvisor-advisor-push.{NAMESPACE}.svc:{push['spec']['ports'][0]['port']}"


def test_every_selector_finds_its_pods_and_ports(objects: list[Obj]) -> None:
    workloads = [o for o in objects if o["kind"] in {"Deployment", "DaemonSet"}]
    for workload in workloads:
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()
        for c in containers(workload):
            assert c["securityContext"]["allowPrivilegeEscalation"] is False, c["name"]
            assert c["securityContext"]["readOnlyRootFilesystem"] is True, c["name"]
            assert c["resources"]["requests"], c["name"]
            # the one exception: the collector connects to the kubelet's root-only pod-resources socket
            if c["name"] != "collector":
                assert c["securityContext"].get("runAsNonRoot") is not False, c["name"]
        assert pod_spec(workload)["securityContext"]["runAsNonRoot"] is True
    for service in (o for o in objects if o["kind"] == "Service"):
        selected = [
            w
            for w in workloads
            if service["spec"]["selector"].items() <= w["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert len(selected) == 1, service["metadata"]["name"]
        port_names = {p["name"] for c in pod_spec(selected[0])["containers"] for p in c.get("ports", [])}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in port_names, f"{service['metadata']['name']}: {port['targetPort']}"
    for kind in ("PodDisruptionBudget", "NetworkPolicy"):
        policy = find(objects, kind, "gpuadvisor-advisor")
        selector = policy["spec"]["selector" if kind == "PodDisruptionBudget" else "podSelector"]["matchLabels"]
        assert selector.items() <= pod_spec_labels(find(objects, "Deployment", "gpuadvisor-advisor")).items()


def pod_spec_labels(workload: Obj) -> dict[str, str]:
    labels: dict[str, str] = workload["spec"]["template"]["metadata"]["labels"]
    return labels


def test_servicemonitors_select_one_service_each_and_keep_workload_labels(objects: list[Obj]) -> None:
    services = [o for o in objects if o["kind"] == "Service"]
    for monitor in (o for o in objects if o["kind"] == "ServiceMonitor"):
        wanted = monitor["spec"]["selector"]["matchLabels"]
        (service,) = [s for s in services if wanted.items() <= s["metadata"].get("labels", {}).items()]
        # the job label is the Service name, which the alert rules use
        assert service["metadata"]["name"] == monitor["metadata"]["name"]
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    (endpoint,) = find(objects, "ServiceMonitor", "gpuadvisor-collector")["spec"]["endpoints"]
    assert {"action": "labeldrop", "regex": "namespace|pod|container"} in endpoint["relabelings"]


def test_second_scheduler_runs_the_extender_profile_against_the_advisor_service(objects: list[Obj]) -> None:
    deployment = find(objects, "Deployment", "gpuadvisor-scheduler")
    spec = pod_spec(deployment)
    (container,) = spec["containers"]
    (volume,) = [v for v in spec["volumes"] if "configMap" in v]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    config_map = find(objects, "ConfigMap", volume["configMap"]["name"])
    (config_file,) = [a.split("=", 1)[1] for a in container["command"] if a.startswith("--config=")]
    assert config_file.startswith(mount["mountPath"] + "/")
    config = yaml.safe_load(config_map["data"][config_file.rsplit("/", 1)[1]])
    assert config["kind"] == "KubeSchedulerConfiguration"
    (profile,) = config["profiles"]
    assert profile["schedulerName"] == deployment["metadata"]["name"]
    (extender,) = config["extenders"]
    service = find(objects, "Service", "gpuadvisor-advisor")
    port = service["spec"]["ports"][0]["port"]
    assert extender["urlPrefix"].startswith(f"http://gpuadvisor-advisor.{NAMESPACE}.svc:{port}/")
    assert extender["nodeCacheCapable"] is True
    assert extender["ignorable"] is True
    assert {"prioritizeVerb", "filterVerb"} <= extender.keys()
    managed = {r["name"]: r["ignoredByScheduler"] for r in extender["managedResources"]}
    # kube-scheduler sends a pod only if a container names one of these (HTTPExtender.IsInterested): every name a
    # GPU pod carries, whole or shared, that the advisor reads
    # (advisor/cluster/pods.py), and every MIG profile's mixed-strategy resource (advisor/placement/mig.py)
    assert set(managed) == set(GPU_RESOURCE_NAMES) | set(MIG_RESOURCE_NAMES)
    # counts a device plugin advertises stay checked by NodeResourcesFit; amounts no node advertises must not be
    assert [name for name, ignored in managed.items() if not ignored] == [
        "nvidia.com/gpu",
        "aliyun.com/gpu-mem",
        "volcano.sh/vgpu-number",
        *MIG_RESOURCE_NAMES,
    ]
    (fit,) = [c["args"] for c in profile["pluginConfig"] if c["name"] == "NodeResourcesFit"]
    # the plugin score the simulator adds the extender's to: LeastAllocated over GPU, CPU and memory alike
    assert fit["scoringStrategy"]["type"] == "LeastAllocated"
    assert {r["name"]: r["weight"] for r in fit["scoringStrategy"]["resources"]} == {
        "cpu": 1,
        "memory": 1,
        "nvidia.com/gpu": 1,
    }
    election = config["leaderElection"]
    lease_role = find(objects, "Role", "gpuadvisor-scheduler-leader-election")
    assert election["resourceNamespace"] == lease_role["metadata"]["namespace"] == NAMESPACE
    assert [election["resourceName"]] in [r.get("resourceNames") for r in lease_role["rules"]]
    assert spec["serviceAccountName"] == "gpuadvisor-scheduler"


def test_database_and_token_come_from_documented_secrets(objects: list[Obj]) -> None:
    install_doc = (ROOT / "docs" / "install.md").read_text()
    refs = {
        (env["name"], env["valueFrom"]["secretKeyRef"]["name"], env["valueFrom"]["secretKeyRef"]["key"])
        for workload in objects
        if workload["kind"] in {"Deployment", "DaemonSet"}
        for c in containers(workload)
        for env in c.get("env", [])
        if "secretKeyRef" in env.get("valueFrom", {})
    }
    assert ("GPUADVISOR_DB_URL", "gpuadvisor-db", "url") in refs
    assert ("GPUADVISOR_API_TOKEN", "gpuadvisor-api-token", "token") in refs
    for _, secret, key in refs:
        assert f"create secret generic {secret}" in install_doc, secret
        assert f"--from-literal={key}=" in install_doc, secret
    assert not [o for o in objects if o["kind"] == "Secret"], "credentials are never part of the rendered install"


def test_dashboards_and_rules_ship_verbatim(objects: list[Obj]) -> None:
    dashboards = find(objects, "ConfigMap", "gpuadvisor-dashboards")
    assert dashboards["metadata"]["labels"]["grafana_dashboard"] == "1"
    files = sorted((ROOT / "dashboards").glob("*.json"))
    assert sorted(dashboards["data"]) == [p.name for p in files]
    for path in files:
        assert dashboards["data"][path.name] == path.read_text()
    # `kubectl apply` (client side) keeps the whole object in an annotation limited to 256 KiB
    assert len(json.dumps(dashboards)) < 256 * 1024
    rules_path = ROOT / "dashboards" / "rules" / "gpuadvisor.rules.yaml"
    assert find(objects, "ConfigMap", "gpuadvisor-prometheus-rules")["data"][rules_path.name] == rules_path.read_text()
    rule = find(objects, "PrometheusRule", "gpuadvisor")
    assert rule["spec"]["groups"] == yaml.safe_load(rules_path.read_text())["groups"], (
        "deploy/monitoring/prometheusrule.yaml is out of date: copy the groups of the rules file into it"
    )


def test_packing_profile_component_ships_the_configuration_the_openb_experiment_measured(tmp_path: Path) -> None:
    from advisor.placement.config import ScoringConfig
    from advisor.settings import AdvisorSettings
    from advisor.sim.model import Pod
    from advisor.sim.packing import FRAGMENTATION_EXTENDER_WEIGHT
    from advisor.sim.run import fragmentation_scoring_config

    kubectl = require_binary("kubectl", "`kubectl kustomize` renders the packing profile overlay")
    base = Path(os.path.relpath(DEPLOY, tmp_path))
    (tmp_path / "kustomization.yaml").write_text(
        f"resources: [{base}]\ncomponents: [{base / 'profiles' / 'packing'}]\n"
    )
    result = subprocess.run(
        [kubectl, "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    rendered = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    (advisor,) = [c for c in containers(find(rendered, "Deployment", "gpuadvisor-advisor")) if c["name"] == "advisor"]
    env = {e["name"]: e.get("value") for e in advisor["env"]}
    assert "GPUADVISOR_DB_URL" in env  # merged into the base's env, not replacing it
    profile_env = {k: v for k, v in env.items() if v is not None and k != "GPUADVISOR_MODEL_DIR"}
    shipped = ScoringConfig.from_settings(
        AdvisorSettings(**{k.removeprefix("GPUADVISOR_").lower(): v for k, v in profile_env.items()})
    )
    measured = fragmentation_scoring_config([Pod(name="p", num_gpu=1, gpu_milli=1000, cpu_milli=1000, memory_mib=1024)])
    fields = (
        "weight_packing",
        "weight_affinity",
        "weight_interference",
        "weight_jct",
        "extender_span_points",
        "wait_slack",
        "extender_first_of_equals",
        "packing_best_fit_share",
        "packing_gradient_steps",
        "packing_cpu_balance",
        "packing_gradient_residual",
    )
    for field in fields:
        assert getattr(shipped, field) == getattr(measured, field), field

    config_map = find(rendered, "ConfigMap", "gpuadvisor-scheduler-config")
    (config,) = [yaml.safe_load(text) for text in config_map["data"].values()]
    base_config = yaml.safe_load((DEPLOY / "scheduler" / "scheduler-config.yaml").read_text())
    (extender,) = config["extenders"]
    assert "managedResources" not in extender  # every pod of this scheduler goes to the advisor
    assert extender["weight"] == FRAGMENTATION_EXTENDER_WEIGHT
    # kube-scheduler's resource scores off (the simulator's packing runs add none to the extender's)
    (profile,) = config["profiles"]
    assert profile["plugins"] == {
        "score": {"disabled": [{"name": "NodeResourcesFit"}, {"name": "NodeResourcesBalancedAllocation"}]}
    }
    base_config["extenders"][0].pop("managedResources")
    base_config["profiles"][0].pop("pluginConfig")
    base_config["profiles"][0]["plugins"] = profile["plugins"]
    assert config == base_config  # otherwise the same configuration as the base


def test_every_component_is_isolated_by_a_network_policy(objects: list[Obj]) -> None:
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    for workload in (o for o in objects if o["kind"] in {"Deployment", "DaemonSet"}):
        labels = pod_spec_labels(workload)
        (policy,) = [p for p in policies if p["spec"]["podSelector"]["matchLabels"].items() <= labels.items()]
        assert "Ingress" in policy["spec"]["policyTypes"]
        served = {p["name"] for c in containers(workload) for p in c.get("ports", [])}
        for rule in policy["spec"]["ingress"]:
            assert rule["from"], f"{policy['metadata']['name']}: a rule open to every source"
            assert {p["port"] for p in rule["ports"]} <= served, policy["metadata"]["name"]
    # nothing calls the profiler: no ingress rule at all
    assert find(objects, "NetworkPolicy", "gpuadvisor-profiler")["spec"]["ingress"] == []


def test_collector_may_change_only_gpuadvisor_annotations(objects: list[Obj]) -> None:
    policy = find(objects, "ValidatingAdmissionPolicy", "gpuadvisor-collector-node-scope")
    expressions = " ".join(v["expression"] for v in policy["spec"]["validations"])
    for guarded in ("labels", "finalizers", "ownerReferences", "object.spec == oldObject.spec"):
        assert guarded in expressions, guarded
    assert "startsWith('gpuadvisor.io/')" in expressions
    # every annotation the components agree on (collector/keys.py), the ones the collector writes among them, passes
    import collector.keys as written

    names = [v for k, v in vars(written).items() if k.endswith("_ANNOTATION") and isinstance(v, str)]
    assert len(names) >= 6
    assert all(name.startswith("gpuadvisor.io/") for name in names), names


def test_volcano_config_asks_the_advisor_to_filter_and_score_in_time() -> None:
    kubectl = require_binary("kubectl", "`kubectl kustomize deploy/volcano` renders the Volcano configuration")
    result = subprocess.run(
        [kubectl, "kustomize", str(DEPLOY / "volcano")], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    (config_map,) = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    kubernetes_validate.validate(config_map, KUBERNETES_VERSIONS[-1], strict=True)
    config = yaml.safe_load(config_map["data"]["volcano-scheduler.conf"])
    (extender,) = [p for tier in config["tiers"] for p in tier["plugins"] if p["name"] == "extender"]
    arguments = extender["arguments"]
    assert arguments["extender.urlPrefix"] == f"http://gpuadvisor-advisor.{NAMESPACE}.svc:8080/volcano"
    # the routes the advisor serves (advisor/api/routes/volcano.py)
    assert (arguments["extender.predicateVerb"], arguments["extender.prioritizeVerb"]) == ("predicate", "prioritize")
    assert arguments["extender.ignorable"] is True
    timeout = arguments["extender.httpTimeout"]
    assert timeout.endswith("ms")
    assert int(timeout.removesuffix("ms")) >= 500, "room for a 12 MB prioritize body"


def test_tls_component_serves_https_to_the_scheduler_the_collectors_and_prometheus(
    objects: list[Obj], tmp_path: Path
) -> None:
    rendered = _render_overlay(tmp_path, "resources: [{base}]\ncomponents: [{base}/monitoring, {base}/profiles/tls]\n")
    for obj in rendered:
        if not obj["apiVersion"].startswith(("cert-manager.io/", "monitoring.coreos.com/")):
            kubernetes_validate.validate(obj, KUBERNETES_VERSIONS[-1], strict=True)
    # one CA for both namespaces: a ClusterIssuer signs the advisor's certificate and the collectors' copy of the CA
    certificates = {
        o["metadata"]["namespace"]: o for o in rendered if o["kind"] == "Certificate" and "isCA" not in o["spec"]
    }
    assert set(certificates) == {NAMESPACE, COLLECTOR_NAMESPACE}
    assert certificates[NAMESPACE]["metadata"]["name"] == "gpuadvisor-advisor-tls"
    issuers = {(c["spec"]["issuerRef"]["kind"], c["spec"]["issuerRef"]["name"]) for c in certificates.values()}
    assert issuers == {("ClusterIssuer", "gpuadvisor-ca")}
    assert (
        find(rendered, "ClusterIssuer", "gpuadvisor-ca")["spec"]["ca"]["secretName"]
        == (find(rendered, "Certificate", "gpuadvisor-ca")["spec"]["secretName"])
    )

    def mounted(workload: Obj, container: Obj, path: str, key: str) -> None:
        """`path` is file `key` of the Secret of the certificate in the workload's namespace, mounted there."""
        secret = certificates[workload["metadata"]["namespace"]]["spec"]["secretName"]
        volumes = {v["name"]: v for v in pod_spec(workload)["volumes"]}
        (mount,) = [m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
        volume = volumes[mount["name"]]["secret"]
        assert volume["secretName"] == secret
        file_name = path.removeprefix(mount["mountPath"] + "/")
        assert key == {i["path"]: i["key"] for i in volume.get("items", [])}.get(file_name, file_name)

    advisor = find(rendered, "Deployment", "gpuadvisor-advisor")
    (serving,) = [c for c in pod_spec(advisor)["containers"] if c["name"] == "advisor"]
    options = dict(a.split("=", 1) for a in serving["args"] if a.startswith("--tls-"))
    mounted(advisor, serving, options["--tls-cert-file"], "tls.crt")
    mounted(advisor, serving, options["--tls-key-file"], "tls.key")
    assert {serving[p]["httpGet"]["scheme"] for p in ("startupProbe", "readinessProbe")} == {"HTTPS"}
    # the liveness process serves plain HTTP on its own port (advisor.api.liveness)
    assert serving["livenessProbe"]["httpGet"].get("scheme", "HTTP") == "HTTP"
    assert serving["livenessProbe"]["httpGet"]["port"] == "liveness"

    collector_set = find(rendered, "DaemonSet", "gpuadvisor-collector")
    (collector,) = pod_spec(collector_set)["containers"]
    (url,) = [a.split("=", 1)[1] for a in collector["args"] if a.startswith("--advisor-url=")]
    env = {e["name"]: e.get("value") for e in collector["env"]}
    mounted(collector_set, collector, env["SSL_CERT_FILE"], "ca.crt")
    (base_collector,) = pod_spec(find(objects, "DaemonSet", "gpuadvisor-collector"))["containers"]
    assert [a for a in collector["args"] if not a.startswith("--advisor-url=")] == [
        a for a in base_collector["args"] if not a.startswith("--advisor-url=")
    ], "the component repeats the collector's arguments: keep them in step with the base"

    scheduler = find(rendered, "Deployment", "gpuadvisor-scheduler")
    (kube_scheduler,) = pod_spec(scheduler)["containers"]
    (config,) = [yaml.safe_load(t) for t in find(rendered, "ConfigMap", "gpuadvisor-scheduler-config")["data"].values()]
    (extender,) = config["extenders"]
    assert extender["enableHTTPS"] is True
    mounted(scheduler, kube_scheduler, extender["tlsConfig"]["caFile"], "ca.crt")
    base_config = yaml.safe_load((DEPLOY / "scheduler" / "scheduler-config.yaml").read_text())
    (base_extender,) = base_config["extenders"]
    assert {k: v for k, v in extender.items() if k not in {"urlPrefix", "enableHTTPS", "tlsConfig"}} == {
        k: v for k, v in base_extender.items() if k not in {"urlPrefix", "enableHTTPS"}
    }, "otherwise the base's extender configuration"

    (endpoint,) = find(rendered, "ServiceMonitor", "gpuadvisor-advisor")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"]["ca"]["secret"] == {
        "name": certificates[NAMESPACE]["spec"]["secretName"],
        "key": "ca.crt",
    }
    # every host name a client verifies is in the certificate
    for client_url in (url, extender["urlPrefix"]):
        parts = urlsplit(client_url)
        assert parts.scheme == "https"
        assert parts.hostname in certificates[NAMESPACE]["spec"]["dnsNames"]
    assert endpoint["tlsConfig"]["serverName"] in certificates[NAMESPACE]["spec"]["dnsNames"]


SHIPPED_VARIANTS = {
    "packing profile": "resources: [{base}]\ncomponents: [{base}/profiles/packing]\n",
    "TLS": "resources: [{base}]\ncomponents: [{base}/profiles/tls]\n",
    "TLS with monitoring": "resources: [{base}]\ncomponents: [{base}/monitoring, {base}/profiles/tls]\n",
    "monitoring": "resources: [{base}]\ncomponents: [{base}/monitoring]\n",
    "trials in another namespace": "namespace: ml\nresources: [{base}/trial-namespace]\n",
    "Volcano": "resources: [{base}/volcano]\n",
}


@pytest.mark.parametrize("variant", sorted(SHIPPED_VARIANTS))
def test_every_shipped_variant_renders_objects_that_validate(variant: str, tmp_path: Path) -> None:
    rendered = _render_overlay(tmp_path, SHIPPED_VARIANTS[variant])
    assert rendered
    for obj in rendered:
        if obj["apiVersion"].startswith(("cert-manager.io/", "monitoring.coreos.com/")):
            continue  # other projects' kinds: no schema
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                pytest.fail(f"{variant}: {obj['kind']}/{obj['metadata']['name']} invalid for {version}: {e.message}")


def _egress_ports(rule: Obj) -> set[tuple[int | str, str]]:
    return {(p["port"], p.get("protocol", "TCP")) for p in rule["ports"]}


def test_every_component_may_reach_only_what_it_talks_to(objects: list[Obj]) -> None:
    """Egress is restricted too (issue 40): each component's policy lists its destinations by port (DNS, the API
    server, the database, the advisor's pods), and no rule is open to every port."""
    dns = {(53, "UDP"), (53, "TCP")}
    api_server = {(443, "TCP"), (6443, "TCP")}
    database = {(5432, "TCP")}
    advisor = {(8080, "TCP")}
    expected = {
        "gpuadvisor-advisor": dns | api_server | database,
        "gpuadvisor-collector": dns | api_server | advisor,
        "gpuadvisor-profiler": dns | api_server | database,
        "gpuadvisor-scheduler": dns | api_server | advisor,
    }
    for name, ports in expected.items():
        policy = find(objects, "NetworkPolicy", name)
        assert "Egress" in policy["spec"]["policyTypes"], name
        rules = policy["spec"]["egress"]
        assert all(rule.get("ports") for rule in rules), f"{name}: an egress rule open to every port"
        assert set().union(*(_egress_ports(rule) for rule in rules)) == ports, name
        for rule in rules:
            if (8080, "TCP") in _egress_ports(rule):  # the advisor's port only towards the advisor's pods
                (peer,) = rule["to"]
                assert peer["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "gpuadvisor-advisor"}


def test_trial_pods_are_isolated_in_their_namespace(objects: list[Obj]) -> None:
    """Trial pods run any image: nothing may reach them, and they reach DNS and HTTPS only — never the advisor's or
    the database's port."""
    policy = find(objects, "NetworkPolicy", TRIAL_POLICY)
    assert policy["metadata"]["namespace"] == "default"  # with the trial Roles (deploy/trial-namespace)
    assert policy["spec"]["podSelector"]["matchLabels"] == {"app.kubernetes.io/managed-by": MANAGER}
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    assert policy["spec"]["ingress"] == []
    reachable = set().union(*(_egress_ports(rule) for rule in policy["spec"]["egress"]))
    assert reachable == {(53, "UDP"), (53, "TCP"), (443, "TCP")}
