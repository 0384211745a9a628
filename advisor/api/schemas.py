"""Request and response bodies of the advisor API (pydantic), kept apart from the pure scoring types.

The kube-scheduler extender shapes follow `k8s.io/kube-scheduler/extender/v1` exactly as the scheduler encodes
and decodes them (Go field names, `Score` an integer 0..10); the Volcano shapes follow its extender plugin
(`task` / `nodes` in, `nodeScore` / `errorMessage` out). Only the parts of a v1.Pod / v1.Node that the advisor reads
are modelled; every other field is accepted and ignored, since the upstream Go types gain fields with every release.
The native API (`/v1/...`) is ours: an unknown field there is a typo, refused (422) rather than silently ignored.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, PlainValidator, model_validator

from advisor.cluster.dra import ClaimAsk, DraIndex, with_claims
from advisor.cluster.migask import with_mig_resources
from advisor.cluster.pods import (
    RESTARTABLE,
    ContainerResources,
    PodSpecError,
    accepted_gpu_models,
    allocatable_of,
    placement_of_spec,
    pod_request,
    rfc3339_seconds,
)
from advisor.placement.queue import DEFAULT_SCHEDULER, NodePlacement, queue_key
from advisor.placement.types import PodRequest, ScoringInputError

MAX_CANDIDATE_NODES = 20_000
"""Most candidate nodes one scheduler request may name (422 beyond): four times the 5,000-node clusters the advisor
is built for (docs/design.md §5); it bounds the work and the answer of one request."""


class _In(BaseModel):
    """A body (or part of one) defined upstream: unknown fields are newer upstream fields, ignored. Numbers are
    strict, as Go's encoding/json decodes them: `true` or `"2"` is no number, `1.5` no integer (issue 40)."""

    model_config = ConfigDict(extra="ignore", strict=True)


class _Native(BaseModel):
    """A body of the native API: an unknown field is a mistake (`gpus_typo`), refused naming it; numbers are strict
    (`true` is not 1)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --------------------------------------------------------------------------------------------------------------------
# Kubernetes objects (the subset the advisor reads)


def _quantity(value: object) -> int | float | str:
    """A resource quantity as Kubernetes writes it (`"1"`, `"500m"`, `"16Gi"`) or a plain JSON number; a boolean is
    neither (in Python it is an int)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError('must be a quantity: a number or a string such as "1", "500m" or "16Gi"')
    return value


Quantity = Annotated[int | float | str, PlainValidator(_quantity, json_schema_input_type=int | float | str)]


class ObjectMeta(_In):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    creationTimestamp: str | None = None  # noqa: N815


class ResourceRequirements(_In):
    limits: dict[str, Quantity] | None = None
    requests: dict[str, Quantity] | None = None


class Container(_In):
    name: str = ""
    resources: ResourceRequirements | None = None
    restartPolicy: str | None = None  # noqa: N815 — "Always" on an init container: a sidecar


class PodSpec(_In):
    # Required, and never empty, as for the API server: a pod's requests are its containers' (advisor.cluster.pods).
    containers: list[Container] = Field(min_length=1)
    initContainers: list[Container] | None = None  # noqa: N815 — Kubernetes' JSON name
    nodeName: str | None = None  # noqa: N815
    overhead: dict[str, Quantity] | None = None
    nodeSelector: dict[str, str] | None = None  # noqa: N815
    affinity: dict[str, Any] | None = None
    priority: int | None = None
    schedulerName: str | None = None  # noqa: N815
    resourceClaims: list[dict[str, Any]] | None = None  # noqa: N815 — DRA claims by name or template


class V1Pod(_In):
    """A v1.Pod as the scheduler sends it; only metadata and container resources are read."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodSpec
    status: dict[str, Any] | None = None

    def claim_ask(self, dra: DraIndex) -> ClaimAsk | None:
        """What the pod's ResourceClaims ask of GPUs (`advisor.cluster.dra`), None when it has none."""
        if not self.spec.resourceClaims:
            return None
        return dra.claim_ask(self.metadata.namespace, {"resourceClaims": self.spec.resourceClaims}, self.status)

    def to_request(self, dra: DraIndex | None = None) -> PodRequest:
        """The scoring request of this pod, with the GPUs its ResourceClaims ask for when `dra` is given;
        `PodSpecError` names the field that is wrong."""
        request = self._own_request()
        ask = self.claim_ask(dra) if dra is not None else None
        return request if ask is None else with_claims(request, ask)

    def _own_request(self) -> PodRequest:
        meta = self.metadata
        containers = [_resources(c) for c in self.spec.containers]
        init_containers = [_resources(c) for c in self.spec.initContainers or []]
        request = pod_request(
            namespace=meta.namespace,
            name=meta.name,
            labels=meta.labels or {},
            annotations=meta.annotations or {},
            containers=containers,
            init_containers=init_containers,
            overhead=self.spec.overhead,
            gpu_models=accepted_gpu_models(self.placement()),
        )
        return with_mig_resources(request, containers, init_containers)

    def scheduler(self) -> str:
        return self.spec.schedulerName or DEFAULT_SCHEDULER

    def queue_key(self, name: str) -> tuple[int, float, str]:
        """Its place in kube-scheduler's queue (`advisor.placement.queue.queue_key`), under the advisor's pod name
        `name`."""
        priority = self.spec.priority if self.spec.priority is not None else 0
        return queue_key(name, priority, rfc3339_seconds(self.metadata.creationTimestamp))

    def placement(self) -> NodePlacement | None:
        """The pod's node selector and required node affinity (None: it may run on any node as far as they go)."""
        return placement_of_spec({"nodeSelector": self.spec.nodeSelector, "affinity": self.spec.affinity})


def _resources(container: Container) -> ContainerResources:
    r = container.resources
    return ContainerResources(
        limits=(r.limits or {}) if r else {},
        requests=(r.requests or {}) if r else {},
        restartable=container.restartPolicy == RESTARTABLE,
    )


class NodeMeta(ObjectMeta):
    """A node's metadata, every field kept (`resourceVersion`, `finalizers`, `ownerReferences`, …)."""

    model_config = ConfigDict(extra="allow")


class V1Node(BaseModel):
    """A v1.Node; every field is kept so that a non-cache-capable filter can hand the object back as it was sent
    (`as_sent`)."""

    model_config = ConfigDict(extra="allow")

    metadata: NodeMeta = Field(default_factory=NodeMeta)

    def as_sent(self) -> dict[str, Any]:
        """The node's JSON with exactly the fields the scheduler sent (none added, none dropped)."""
        return self.model_dump(mode="json", exclude_unset=True)

    def allocatable(self) -> tuple[int, int] | None:
        """`status.allocatable` cpu and memory as (milli-CPU, MiB), None when either is missing or unreadable."""
        status = getattr(self, "status", None)
        allocatable = status.get("allocatable") if isinstance(status, dict) else None
        if not isinstance(allocatable, dict):
            return None
        cpu, memory = allocatable.get("cpu"), allocatable.get("memory")
        if not isinstance(cpu, int | float | str) or not isinstance(memory, int | float | str):
            return None
        return _allocatable(cpu, memory)

    def labels(self) -> dict[str, str]:
        return self.metadata.labels or {}


@functools.lru_cache(maxsize=4096)
def _allocatable(cpu: Quantity, memory: Quantity) -> tuple[int, int] | None:
    """Memoised: a non-cache-capable scheduler sends the same few allocatable strings for every node on every call."""
    return allocatable_of({"cpu": cpu, "memory": memory})


class V1NodeList(BaseModel):
    """A v1.NodeList; its own fields (`metadata`, `kind`, `apiVersion`) are kept to be sent back too."""

    model_config = ConfigDict(extra="allow")

    items: list[V1Node] | None = Field(default=None, max_length=MAX_CANDIDATE_NODES)


# --------------------------------------------------------------------------------------------------------------------
# kube-scheduler extender (k8s.io/kube-scheduler/extender/v1)


class ExtenderArgs(_In):
    """What kube-scheduler POSTs to `prioritizeVerb` / `filterVerb`.

    With `nodeCacheCapable: true` it sends `NodeNames` and `Nodes` is null; otherwise the full `Nodes` list.
    """

    Pod: V1Pod
    Nodes: V1NodeList | None = None
    NodeNames: list[str] | None = Field(default=None, max_length=MAX_CANDIDATE_NODES)

    def candidates(self) -> list[str]:
        """Candidate node names, from `NodeNames` or else `Nodes.items[].metadata.name`."""
        if self.NodeNames is not None:
            return self.NodeNames
        if self.Nodes is not None:
            return [n.metadata.name for n in self.Nodes.items or []]
        raise PodSpecError("NodeNames: either Nodes or NodeNames must be given")


class HostPriority(_Out):
    Host: str
    Score: int = Field(ge=0, le=10)


class ExtenderFilterResult(_Out):
    """What `filterVerb` answers: `NodeNames` (cache-capable) or `Nodes` (full objects), failures with reasons."""

    Nodes: dict[str, Any] | None = None
    NodeNames: list[str] | None = None
    FailedNodes: dict[str, str] = Field(default_factory=dict)
    FailedAndUnresolvableNodes: dict[str, str] = Field(default_factory=dict)
    Error: str = ""


# --------------------------------------------------------------------------------------------------------------------
# Volcano extender plugin


class VolcanoTask(_In):
    """Volcano's api.TaskInfo; only its Pod is read."""

    Pod: V1Pod


class VolcanoNode(_In):
    """Volcano's api.NodeInfo; only its Name is read (and, for predicate, its Node's labels and allocatable)."""

    Name: str
    Node: V1Node | None = None


class VolcanoPriorityRequest(_In):
    """PrioritizeRequest. Documents the body: the route decodes it itself, reading only the fields used."""

    task: VolcanoTask
    nodes: list[VolcanoNode] = Field(default_factory=list, max_length=MAX_CANDIDATE_NODES)


class VolcanoPredicateRequest(_In):
    """PredicateRequest: one candidate node per call. Documents the body, as `VolcanoPriorityRequest`."""

    task: VolcanoTask
    node: VolcanoNode


class VolcanoPriorityResponse(_Out):
    nodeScore: dict[str, float]  # noqa: N815 — Volcano's JSON name
    errorMessage: str = ""  # noqa: N815


class VolcanoPredicateResponse(_Out):
    """PredicateResponse: `status` is the reason a node does not fit ("" when it does; Go name ErrorMessage),
    `code` Volcano's api.Status code (0 success, 2 unschedulable, 3 unschedulable and unresolvable)."""

    status: str = ""
    code: int = 0


# --------------------------------------------------------------------------------------------------------------------
# Native API


class PodQuery(_Native):
    """A pod for `/v1/score` and `/v1/allocate`: either the plain fields, or a v1.Pod's `metadata` + `spec`."""

    name: str = Field(default="", description="The pod's name (`namespace/name`), used in reasons and gang locality.")
    gpus: int = Field(default=0, ge=0, le=1024, description="Whole GPUs requested (0..1024).")
    gpu_milli: int = Field(
        default=0, ge=0, le=1000, description="A share of one GPU in thousandths (0..1000); with `gpus` too: a 422."
    )
    gpu_memory_bytes: int | None = Field(
        default=None, ge=0, description="GPU memory requested in bytes (a share); with `gpus` too: a 422."
    )
    workload: str | None = Field(
        default=None, description="Workload signature (label `gpuadvisor.io/workload`) that profiles are keyed on."
    )
    gang: str | None = Field(default=None, description="Pod group of a gang-scheduled job, for gang locality.")
    cpu_milli: int | None = Field(default=None, ge=0, description="The pod's CPU request in milli-CPU.")
    memory_mib: int | None = Field(default=None, ge=0, description="The pod's memory request in MiB.")
    metadata: ObjectMeta | None = Field(default=None, description="A v1.Pod's metadata, instead of the plain fields.")
    spec: PodSpec | None = Field(default=None, description="A v1.Pod's spec, instead of the plain fields.")
    apiVersion: str | None = Field(default=None, description="Ignored: a whole v1.Pod may be sent.")  # noqa: N815
    kind: str | None = Field(default=None, description="Ignored: a whole v1.Pod may be sent.")
    status: dict[str, Any] | None = Field(default=None, description="Ignored: a whole v1.Pod may be sent.")

    def _share_fields(self) -> list[str]:
        return [name for name in ("gpu_milli", "gpu_memory_bytes") if getattr(self, name)]

    def claim_ask(self, dra: DraIndex) -> ClaimAsk | None:
        """What a v1.Pod's ResourceClaims ask of GPUs, None when it has none (or plain fields are given)."""
        if self.spec is None:
            return None
        return V1Pod(metadata=self.metadata or ObjectMeta(), spec=self.spec, status=self.status).claim_ask(dra)

    def to_request(self, dra: DraIndex | None = None) -> PodRequest:
        whole_and_share = self._share_fields() if self.gpus else []
        if whole_and_share:  # one notation per pod (docs/advisor.md, "GPU requests")
            raise PodSpecError(
                f"pod.{whole_and_share[0]}: two GPU notations in one pod: gpus={self.gpus} whole GPUs and "
                f"{whole_and_share[0]}={getattr(self, whole_and_share[0])} (a share of one GPU); give one of them"
            )
        if self.spec is not None or self.metadata is not None:
            plain = [name for name in ("gpus", *self._share_fields()) if getattr(self, name)]
            if plain:
                raise PodSpecError(
                    f"pod.{plain[0]}: two GPU notations in one pod: the plain field {plain[0]} and a v1.Pod's "
                    "metadata/spec; give one of them"
                )
            if self.spec is None:
                raise PodSpecError("pod.spec: a v1.Pod's metadata needs its spec (with at least one container)")
            return V1Pod(metadata=self.metadata or ObjectMeta(), spec=self.spec, status=self.status).to_request(dra)
        if (
            self.gpus == 0
            and self.gpu_milli == 0
            and self.gpu_memory_bytes is None
            and self.cpu_milli is None
            and self.memory_mib is None
        ):
            raise PodSpecError(
                "pod: give gpus, gpu_milli, gpu_memory_bytes, cpu_milli or memory_mib (or a v1.Pod's metadata and spec)"
            )
        try:
            return PodRequest(
                name=self.name,
                gpus=self.gpus,
                gpu_milli=self.gpu_milli,
                gpu_memory_bytes=self.gpu_memory_bytes,
                workload=self.workload,
                gang=self.gang,
                cpu_milli=self.cpu_milli,
                memory_mib=self.memory_mib,
            )
        except ScoringInputError as e:
            raise PodSpecError(f"pod: {e}") from e


class AssumedPod(_Native):
    """A pod a scheduler has placed (its Reserve) that the advisor's pod watch may not have seen bound yet."""

    node: str = Field(min_length=1, description="The node the pod was placed on.")
    pod: PodQuery = Field(description="The pod, as in `ScoreRequest.pod` (a v1.Pod's metadata and spec).")


class ScoreRequest(_Native):
    pod: PodQuery
    nodes: list[str] | None = Field(
        default=None,
        max_length=MAX_CANDIDATE_NODES,
        description="Node names; all nodes with telemetry when omitted.",
    )
    unknown_nodes: Literal["error", "neutral"] = Field(
        default="error",
        description="A named node without telemetry: `error` (404), or `neutral` (its neutral unknown score, as the "
        "extender answers: a scheduler plugin asks about every node that passed its filter).",
    )
    assumed: list[AssumedPod] = Field(
        default_factory=list,
        max_length=10_000,
        description="Pods already placed but perhaps not yet seen bound: scored as if on their nodes (once, if the "
        "watch already holds them), so that a burst of pods does not take the same free GPU twice.",
    )
    detail: Literal["full", "brief"] = Field(
        default="full",
        description="`full`: every entry explained (`NodeScoreOut`). `brief`: only what a scheduler acts on "
        "(`NodeScoreBrief`: node, score, feasible, known; an infeasible node's reason and whether it can never host "
        "the pod) — a sixth of the bytes, for a scheduler plugin asking once per scheduling cycle.",
    )
    since: str | None = Field(
        default=None,
        max_length=64,
        description="With `detail: brief`: ask for a delta answer. The `token` of this caller's last answer for a pod "
        'of the same shape ("" for none): when it is still the advisor\'s current one, `scores` carries only the '
        "candidates whose entry changed since (`delta: true`; merge them into the entries held), else every candidate "
        "(`delta: false`; replace what is held). Either way the answer's `token` names what the caller then holds; "
        'an empty `token` means this pod is not tracked (a gang or MIG pod): send `since: ""` again.',
    )

    @model_validator(mode="after")
    def _since_needs_brief(self) -> ScoreRequest:
        if self.since is not None and self.detail != "brief":
            raise ValueError("since: a delta answer needs `detail: brief` (the full answer has no token)")
        return self


class Components(_Out):
    """The four parts of a score, each 0..1 (1 best), weighted by the `GPUADVISOR_WEIGHT_*` settings."""

    packing: float = Field(description="Fragmentation-aware packing, 0..1.")
    affinity: float = Field(description="Topology affinity of the chosen GPUs (and gang locality), 0..1.")
    interference: float = Field(description="1 / predicted slowdown from sharing GPUs, 0..1.")
    jct: float = Field(description="Predicted completion time here relative to the fastest candidate, 0..1.")


class NodeScoreOut(_Out):
    node: str
    score: float = Field(ge=0, le=100, description="0..100, higher is better; 0 when infeasible.")
    feasible: bool = Field(description="Whether the pod fits on the node now.")
    known: bool = Field(description="Whether the node has fresh telemetry (else the neutral score).")
    components: Components
    predicted_jct_seconds: float | None = Field(description="Predicted completion time here in seconds, if known.")
    predicted_slowdown: float = Field(description="Predicted slowdown from sharing GPUs, >= 1 (1: none).")
    gpus: list[int] = Field(description="GPU indices the pod would get on this node.")
    reason: str = Field(description="Why this score, in words (and which heuristics stood in for models).")


class NodeScoreBrief(_Out):
    """A `NodeScoreOut` as `detail: brief` answers it: the verdict without its explanation."""

    node: str
    score: float = Field(ge=0, le=100, description="0..100, higher is better; 0 when infeasible.")
    feasible: bool = Field(description="Whether the pod fits on the node now.")
    known: bool = Field(description="Whether the node has fresh telemetry (else the neutral score).")
    reason: str | None = Field(default=None, description="Why the pod does not fit; only on infeasible known nodes.")
    unresolvable: bool | None = Field(
        default=None,
        description="On infeasible known nodes: true when the node can never host the pod, whatever leaves it (as the "
        "extender filter's `FailedAndUnresolvableNodes`; `reason` then says why), false when it merely lacks room now.",
    )


class ScoreResponse(_Out):
    scores: list[NodeScoreOut] | list[NodeScoreBrief] = Field(
        description="One entry per node, best first: `NodeScoreOut`, or `NodeScoreBrief` when the request asked for "
        "`detail: brief`."
    )
    models: dict[str, str] = Field(description="Which model version (or heuristic) answered each question.")
    hint: str = Field(default="", description="Why `scores` is empty, when it is.")
    assumed_held: list[str] = Field(
        default_factory=list,
        description="The request's assumed pods (`namespace/name`) that the advisor already holds from its pod watch: "
        "the caller may stop sending them.",
    )


class ScoreDeltaResponse(ScoreResponse):
    """The answer to a request with `since` (a scheduler plugin holding the entries it was given before)."""

    token: str = Field(
        description="The token to send as `since` next time for a pod of this shape (empty: not tracked, every "
        "answer is full)."
    )
    delta: bool = Field(
        description="True when `scores` holds only the entries changed since the request's token (to merge into "
        "those held; every other candidate's entry is unchanged), false when it holds every candidate. In a delta "
        "answer `models` is that of the full answer the token chain began with."
    )


class AllocateRequest(_Native):
    pod: PodQuery
    node: str = Field(min_length=1, description="The node to choose GPUs on.")


class AllocateResponse(_Out):
    node: str
    feasible: bool
    gpus: list[int] = Field(description="The chosen GPU indices, best topology first; empty when infeasible.")
    score: float = Field(description="0..100, as in /v1/score.")
    predicted_slowdown: float = Field(description="Predicted slowdown from sharing GPUs, >= 1 (1: none).")
    reason: str


class ContainerPreferredAllocationRequest(_In):
    """One container's part of the device plugin API's PreferredAllocationRequest (v1beta1; proto field names, or
    protobuf JSON's lowerCamel ones)."""

    available_deviceIDs: list[str] = Field(  # noqa: N815 — the device plugin API's names
        default_factory=list, validation_alias=AliasChoices("available_deviceIDs", "availableDeviceIDs")
    )
    must_include_deviceIDs: list[str] = Field(  # noqa: N815
        default_factory=list, validation_alias=AliasChoices("must_include_deviceIDs", "mustIncludeDeviceIDs")
    )
    allocation_size: int = Field(ge=0, validation_alias=AliasChoices("allocation_size", "allocationSize"))


class PreferredAllocationRequest(_In):
    """`POST /v1/allocate` as a device plugin's GetPreferredAllocation forwards it: the kubelet's request plus the
    node the plugin runs on (the request itself names no pod and no node)."""

    node: str = Field(min_length=1)
    container_requests: list[ContainerPreferredAllocationRequest] = Field(
        min_length=1, validation_alias=AliasChoices("container_requests", "containerRequests")
    )


class ContainerPreferredAllocationResponse(_Out):
    deviceIDs: list[str]  # noqa: N815 — the device plugin API's name


class PreferredAllocationResponse(_Out):
    """The PreferredAllocationResponse to hand back to the kubelet, one entry per container request, in order."""

    container_responses: list[ContainerPreferredAllocationResponse]


class ResidentOut(_Out):
    pod: str = Field(description="`namespace/name`, `uid:<pod UID>`, or `host` for processes without a pod.")
    workload: str | None = Field(description="Workload signature, when known.")
    gpu_milli: int = Field(description="The share of the GPU it was granted in thousandths (0: whole GPUs or none).")
    sm_utilization_ratio: float = Field(description="Its SM utilisation, 0..1.")
    memory_bandwidth_utilization_ratio: float = Field(description="Its estimated memory-bandwidth use, 0..1.")
    memory_used_bytes: int = Field(description="GPU memory its processes use, bytes.")


class GpuOut(_Out):
    index: int = Field(description="GPU index on its node, as in the collector's `gpu` label.")
    model: str
    healthy: bool
    memory_total_bytes: int = Field(description="Bytes.")
    memory_used_bytes: int = Field(description="Bytes.")
    utilization_ratio: float = Field(description="SM utilisation, 0..1.")
    memory_bandwidth_utilization_ratio: float = Field(description="0..1.")
    allocated_milli: int = Field(description="How much of the GPU is allocated, in thousandths (0..1000).")
    residents: list[ResidentOut]


class MigInstanceOut(_Out):
    gpu: int = Field(description="The index of its parent GPU on the node.")
    profile: str = Field(description="Its profile as NVIDIA writes it (`1g.10gb`, `3g.40gb`).")
    taken: bool = Field(description="Whether a pod holds it (a DRA claim's device, or a pod asking its profile).")


class NodeOut(_Out):
    name: str
    stale: bool = Field(description="No snapshot for longer than `staleness_seconds`: scored as unknown.")
    age_seconds: float = Field(description="Seconds since this replica received the node's last snapshot.")
    snapshot_timestamp: str = Field(description="The last snapshot's own timestamp (RFC 3339).")
    gpu_model: str
    gpu_count: int
    free_gpus: int = Field(description="GPUs with nothing allocated.")
    topology_known: bool = Field(description="Whether the snapshot reported the GPUs' links.")
    gangs: list[str] = Field(description="Pod groups with pods on this node.")
    gpus: list[GpuOut] | None = Field(default=None, description="Every GPU (with `detail=true`, or for one node).")
    mig_instances: list[MigInstanceOut] | None = Field(
        default=None,
        description="The node's MIG instances, free or taken: MIG pods' capacity (with `detail=true`, or for one node; "
        "from Dynamic Resource Allocation's devices, else the snapshot's MIG devices with a profile).",
    )
    labels: dict[str, str] | None = Field(
        default=None,
        description="The Node object's labels as the advisor's node watch last saw them (with `detail=true`, or for "
        "one node); absent while it has not seen the Node (no watch, or not listed yet).",
    )


class NodeListOut(_Out):
    nodes: list[NodeOut]
    staleness_seconds: float


class TelemetryAccepted(_Out):
    node: str
    accepted: bool = Field(description="False when older than the snapshot already held for the node (dropped).")
    reason: str = Field(default="", description="Why it was dropped.")


class JctQuery(_Native):
    workload: str = Field(min_length=1, description="Workload signature.")
    gpu_model: str = Field(min_length=1, description='GPU model name, e.g. "NVIDIA H100 80GB HBM3" or "V100".')
    gpu_count: int = Field(default=1, ge=1, le=1024, description="GPUs the job runs on (1..1024).")
    steps: int | None = Field(
        default=None,
        ge=1,
        le=10**12,
        description="Training steps the job asks for, at its profiled batch size. Without history of the workload, "
        "the JCT is estimated from them: steps / its single-GPU steps/s on this GPU model / the data-parallel "
        "speed-up of `gpu_count` GPUs.",
    )


class JctAnswer(_Out):
    workload: str
    gpu_model: str
    gpu_count: int
    jct_seconds: float | None = Field(description="Predicted completion time in seconds; null when unknown.")
    relative_speed: float | None = Field(
        description="This workload's speed on this GPU model relative to a V100 (1.0); null for an unknown GPU model."
    )
    model: str = Field(description="The JCT model version served, or `heuristic`.")
    models: dict[str, str] = Field(
        default_factory=dict,
        description="What answered this request: `jct` (a model version, or `heuristic: …`) and `speed` (`measured`, "
        "`throughput vN`, `data sheets`, or the unknown GPU model).",
    )
    reason: str


class UsageIn(_Native):
    sm_utilization_ratio: float = Field(ge=0, le=1, description="SM utilisation when running alone, 0..1.")
    memory_bandwidth_utilization_ratio: float = Field(
        ge=0, le=1, description="Memory-bandwidth utilisation when running alone, 0..1."
    )


class InterferenceQuery(_Native):
    gpu_model: str = Field(min_length=1, description="GPU model the two workloads share.")
    workload_a: str = Field(min_length=1, description="Workload signature of the first workload.")
    workload_b: str = Field(min_length=1, description="Workload signature of the second workload.")
    usage_a: UsageIn | None = Field(default=None, description="Measured solo usage of A (else from its profiles).")
    usage_b: UsageIn | None = Field(default=None, description="Measured solo usage of B (else from its profiles).")
    sharing: Literal["time-slicing", "mps", "mig"] | None = Field(
        default=None,
        description="How the GPU is shared: contexts taking turns (the default compute mode), an MPS server, or MIG "
        "instances; null: unknown (the picture of kernels running at once, as the model was trained).",
    )


class InterferenceAnswer(_Out):
    gpu_model: str
    slowdown_a: float = Field(description="A's slowdown when sharing, >= 1 (solo time x this).")
    slowdown_b: float = Field(description="B's slowdown when sharing, >= 1.")
    normalized_throughput_a: float = Field(description="A's throughput sharing / solo, 0..1.")
    normalized_throughput_b: float = Field(description="B's throughput sharing / solo, 0..1.")
    model: str = Field(description="The interference model version that answered, or `heuristic`.")
    source: Literal["model", "heuristic"] = Field(description="Whether a trained model or the heuristic answered.")
    reason: str = Field(description="Where the answer and the usage it was computed from came from, in words.")


class ModelVersionOut(_Out):
    kind: str
    version: int
    promoted: bool
    artifact_path: str
    metrics: dict[str, Any]
    created_at: str
    promoted_at: str | None


class ServedModelOut(_Out):
    version: int
    source: str = Field(description="Where the version's training data came from (a CSV, the store, bundled data).")


class ModelsOut(_Out):
    versions: list[ModelVersionOut]
    serving: dict[str, str] = Field(description="Which predictor answers each question: a model version or heuristic.")
    served: dict[str, ServedModelOut] = Field(
        default_factory=dict, description="Per model kind this replica serves: the version and its data source."
    )
    answers: dict[str, dict[str, int]] = Field(
        default_factory=dict,
        description="Per question, how this replica has answered since start-up: by which model version, or which "
        "fallback (heuristic, data sheets) and why.",
    )


ModelKind = Literal["throughput", "interference", "jct"]


def _all_kinds() -> list[ModelKind]:
    return ["throughput", "interference", "jct"]


class TrainRequest(_Native):
    kinds: list[ModelKind] = Field(default_factory=_all_kinds, min_length=1)
    force: bool = Field(default=False, description="Promote even if the new version validates worse.")


class TrainingJobOut(_Out):
    id: str
    kinds: list[str]
    state: Literal["queued", "running", "succeeded", "failed"]
    status_url: str
    created_at: str
    finished_at: str | None
    results: list[dict[str, Any]]
    error: str
