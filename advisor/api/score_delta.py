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

Memory is bounded: at most `SHAPE_LIMIT` tables (least recently used dropped), each with at most one entry per node
the state knows plus those the current request names; a table that outgrows that is dropped.
"""

from __future__ import annotations

import math
import secrets
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import count
from operator import itemgetter

from advisor.placement.scorer import NO_STATE_REASON, BriefScore, Scorer
from advisor.placement.scoring import RawVerdict, jct_basis_how, unknown_score
from advisor.placement.types import NodeScore, NodeState, PodRequest

SHAPE_LIMIT = 16
"""Pod shapes whose tables the advisor keeps (least recently used dropped)."""

_FIRST = itemgetter(0)
_ABSENT = object()
"""Stands for "no state" when a candidate's state is looked up: never a live state, never a dead reference's None."""

Basis = tuple[bool, tuple[tuple[str, float], ...], float]
"""A batch's JCT basis: whether the JCT model answers every GPU model, each model's unit time, the best time."""


def _no_state() -> object:
    return _ABSENT


@dataclass(slots=True)
class _Entry:
    """One node's entry in a shape's table: the state it was computed from, the observation time it holds while
    fresh (`evaluate`'s staleness check: valid while `observed_at_seconds >= now - staleness`; +inf for an unknown
    verdict, which holds while its state lives), its verdict's part in the batch's JCT basis ((GPU model, slowdown)
    when feasible), its outcome (0 scored, 1 infeasible, 2 unknown) and the text sent."""

    ref: Callable[[], object]
    observed_at_seconds: float
    basis_key: tuple[str, float] | None
    outcome: int
    text: str


@dataclass(slots=True)
class _Table:
    token: str
    scorer: Scorer
    basis: Basis
    models: dict[str, str]
    entries: dict[str, _Entry]
    generation: int = 0


@dataclass(frozen=True, slots=True)
class DeltaAnswer:
    """The entries to send (best first), whether they are a delta, the token, each outcome's count over every
    candidate, and the `models` of the full answer the token began with (None on a full answer: the
    caller writes it, then `remember_models`)."""

    entries: list[str]
    delta: bool
    token: str
    outcomes: tuple[int, int, int]
    models: dict[str, str] | None
    briefs: Sequence[BriefScore]


def tracked(pod: PodRequest) -> bool:
    """Whether delta answers are kept for `pod`: a GPU pod (whole or share) without a gang or MIG instances."""
    return (pod.whole_gpus > 0 or pod.is_share) and not pod.gang and not pod.mig


class ScoreDeltas:
    """The shape tables of delta answers (`/v1/score` with `since`), owned by the app's context: a new app starts
    with none. `answers` counts full and delta answers."""

    def __init__(self, shape_limit: int = SHAPE_LIMIT) -> None:
        self.shape_limit = shape_limit
        self._tables: OrderedDict[PodRequest, _Table] = OrderedDict()
        self._lock = threading.Lock()  # large bodies are answered in worker threads
        self._nonce = secrets.token_hex(4)  # another replica's (or a restarted advisor's) tokens are never current
        self._table_ids = count()
        self.answers = {"full": 0, "delta": 0}

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
    ) -> DeltaAnswer:
        """The answer for a tracked pod (`tracked`): the entries changed since `since` when it names its shape's
        current table, else every candidate's, with the token that names what the caller now holds. `write` writes
        one entry's text (the route's brief entry)."""
        key = replace(pod, name="")
        with self._lock:
            table = self._tables.get(key)
            if table is not None:
                self._tables.move_to_end(key)
            if table is not None and table.token == since and table.scorer is scorer:
                got = self._delta(table, pod=pod, names=names, nodes=nodes, scorer=scorer, write=write)
                if got is not None:
                    if len(table.entries) > len(nodes) + len(names):
                        del self._tables[key]  # names the state does not know, call after call: start again
                    self.answers["delta"] += 1
                    return got
            self.answers["full"] += 1
            return self._full(key, pod=pod, names=names, nodes=nodes, scorer=scorer, write=write)

    def _token(self, table_id: int, generation: int) -> str:
        return f"{self._nonce}.{table_id}.{generation}"

    def _full(
        self,
        key: PodRequest,
        *,
        pod: PodRequest,
        names: Sequence[str],
        nodes: Mapping[str, NodeState],
        scorer: Scorer,
        write: Callable[[BriefScore], str],
    ) -> DeltaAnswer:
        now = scorer.clock()
        found = [nodes.get(n) for n in names]
        known = [s for s in found if s is not None]
        evaluated = iter(scorer.evaluate(pod, known, now))
        raws: list[RawVerdict | NodeScore] = [
            next(evaluated) if s is not None else unknown_score(n, NO_STATE_REASON, scorer.config)
            for n, s in zip(names, found, strict=True)
        ]
        briefs = scorer.brief_verdicts(pod, raws)
        entries: dict[str, _Entry] = {}
        texts: list[tuple[float, str]] = []
        outcomes = [0, 0, 0]
        basis_keys: set[tuple[str, float]] = set()
        for state, raw, brief in zip(found, raws, briefs, strict=True):
            entry = _entry(state, raw, write(brief))
            entries[brief.node] = entry
            outcomes[entry.outcome] += 1
            texts.append((brief.score, entry.text))
            if entry.basis_key is not None:
                basis_keys.add(entry.basis_key)
        table_id = next(self._table_ids)
        table = _Table(self._token(table_id, 0), scorer, _basis(pod, basis_keys, scorer), {}, entries)
        self._tables[key] = table
        self._tables.move_to_end(key)
        while len(self._tables) > self.shape_limit:
            self._tables.popitem(last=False)
        outcome_counts = (outcomes[0], outcomes[1], outcomes[2])
        return DeltaAnswer(_best_first(texts), False, table.token, outcome_counts, None, briefs)

    def _delta(
        self,
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
        table_entries = table.entries
        get_entry, get_state = table_entries.get, nodes.get
        outcomes = [0, 0, 0]
        basis_keys: set[tuple[str, float]] = set()
        add_key = basis_keys.add
        changed: list[tuple[str, object]] = []
        for name in names:
            state = get_state(name, _ABSENT)
            entry = get_entry(name)
            if entry is not None and entry.ref() is state and entry.observed_at_seconds >= oldest:
                outcomes[entry.outcome] += 1
                if entry.basis_key is not None:
                    add_key(entry.basis_key)
            else:
                changed.append((name, state))
        known = [s for _, s in changed if isinstance(s, NodeState)]
        evaluated = iter(scorer.evaluate(pod, known, now))
        raws: list[RawVerdict | NodeScore] = [
            next(evaluated) if isinstance(s, NodeState) else unknown_score(n, NO_STATE_REASON, scorer.config)
            for n, s in changed
        ]
        for raw in raws:
            if isinstance(raw, RawVerdict) and raw.feasible:
                add_key((raw.gpu_model, raw.slowdown))
        basis = _basis(pod, basis_keys, scorer)
        if basis != table.basis:
            return None
        anchors = [RawVerdict("", model, True, slowdown=slowdown) for model, slowdown in _smallest(basis_keys)]
        briefs = scorer.brief_verdicts(pod, raws, anchors)
        texts: list[tuple[float, str]] = []
        for (_, state), raw, brief in zip(changed, raws, briefs, strict=True):
            entry = _entry(state if isinstance(state, NodeState) else None, raw, write(brief))
            outcomes[entry.outcome] += 1
            old = table_entries.get(brief.node)
            table_entries[brief.node] = entry
            if old is None or old.text != entry.text:
                texts.append((brief.score, entry.text))
        if texts:
            table.generation += 1
            table.token = f"{table.token.rsplit('.', 1)[0]}.{table.generation}"
        return DeltaAnswer(
            _best_first(texts), True, table.token, (outcomes[0], outcomes[1], outcomes[2]), table.models, briefs
        )


def _entry(state: NodeState | None, raw: RawVerdict | NodeScore, text: str) -> _Entry:
    """A candidate's entry: a fresh node's verdict holds until the node turns stale, an unknown one while its state
    lives (a new snapshot makes a new state)."""
    ref: Callable[[], object] = _no_state if state is None else weakref.ref(state)
    if isinstance(raw, NodeScore):
        return _Entry(ref, math.inf, None, 2, text)
    # `evaluate` gives a RawVerdict only for an observed node that is fresh now
    observed = state.observed_at_seconds if state is not None else None
    observed_at = math.inf if observed is None else observed
    if not raw.feasible:
        return _Entry(ref, observed_at, None, 1, text)
    return _Entry(ref, observed_at, (raw.gpu_model, raw.slowdown), 0, text)


def _smallest(basis_keys: set[tuple[str, float]]) -> list[tuple[str, float]]:
    """Per GPU model, its smallest slowdown among the batch's feasible verdicts."""
    smallest: dict[str, float] = {}
    for model, slowdown in basis_keys:
        if model not in smallest or slowdown < smallest[model]:
            smallest[model] = slowdown
    return sorted(smallest.items())


def _basis(pod: PodRequest, basis_keys: set[tuple[str, float]], scorer: Scorer) -> Basis:
    """The batch's JCT basis (`scoring.jct_basis_how` over one verdict per GPU model: it reads only the models) and
    its best time, as `Scorer._feasible_totals` computes them."""
    smallest = _smallest(basis_keys)
    reps = [RawVerdict("", model, True, slowdown=slowdown) for model, slowdown in smallest]
    _, unit_time, use_jct, _ = jct_basis_how(pod, reps, scorer.predictors)
    best = min((slowdown * unit_time[model] for model, slowdown in smallest), default=math.inf)
    return use_jct, tuple(sorted(unit_time.items())), best


def _best_first(texts: list[tuple[float, str]]) -> list[str]:
    """The entries best first (stable: equal scores keep the order given), as the full answer has them."""
    return [t for _, t in sorted(texts, key=_FIRST, reverse=True)]
