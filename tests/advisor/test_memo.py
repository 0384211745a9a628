"""The scorer's memo of node states (`advisor.placement.memo.NodeMemo`): a verdict is reused for the same state, a
new state of the same node is scored afresh, and a state that is gone takes its entries with it (the memo does not
grow with every snapshot)."""

from __future__ import annotations

import gc

import pytest

from advisor.placement.config import ScoringConfig
from advisor.placement.memo import NodeMemo
from advisor.placement.scorer import MEMO_LIMIT, Scorer
from advisor.placement.types import PodRequest
from tests.advisor.factories import node_state

CONFIG = ScoringConfig()


def test_a_new_snapshot_of_a_node_is_scored_afresh_not_from_the_old_states_memo() -> None:
    pod = PodRequest(name="ml/a", gpus=8)
    scorer = Scorer(CONFIG)
    idle = node_state("n1")
    assert scorer.score_nodes(pod, [idle])[0].feasible
    busy = node_state("n1", allocated={0: 1000})  # the same node after a pod took a GPU
    [verdict] = scorer.score_nodes(pod, [busy])
    assert not verdict.feasible
    assert verdict.detail == "needs 8 free GPUs, has 7"
    assert scorer.score_nodes(pod, [idle])[0].feasible  # the old state's verdict is still its own
    assert idle in scorer.verdicts
    assert busy in scorer.verdicts


def test_an_entry_goes_with_its_node_state() -> None:
    memo: NodeMemo[str] = NodeMemo()
    kept, dropped = node_state("kept"), node_state("dropped")
    memo.put(kept, "k")
    memo.put(dropped, "d")
    memo.put(dropped, "d2")
    assert (memo.get(kept), memo.get(dropped), len(memo)) == ("k", "d2", 2)
    del dropped
    gc.collect()
    assert len(memo) == 1
    assert kept in memo
    assert memo.get(node_state("kept")) is None  # keyed by the state itself, not the node's name


def test_memo_limit_sets_how_many_request_shapes_a_node_state_keeps() -> None:
    """The service's scorer keeps `MEMO_LIMIT` shapes per node state and forgets the oldest; one built with a larger
    `memo_limit` (the simulator's) still answers the first shape from its memo after more shapes than that."""
    pods = [PodRequest(gpu_milli=100 + i) for i in range(MEMO_LIMIT + 1)]
    node = node_state("n1")
    for limit, kept in ((MEMO_LIMIT, False), (MEMO_LIMIT + 1, True)):
        scorer = Scorer(CONFIG, memo_limit=limit)
        first = [scorer.evaluate(pod, [node], None)[0] for pod in pods]
        again = scorer.evaluate(pods[0], [node], None)[0]
        assert (again is first[0]) is kept
        assert again == first[0]
    assert Scorer(CONFIG).memo_limit == MEMO_LIMIT


def test_a_memo_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="memo_limit must be >= 1, got 0"):
        Scorer(CONFIG, memo_limit=0)
