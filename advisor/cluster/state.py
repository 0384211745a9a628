"""The cluster as the advisor sees it: per node its GPUs, links, residents and allocations, rebuilt from telemetry.

Soft state in memory (docs/design.md §5): every replica rebuilds it from the collectors' NodeSnapshots within two push
intervals, plus, when a Kubernetes watch feeds them (`update_pod`, `replace_pods`, `set_allocatable`), the GPU
allocations of bound pods and each node's CPU/memory: allocatable from the node object, free = allocatable minus the
requests of every bound, non-terminated pod (GPU or not). A node's `NodeState` carries CPU/memory only when both its
allocatable and the pods' requests are known (after the first pod list), None otherwise.

Staleness is judged by when a snapshot *arrived* (this replica's clock), so a collector with a skewed clock is not
mistaken for a dead one; older snapshots arriving after newer ones (by their own timestamps) are dropped. A node
silent for `node_expiry_seconds` leaves the state (`expire_silent`): without it, churning node names would grow the
state, and /metrics with it, without bound. Every read (`nodes`, `record`, `records`) applies the expiry first, so no
request sees a node past it, whatever requests came before.

What a node's view holds and how it is built from a snapshot and the pods' allocations: `advisor.cluster.nodeview`;
the allocations themselves: `advisor.cluster.allocation`.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import threading
import time
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from advisor.cluster.allocation import PodAllocation, PodResources, allocation_of, merged_allocation
from advisor.cluster.nodeview import NodeCapacity, build_node_state, topology_of
from advisor.placement.queue import PendingPod
from advisor.placement.types import AssumedTable, NodeState, NodeTable, Topology
from advisor.sharing import MIG_STRATEGY_LABEL, SHARING_STRATEGY_LABEL
from collector.snapshot import GpuSnapshot, NodeSnapshot

# The types `ClusterState` takes and gives, importable with it.
__all__ = [
    "DEFAULT_NODE_EXPIRY_SECONDS",
    "KEEP_JSON_MAX_BYTES",
    "TOPOLOGY_CACHE_ENTRIES",
    "ClusterState",
    "Link",
    "NodeRecord",
    "PodAllocation",
    "PodResources",
    "allocation_of",
]

DEFAULT_NODE_EXPIRY_SECONDS = 600.0
# Distinct (GPU indices, links) shapes kept: a cluster has a handful; a node whose links change in every snapshot
# (a broken collector) must not grow the cache without bound.
TOPOLOGY_CACHE_ENTRIES = 1024
# A snapshot's JSON is kept as received up to this size (a 16-GPU node with 256 processes is ~80 KB); a larger body
# (fields the schema ignores) is kept re-encoded from what was parsed, so a node never holds more than it needs.
KEEP_JSON_MAX_BYTES = 256 * 1024


Link = tuple[int, int, str]
"""A link between two GPUs of a node as its snapshot gives it: (GPU index a, GPU index b, `LinkLevel` value)."""


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """What the state keeps per node: the scoring view plus where it came from.

    The snapshot is kept as the JSON it arrived as (`snapshot_json`, decoded again only to rebuild the node when its
    pods change) and the few fields read per node (its timestamp, GPU UUIDs, links, shared between nodes of one
    topology): a parsed snapshot is ~130 small objects that the garbage collector would scan, a `bytes` none.
    """

    state: NodeState
    snapshot_json: bytes
    timestamp: datetime
    received_at_seconds: float
    links: tuple[Link, ...]
    uuids: tuple[tuple[int, str], ...]
    # What ordering judges by: the snapshot's timestamp, but never later than this replica's wall clock when it
    # arrived, so a snapshot stamped ahead cannot make the node's next genuine ones look older (`ingest`).
    order_seconds: float = 0.0
    # The last snapshot pushed for this node after this one was dropped as older: a second in a row is taken.
    dropped_last: bool = False

    @property
    def snapshot(self) -> NodeSnapshot:
        """The snapshot itself, decoded again (for the rare reader that needs more than the fields above)."""
        return NodeSnapshot.model_validate_json(self.snapshot_json)


def _sharing_labels(labels: Mapping[str, str] | None) -> tuple[str, str]:
    labels = labels or {}
    return labels.get(SHARING_STRATEGY_LABEL, ""), labels.get(MIG_STRATEGY_LABEL, "")


def _same_topology(topology: Topology) -> Callable[[NodeSnapshot, list[GpuSnapshot]], Topology]:
    """A `build_node_state` topology that is the node's own, already built (and shared with its peers)."""

    def same(_snapshot: NodeSnapshot, _gpus: list[GpuSnapshot]) -> Topology:
        return topology

    return same


class ClusterState:
    """Thread-safe holder of every node's `NodeRecord`, every pod's `PodAllocation` and `PodResources`, and every
    node's allocatable CPU/memory. One small record per pod that requests GPUs, CPU or memory; deleted pods and nodes
    are forgotten.

    Writers (ingest, the Kubernetes watch) take a lock and replace whole records; readers get the current mapping
    without locking (a record is immutable, a dict entry swap is atomic).

    With `freeze_after_nodes` (the service sets it), every that many rebuilt nodes the state calls `gc.freeze()`:
    the objects of the nodes built since leave the collector's generations for good. Without it, a young
    collection scans every node state built since the last one (a few hundred objects each; a second of ingest at
    1,000 snapshots/s is ~60 ms of pause) and a full one all of them. Frozen objects are still freed when their
    node is replaced (reference counting). What else was alive at a freeze and later became cyclic garbage would
    be reclaimed only by a full collection of everything (`gc.unfreeze()`, `gc.collect()`: ~0.4 s at 10,000 nodes,
    a stall of every request): none is run, since the serving path makes none (bench/frozen_garbage.py counts it
    in a serving advisor: a closed connection's transport was the one cycle, `api.limits._drop_read_callback`; the
    start-up's garbage is collected before the first freeze). The frozen objects' count grows as caches fill
    (live objects, not garbage: it is no sign that a full collection would reclaim anything).
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        node_expiry_seconds: float = DEFAULT_NODE_EXPIRY_SECONDS,
        freeze_after_nodes: int | None = None,
    ) -> None:
        self._clock = clock
        self._freeze_after = freeze_after_nodes
        self._unfrozen = 0
        self._lock = threading.Lock()
        self._expiry_seconds = node_expiry_seconds
        self._next_sweep_seconds = math.inf  # when the oldest node can have expired: none yet
        self._records: dict[str, NodeRecord] = {}
        self._nodes = NodeTable()  # its log tells the score vectors which nodes changed
        self._allocations: dict[str, PodAllocation] = {}  # pod → what it holds (its own resources and its claims)
        self._own: dict[str, PodAllocation] = {}  # pod → what its own resources say (the pod watch)
        self._from_claims: dict[str, PodAllocation] = {}  # pod → what its ResourceClaims hold (the DRA watch)
        self._mig: dict[str, tuple[tuple[str, str, bool], ...]] = {}  # node → its MIG instances (the DRA watch)
        self._by_node: dict[str, dict[str, PodAllocation]] = {}
        self._topologies: OrderedDict[tuple[object, ...], tuple[Topology, tuple[Link, ...]]] = OrderedDict()
        self._resources: dict[str, PodResources] = {}
        self._requested: dict[str, tuple[int, int, int]] = {}  # node → (milli-CPU, MiB, pods)
        self._requests_known = False
        self._allocatable: dict[str, tuple[int, int]] = {}  # node → (milli-CPU, MiB)
        self._labels: dict[str, Mapping[str, str]] = {}  # node → its labels (from the node watch)
        # node → (its state then, the assumed pods on it, the state with them): `with_assumed`'s last build per node
        self._assumed_builds: dict[str, tuple[weakref.ref[NodeState], dict[str, PodAllocation], NodeState]] = {}
        self._pending: dict[str, PendingPod] = {}  # pod → pending GPU pod (from the pending-pod watch)
        self._pending_mig: Counter[str] = Counter()  # MIG profile → pending pods asking for it
        self._claimed: dict[str, float] = {}  # pending pod → when it was first expected to take room ahead of others
        self.out_of_order_dropped = 0
        self.expired_nodes = 0

    def now(self) -> float:
        return self._clock()

    def _topology(self, snapshot: NodeSnapshot, gpus: list[GpuSnapshot]) -> tuple[Topology, tuple[Link, ...]]:
        """One shared `Topology` and link list per distinct (GPU indices, links): most nodes of a cluster share a
        handful."""
        links = tuple((link.a, link.b, link.level.value) for link in snapshot.links)
        key = (tuple(g.index for g in gpus), links)
        entry = self._topologies.get(key)
        if entry is None:
            entry = self._topologies[key] = (topology_of(snapshot, gpus), links)
            if len(self._topologies) > TOPOLOGY_CACHE_ENTRIES:
                self._topologies.popitem(last=False)
        else:
            self._topologies.move_to_end(key)
        return entry

    def topology_cache_size(self) -> int:
        return len(self._topologies)

    def expire_silent(self) -> list[str]:
        """Forget the nodes that have sent no snapshot for `node_expiry_seconds` (their telemetry, and with it their
        /metrics series); the names forgotten. A sweep over the nodes runs only once the oldest one can have expired
        (its arrival plus the expiry, kept up to date by the sweeps and by new nodes); before that a call is one
        clock read and a comparison, so every read of the state calls it. What the Kubernetes watch knows of a node
        (labels, allocatable, pods) stays: the watch forgets it when the node object goes."""
        now = self._clock()
        if now <= self._next_sweep_seconds:
            return []
        with self._lock:
            cutoff = now - self._expiry_seconds
            gone = [n for n, r in self._records.items() if r.received_at_seconds < cutoff]
            if gone:
                # New mappings rather than deletions in place: a request may be iterating over the current ones.
                dropped = set(gone)
                self._records = {n: r for n, r in self._records.items() if n not in dropped}
                self._nodes = NodeTable((n, s) for n, s in self._nodes.items() if n not in dropped)
                self.expired_nodes += len(gone)
            oldest = min((r.received_at_seconds for r in self._records.values()), default=math.inf)
            self._next_sweep_seconds = oldest + self._expiry_seconds
        return gone

    def ingest(
        self, snapshot: NodeSnapshot, snapshot_json: bytes | None = None, *, wall_seconds: float | None = None
    ) -> bool:
        """Take one snapshot (`snapshot_json`: the JSON it was parsed from, kept as is; encoded here when not given
        or larger than `KEEP_JSON_MAX_BYTES`, e.g. padded with fields the schema ignores); False when it is older
        than the one already held for that node (dropped).

        `wall_seconds` (the service passes its wall clock at arrival) caps the timestamp ordering judges by: a
        snapshot stamped ahead of it counts as stamped when it arrived, so one forward-dated push cannot freeze the
        node until its stamp has passed. A second older snapshot in a row is taken (the collector's clock stepped
        back, an NTP correction); a single late one (a push overtaken by the next) is dropped."""
        self.expire_silent()
        received = self._clock()
        stamp = _ts(snapshot.timestamp)
        order = stamp if wall_seconds is None else min(stamp, wall_seconds)
        with self._lock:
            current = self._records.get(snapshot.node)
            if current is not None and order < current.order_seconds and not current.dropped_last:
                self.out_of_order_dropped += 1
                self._records[snapshot.node] = dataclasses.replace(current, dropped_last=True)
                return False
            keep = snapshot_json is not None and len(snapshot_json) <= KEEP_JSON_MAX_BYTES
            raw = snapshot_json if keep and snapshot_json is not None else snapshot.model_dump_json().encode()
            self._store(snapshot, raw, received, order)
        return True

    def _changed(self) -> None:
        """Count a rebuilt node; every `freeze_after_nodes` of them, `gc.freeze()` (see the class docstring)."""
        if self._freeze_after is None:
            return
        self._unfrozen += 1
        if self._unfrozen >= self._freeze_after:
            gc.freeze()
            self._unfrozen = 0

    def _capacity(self, node: str) -> NodeCapacity | None:
        allocatable = self._allocatable.get(node)
        if allocatable is None or not self._requests_known:
            return None
        cpu, memory, _ = self._requested.get(node, (0, 0, 0))
        return NodeCapacity(allocatable[0], cpu, allocatable[1], memory)

    def _store(self, snapshot: NodeSnapshot, snapshot_json: bytes, received: float, order: float) -> None:
        links: tuple[Link, ...] = ()

        def topology(snap: NodeSnapshot, gpus: list[GpuSnapshot]) -> Topology:
            nonlocal links
            shared, links = self._topology(snap, gpus)
            return shared

        state = build_node_state(
            snapshot,
            self._by_node.get(snapshot.node, {}),
            observed_at_seconds=received,
            topology=topology,
            capacity=self._capacity(snapshot.node),
            labels=self._labels.get(snapshot.node),
            mig=self._mig.get(snapshot.node, ()),
        )
        uuids = tuple((g.index, g.uuid) for g in snapshot.gpus)
        record = NodeRecord(state, snapshot_json, snapshot.timestamp, received, links, uuids, order)
        self._records[snapshot.node] = record
        self._nodes.put(snapshot.node, state)
        self._next_sweep_seconds = min(self._next_sweep_seconds, received + self._expiry_seconds)
        self._changed()

    def _rebuild(self, node: str) -> None:
        record = self._records.get(node)
        if record is not None:
            self._store(record.snapshot, record.snapshot_json, record.received_at_seconds, record.order_seconds)

    def _put_allocation(self, pod: str, allocation: PodAllocation | None, touched: set[str]) -> None:
        previous = self._allocations.pop(pod, None)
        if previous is not None:
            self._by_node.get(previous.node, {}).pop(pod, None)
            touched.add(previous.node)
        if allocation is not None:
            self._allocations[pod] = allocation
            self._by_node.setdefault(allocation.node, {})[pod] = allocation
            touched.add(allocation.node)

    def _add_requested(self, r: PodResources, sign: int) -> None:
        cpu, memory, pods = self._requested.get(r.node, (0, 0, 0))
        total = (cpu + sign * r.cpu_milli, memory + sign * r.memory_mib, pods + sign)
        if total[2] > 0:
            self._requested[r.node] = total
        else:
            self._requested.pop(r.node, None)

    def _put_resources(self, pod: str, resources: PodResources | None, touched: set[str]) -> None:
        previous = self._resources.pop(pod, None)
        if previous is not None:
            self._add_requested(previous, -1)
            touched.add(previous.node)
        if resources is not None:
            self._resources[pod] = resources
            self._add_requested(resources, +1)
            touched.add(resources.node)

    def update_pod(self, pod: str, allocation: PodAllocation | None, resources: PodResources | None) -> None:
        """Record (or move, or forget: None) a bound pod's GPU allocation and CPU/memory requests, and refresh the
        affected nodes once."""
        holding = merged_allocation(allocation, self._from_claims.get(pod))
        if (
            self._own.get(pod) == allocation
            and self._allocations.get(pod) == holding
            and self._resources.get(pod) == resources
        ):
            return
        touched: set[str] = set()
        with self._lock:
            if allocation is None:
                self._own.pop(pod, None)
            else:
                self._own[pod] = allocation
            self._put_allocation(pod, merged_allocation(allocation, self._from_claims.get(pod)), touched)
            self._put_resources(pod, resources, touched)
            for node in touched:
                self._rebuild(node)

    def _set_allocations(self, allocations: Iterable[PodAllocation]) -> None:
        self._own = {a.pod: a for a in allocations}
        self._allocations = {}
        for pod in set(self._own) | set(self._from_claims):
            holding = merged_allocation(self._own.get(pod), self._from_claims.get(pod))
            if holding is not None:
                self._allocations[pod] = holding
        self._by_node = {}
        for a in self._allocations.values():
            self._by_node.setdefault(a.node, {})[a.pod] = a

    def replace_pods(self, allocations: Iterable[PodAllocation], resources: Iterable[PodResources]) -> None:
        """Swap in the full lists of a (re-)list of bound pods; from now on the pods' requests count as known. Only
        the nodes whose pods or CPU/memory changed are rebuilt (a re-list mostly confirms what the watch said)."""
        with self._lock:
            before = {n: (self._by_node.get(n), self._capacity(n)) for n in self._records}
            self._set_allocations(allocations)
            self._resources = {}
            self._requested = {}
            for r in resources:
                self._put_resources(r.pod, r, set())
            self._requests_known = True
            changed = [n for n in self._records if before.get(n) != (self._by_node.get(n), self._capacity(n))]
            for node in changed:
                self._rebuild(node)

    def replace_claimed(self, claimed: Mapping[str, PodAllocation]) -> None:
        """Swap in what every pod's ResourceClaims hold (`advisor.cluster.dra.DraIndex.held_by_pods`), merged with
        what its own resources say; the nodes of the pods whose holding changed are rebuilt."""
        with self._lock:
            changed = {p for p in set(self._from_claims) | set(claimed) if self._from_claims.get(p) != claimed.get(p)}
            self._from_claims = dict(claimed)
            touched: set[str] = set()
            for pod in changed:
                self._put_allocation(pod, merged_allocation(self._own.get(pod), claimed.get(pod)), touched)
            for node in touched:
                self._rebuild(node)

    def replace_mig(self, mig: Mapping[str, tuple[tuple[str, str, bool], ...]]) -> None:
        """Swap in every node's MIG instances (`advisor.cluster.dra.DraIndex.mig_by_node`); the nodes whose
        instances changed are rebuilt."""
        with self._lock:
            changed = {n for n in set(self._mig) | set(mig) if self._mig.get(n) != mig.get(n)}
            self._mig = dict(mig)
            for node in changed:
                self._rebuild(node)

    def set_allocatable(self, node: str, allocatable: tuple[int, int] | None) -> None:
        """A node's `status.allocatable` (milli-CPU, MiB), None to forget it; refreshes the node when it changed."""
        if self._allocatable.get(node) == allocatable:
            return
        with self._lock:
            if allocatable is None:
                self._allocatable.pop(node, None)
            else:
                self._allocatable[node] = allocatable
            self._rebuild(node)

    def replace_allocatable(self, allocatable: Mapping[str, tuple[int, int]]) -> None:
        """Swap in every node's allocatable (after a node re-list) and refresh the nodes whose value changed."""
        with self._lock:
            changed = {
                n for n in set(self._allocatable) | set(allocatable) if self._allocatable.get(n) != allocatable.get(n)
            }
            self._allocatable = dict(allocatable)
            for node in changed:
                self._rebuild(node)

    def set_node_labels(self, node: str, labels: Mapping[str, str]) -> None:
        """A node's labels (for pods' node selectors and affinity, and how its GPUs are shared: a change of the
        sharing labels rebuilds the node's scoring view)."""
        if self._labels.get(node) != labels:
            before = _sharing_labels(self._labels.get(node))
            self._labels[node] = dict(labels)
            if _sharing_labels(labels) != before:
                with self._lock:
                    self._rebuild(node)

    def replace_node_labels(self, labels: Mapping[str, Mapping[str, str]]) -> None:
        """Swap in every node's labels (after a node re-list)."""
        before = {n: _sharing_labels(v) for n, v in self._labels.items()}
        self._labels = {n: dict(v) for n, v in labels.items()}
        changed = [n for n in set(before) | set(self._labels) if before.get(n) != _sharing_labels(self._labels.get(n))]
        if changed:
            with self._lock:
                for node in changed:
                    self._rebuild(node)

    def listed_nodes(self) -> set[str]:
        """The nodes whose Node object the watch has seen (and not seen deleted)."""
        return set(self._labels)

    def node_labels(self, node: str) -> Mapping[str, str] | None:
        """A node's labels, None when the advisor has not seen the node object (no watch, or not listed yet)."""
        return self._labels.get(node)

    def update_pending(self, pod: str, pending: PendingPod | None) -> None:
        """Record (or forget: None, once bound or deleted) a pending GPU pod."""
        previous = self._pending.pop(pod, None)
        asked = Counter(self._pending_mig)  # a new counter: readers iterate the current one without a lock
        if previous is not None:
            asked.subtract(profile for profile, _ in previous.request.mig)
        if pending is None:
            self._claimed.pop(pod, None)
        else:
            self._pending[pod] = pending
            asked.update(profile for profile, _ in pending.request.mig)
        self._pending_mig = +asked

    def replace_pending(self, pending: Iterable[PendingPod]) -> None:
        """Swap in the full list of pending GPU pods (after a re-list)."""
        self._pending = {p.pod: p for p in pending}
        self._pending_mig = Counter(profile for p in self._pending.values() for profile, _ in p.request.mig)
        self._claimed = {pod: at for pod, at in self._claimed.items() if pod in self._pending}

    def pending_mig_profiles(self) -> frozenset[str]:
        """The MIG profiles pending pods ask for: a free instance of any other profile is stranded
        (`advisor.placement.mig.stranded`)."""
        return frozenset(self._pending_mig)

    def note_claims(self, pods: Iterable[str], now_seconds: float) -> None:
        """Record when each of these pending pods was first expected to take room ahead of others (shortest first,
        `advisor.placement.shortest.queue_claims`); forgotten once it is bound or deleted."""
        for pod in pods:
            if pod in self._pending:
                self._claimed.setdefault(pod, now_seconds)

    def claimed_since(self, pod: str) -> float | None:
        """When `pod`, still pending, was first expected to take room ahead of others (None: never)."""
        return self._claimed.get(pod)

    def pending(self) -> list[PendingPod]:
        """Pending GPU pods in kube-scheduler's queue order."""
        return sorted(self._pending.values(), key=PendingPod.queue_key)

    def remove_node(self, node: str) -> None:
        """Forget a node deleted from the cluster."""
        with self._lock:
            self._records.pop(node, None)
            self._nodes.drop(node)
            self._allocatable.pop(node, None)
            self._labels.pop(node, None)

    def holds_pod(self, pod: str) -> bool:
        """Whether the state holds pod `pod`'s GPU allocation (the watch has seen it bound)."""
        return pod in self._allocations

    def with_assumed(self, assumed: Iterable[PodAllocation]) -> Mapping[str, NodeState]:
        """The nodes as they are once `assumed` pods are on them: pods a scheduler has placed (its Reserve) before
        the watch reports them bound. A pod the state already holds counts once, as the state has it; a pod on a node
        without telemetry changes nothing. Only the nodes that gain a pod are rebuilt, for this answer alone; the
        state itself is unchanged.

        A node whose state and assumed pods are those of the last call gets the state built then, the same object:
        a burst sends the same few assumed pods call after call until the watch sees them bound, and a new object
        would make the node look changed to every per-state cache (its verdicts evaluated again, its delta entry
        sent again). A change of what the node's state is built from (its snapshot, pods, capacity, sharing labels, MIG
        instances) replaces that state object, so the same state and the same assumed pods build the same state.

        The answer is an `AssumedTable`: the node table's copy with the log position it was taken at, so that a delta
        answer still follows the log (`advisor.api.score_delta`) instead of checking every candidate's state, on this
        call and the next: where the watch trails the scheduler's bindings, nearly every call of a burst has one."""
        extra: dict[str, dict[str, PodAllocation]] = {}
        for a in assumed:
            if a.pod not in self._allocations and a.node in self._records:
                extra.setdefault(a.node, {})[a.pod] = a
        if not extra:
            return self._nodes
        own: dict[str, NodeState] = {}
        builds = self._assumed_builds
        if len(builds) > len(self._records) + 64:  # nodes gone since: start again
            builds.clear()
        for node, pods in extra.items():
            base = self._nodes.get(node)
            last = builds.get(node)
            if last is not None and base is not None and last[0]() is base and last[1] == pods:
                own[node] = last[2]
                continue
            record = self._records[node]
            built = build_node_state(
                record.snapshot,
                {**self._by_node.get(node, {}), **pods},
                observed_at_seconds=record.received_at_seconds,
                topology=_same_topology(record.state.topology),
                capacity=self._capacity(node),
                labels=self._labels.get(node),
                mig=self._mig.get(node, ()),
            )
            own[node] = built
            if base is not None:
                builds[node] = (weakref.ref(base), pods, built)
        return AssumedTable(self._nodes, own)

    @property
    def nodes(self) -> Mapping[str, NodeState]:
        """Current scoring view of every node that has sent telemetry within the expiry."""
        self.expire_silent()
        return self._nodes

    def record(self, node: str) -> NodeRecord | None:
        self.expire_silent()
        return self._records.get(node)

    def records(self) -> list[NodeRecord]:
        self.expire_silent()
        records = self._records
        return [records[n] for n in sorted(records)]

    def allocations(self) -> list[PodAllocation]:
        return list(self._allocations.values())

    def pod_resources(self) -> list[PodResources]:
        return list(self._resources.values())


def _ts(value: datetime) -> float:
    return value.timestamp()
