"""The scorer's memo of node states (`advisor.placement.memo.NodeMemo`): a verdict is reused for the same state, a
new state of the same node is scored afresh, and a state that is gone takes its entries with it (the memo does not
grow with every snapshot)."""

from __future__ import annotations

import gc

from advisor.placement.config import ScoringConfig
from advisor.placement.memo import NodeMemo
from advisor.placement.scorer import Scorer
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
