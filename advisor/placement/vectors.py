"""Per-shape score vectors over a node index: kube-scheduler's prioritize verb as a gather.

kube-scheduler asks about every GPU pod with ~500 candidate nodes. Memoised verdicts (`Scorer.evaluate`) still
cost a memo lookup, a verdict object and a weighted sum per node in Python on every call. Here each request shape has
one row of numbers per node slot — feasible, packing, affinity, interference, slowdown — each row valid for one node
state. A call maps the candidates' names to slots, finds with one array comparison the rows that do not belong to the
node states of this moment (a shape not seen before, a node that sent a new snapshot), computes only those (a share
straight from `columnar.share_arrays`, whole GPUs from the node shape's cached plan in `_whole_plans`; no verdict
object or memo entry per node either way), and weighs the components and converts them to 0..10 with numpy, by the same
functions as `Scorer.extender_priorities` (`advisor.placement.totals`): the same integers
(tests/advisor/test_vectors.py compares).

The shape is `Scorer.evaluate`'s: GPUs or share, GPU memory, GPU models, configuration and predictors, and the workload
— except for whole GPUs, whose plans (the GPUs chosen, packing, affinity) hold for any workload: one table of them
per shape without the workload, and one per workload with the rows of the nodes whose chosen GPUs have residents
(their interference), so that a new workload computes only those (`_whole_priorities`). A whole-GPU pod's GPU memory
is part of the shape only on nodes where some GPU of known memory falls short of it: elsewhere its eligible GPUs are
the free ones and its rows are the pod's without it (`_whole_rows`). The pod's CPU/memory is no part of it: a
shortfall is checked on every call over the nodes' free CPU/memory, as `Scorer.evaluate` does.

A node shape (topology, free milli-GPU) met for the first time by a whole-GPU shape is planned with those of the same
call together (`_new_plans`): the GPU sets on arrays (`gpuset.best_gpu_sets`), their packing on arrays
(`columnar.whole_packing`), the same numbers as `gpuset.whole_plan` — at 10,000 nodes nearly every node has a shape of
its own, so the first calls after a start (or after many snapshots) meet hundreds of them.

What it covers: pods that ask for GPUs (whole or a share), without a gang (whether a member runs elsewhere depends on
the whole batch), under a configuration whose task mixes give no CPU/memory (no node has a fit index). Everything else
goes through the per-node path unchanged (`covers`).

Memory is bounded: at most `MAX_TABLES` shapes, the least recently used forgotten first (one array pair freed, no
per-node objects), each 7 × 8 bytes per node slot; the index holds one slot per node name the cluster knew (and the
`NodeState.serial` of the state last found there, never the state itself), and is started afresh once it holds
more than twice as many names as the cluster has nodes (`_SPARE_SLOTS` aside); the first time its arrays grow, they
make room for the whole cluster (a growth copies them all: a stall once they are full). Per slot it also keeps the
node's `NodeState.columns` (`COLUMN_ROWS` × its GPUs × 8 bytes: 960 bytes for 8 GPUs, as wide as the widest
node), so that a cold call reads them as arrays instead of joining every candidate's bytes. Whole-GPU plans are kept
per node shape for at most `_PLAN_TABLES` (whole GPUs, configuration) pairs, 24 bytes per node shape each, and per
(node shape, eligible GPUs) for GPU-memory requests (at most `_NODE_SHAPE_LIMIT` plans per pair), and go with the
node shapes when the index starts afresh. A share's node basis (`columnar.ShareBasis`: what it reads of a node whatever
its size, F_n(M) as the node is among it) is kept per slot for at most `_BASIS_TABLES` configurations, 600 bytes per
slot each with the default task mix, so that a cold share computes only the after-state of the GPUs it fits on.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from itertools import repeat
from operator import attrgetter
from typing import Any, NamedTuple, Protocol, cast, overload

import numpy as np
from numpy.typing import NDArray

from advisor.gpus import normalize_gpu_model
from advisor.placement.columnar import (
    NodeFacts,
    ShareBasis,
    gpu_slowdowns,
    masks_fragmentation,
    node_modes,
    resident_flags,
    resident_keys,
    share_arrays,
    share_basis,
    share_sizes,
    whole_packing,
)
from advisor.placement.config import ScoringConfig
from advisor.placement.gpuset import GpuSet, best_gpu_sets, set_affinity, whole_plan
from advisor.placement.scoring import RawVerdict, jct_basis
from advisor.placement.totals import extender_integers, unknown_integer, weighted_totals
from advisor.placement.types import (
    COLUMN_ROWS,
    WHOLE_GPU_MILLI,
    NodeScore,
    NodeState,
    NodeTable,
    PodRequest,
    Topology,
)
from advisor.predictors import Predictors, default_usage

MAX_TABLES = 32
"""Request shapes whose score vectors are kept (each 56 bytes per node slot: 0.56 MB per shape at 10,000 nodes)."""
_SPARE_SLOTS = 1024
_MASK_BITS = 62
"""Nodes with more GPUs than this have no int64 mask of them: their whole-GPU rows come from the per-node path."""
_NODE_SHAPE_LIMIT = 65536
"""Distinct (topology, free milli-GPU) pairs the index interns before it starts afresh."""
_MASKS = (1 << _MASK_BITS) - 1
_INT64_MAX = np.iinfo(np.int64).max
_FEASIBLE, _PACKING, _AFFINITY, _INTERFERENCE, _SLOWDOWN = range(5)
_FIELDS = 5
_PLAN_TABLES = 16
"""(whole GPUs, configuration) pairs whose plans by node shape are kept (24 bytes per node shape each)."""
_BASIS_TABLES = 4
"""Configurations whose shares' node bases are kept (`_BasisTable`: (5 + share sizes of the mix) × 8 + 4 floats and 8
class leaders per slot, 664 bytes with the default mix)."""

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]


class Evaluator(Protocol):
    """What the vectors need of their `Scorer`: its configuration and predictors, and its per-node verdicts (for
    groups too small to vectorise)."""

    @property
    def config(self) -> ScoringConfig: ...

    @property
    def predictors(self) -> Predictors: ...

    def evaluate(
        self, pod: PodRequest, nodes: Sequence[NodeState], now_seconds: float | None
    ) -> list[RawVerdict | NodeScore]: ...


class Priorities(NamedTuple):
    """A batch's 0..10 per candidate (in order) and, per candidate, whether it was scored (known, fresh, feasible)
    or is infeasible; the rest are unknown."""

    scores: list[int]
    scored: BoolArray
    infeasible: BoolArray


def covers(pod: PodRequest, config: ScoringConfig) -> bool:
    """Whether `priorities` answers this pod under this configuration (else: the per-node path)."""
    if pod.gang or not (pod.whole_gpus > 0 or pod.is_share) or config.resources is not None:
        return False
    return all(config.for_model(model).resources is None for model in config.model_task_mix or ())


class _Table:
    """One shape's rows: `epoch[slot]` is the node index's epoch of the state the row was computed for (-1: none).
    In a whole-GPU shape's table of plans (`_whole_plans`), `busy[slot]` is the mask of the chosen GPUs that have
    residents (0: none, the row holds for any workload; -1: the per-node path's row, the workload's too)."""

    __slots__ = ("busy", "data", "epoch")

    def __init__(self, capacity: int) -> None:
        self.epoch: IntArray = np.full(capacity, -1, dtype=np.int64)
        self.data: FloatArray = np.zeros((_FIELDS, capacity))
        self.busy: IntArray = np.zeros(capacity, dtype=np.int64)

    def fit(self, capacity: int) -> None:
        """Grow to the index's capacity (new slots: no row)."""
        old = self.epoch.size
        if old < capacity:
            epoch = np.full(capacity, -1, dtype=np.int64)
            epoch[:old] = self.epoch
            data = np.zeros((_FIELDS, capacity))
            data[:, :old] = self.data
            busy = np.zeros(capacity, dtype=np.int64)
            busy[:old] = self.busy
            self.epoch, self.data, self.busy = epoch, data, busy


class _Absent:
    """Stands for a name the cluster does not know (the default of `nodes.get`): serial 0, no state's."""

    serial = 0


_ABSENT = _Absent()
_serial_of = attrgetter("serial")
_observed_of = attrgetter("observed_at_seconds")
_cpu_free_of = attrgetter("cpu_free_milli")
_memory_free_of = attrgetter("memory_free_mib")
_healthy_count_of = attrgetter("healthy_count")
_gpu_count_of = attrgetter("topology.gpu_count")
_largest_island_of = attrgetter("topology.largest_island")
_gpu_model_of = attrgetter("gpu_model")
_free_mask_of = attrgetter("free_mask")


class ScoreVectors:
    """The node index and the per-shape tables of one process (the service's prioritize verb; one lock: a call
    reads and writes both). A slot holds no node state: it knows the state last found there by its `serial`.
    `computed_rows` counts the rows computed so far (the rest of each call is a gather)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.computed_rows = 0
        self._tables: OrderedDict[tuple[object, ...], _Table] = OrderedDict()
        self._next_epoch = 1
        self._reset(64)

    def _reset(self, capacity: int) -> None:
        self._tables.clear()
        self._slot_of: dict[str, int] = {}
        # the last call's names and their slots (read-only), while no name's slot has changed: kube-scheduler sends
        # the same candidates in the same order call after call, and comparing strings is cheaper than hashing them
        self._named: tuple[list[str], NDArray[np.intp]] | None = None
        self._used = 1  # slots taken; slot 0 answers for every name the cluster does not know
        self._serial = np.zeros(capacity, dtype=np.int64)  # `NodeState.serial` each slot was last found with
        # whether a slot's facts are those of its node's current state as far as the cluster's log (`NodeTable`)
        # tells: no change logged since they were read (slot 0, no node's, always)
        self._trusted = np.zeros(capacity, dtype=np.bool_)
        self._trusted[0] = True
        self._log_at = (0, 0)  # (table token, position) of the `NodeTable` log read up to
        self._epoch = np.zeros(capacity, dtype=np.int64)  # a new number whenever that changes: rows compare it
        self._observed = np.full(capacity, np.nan)  # NaN: never observed (or not a known node)
        self._cpu_free = np.full(capacity, np.nan)  # NaN: unknown (never short)
        self._memory_free = np.full(capacity, np.nan)
        self._healthy = np.zeros(capacity, dtype=np.bool_)  # at least one healthy GPU
        self._gpu_count = np.zeros(capacity, dtype=np.intp)
        self._largest_island = np.zeros(capacity)
        self._model = np.zeros(capacity, dtype=np.intp)  # index into `_models`
        self._models: list[str] = []
        self._model_ids: dict[str, int] = {}
        # whole GPUs: the free GPUs and those with residents (bit per position), each GPU's memory (bytes, 0:
        # unknown), and the node's shape (topology, free milli-GPU), index into `_node_shapes`: the plan's key
        self._free_mask = np.zeros(capacity, dtype=np.int64)
        self._resident_mask = np.zeros(capacity, dtype=np.int64)
        self._memory_total = np.zeros((capacity, 8), dtype=np.int64)
        # per node, the least and the most memory of its GPUs whose memory is known (none: int64's largest and 0)
        # and the positions whose memory is not (bit per position): a GPU-memory request reads these three unless
        # it falls between its GPUs' sizes
        self._memory_low = np.full(capacity, _INT64_MAX, dtype=np.int64)
        self._memory_high = np.zeros(capacity, dtype=np.int64)
        self._memory_unknown = np.zeros(capacity, dtype=np.int64)
        self._node_shape = np.zeros(capacity, dtype=np.int64)
        # each node's `NodeState.columns` (row × GPU position, zero past its GPUs) and sharing mode, lent to
        # `columnar` (`NodeFacts`) so that a call copies no node's bytes
        self._columns = np.zeros((COLUMN_ROWS, capacity, 8))
        self._concurrent = np.zeros(capacity, dtype=np.bool_)
        self._sliced = np.zeros(capacity, dtype=np.bool_)
        # each GPU's residents as the turn-taking grid keys them (`predictors.resident_set_keys`; -1: none)
        self._set_keys = np.full((capacity, 8), -1, dtype=np.int64)
        self._node_shapes: list[tuple[Topology, tuple[int, ...]]] = []
        self._node_shape_ids: dict[tuple[Topology, tuple[int, ...]], int] = {}
        # per (whole GPUs, configuration): each node shape id's whole-GPU plan (`_PlanTable`), gathered by cold calls
        self._plans: dict[tuple[int, ScoringConfig], _PlanTable] = {}
        # the same where a GPU-memory request leaves fewer eligible GPUs: by (node shape id, eligible mask) packed
        # as `id << _MASK_BITS | mask` (`_eligible_plans`)
        self._eligible: dict[tuple[int, ScoringConfig], dict[int, _Plan]] = {}
        # per configuration: each slot's `columnar.ShareBasis` (what a share reads of its node whatever its size)
        self._bases: OrderedDict[ScoringConfig, _BasisTable] = OrderedDict()

    @property
    def capacity(self) -> int:
        """Node slots the index's arrays hold (slot 0 included)."""
        return int(self._serial.size)

    def clear(self) -> None:
        """Forget every row, as if every node had just sent a new snapshot (a benchmark's cold start): the slots
        stay, each one's state unknown until the next call finds it."""
        with self._lock:
            self._tables.clear()
            self._bases.clear()
            self._serial[1:] = -1  # no state's serial
            self._trusted[1:] = False

    def _grow(self, capacity: int) -> None:
        def grown(a: NDArray[Any], fill: object) -> NDArray[Any]:
            out = np.full(capacity, fill, dtype=a.dtype)
            out[: a.size] = a
            return out

        self._serial = grown(self._serial, 0)
        self._trusted = grown(self._trusted, False)
        self._epoch = grown(self._epoch, 0)
        self._observed = grown(self._observed, np.nan)
        self._cpu_free = grown(self._cpu_free, np.nan)
        self._memory_free = grown(self._memory_free, np.nan)
        self._healthy = grown(self._healthy, False)
        self._gpu_count = grown(self._gpu_count, 0)
        self._largest_island = grown(self._largest_island, 0.0)
        self._model = grown(self._model, 0)
        self._free_mask = grown(self._free_mask, 0)
        self._resident_mask = grown(self._resident_mask, 0)
        self._memory_low = grown(self._memory_low, _INT64_MAX)
        self._memory_high = grown(self._memory_high, 0)
        self._memory_unknown = grown(self._memory_unknown, 0)
        self._node_shape = grown(self._node_shape, 0)
        self._concurrent = grown(self._concurrent, False)
        self._sliced = grown(self._sliced, False)
        memory = np.zeros((capacity, self._memory_total.shape[1]), dtype=np.int64)
        memory[: self._memory_total.shape[0]] = self._memory_total
        self._memory_total = memory
        columns = np.zeros((COLUMN_ROWS, capacity, self._columns.shape[2]))
        columns[:, : self._columns.shape[1]] = self._columns
        self._columns = columns
        set_keys = np.full((capacity, self._set_keys.shape[1]), -1, dtype=np.int64)
        set_keys[: self._set_keys.shape[0]] = self._set_keys
        self._set_keys = set_keys

    def _slots(self, names: Sequence[str], states: list[NodeState | _Absent], cluster_size: int) -> NDArray[np.intp]:
        """Each name's slot (0 for a name the cluster does not know and never knew), new slots assigned."""
        given = np.fromiter(map(self._slot_of.get, names, repeat(-1)), dtype=np.intp, count=len(names))
        if given.size and given.min() >= 0:  # every name has a slot (the usual call): no Python step per name
            unknown = np.flatnonzero(given == 0)
            if not any(states[i] is not _ABSENT for i in unknown.tolist()):
                return given
            for i in unknown.tolist():  # a name the cluster did not know has a node now: a slot of its own
                if states[i] is not _ABSENT:
                    self._slot_of.pop(names[i], None)
        self._named = None  # slots change below
        got = list(map(self._slot_of.get, names))
        if len(self._slot_of) + got.count(None) > 2 * cluster_size + _SPARE_SLOTS:
            self._reset(self._serial.size)  # mostly names of nodes that left: start afresh
            got = list(map(self._slot_of.get, names))
        needed = self._used + sum(1 for f, s in zip(got, states, strict=True) if f is None and s is not _ABSENT)
        if needed > self._serial.size:
            # room for the whole cluster at once: growing copies every per-slot array (tens of MB at 10,000 nodes),
            # a stall if done while they are full, cheap while they are nearly empty (the first calls)
            self._grow(max(2 * self._serial.size, 1 << max(needed, cluster_size + _SPARE_SLOTS).bit_length()))
        out: list[int] = []
        for name, found, state in zip(names, got, states, strict=True):
            if found is not None:
                out.append(found)
            elif state is _ABSENT:
                self._slot_of[name] = 0  # found as slot 0 next time (the cluster's log says when it has a node)
                out.append(0)
            else:
                slot = self._slot_of[name] = self._used
                self._used += 1
                out.append(slot)
        return np.array(out, dtype=np.intp)

    def _refresh(
        self, changed: IntArray, slots: NDArray[np.intp], states: list[NodeState | _Absent], serials: IntArray
    ) -> None:
        """Take the node-level facts of the candidates at `changed` from the states this call found (their rows in
        every table go stale), one array assignment per fact."""
        target = slots[changed]
        self._serial[target] = serials[changed]
        self._epoch[target] = np.arange(self._next_epoch, self._next_epoch + target.size)
        self._next_epoch += target.size
        found = [states[i] for i in changed.tolist()]
        known = cast("list[NodeState]", [s for s in found if s is not _ABSENT])
        if len(known) < len(found):
            absent = np.fromiter((s is _ABSENT for s in found), dtype=np.bool_, count=len(found))
            self._observed[target[absent]] = np.nan
            target = target[~absent]
        if not known:
            return
        n = len(known)
        # None (unknown) becomes NaN: never observed, never short of CPU or memory
        self._observed[target] = np.array(list(map(_observed_of, known)), dtype=np.float64)
        self._cpu_free[target] = np.array(list(map(_cpu_free_of, known)), dtype=np.float64)
        self._memory_free[target] = np.array(list(map(_memory_free_of, known)), dtype=np.float64)
        self._healthy[target] = np.fromiter(map(_healthy_count_of, known), dtype=np.intp, count=n) > 0
        self._gpu_count[target] = np.fromiter(map(_gpu_count_of, known), dtype=np.intp, count=n)
        self._largest_island[target] = np.fromiter(map(_largest_island_of, known), dtype=np.float64, count=n)
        models = list(map(_gpu_model_of, known))
        for model in set(models).difference(self._model_ids):
            self._model_ids[model] = len(self._models)
            self._models.append(model)
        self._model[target] = np.fromiter(map(self._model_ids.__getitem__, models), dtype=np.intp, count=n)
        self._take_columns(target, known)
        narrow = self._gpu_count[target] <= _MASK_BITS
        self._free_mask[target] = np.where(narrow, [s.free_mask & _MASKS for s in known], 0)
        self._resident_mask[target] = np.where(narrow, _bits(resident_flags(self._columns, target)), 0)
        memory = np.zeros((n, self._memory_total.shape[1]), dtype=np.int64)
        shapes = self._node_shape_ids
        ids = []
        for row, state in enumerate(known):
            totals = [g.memory_total_bytes for g in state.gpus]
            memory[row, : len(totals)] = totals
            shape = (state.topology, state.free_milli)
            shape_id = shapes.get(shape)
            if shape_id is None:
                shape_id = shapes[shape] = len(self._node_shapes)
                self._node_shapes.append(shape)
            ids.append(shape_id)
        self._memory_total[target] = memory
        known_memory = memory > 0
        self._memory_low[target] = np.where(known_memory, memory, _INT64_MAX).min(axis=1)
        self._memory_high[target] = np.where(known_memory, memory, 0).max(axis=1)
        self._memory_unknown[target] = _bits(~known_memory)
        self._node_shape[target] = ids

    def _take_columns(self, target: NDArray[np.intp], known: list[NodeState]) -> None:
        """Each node's GPU memory and columns (zero past its GPUs) and sharing mode into the slots `target`."""
        counts = self._gpu_count[target]
        wide = int(counts.max())
        if wide > self._memory_total.shape[1]:
            memory = np.zeros((self._memory_total.shape[0], wide), dtype=np.int64)
            memory[:, : self._memory_total.shape[1]] = self._memory_total
            self._memory_total = memory
            columns = np.zeros((COLUMN_ROWS, self._columns.shape[1], wide))
            columns[:, :, : self._columns.shape[2]] = self._columns
            self._columns = columns
            set_keys = np.full((self._set_keys.shape[0], wide), -1, dtype=np.int64)
            set_keys[:, : self._set_keys.shape[1]] = self._set_keys
            self._set_keys = set_keys
        self._columns[:, target] = 0.0
        for g in np.unique(counts).tolist():  # the nodes of g GPUs: one join of their bytes
            same = np.flatnonzero(counts == g)
            joined = b"".join([known[i].columns for i in same.tolist()])
            by_node = np.frombuffer(joined, dtype=np.float64).reshape(same.size, COLUMN_ROWS, g)
            self._columns[:, target[same], :g] = by_node.transpose(1, 0, 2)
        self._set_keys[target] = resident_keys(self._columns[:, target])
        self._concurrent[target], self._sliced[target] = node_modes(known)

    def _candidates(
        self, names: Sequence[str], nodes: Mapping[str, NodeState]
    ) -> tuple[NDArray[np.intp], Callable[[int], NodeState | _Absent]]:
        """Each candidate's slot, its facts those of the node's current state, and a reader of a candidate's
        state by position. Where `nodes` is a `NodeTable` whose log reaches back to the last call, only the
        slots of the nodes it names are read again (one dict lookup per candidate in all); else, or where a
        candidate is new or was named, every candidate's state is read and its serial compared."""
        if isinstance(nodes, NodeTable):
            found = nodes.changed_since(*self._log_at)
            if found is None:
                self._trusted[1:] = False
                self._log_at = (nodes.token, nodes.mark())
            else:
                changed, end = found
                self._log_at = (nodes.token, end)
                if changed:
                    self._distrust(changed)
            named = self._named
            if named is not None and isinstance(names, list) and names == named[0]:
                slots = named[1]
            else:
                slots = np.fromiter(map(self._slot_of.get, names, repeat(-1)), dtype=np.intp, count=len(names))
                if slots.size and slots.min() >= 0:
                    slots.flags.writeable = False
                    self._named = (list(names), slots)
            if slots.size and slots.min() >= 0 and self._trusted[slots].all():

                def lookup(i: int) -> NodeState | _Absent:
                    return nodes.get(names[i], _ABSENT)

                return slots, lookup
        states: list[NodeState | _Absent] = list(map(nodes.get, names, repeat(_ABSENT)))
        slots = self._slots(names, states, len(nodes))
        serials = np.fromiter(map(_serial_of, states), dtype=np.int64, count=len(states))
        changed_at = np.flatnonzero(serials != self._serial[slots])
        if changed_at.size:
            self._refresh(changed_at, slots, states, serials)
        self._trusted[slots] = True
        return slots, states.__getitem__

    def _distrust(self, names: list[str]) -> None:
        """The slots of `names` (logged as changed) to be read again; a name of no node before (slot 0) forgotten,
        so that it gets a slot of its own when next asked about."""
        slot_of = self._slot_of
        for name in set(names):
            slot = slot_of.get(name)
            if slot == 0:
                del slot_of[name]
                self._named = None
            elif slot is not None:
                self._trusted[slot] = False

    def _table(self, key: tuple[object, ...]) -> _Table:
        table = self._tables.get(key)
        if table is None:
            # the least recently used shape's arrays, where there are `MAX_TABLES` (no row of theirs is read: every
            # epoch forgotten), else new ones
            spare = self._tables.popitem(last=False)[1] if len(self._tables) >= MAX_TABLES else None
            if spare is not None and spare.epoch.size == self._serial.size:
                spare.epoch.fill(-1)
                table = spare
            else:
                table = _Table(self._serial.size)
            self._tables[key] = table
        else:
            self._tables.move_to_end(key)
            table.fit(self._serial.size)
        return table

    def priorities(
        self,
        pod: PodRequest,
        names: Sequence[str],
        nodes: Mapping[str, NodeState],
        *,
        scorer: Evaluator,
        now_seconds: float | None,
    ) -> Priorities:
        """The extender's integers for `names` (a pod `covers` accepts): `Scorer.extender_priorities`' numbers."""
        config, predictors = scorer.config, scorer.predictors
        with self._lock:
            if len(self._node_shapes) > _NODE_SHAPE_LIMIT:
                self._reset(self._serial.size)  # node shapes of states long gone: start afresh
            slots, state_at = self._candidates(names, nodes)
            observed = self._observed[slots]
            # `Scorer.evaluate`'s staleness (never observed: NaN, never fresh) and CPU/memory shortfall, on arrays
            fresh = ~np.isnan(observed) if now_seconds is None else observed >= now_seconds - config.staleness_seconds
            fresh_fits = fresh
            if pod.cpu_milli is not None:
                fresh_fits = fresh_fits & ~(pod.cpu_milli > self._cpu_free[slots])
            if pod.memory_mib is not None:
                fresh_fits = fresh_fits & ~(pod.memory_mib > self._memory_free[slots])

            shape = (pod.whole_gpus, pod.share_milli, pod.gpu_memory_bytes, pod.gpu_models, config, predictors)
            epochs = self._epoch[slots]
            if pod.whole_gpus > 0:
                rows = self._whole_rows(
                    pod, shape, slots, epochs=epochs, fresh_fits=fresh_fits, state_at=state_at, scorer=scorer
                )
            else:
                table = self._table((*shape, pod.workload))
                cold = np.flatnonzero(fresh_fits & (table.epoch[slots] != epochs))
                if cold.size:  # fresh, with room for the pod's CPU/memory
                    self.computed_rows += int(cold.size)
                    target = slots[cold]
                    table.data[:, target] = self._share_rows(pod, _reader(cold, state_at), target, scorer=scorer)
                    table.epoch[target] = epochs[cold]
                rows = np.take(table.data, slots, axis=1)
            feasible = fresh_fits & (rows[_FEASIBLE] > 0)
            return self._integers(pod, feasible, fresh, rows, slots, config=config, predictors=predictors)

    def _whole_rows(
        self,
        pod: PodRequest,
        shape: tuple[object, ...],
        slots: NDArray[np.intp],
        *,
        epochs: IntArray,
        fresh_fits: BoolArray,
        state_at: Callable[[int], NodeState | _Absent],
        scorer: Evaluator,
    ) -> FloatArray:
        """Whole GPUs' rows of the candidates (`_whole_priorities`). A GPU-memory request that every GPU of known
        memory on a node meets leaves the node's eligible GPUs the free ones, so its rows there are those of the same
        pod without the request: they are read from (and kept in) that shape's tables, shared by every such request,
        and only the other nodes' rows are the request's own."""
        need = pod.gpu_memory_bytes
        if need is None:
            return self._whole_priorities(
                pod, shape, slots, epochs=epochs, fresh_fits=fresh_fits, state_at=state_at, scorer=scorer
            )
        met = min(need, _INT64_MAX) <= self._memory_low[slots]
        without = (shape[0], shape[1], None, *shape[3:])  # `priorities`' shape, no GPU memory asked
        if met.all() or not met.any():
            return self._whole_priorities(
                pod,
                without if met.all() else shape,
                slots,
                epochs=epochs,
                fresh_fits=fresh_fits,
                state_at=state_at,
                scorer=scorer,
            )
        rows = np.empty((_FIELDS, slots.size))
        for part, key in ((np.flatnonzero(met), without), (np.flatnonzero(~met), shape)):
            rows[:, part] = self._whole_priorities(
                pod,
                key,
                slots[part],
                epochs=epochs[part],
                fresh_fits=fresh_fits[part],
                state_at=_positions_in(part, state_at),
                scorer=scorer,
            )
        return rows

    def _whole_priorities(
        self,
        pod: PodRequest,
        shape: tuple[object, ...],
        slots: NDArray[np.intp],
        *,
        epochs: IntArray,
        fresh_fits: BoolArray,
        state_at: Callable[[int], NodeState | _Absent],
        scorer: Evaluator,
    ) -> FloatArray:
        """Whole GPUs' rows of the candidates (fields × candidates) from two tables, each computing only the rows
        it lacks for the fresh candidates with room for the pod's CPU/memory: the shape's plans, which hold for any
        workload (`_whole_plans`: the checks, the GPUs chosen, packing and affinity; the whole row where no chosen
        GPU has residents), and the workload's rows where the chosen GPUs have residents (`_whole_interference`).
        A new workload recomputes only the nodes where it would share a GPU (the memo's rule is coarser: any node
        whose free GPUs have residents)."""
        plans = self._table((*shape, _ANY_WORKLOAD))
        cold = np.flatnonzero(fresh_fits & (plans.epoch[slots] != epochs))
        if cold.size:
            self.computed_rows += int(cold.size)
            target = slots[cold]
            plans.data[:, target], plans.busy[target] = self._whole_plans(pod, target, scorer=scorer)
            plans.epoch[target] = epochs[cold]
        rows = np.take(plans.data, slots, axis=1)
        busy = plans.busy[slots]
        shared = np.flatnonzero(fresh_fits & (busy != 0))
        if shared.size:
            table = self._table((*shape, pod.workload))
            at = slots[shared]
            cold = shared[table.epoch[at] != epochs[shared]]
            if cold.size:
                self.computed_rows += int(cold.size)
                target = slots[cold]
                computed = self._whole_interference(
                    pod, _reader(cold, state_at), target, busy[cold], rows[:, cold], scorer=scorer
                )
                table.data[:, target] = computed
                table.epoch[target] = epochs[cold]
                if cold.size == shared.size:  # all of them new (a new workload): the rows as computed, no gather back
                    rows[:, shared] = computed
                    return rows
            rows[:, shared] = np.take(table.data, at, axis=1)
        return rows

    def _share_rows(
        self,
        pod: PodRequest,
        batch: Callable[[IntArray], Sequence[NodeState]],
        target: NDArray[np.intp],
        *,
        scorer: Evaluator,
    ) -> FloatArray:
        """A share's rows (fields × nodes) without a verdict object per node: `Scorer.evaluate`'s checks (a GPU
        model the pod does not accept, no healthy GPU: infeasible) over the index's arrays, then the nodes of one
        GPU count and packing configuration (`ScoringConfig.for_model`) together through `share_arrays`, as
        `scoring._evaluate_shares` groups them."""
        config, predictors = scorer.config, scorer.predictors
        values = np.zeros((_FIELDS, target.size))
        values[_SLOWDOWN] = 1.0
        model = self._model[target]
        ok = self._healthy[target]
        models = self._models
        if pod.gpu_models:
            accepted = np.array([normalize_gpu_model(m) in pod.gpu_models for m in models], dtype=np.bool_)
            ok = ok & accepted[model]
        per_model = [config.for_model(m) for m in models]
        distinct = list({id(c): c for c in per_model}.values())  # compared by identity
        numbers = np.array([distinct.index(c) for c in per_model], dtype=np.intp)
        group = self._gpu_count[target] * len(distinct) + numbers[model]
        fallback = default_usage(pod.share_milli or WHOLE_GPU_MILLI)
        usages = [predictors.usage.usage(pod.workload, m) or fallback for m in models]  # by model, as Scorer.evaluate
        keys = np.flatnonzero(np.bincount(group[ok])).tolist()  # the groups present, ascending (no sort)
        for key in keys:
            members = np.flatnonzero(ok & (group == key)) if len(keys) > 1 else np.flatnonzero(ok)
            nodes = batch(members)
            if len(nodes) < _VECTORISE_MIN_NODES:  # the scalar loop is cheaper than setting up the arrays
                values[:, members] = _rows(scorer.evaluate(pod, nodes, None))
                continue
            config = distinct[key % len(distinct)]
            chosen = share_arrays(
                pod,
                nodes,
                [None] * len(nodes),
                usages,
                config=config,
                predictors=predictors,
                facts=self._facts(target[members], model[members]),
                basis=self._share_basis(config, target[members], key // len(distinct)),
            )
            values[_FEASIBLE, members] = chosen.positions >= 0
            values[_PACKING, members] = chosen.packing
            values[_AFFINITY, members] = 1.0  # no gang: `scoring._share_verdict`'s affinity
            values[_INTERFERENCE, members] = chosen.interference
            values[_SLOWDOWN, members] = chosen.pod_slowdown
        return values

    def _whole_plans(
        self, pod: PodRequest, target: NDArray[np.intp], *, scorer: Evaluator
    ) -> tuple[FloatArray, IntArray]:
        """Whole GPUs' rows (fields × nodes) as if no chosen GPU had residents, and per node the mask of the chosen
        GPUs that have (`_Table.busy`), over the index's arrays: `Scorer.evaluate`'s checks (a GPU model the pod
        does not accept, no healthy GPU) and `scoring.evaluate_whole`'s plan for a pod without a gang on nodes
        without a CPU/memory fit index (what `covers` admits). The GPUs eligible (free, and with the memory asked
        for) are a mask per node; one plan (`gpuset.whole_plan`) per distinct node shape, eligible mask and
        configuration. None of it depends on the workload."""
        config = scorer.config
        k = pod.whole_gpus
        values = np.zeros((_FIELDS, target.size))
        values[_SLOWDOWN] = 1.0
        busy = np.zeros(target.size, dtype=np.int64)
        model = self._model[target]
        ok = self._healthy[target].copy()
        models = self._models
        if pod.gpu_models:
            accepted = np.array([normalize_gpu_model(m) in pod.gpu_models for m in models], dtype=np.bool_)
            ok &= accepted[model]
        wide = np.flatnonzero(ok & (self._gpu_count[target] > _MASK_BITS))
        if wide.size:  # no int64 mask of their GPUs: the per-node path (`_whole_interference`), for every workload
            busy[wide] = -1
            ok[wide] = False
        free = self._free_mask[target]
        eligible = free
        if pod.gpu_memory_bytes is not None:  # `scoring.memory_ok` of a whole GPU: unknown memory, or enough
            need = min(pod.gpu_memory_bytes, _INT64_MAX)
            low = self._memory_low[target]
            # every GPU of known memory has enough, or none has; per position only where the request falls
            # between the node's GPUs' sizes
            eligible = np.where(need <= low, free, free & self._memory_unknown[target])
            between = np.flatnonzero((need > low) & (need <= self._memory_high[target]))
            if between.size:
                memory = self._memory_total[target[between]]
                eligible[between] = free[between] & _bits((memory <= 0) | (memory >= need))
        ok &= np.bitwise_count(eligible) >= k
        members = np.flatnonzero(ok)
        if not members.size:
            return values, busy
        per_model = [config.for_model(m) for m in models]
        distinct = list({id(c): c for c in per_model}.values())  # compared by identity
        numbers = np.array([distinct.index(c) for c in per_model], dtype=np.int64)
        # one plan per distinct (node shape, configuration, eligible GPUs): where the eligible GPUs are the free ones
        # (no GPU-memory request, or one every free GPU meets), which the node shape (its free milli-GPU) already
        # says, a gather from the plans by node shape; elsewhere from the plans by (node shape, eligible GPUs)
        masks = eligible[members]
        shapes = self._node_shape[target[members]]
        config_numbers = numbers[model[members]]
        if pod.gpu_memory_bytes is None:
            planned, chosen = self._shape_plans(k, distinct, shapes, config_numbers, masks, slots=target[members])
        else:
            planned = np.empty((_FIELDS, members.size))
            chosen = np.empty(members.size, dtype=np.int64)
            narrowed = masks != free[members]
            for where, plans in (
                (np.flatnonzero(~narrowed), self._shape_plans),
                (np.flatnonzero(narrowed), self._eligible_plans),
            ):
                if where.size == members.size:  # all of them: no scatter
                    planned, chosen = plans(k, distinct, shapes, config_numbers, masks, slots=target[members])
                elif where.size:
                    planned[:, where], chosen[where] = plans(
                        k, distinct, shapes[where], config_numbers[where], masks[where], slots=target[members[where]]
                    )
        shared = np.where(planned[_FEASIBLE] > 0, chosen & self._resident_mask[target[members]], 0)
        if members.size == target.size:  # every node passed the checks (the usual call): the plans are the rows
            return planned, shared
        values[:, members] = planned
        busy[members] = shared
        return values, busy

    def _whole_interference(
        self,
        pod: PodRequest,
        batch: Callable[[IntArray], Sequence[NodeState]],
        target: NDArray[np.intp],
        busy: IntArray,
        plans: FloatArray,
        *,
        scorer: Evaluator,
    ) -> FloatArray:
        """The workload's rows (fields × nodes) of nodes whose plan (`plans`, from `_whole_plans`) chose GPUs with
        residents (`busy`, their mask; -1: the per-node path's verdict): the plan's row with the interference of
        the chosen GPUs with their residents, for every (node, chosen GPU with residents) pair at once
        (`columnar.gpu_slowdowns`), then the worst per node, as `scoring.whole_slowdowns` takes it GPU by GPU."""
        predictors = scorer.predictors
        values = plans.copy()
        wide = np.flatnonzero(busy < 0)
        if wide.size:
            values[:, wide] = _rows(scorer.evaluate(pod, batch(wide), None))
        shared = np.flatnonzero(busy > 0)
        if not shared.size:
            return values
        at = target[shared]
        model = self._model[at]
        width = int(self._gpu_count[at].max())
        # each (node, chosen GPU with residents) pair, nodes ascending and each node's GPUs by position: the set bits
        # of a boolean (node, position) table read flat (numpy's nonzero of a 2-D integer table took twice as long)
        flat = np.flatnonzero((busy[shared, None] & (1 << np.arange(width, dtype=np.int64))) != 0)
        rows = flat // width
        positions = flat - rows * width
        fallback = default_usage(pod.share_milli or WHOLE_GPU_MILLI)
        usages = [predictors.usage.usage(pod.workload, m) or fallback for m in self._models]  # by model
        pod_pair, res_pair = gpu_slowdowns(
            pod,
            batch(shared),
            (positions, rows),
            usages=usages,
            facts=self._facts(at, model),
            predictors=predictors,
        )
        # the worst pair of each node, at least 1 (`rows` ascend, each node's pairs one run of them, as many as the
        # bits of its mask: every node here has at least one)
        counts = np.bitwise_count(busy[shared]).astype(np.intp)
        starts = np.cumsum(counts) - counts
        pod_slow = np.maximum(np.maximum.reduceat(pod_pair, starts), 1.0)
        res_slow = np.maximum(np.maximum.reduceat(res_pair, starts), 1.0)
        values[_INTERFERENCE, shared] = 0.5 / pod_slow + 0.5 / res_slow
        values[_SLOWDOWN, shared] = pod_slow
        return values

    def _share_basis(self, config: ScoringConfig, slots: NDArray[np.intp], gpu_count: int) -> ShareBasis:
        """The `columnar.ShareBasis` of the nodes at `slots` (of `gpu_count` GPUs) under `config`: kept per slot and
        node state, so that only nodes whose state is new since they were last asked about are computed."""
        table = self._bases.pop(config, None)  # put back last: the least recently used go first
        capacity, width = self._serial.size, self._columns.shape[2]
        if table is None or table.epoch.size < capacity or table.gpus.shape[2] < width:
            table = _BasisTable(capacity, width, sorted(share_sizes(config)))
        self._bases[config] = table
        if len(self._bases) > _BASIS_TABLES:
            self._bases.popitem(last=False)
        stale = slots[table.epoch[slots] != self._epoch[slots]]
        if stale.size:
            fits: list[None] = [None] * stale.size  # `covers`: no CPU/memory fit index
            table.keep(
                stale,
                share_basis(self._columns, stale, gpu_count, self._largest_island[stale], config=config, fits=fits),
            )
            table.epoch[stale] = self._epoch[stale]
        return table.basis(slots)

    def _facts(self, slots: NDArray[np.intp], usage_index: NDArray[np.intp]) -> NodeFacts:
        """The index's arrays of the nodes at `slots` for `columnar` (their columns lent whole, not copied)."""
        return NodeFacts(
            self._largest_island[slots],
            usage_index,
            self._concurrent[slots],
            self._sliced[slots],
            self._columns,
            slots,
            self._set_keys,
            self._node_shape[slots],
        )

    def _shape_plans(
        self,
        k: int,
        configs: list[ScoringConfig],
        shapes: IntArray,
        config_numbers: IntArray,
        free_masks: IntArray,
        *,
        slots: NDArray[np.intp],
    ) -> tuple[FloatArray, IntArray]:
        """The plans (`_plan_rows`) of `k` whole GPUs on the nodes at `slots`, of the node shapes `shapes` (ids into
        `_node_shapes`), under `configs[config_numbers[i]]`, their eligible GPUs the free ones (`free_masks`: the
        node shape says which). Kept per (k, configuration) as arrays over node shape ids (24 bytes each), so that
        a call gathers the plans of shapes seen before (any workload's: a plan does not depend on it) and computes
        only new ones (`_new_plans`)."""
        rows = np.empty((_FIELDS, shapes.size))
        chosen = np.empty(shapes.size, dtype=np.int64)
        known = len(self._node_shapes)
        for number, config in enumerate(configs):
            where = np.flatnonzero(config_numbers == number) if len(configs) > 1 else np.arange(shapes.size)
            ids = shapes[where]
            table = self._plans.pop((k, config), None)  # put back last: the least recently used go first
            if table is None or table.mask.size < known:
                grown = _PlanTable(max(64, 2 * known))
                if table is not None:
                    grown.take(table)
                table = grown
            self._plans[(k, config)] = table
            if len(self._plans) > _PLAN_TABLES:
                del self._plans[next(iter(self._plans))]
            missing = table.mask[ids] < 0
            if missing.any():
                new, first = np.unique(ids[missing], return_index=True)
                pick = where[np.flatnonzero(missing)[first]]  # one node of each new shape
                table.packing[new], table.affinity[new], table.mask[new] = self._new_plans(
                    k, config, new.tolist(), free_masks[pick].tolist(), slots[pick]
                )
            mask = table.mask[ids]
            planned = _plan_rows(mask > 0, table.packing[ids], table.affinity[ids])
            if len(configs) == 1:  # every node's
                return planned, mask
            rows[:, where] = planned
            chosen[where] = mask
        return rows, chosen

    def _eligible_plans(
        self,
        k: int,
        configs: list[ScoringConfig],
        shapes: IntArray,
        config_numbers: IntArray,
        eligible_masks: IntArray,
        *,
        slots: NDArray[np.intp],
    ) -> tuple[FloatArray, IntArray]:
        """`_shape_plans` where the eligible GPUs are fewer than the free ones (a GPU-memory request some free GPUs
        do not meet): one plan per distinct (node shape, eligible GPUs), kept per (k, configuration) by the pair
        (`_PLAN_TABLES` of them, each emptied past `_NODE_SHAPE_LIMIT` pairs), so that only pairs never seen before
        are computed (`_new_plans`)."""
        rows = np.empty((_FIELDS, shapes.size))
        chosen = np.empty(shapes.size, dtype=np.int64)
        for number, config in enumerate(configs):
            where = np.flatnonzero(config_numbers == number) if len(configs) > 1 else np.arange(shapes.size)
            if not where.size:
                continue
            # the distinct (shape, mask) pairs: sorted by both, a new pair wherever either changes
            order = where[np.lexsort((eligible_masks[where], shapes[where]))]
            ids, masks = shapes[order], eligible_masks[order]
            new_pair = np.r_[True, (ids[1:] != ids[:-1]) | (masks[1:] != masks[:-1])]
            starts = np.flatnonzero(new_pair)
            pair_of = np.empty(shapes.size, dtype=np.intp)
            pair_of[order] = np.cumsum(new_pair) - 1
            keys = [(i << _MASK_BITS) | m for i, m in zip(ids[starts].tolist(), masks[starts].tolist(), strict=True)]
            known = self._eligible.pop((k, config), None)  # put back last: the least recently used go first
            if known is None or len(known) > _NODE_SHAPE_LIMIT:
                known = {}
            self._eligible[(k, config)] = known
            if len(self._eligible) > _PLAN_TABLES:
                del self._eligible[next(iter(self._eligible))]
            found = list(map(known.get, keys, repeat(_UNPLANNED)))
            new = [j for j, plan in enumerate(found) if plan is _UNPLANNED]
            if new:
                new_keys = [keys[j] for j in new]
                computed = self._new_plans(
                    k,
                    config,
                    [key >> _MASK_BITS for key in new_keys],
                    [key & _MASKS for key in new_keys],
                    slots[order[starts[new]]],
                )
                for j, key, plan in zip(new, new_keys, zip(*(a.tolist() for a in computed), strict=True), strict=True):
                    found[j] = known[key] = plan
            packing, affinity, mask = (np.array(a) for a in zip(*cast("list[_Plan]", found), strict=True))
            pick = pair_of[where]
            mask = mask.astype(np.int64)[pick]
            rows[:, where] = _plan_rows(mask > 0, packing[pick], affinity[pick])
            chosen[where] = mask
        return rows, chosen

    def _new_plans(
        self, k: int, config: ScoringConfig, shape_ids: list[int], masks: list[int], slots: NDArray[np.intp]
    ) -> tuple[FloatArray, FloatArray, IntArray]:
        """`gpuset.whole_plan`'s packing, affinity and chosen GPUs (mask; 0: no plan, too few eligible GPUs) of `k`
        whole GPUs among the eligible `masks[i]` of node shape `shape_ids[i]`, whose columns are those of the node
        at `slots[i]`: the GPUs chosen for every eligible mask of a topology at once (`gpuset.best_gpu_sets`), then
        the packing of every new shape at once (`columnar.whole_packing`), not one Python F_n(M) per shape — from
        `_ARRAY_PLANS_MIN` shapes on."""
        n = len(shape_ids)
        node_shapes = self._node_shapes
        if n < _ARRAY_PLANS_MIN:  # a few: one `whole_plan` each costs less than setting up the arrays
            plans = [whole_plan(*node_shapes[i], m, k, config) for i, m in zip(shape_ids, masks, strict=True)]
            return (
                np.array([0.0 if p is None else p.packing for p in plans]),
                np.array([0.0 if p is None else p.topology_affinity for p in plans]),
                np.array([0 if p is None else p.mask for p in plans], dtype=np.int64),
            )
        by_topology: dict[Topology, list[int]] = {}
        for j, i in enumerate(shape_ids):
            by_topology.setdefault(node_shapes[i][0], []).append(j)
        sets: list[GpuSet | None] = [None] * n
        for topology, members in by_topology.items():
            found = best_gpu_sets(
                topology,
                [masks[j] for j in members],
                k,
                config.task_mix,
                fragmentation=partial(masks_fragmentation, topology, config=config),
            )
            for j, gpu_set in zip(members, found, strict=True):
                sets[j] = gpu_set
        packing, affinity, chosen = np.zeros(n), np.zeros(n), np.zeros(n, dtype=np.int64)
        planned = [j for j, s in enumerate(sets) if s is not None]
        if planned:
            at = np.array(planned, dtype=np.intp)
            got = cast("list[GpuSet]", [sets[j] for j in planned])
            chosen[at] = [s.mask for s in got]
            affinity[at] = [set_affinity(s, k) for s in got]
            where = slots[at]
            packing[at] = whole_packing(
                self._columns,
                where,
                self._gpu_count[where],
                self._largest_island[where],
                chosen[at],
                config=config,
            )
        return packing, affinity, chosen

    def _integers(
        self,
        pod: PodRequest,
        feasible: BoolArray,
        fresh: BoolArray,
        rows: FloatArray,
        slots: NDArray[np.intp],
        *,
        config: ScoringConfig,
        predictors: Predictors,
    ) -> Priorities:
        """The weighted totals (`totals.weighted_totals`) and their integers (`totals.extender_integers`) of the
        feasible candidates, as `Scorer.extender_priorities` computes them over verdicts."""
        infeasible = fresh & ~feasible
        out = np.where(infeasible, 0, unknown_integer(config.unknown_node_score))
        at = np.flatnonzero(feasible)
        if at.size:
            model = self._model[slots[at]]
            present = np.flatnonzero(np.bincount(model, minlength=len(self._models))).tolist()
            # `jct_basis` reads only the verdicts' GPU models: one stand-in verdict per model present.
            stand_ins = [RawVerdict("", self._models[m], True) for m in present]
            _, unit_time, _ = jct_basis(pod, stand_ins, predictors)
            unit = np.zeros(len(self._models))
            unit[present] = [unit_time[self._models[m]] for m in present]
            packing, affinity, interference, slowdown = np.take(rows[_PACKING:], at, axis=1)
            totals, _ = weighted_totals(config, packing, affinity, interference, slowdown * unit[model])
            out[at] = extender_integers(totals, config.extender_span_points)
        return Priorities(out.tolist(), feasible, infeasible)


class _States(Sequence[NodeState]):
    """The states of some candidates (by their positions in the call), each read when asked for."""

    __slots__ = ("_at", "_read")

    def __init__(self, at: IntArray, read: Callable[[int], NodeState | _Absent]) -> None:
        self._at = at
        self._read = read

    def __len__(self) -> int:
        return len(self._at)

    @overload
    def __getitem__(self, index: int) -> NodeState: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[NodeState]: ...

    def __getitem__(self, index: int | slice) -> NodeState | Sequence[NodeState]:
        if isinstance(index, slice):
            return _States(self._at[index], self._read)
        return cast("NodeState", self._read(int(self._at[index])))


def _positions_in(
    part: NDArray[np.intp], state_at: Callable[[int], NodeState | _Absent]
) -> Callable[[int], NodeState | _Absent]:
    """A reader of the candidates at positions `part` of a call by their position in `part`."""
    positions: list[int] = part.tolist()

    def read(i: int) -> NodeState | _Absent:
        return state_at(positions[i])

    return read


def _reader(at: IntArray, state_at: Callable[[int], NodeState | _Absent]) -> Callable[[IntArray], Sequence[NodeState]]:
    """The states of the candidates at positions `at[i]` of a call, for the i a step asks about (fresh: known nodes),
    each read only where a step needs it (most steps read the index's arrays)."""

    def batch(which: IntArray) -> Sequence[NodeState]:
        return _States(at[which], state_at)  # no list of them: most steps read one state, or none

    return batch


def _bits(flags: BoolArray) -> IntArray:
    """Each row of per-position flags (nodes × GPU positions) as a bit mask (position p: bit p); positions past
    `_MASK_BITS` are left out (such nodes take the per-node path)."""
    narrow = flags[:, :_MASK_BITS].astype(np.int64)
    bits: IntArray = (narrow << np.arange(narrow.shape[1], dtype=np.int64)).sum(axis=1)
    return bits


def _plan_rows(feasible: BoolArray, packing: FloatArray, affinity: FloatArray) -> FloatArray:
    """Whole-GPU plans as the table rows they give where no chosen GPU has residents: feasible, packing, affinity,
    interference 0.5 / 1 + 0.5 / 1 where feasible (0 where not), slowdown 1."""
    rows = np.empty((_FIELDS, feasible.size))
    rows[_FEASIBLE] = feasible
    rows[_PACKING] = packing
    rows[_AFFINITY] = affinity
    rows[_INTERFERENCE] = feasible  # 1.0 where feasible, else 0.0
    rows[_SLOWDOWN] = 1.0
    return rows


class _BasisTable:
    """`columnar.ShareBasis` of each slot's node state under one configuration: its per-GPU arrays as rows of one
    array (field × slot × GPU position), its per-node ones as rows of another, `epoch[slot]` the index's epoch of the
    state they were computed for (-1: none)."""

    __slots__ = ("epoch", "gpus", "leader", "nodes", "sizes")

    def __init__(self, capacity: int, width: int, sizes: list[int]) -> None:
        self.epoch: IntArray = np.full(capacity, -1, dtype=np.int64)
        self.sizes = sizes
        self.gpus: FloatArray = np.zeros((5 + len(sizes), capacity, width))
        self.nodes: FloatArray = np.zeros((4, capacity))
        self.leader = np.zeros((capacity, width), dtype=np.intp)

    def keep(self, slots: NDArray[np.intp], basis: ShareBasis) -> None:
        g = basis.free.shape[1]
        self.leader[slots, :g] = basis.leader
        per_gpu = (basis.free, basis.allocated, basis.memory_free, basis.others_max, basis.island_drop)
        for field, values in enumerate((*per_gpu, *(basis.below_without[m] for m in self.sizes))):
            self.gpus[field, slots, :g] = values
        for field, values in enumerate((basis.total, basis.full, basis.island_full, basis.fragmentation)):
            self.nodes[field, slots] = values

    def basis(self, slots: NDArray[np.intp]) -> ShareBasis:
        """The kept bases of the nodes at `slots`, lent whole (`ShareBasis.slot`)."""
        gpus, nodes = self.gpus, self.nodes
        return ShareBasis(
            free=gpus[0],
            allocated=gpus[1],
            memory_free=gpus[2],
            others_max=gpus[3],
            island_drop=gpus[4],
            below_without={m: gpus[5 + j] for j, m in enumerate(self.sizes)},
            total=nodes[0],
            full=nodes[1],
            island_full=nodes[2],
            fragmentation=nodes[3],
            leader=self.leader,
            slot=slots,
        )


class _PlanTable:
    """Whole-GPU plans of one (k, configuration) by node shape id: the chosen GPUs' mask (-1: not planned yet,
    0: infeasible), the plan's packing and link affinity."""

    __slots__ = ("affinity", "mask", "packing")

    def __init__(self, capacity: int) -> None:
        self.mask: IntArray = np.full(capacity, -1, dtype=np.int64)
        self.packing: FloatArray = np.zeros(capacity)
        self.affinity: FloatArray = np.zeros(capacity)

    def take(self, other: _PlanTable) -> None:
        """Hold `other`'s plans (a smaller table's)."""
        size = other.mask.size
        self.mask[:size] = other.mask
        self.packing[:size] = other.packing
        self.affinity[:size] = other.affinity


def _rows(raws: Sequence[RawVerdict | NodeScore]) -> FloatArray:
    """Verdicts as table rows (fields × nodes), one attribute at a time (an infeasible verdict's other fields are
    never read). Every one is a `RawVerdict` (fresh nodes, a GPU pod): a `NodeScore` has no `slowdown`."""
    n = len(raws)
    rows = np.empty((_FIELDS, n))
    for field, of in enumerate(_FIELD_OF):
        rows[field] = np.fromiter(map(of, raws), dtype=np.float64, count=n)
    return rows


_FIELD_OF = [attrgetter(name) for name in ("feasible", "packing", "affinity", "interference", "slowdown")]
_VECTORISE_MIN_NODES = 8
"""Below this many cold nodes of one GPU count and configuration, `Scorer.evaluate`'s scalar loop is cheaper than
setting up the arrays (the same numbers either way)."""
_ARRAY_PLANS_MIN = 48
"""From this many node shapes new to a call's plans, they are planned on arrays (`ScoreVectors._new_plans`); fewer go
one `gpuset.whole_plan` each (the same numbers: tests/advisor/test_columnar.py compares the array forms with it)."""
_Plan = tuple[float, float, int]
"""A whole-GPU plan as `_eligible_plans` keeps it: packing, affinity, the chosen GPUs' mask (0: no plan)."""
_UNPLANNED = object()
"""What `_eligible_plans` finds for a pair it has no plan of yet."""
_ANY_WORKLOAD = object()
"""Stands for the workload in the key of a whole-GPU table whose rows hold for any workload."""
