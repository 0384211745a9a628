"""Delta answers of `/v1/score` (`since`): a scheduler plugin asks about pods of one shape cycle after cycle, and
between two cycles only the few nodes a binding, a snapshot or an assumed pod touched have a new verdict.

Per pod shape (the scoring request without the pod's name: the brief answer does not depend on it) the advisor keeps
a table of the entries it has sent under a token: for each node the state its verdict was computed from (a weak
reference: a replaced state ends the entry's validity and is not kept alive by it), until when that verdict holds
(staleness by time), and the entry's text. A request that names the table's current token gets only the entries that
changed or that the table lacks, and a new token; any other (no or unknown token, another shape, new models or
configuration, another replica) gets the full answer and a fresh token. Everything a verdict depends on is checked:
the node's state (a new snapshot, a binding and an assumed pod each make a new state object), the clock (a fresh
node's verdict holds until it turns stale), the scorer (models, configuration), and the one part of a score that
depends on the batch: the jct component is relative to the batch's best predicted time (`totals.weighted_totals`),
so the table also keeps the batch's JCT basis (which GPU models, their unit times, the best time); a batch with
another basis gets the full answer. Gang pods (their affinity depends on the whole batch) and MIG pods (their
packing depends on the cluster's pending MIG profiles) are not tracked: they get full answers with an empty token.

A table follows the node table's change log (`NodeTable.changed_since`): every entry not named as suspect was
computed from the state its node had at the log position last read, so only the candidates logged since (or left
suspect by earlier calls, when they were not candidates) have their state looked up and compared; the rest of the
check is one pass over the candidates' rows. With assumed pods the nodes are an `AssumedTable`, the node table's copy
taken at a known log position: the nodes holding an assumed pod count as logged, on that call and the next (in a
burst nearly every call carries the pod placed by the last one, until the advisor's pod watch sees it bound).

Memory is bounded: at most `SHAPE_LIMIT` tables (least recently used dropped), each with at most one entry per node
the state knows plus those the current request names (a table that outgrows that is dropped), and its suspects
are among those nodes.
"""

from __future__ import annotations

import math
import secrets
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from itertools import compress, count, repeat
from operator import and_, call, ge, is_, is_not, itemgetter

from advisor.placement.scorer import NO_STATE_REASON, BriefScore, Scorer
from advisor.placement.scoring import RawVerdict, jct_basis_how, unknown_score
from advisor.placement.types import AssumedTable, NodeScore, NodeState, NodeTable, PodRequest

SHAPE_LIMIT = 16
"""Pod shapes whose tables the advisor keeps (least recently used dropped)."""
BASES_LIMIT = 64
"""JCT bases a table keeps by their batch's (GPU model, slowdown) pairs (all dropped when full)."""

_FIRST = itemgetter(0)
_ABSENT = object()
"""Stands for "no state" when a candidate's state is looked up: never a live state, never a dead reference's None."""
_GONE = object()

Basis = tuple[bool, tuple[tuple[str, float], ...], float]
"""A batch's JCT basis: whether the JCT model answers every GPU model, each feasible GPU model's unit time, the best
time."""


def _no_state() -> object:
    return _ABSENT


_Row = tuple[Callable[[], object], float, int, int, str]
"""A node's entry in a shape's table: the state it was computed from (a weak reference, called; `_no_state` for a
node without state), the observation time it holds while fresh (`evaluate`'s staleness check: valid while
`observed_at_seconds >= now - staleness`; +inf for an unknown verdict, which holds while its state lives), its part in
the batch's JCT basis when feasible (its (GPU model, slowdown) as an index into `_Table.basis_keys`; ints are
hashed for nothing, tuples every time), else -1, its outcome (0 scored, 1 infeasible, 2
unknown) and the text sent. A plain tuple: a request's candidates are checked with C-level passes over their rows
(`map`, `itemgetter`, `compress`), not a Python loop over ~500 names."""

_REF, _OBSERVED, _BASIS_KEY, _OUTCOME, _TEXT = (itemgetter(i) for i in range(5))


_LogRead = tuple[int, int, list[str] | None, frozenset[str]]
"""The node table's token, its log's end position, the names logged since the table's `log_at` (None: unknown), and
the nodes whose states are this answer's alone (assumed pods)."""

_NONE: frozenset[str] = frozenset()


def _read_log(table: _Table, nodes: Mapping[str, NodeState]) -> _LogRead | None:
    """Where the node table's log stands, read before any state is (a node's new state is in the table before its
    name is logged, so a state read after this is never older than the log says); None when `nodes` is neither the
    state's own table nor an `AssumedTable` of it. With assumed pods, the log's position is the one the copy was
    taken at, and the nodes with this answer's own states count as logged."""
    if isinstance(nodes, AssumedTable):
        log, end, own = nodes.base, nodes.mark, nodes.own
    elif isinstance(nodes, NodeTable):
        log, end, own = nodes, -1, _NONE
    else:
        return None
    if table.log_at is not None and (end < 0 or table.log_at[1] <= end):
        got = log.changed_since(*table.log_at)
        if got is not None:
            return log.token, got[1] if end < 0 else end, [*got[0], *own] if own else got[0], own
    return log.token, log.mark() if end < 0 else end, None, own


@dataclass(slots=True)
class _Table:
    """One shape's entries by node name, the token that names them, and what they were computed under."""

    token: str
    scorer: Scorer
    basis: Basis
    models: dict[str, str]
    rows: dict[str, _Row] = field(default_factory=dict)
    basis_keys: list[tuple[str, float]] = field(default_factory=list)
    basis_key_ids: dict[tuple[str, float], int] = field(default_factory=dict)
    bases: dict[frozenset[tuple[str, float]], tuple[Basis, list[tuple[str, float]]]] = field(default_factory=dict)
    oldest_observed: float = math.inf
    """The earliest observation time of a row (or of a row since replaced): while it is fresh, every row is."""
    generation: int = 0
    log_at: tuple[int, int] | None = None
    """(the node table's token, a position of its log): every row but those named in `dirty` was computed from the
    state its node had at that position (None: unknown, every row is checked)."""
    dirty: set[str] = field(default_factory=set)

    def put(self, name: str, state: NodeState | None, raw: RawVerdict | NodeScore, text: str) -> int:
        """Keep a candidate's entry; returns its outcome. A fresh node's verdict holds until the node turns stale,
        an unknown one while its state lives (a new snapshot makes a new state)."""
        ref = _no_state if state is None else weakref.ref(state)
        if isinstance(raw, NodeScore):
            self.rows[name] = (ref, math.inf, -1, 2, text)
            return 2
        # `evaluate` gives a RawVerdict only for an observed node that is fresh now
        seen = state.observed_at_seconds if state is not None else None
        observed = math.inf if seen is None else seen
        self.oldest_observed = min(self.oldest_observed, observed)
        if raw.feasible:
            key = (raw.gpu_model, raw.slowdown)
            key_id = self.basis_key_ids.get(key)
            if key_id is None:
                key_id = self.basis_key_ids[key] = len(self.basis_keys)
                self.basis_keys.append(key)
            self.rows[name] = (ref, observed, key_id, 0, text)
            return 0
        self.rows[name] = (ref, observed, -1, 1, text)
        return 1

    def follow(self, read: _LogRead | None, verified: Collection[str]) -> None:
        """After an answer: the rows of `verified` hold against the nodes asked with; `read` is what `_read_log`
        gave before their states were read (None: not the state's table — nothing is known of the rows from here
        on). The rows of nodes with states of this answer alone (assumed pods) stay suspect."""
        if read is None:
            self.log_at = None
            self.dirty.clear()
            return
        token, end, logged, own = read
        if logged is None:  # the log did not reach back: every other row is suspect
            self.dirty = set(self.rows).difference(verified)
        else:
            self.dirty.update(logged)
            self.dirty.difference_update(verified)
        self.dirty.update(own)
        self.log_at = (token, end)

    def __len__(self) -> int:
        return len(self.rows)

    def basis_of(
        self, pod: PodRequest, basis_keys: frozenset[tuple[str, float]], scorer: Scorer
    ) -> tuple[Basis, list[tuple[str, float]]]:
        """`_basis` of a batch with these (GPU model, slowdown) pairs, kept: a burst's batches mostly have the same
        ones, and the table's shape and scorer (all `_basis` reads besides the pairs) are fixed."""
        got = self.bases.get(basis_keys)
        if got is None:
            if len(self.bases) >= BASES_LIMIT:
                self.bases.clear()
            got = self.bases[basis_keys] = _basis(pod, basis_keys, scorer)
        return got

    def keys_of(self, key_ids: set[int]) -> set[tuple[str, float]]:
        """The (GPU model, slowdown) pairs of basis key indices (-1: none)."""
        key_ids.discard(-1)
        return {self.basis_keys[i] for i in key_ids}


@dataclass(frozen=True, slots=True)
class DeltaAnswer:
    """The entries to send (best first), whether they are a delta, the token, each outcome's count over every
    candidate, the `models` of the full answer the token began with (None on a full answer: the caller writes it,
    then `remember_models`), the briefs scored in this call (every candidate's on a full answer) and how many
    candidates' states were looked up."""

    entries: list[str]
    delta: bool
    token: str
    outcomes: tuple[int, int, int]
    models: dict[str, str] | None
    briefs: Sequence[BriefScore]
    state_reads: int
    """Candidates whose state this answer looked up: every one on a full answer or where the node table's log could
    not be followed, else those logged since the table's last answer (`_check`)."""


def tracked(pod: PodRequest) -> bool:
    """Whether delta answers are kept for `pod`: a GPU pod (whole or share) without a gang or MIG instances."""
    return (pod.whole_gpus > 0 or pod.is_share) and not pod.gang and not pod.mig


class ScoreDeltas:
    """The shape tables of delta answers (`/v1/score` with `since`), owned by the app's context: a new app starts
    with none."""

    def __init__(self, shape_limit: int = SHAPE_LIMIT) -> None:
        self.shape_limit = shape_limit
        self._tables: OrderedDict[PodRequest, _Table] = OrderedDict()
        self._lock = threading.Lock()  # large bodies are answered in worker threads
        self._nonce = secrets.token_hex(4)  # another replica's (or a restarted advisor's) tokens are never current
        self._table_ids = count()

    def __len__(self) -> int:
        return len(self._tables)

    def clear(self) -> None:
        with self._lock:
            self._tables.clear()

    def remember_models(self, token: str, pod: PodRequest, models: dict[str, str]) -> None:
        """Keep the `models` of the full answer that began `token`, for the delta answers that follow it."""
        with self._lock:
            table = self._tables.get(replace(pod, name=""))
            if table is not None and table.token == token:
                table.models = models

    def answer(
        self,
        pod: PodRequest,
        *,
        names: Sequence[str],
        nodes: Mapping[str, NodeState],
        since: str,
        scorer: Scorer,
        write: Callable[[BriefScore], str],
        shape: PodRequest | None = None,
    ) -> DeltaAnswer:
        """The answer for a tracked pod (`tracked`): the entries changed since `since` when it names its shape's
        current table, else every candidate's, with the token that names what the caller now holds. `write` writes
        one entry's text (the route's brief entry); `shape` is `pod` without its name, when the caller has it."""
        key = replace(pod, name="") if shape is None else shape
        with self._lock:
            table = self._tables.get(key)
            if table is not None:
                self._tables.move_to_end(key)
            if table is not None and table.token == since and table.scorer is scorer:
                got = _delta(table, pod=pod, names=names, nodes=nodes, scorer=scorer, write=write)
                if got is not None:
                    if len(table) > len(nodes) + len(names):
                        del self._tables[key]  # names the state does not know, call after call: start again
                    return got
            table = _Table(f"{self._nonce}.{next(self._table_ids)}.0", scorer, (False, (), math.inf), {})
            got = _full(table, pod=pod, names=names, nodes=nodes, scorer=scorer, write=write)
            self._tables[key] = table
            self._tables.move_to_end(key)
            while len(self._tables) > self.shape_limit:
                self._tables.popitem(last=False)
            return got


def _full(
    table: _Table,
    *,
    pod: PodRequest,
    names: Sequence[str],
    nodes: Mapping[str, NodeState],
    scorer: Scorer,
    write: Callable[[BriefScore], str],
) -> DeltaAnswer:
    """Every candidate's entry, kept in the new `table` (its basis set from this batch)."""
    read = _read_log(table, nodes)
    found = [nodes.get(n) for n in names]
    raws = _verdicts(pod, list(zip(names, found, strict=True)), scorer, scorer.clock())
    briefs = scorer.brief_verdicts(pod, raws)
    texts: list[tuple[float, str]] = []
    outcomes = [0, 0, 0]
    for state, raw, brief in zip(found, raws, briefs, strict=True):
        text = write(brief)
        outcomes[table.put(brief.node, state, raw, text)] += 1
        texts.append((brief.score, text))
    table.basis = table.basis_of(pod, frozenset(table.keys_of(set(map(_BASIS_KEY, table.rows.values())))), scorer)[0]
    table.follow(read, names)
    return DeltaAnswer(
        _best_first(texts), False, table.token, (outcomes[0], outcomes[1], outcomes[2]), None, briefs, len(names)
    )


def _delta(
    table: _Table,
    *,
    pod: PodRequest,
    names: Sequence[str],
    nodes: Mapping[str, NodeState],
    scorer: Scorer,
    write: Callable[[BriefScore], str],
) -> DeltaAnswer | None:
    """The changed entries against `table`, or None when the batch's JCT basis is not the table's (then every
    total may differ: the caller answers in full)."""
    now = scorer.clock()
    oldest = -math.inf if now is None else now - scorer.config.staleness_seconds
    read = _read_log(table, nodes)
    changed, outcomes, basis_keys, reads = _check(table, names, nodes, oldest, read[2] if read is not None else None)
    raws = _verdicts(pod, changed, scorer, now) if changed else []
    basis_keys.update((raw.gpu_model, raw.slowdown) for raw in raws if isinstance(raw, RawVerdict) and raw.feasible)
    basis, smallest = table.basis_of(pod, frozenset(basis_keys), scorer)
    if basis != table.basis:
        return None
    briefs: list[BriefScore] = []
    if raws:  # nothing changed (most calls): no totals to compute
        anchors = [RawVerdict("", model, True, slowdown=slowdown) for model, slowdown in smallest]
        briefs = scorer.brief_verdicts(pod, raws, anchors)
    texts: list[tuple[float, str]] = []
    for (name, state), raw, brief in zip(changed, raws, briefs, strict=True):
        text = write(brief)
        old = _TEXT(table.rows.get(name, _MISSING))
        outcomes[table.put(name, state if isinstance(state, NodeState) else None, raw, text)] += 1
        if old != text:
            texts.append((brief.score, text))
    if texts:
        table.generation += 1
        table.token = f"{table.token.rsplit('.', 1)[0]}.{table.generation}"
    table.follow(read, names)
    return DeltaAnswer(
        _best_first(texts), True, table.token, (outcomes[0], outcomes[1], outcomes[2]), table.models, briefs, reads
    )


def _check(
    table: _Table, names: Sequence[str], nodes: Mapping[str, NodeState], oldest: float, logged: list[str] | None
) -> tuple[list[tuple[str, object]], list[int], set[tuple[str, float]], int]:
    """Every candidate checked: the changed ones (name, state now), the outcome counts and JCT basis pairs of the
    rows that hold, and how many state lookups that took. With the names `logged` in the node table since the
    table's `log_at` (None: unknown), only the candidates logged or suspect (`dirty`) have their state compared:
    every other row was computed from the state its node has now."""
    n = len(names)
    rows = list(map(table.rows.get, names, repeat(_MISSING, n)))
    states: list[object] | None = None
    reads = n
    if logged is None or len(logged) + len(table.dirty) > n:  # one pass over the states costs less
        states = list(map(nodes.get, names, repeat(_ABSENT, n)))
        holds = list(map(is_, map(call, map(_REF, rows)), states))
    else:
        reads = 0
        holds = list(map(is_not, rows, repeat(_MISSING, n)))
        suspects = table.dirty.union(logged)
        if suspects:
            flagged = list(map(suspects.__contains__, names))
            at = -1
            reads = flagged.count(True)
            for _ in range(reads):
                at = flagged.index(True, at + 1)
                if holds[at] and rows[at][0]() is not nodes.get(names[at], _ABSENT):
                    holds[at] = False
    # An entry holds when it was computed from the state the node has now and that state is still fresh (checked
    # row by row only once the table's oldest row may have turned stale).
    if table.oldest_observed < oldest:
        holds = list(map(and_, holds, map(ge, map(_OBSERVED, rows), repeat(oldest, n))))
    misses = holds.count(False)
    kept = list(compress(rows, holds)) if misses else rows
    kept_outcomes = list(map(_OUTCOME, kept))
    infeasible, unknown = kept_outcomes.count(1), kept_outcomes.count(2)
    outcomes = [len(kept) - infeasible - unknown, infeasible, unknown]
    basis_keys = table.keys_of(set(map(_BASIS_KEY, kept)))
    changed: list[tuple[str, object]] = []
    if states is None:
        reads += misses
    at = -1
    for _ in range(misses):  # the few changed candidates, found by C-level searches
        at = holds.index(False, at + 1)
        name = names[at]
        changed.append((name, states[at] if states is not None else nodes.get(name, _ABSENT)))
    return changed, outcomes, basis_keys, reads


def _verdicts(
    pod: PodRequest, candidates: Sequence[tuple[str, object]], scorer: Scorer, now: float | None
) -> list[RawVerdict | NodeScore]:
    """Each candidate's verdict, the nodes with a state evaluated in one batch; a name without one is unknown."""
    evaluated = iter(scorer.evaluate(pod, [s for _, s in candidates if isinstance(s, NodeState)], now))
    return [
        next(evaluated) if isinstance(s, NodeState) else unknown_score(name, NO_STATE_REASON, scorer.config)
        for name, s in candidates
    ]


def _gone() -> object:
    """What a node the table lacks is compared with: never a live state, `_ABSENT` or a dead reference's None."""
    return _GONE


_MISSING: _Row = (_gone, -math.inf, -1, 0, "")
"""The row of a node the table lacks: never holds."""


def _smallest(basis_keys: AbstractSet[tuple[str, float]]) -> list[tuple[str, float]]:
    """Per GPU model, its smallest slowdown among the batch's feasible verdicts."""
    smallest: dict[str, float] = {}
    for model, slowdown in basis_keys:
        if model not in smallest or slowdown < smallest[model]:
            smallest[model] = slowdown
    return sorted(smallest.items())


def _basis(
    pod: PodRequest, basis_keys: AbstractSet[tuple[str, float]], scorer: Scorer
) -> tuple[Basis, list[tuple[str, float]]]:
    """The batch's JCT basis (`scoring.jct_basis_how` over one verdict per GPU model: it reads only the models) and
    best time, as `Scorer._feasible_totals` computes them, and per GPU model its smallest slowdown (the anchors that
    give a part of the batch the same basis and best time)."""
    smallest = _smallest(basis_keys)
    reps = [RawVerdict("", model, True, slowdown=slowdown) for model, slowdown in smallest]
    _, unit_time, use_jct, _ = jct_basis_how(pod, reps, scorer.predictors)
    best = min((slowdown * unit_time[model] for model, slowdown in smallest), default=math.inf)
    return (use_jct, tuple(sorted(unit_time.items())), best), smallest


def _best_first(texts: list[tuple[float, str]]) -> list[str]:
    """The entries best first (stable: equal scores keep the order given), as the full answer has them."""
    return [t for _, t in sorted(texts, key=_FIRST, reverse=True)]
