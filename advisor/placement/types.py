"""The placement domain: what a pod asks for, what a node offers, and the verdict on one node.

Plain immutable values shared by every part of `advisor.placement` (scoring, the extender's integers, the filter's
rules) and built by its callers: the cluster state from snapshots (`advisor.cluster.state`), the HTTP schemas and the
Kubernetes watch from pod manifests (`advisor.cluster.pods`), the simulator from its own model. No I/O here.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import count
from typing import NamedTuple

from collector.snapshot import LINK_RANK, LinkLevel

WHOLE_GPU_MILLI = 1000
WORST_LINK_RANK = LINK_RANK[LinkLevel.SYSTEM]
COLUMN_RESIDENTS = 4
"""Residents per GPU whose SM and bandwidth use `NodeState.columns` carries (a GPU with more is evaluated alone)."""
COLUMN_ROWS = 7 + 2 * COLUMN_RESIDENTS
"""Rows of `NodeState.columns`: free milli-GPU, allocated milli-GPU, share allowed (1/0), GPU memory total and used
(bytes), NVLink island (index into `Topology.islands`), residents; then the first `COLUMN_RESIDENTS` residents' SM use
and their memory-bandwidth use (0 where there is none)."""


class ScoringInputError(ValueError):
    """A pod request or node state that cannot be scored; the message names the field."""


@dataclass(frozen=True, slots=True)
class PodRequest:
    """What one pod asks for.

    `gpus` whole GPUs, or a share of one GPU: `gpu_milli` in 1..999 (thousandths of a GPU) and/or `gpu_memory_bytes`.
    `workload` is the `gpuadvisor.io/workload` label (the key for profiles and models); `gang` the pod group.
    `cpu_milli` / `memory_mib` are the pod's CPU and memory requests (None: unknown, taken as 0); they matter only
    on nodes whose free CPU / memory is known and with a task mix that gives CPU / memory. `gpu_models` are the GPU
    models the pod accepts, normalised (`advisor.gpus.normalize_gpu_model`; from its node selector or required
    affinity on `nvidia.com/gpu.product`); empty: any. A node of another model cannot run it. `mig` are the MIG
    instances it asks for, (profile name, count) (`advisor.placement.mig`): such a pod runs on instances of those
    profiles, not on whole GPUs or shares.
    """

    name: str = ""
    gpus: int = 0
    gpu_milli: int = 0
    gpu_memory_bytes: int | None = None
    workload: str | None = None
    gang: str | None = None
    cpu_milli: int | None = None
    memory_mib: int | None = None
    gpu_models: tuple[str, ...] = ()
    mig: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        for profile, n in self.mig:
            if n < 1:
                raise ScoringInputError(f"MIG profile {profile}: count must be >= 1, got {n}")
        if self.gpus < 0:
            raise ScoringInputError(f"gpus must be >= 0, got {self.gpus}")
        if not 0 <= self.gpu_milli <= WHOLE_GPU_MILLI:
            raise ScoringInputError(f"gpu_milli must be within 0..1000, got {self.gpu_milli}")
        if self.gpu_memory_bytes is not None and self.gpu_memory_bytes < 0:
            raise ScoringInputError(f"gpu_memory_bytes must be >= 0, got {self.gpu_memory_bytes}")
        if self.gpus > 0 and self.gpu_milli not in (0, WHOLE_GPU_MILLI):
            raise ScoringInputError("gpu_milli (a GPU share) cannot be combined with whole gpus")
        if self.cpu_milli is not None and self.cpu_milli < 0:
            raise ScoringInputError(f"cpu_milli must be >= 0, got {self.cpu_milli}")
        if self.memory_mib is not None and self.memory_mib < 0:
            raise ScoringInputError(f"memory_mib must be >= 0, got {self.memory_mib}")

    @property
    def is_share(self) -> bool:
        """True for a fraction of one GPU (shared with other pods)."""
        return self.gpus == 0 and (0 < self.gpu_milli < WHOLE_GPU_MILLI or self.gpu_memory_bytes is not None)

    @property
    def whole_gpus(self) -> int:
        """Whole GPUs needed (a share of 1000 milli is one whole GPU)."""
        if self.gpus:
            return self.gpus
        return 1 if self.gpu_milli == WHOLE_GPU_MILLI else 0

    @property
    def share_milli(self) -> int:
        """Thousandths of a GPU that a share takes (a memory-only share counts as 0: no SM reservation)."""
        return self.gpu_milli if self.is_share else 0


@dataclass(frozen=True, slots=True)
class MigInstance:
    """A MIG instance of a node: its parent GPU (index in the node), profile (`1g.10gb`), and whether a pod holds
    it."""

    gpu: int
    profile: str
    taken: bool = False


@dataclass(frozen=True, slots=True)
class Resident:
    """A process (usually a pod) on a GPU, as the last snapshot saw it; `started_seconds` is when its pod started
    (the advisor's clock, None when unknown)."""

    pod: str
    workload: str | None = None
    gpu_milli: int = WHOLE_GPU_MILLI
    sm_utilization_ratio: float = 0.0
    memory_bandwidth_utilization_ratio: float = 0.0
    memory_used_bytes: int = 0
    started_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class GpuState:
    """One GPU of a node. `allocated_milli` is how much of it pods hold (1000 = a whole-GPU pod or full shares).
    `occupancy_known` is False when its collector could not read which processes use it: it is then counted as taken
    (`allocated_milli` 1000), never as free, and reasons say why (`taken_as_unknown`)."""

    index: int
    model: str = ""
    healthy: bool = True
    memory_total_bytes: int = 0
    memory_used_bytes: int = 0
    sm_utilization_ratio: float = 0.0
    memory_bandwidth_utilization_ratio: float = 0.0
    allocated_milli: int = 0
    residents: tuple[Resident, ...] = ()
    occupancy_known: bool = True

    @property
    def memory_free_bytes(self) -> int | None:
        """Free memory, or None when the total is unknown."""
        if self.memory_total_bytes <= 0:
            return None
        return max(0, self.memory_total_bytes - self.memory_used_bytes)


class Topology:
    """Pairwise link ranks of a node's GPUs (`LINK_RANK`, 0 = NVLINK … 4 = SYSTEM), by position in `NodeState.gpus`.

    Hashed by identity so that per-topology caches stay cheap: build one per distinct topology and share it (the
    cluster state does, per distinct link list).
    """

    __slots__ = ("gpu_count", "islands", "known", "largest_island", "ranks")

    def __init__(self, ranks: Sequence[Sequence[int]], *, known: bool = True) -> None:
        n = len(ranks)
        for i, row in enumerate(ranks):
            if len(row) != n:
                raise ScoringInputError(f"topology row {i} has {len(row)} entries, expected {n}")
        self.gpu_count = n
        self.ranks: tuple[tuple[int, ...], ...] = tuple(tuple(int(r) for r in row) for row in ranks)
        self.known = known
        self.islands = _nvlink_islands(self.ranks)
        self.largest_island = max((m.bit_count() for m in self.islands), default=0)

    @classmethod
    def from_links(cls, gpu_count: int, links: Iterable[tuple[int, int, LinkLevel]]) -> Topology:
        """From (position a, position b, level) pairs; pairs not listed are assumed SYSTEM (the worst)."""
        ranks = [[0 if i == j else WORST_LINK_RANK for j in range(gpu_count)] for i in range(gpu_count)]
        seen = False
        for a, b, level in links:
            if a >= gpu_count or b >= gpu_count:
                raise ScoringInputError(f"link {a}-{b} names a GPU outside 0..{gpu_count - 1}")
            if a != b:
                ranks[a][b] = ranks[b][a] = LINK_RANK[level]
                seen = True
        return cls(ranks, known=seen or gpu_count <= 1)

    @classmethod
    def uniform(cls, gpu_count: int, level: LinkLevel) -> Topology:
        """Every pair connected at `level` (e.g. an NVSwitch node is uniform NVLINK)."""
        return cls([[0 if i == j else LINK_RANK[level] for j in range(gpu_count)] for i in range(gpu_count)])


def _nvlink_islands(ranks: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    """Connected components (as bit masks) of the NVLINK graph; a lone GPU is its own island."""
    n = len(ranks)
    seen = 0
    islands: list[int] = []
    nvlink = LINK_RANK[LinkLevel.NVLINK]
    for start in range(n):
        if seen >> start & 1:
            continue
        mask, stack = 0, [start]
        while stack:
            i = stack.pop()
            if mask >> i & 1:
                continue
            mask |= 1 << i
            stack.extend(j for j in range(n) if j != i and ranks[i][j] == nvlink and not mask >> j & 1)
        seen |= mask
        islands.append(mask)
    return tuple(islands)


_SERIALS = count(1)


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class NodeState:
    """One node as the advisor sees it. Derived masks are computed once here, not per scoring call.

    `observed_at_seconds` is the Unix time of the node's last snapshot (None: never observed, e.g. only known from
    the Kubernetes API). `gangs` names the pod groups with members allocated on this node.

    CPU (milli-CPU) and memory (MiB), allocatable and free (allocatable minus what pods request), are optional: None
    when unknown. With free CPU or memory known (and a task mix that gives CPU / memory), packing counts a node's free
    GPUs as fragments for the task types whose CPU or memory no longer fits (FGD's definition), and a pod whose own
    request exceeds them is infeasible; without, the node is scored on its GPUs alone.

    Immutable, compared and hashed by identity: the scorer memoises what it derives from a node against the node
    itself (`advisor.placement.memo.NodeMemo`; a new snapshot makes a new `NodeState`, so a memo never goes stale).
    `serial` numbers the states of a process, never reused: the prioritize verb's score vectors
    (`advisor.placement.vectors`) tell a node's states apart by it, in arrays, without holding them.
    """

    name: str
    gpus: tuple[GpuState, ...]
    topology: Topology
    observed_at_seconds: float | None = None
    gangs: frozenset[str] = frozenset()
    cpu_allocatable_milli: int | None = None
    cpu_free_milli: int | None = None
    memory_allocatable_mib: int | None = None
    memory_free_mib: int | None = None
    # How the node's GPUs are shared by several pods (`advisor.sharing`: "time-slicing", "mps", "mig"; "" unknown)
    # and which source said so (`advisor.sharing.node_sharing`: "snapshot", "label", or "assumed" when neither said).
    sharing_mode: str = ""
    sharing_source: str = "assumed"
    # The node's MIG instances (from Dynamic Resource Allocation's devices, else the snapshot's MIG devices with a
    # profile), free or taken (`advisor.cluster.nodeview.mig_instances_of`): MIG pods' capacity.
    mig_instances: tuple[MigInstance, ...] = ()
    gpu_model: str = field(init=False)
    free_mask: int = field(init=False)
    free_milli: tuple[int, ...] = field(init=False)
    healthy_count: int = field(init=False)
    share_positions: tuple[int, ...] = field(init=False)
    natural_indices: bool = field(init=False)
    free_residents: bool = field(init=False)
    columns: bytes = field(init=False, repr=False)
    serial: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "serial", next(_SERIALS))
        if self.topology.gpu_count != len(self.gpus):
            raise ScoringInputError(
                f"node {self.name}: topology covers {self.topology.gpu_count} GPUs, node has {len(self.gpus)}"
            )
        for what, allocatable, free in (
            ("cpu", self.cpu_allocatable_milli, self.cpu_free_milli),
            ("memory", self.memory_allocatable_mib, self.memory_free_mib),
        ):
            unit = "milli" if what == "cpu" else "mib"
            if allocatable is not None and allocatable < 0:
                raise ScoringInputError(f"node {self.name}: {what}_allocatable_{unit} must be >= 0, got {allocatable}")
            if free is not None and free < 0:
                raise ScoringInputError(f"node {self.name}: {what}_free_{unit} must be >= 0, got {free}")
            if allocatable is not None and free is not None and free > allocatable:
                raise ScoringInputError(
                    f"node {self.name}: {what}_free_{unit} {free} exceeds {what}_allocatable_{unit} {allocatable}"
                )
        free = 0
        healthy = 0
        models: dict[str, int] = {}
        share: list[int] = []
        clean_free_seen = False
        for pos, g in enumerate(self.gpus):
            if g.healthy:
                healthy += 1
                if g.allocated_milli == 0:
                    free |= 1 << pos
                if g.allocated_milli < WHOLE_GPU_MILLI and (g.allocated_milli or g.residents or not clean_free_seen):
                    # Shared or busy GPUs each differ; unshared free GPUs are interchangeable, the first stands in.
                    share.append(pos)
                    clean_free_seen = clean_free_seen or not (g.allocated_milli or g.residents)
            models[g.model] = models.get(g.model, 0) + 1
        object.__setattr__(self, "share_positions", tuple(share))
        object.__setattr__(self, "natural_indices", all(g.index == pos for pos, g in enumerate(self.gpus)))
        object.__setattr__(self, "free_mask", free)
        object.__setattr__(
            self, "free_residents", any(g.residents for pos, g in enumerate(self.gpus) if free >> pos & 1)
        )
        object.__setattr__(
            self,
            "free_milli",
            tuple(max(0, WHOLE_GPU_MILLI - g.allocated_milli) if g.healthy else 0 for g in self.gpus),
        )
        object.__setattr__(self, "healthy_count", healthy)
        object.__setattr__(self, "gpu_model", max(models, key=lambda m: models[m]) if models else "")
        object.__setattr__(self, "columns", self._columns(share))

    def _columns(self, share: list[int]) -> bytes:
        """The node's GPUs as `COLUMN_ROWS` rows of float64 (one column per GPU position), packed: the vectorised
        scorer (`advisor.placement.columnar`) joins many nodes' bytes into one array without touching a `GpuState`.
        Bytes hold no references, so the garbage collector never scans them."""
        island_of = [0] * len(self.gpus)
        for i, mask in enumerate(self.topology.islands):
            for pos in range(len(self.gpus)):
                if mask >> pos & 1:
                    island_of[pos] = i
        share_ok = [0.0] * len(self.gpus)
        for pos in share:
            share_ok[pos] = 1.0
        gpus = self.gpus
        values = array("d", self.free_milli)
        values.extend([float(g.allocated_milli) for g in gpus])
        values.extend(share_ok)
        values.extend([float(g.memory_total_bytes) for g in gpus])
        values.extend([float(g.memory_used_bytes) for g in gpus])
        values.extend([float(i) for i in island_of])
        values.extend([float(len(g.residents)) for g in gpus])
        for j in range(COLUMN_RESIDENTS):
            values.extend([g.residents[j].sm_utilization_ratio if len(g.residents) > j else 0.0 for g in gpus])
        for j in range(COLUMN_RESIDENTS):
            values.extend(
                [g.residents[j].memory_bandwidth_utilization_ratio if len(g.residents) > j else 0.0 for g in gpus]
            )
        return values.tobytes()

    @property
    def free_gpus(self) -> int:
        return self.free_mask.bit_count()


class NodeScore(NamedTuple):
    """The verdict on one node. `score` 0..100; components are ratios 0..1; `gpus` are GPU indices (NVML order).

    A NamedTuple rather than a frozen dataclass: one is built per candidate node per call, and that is 3x cheaper.
    """

    node: str
    score: float
    feasible: bool
    known: bool
    packing: float
    affinity: float
    interference: float
    jct: float
    gpus: tuple[int, ...]
    predicted_slowdown: float
    predicted_jct_seconds: float | None
    detail: str
    gpu_model: str = ""
    jct_basis: str = ""

    @property
    def reason(self) -> str:
        """One line explaining the score (built on demand: the extender path never needs it)."""
        if not self.feasible or not self.known:
            return self.detail
        run = f": ~{duration_text(self.predicted_jct_seconds)}" if self.predicted_jct_seconds is not None else ""
        return (
            f"GPUs {list(self.gpus)}{self.detail}; packing {self.packing:.2f}, affinity {self.affinity:.2f}, "
            f"slowdown x{self.predicted_slowdown:.2f}; on {self.gpu_model or 'an unknown GPU model'} it runs at "
            f"{self.jct:.2f} of the fastest candidate's speed ({self.jct_basis}{run})"
        )

    @property
    def extender_score(self) -> int:
        """This score alone on the extender's integer scale 0..10 (see `extender_scores` for a whole batch)."""
        return min(10, max(0, round(self.score / 10.0)))


def taken_as_unknown(node: NodeState) -> str:
    """The words a capacity reason adds when some of the node's healthy GPUs count as taken only because their
    processes could not be read ("" when none)."""
    unknown = sum(1 for g in node.gpus if g.healthy and not g.occupancy_known)
    if not unknown:
        return ""
    gpus = "GPU" if unknown == 1 else "GPUs"
    return f" ({unknown} {gpus} counted as taken: the collector could not read which processes use them)"


def duration_text(seconds: float) -> str:
    """A predicted duration as a reason string shows it: whole seconds up to 90 s, then minutes, then hours."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:,.1f} h"


_TABLES = count(1)
_LOG_SPARE = 1024


class NodeTable(dict[str, "NodeState"]):
    """The cluster's nodes by name (a plain dict to every reader) that also logs the names whose state its holder
    replaced or removed (`put`, `drop`), so that a reader holding per-node facts (the prioritize verb's node index,
    `advisor.placement.vectors`) re-reads only those instead of every candidate's state on every call.

    `changed_since(token, mark)` answers the names logged since `mark` (a position `mark()` gave) of this table
    (`token`: another table, e.g. a new one after nodes expired, answers None). The log keeps at most about four
    entries per node: older positions answer None (the reader checks every node, as without a log). Writes go
    through the holder's lock; a reader needs none (appending to a list and swapping the log are atomic)."""

    __slots__ = ("_log", "token")

    def __init__(self, nodes: Iterable[tuple[str, NodeState]] = ()) -> None:
        super().__init__(nodes)
        self.token = next(_TABLES)
        self._log: tuple[int, list[str]] = (0, [])  # (position of the first entry kept, the names logged since)

    def put(self, name: str, state: NodeState) -> None:
        self[name] = state
        self._note(name)

    def drop(self, name: str) -> None:
        self.pop(name, None)
        self._note(name)

    def _note(self, name: str) -> None:
        base, log = self._log
        log.append(name)
        if len(log) > 4 * len(self) + _LOG_SPARE:  # keep the newest half: a new list, swapped in whole
            keep = len(log) // 2
            self._log = (base + len(log) - keep, log[-keep:])

    def mark(self) -> int:
        """The position after the last name logged so far."""
        base, log = self._log
        return base + len(log)

    def changed_since(self, token: int, mark: int) -> tuple[list[str], int] | None:
        """The names logged after position `mark` of the table `token` (repeats possible) and the position after
        them; None when this is another table or the log no longer reaches back that far."""
        base, log = self._log
        end = base + len(log)
        if token != self.token or not base <= mark <= end:
            return None
        return log[mark - base : end - base], end


class AssumedTable(dict[str, "NodeState"]):
    """The nodes as one answer sees them with a scheduler's assumed pods (`ClusterState.with_assumed`): a copy of the
    state's `NodeTable` (`base`) taken at its log position `mark`, in which the nodes named in `own` hold states built
    for this answer alone. A reader that follows `base`'s log (`advisor.api.score_delta`) still may: every other
    node's state here is the one `base` had at `mark` or a newer one, and the `own` nodes are to be checked, now and
    by the next reader of the log (their states are not in `base`)."""

    __slots__ = ("base", "mark", "own")

    def __init__(self, base: NodeTable, own: Mapping[str, NodeState]) -> None:
        self.base = base
        self.mark = base.mark()  # before the copy: a state copied is never older than the log says
        super().__init__(base)
        self.update(own)
        self.own = frozenset(own)
