"""Expansion of a TrialRun into trials, and the `$(VAR)` substitution the local runner shares with Kubernetes."""

from __future__ import annotations

from profiler.spec import parse_trialrun
from profiler.trials import ENV_BATCH_SIZE, TrialKind, expand, expand_command, solo_of
from tests.profiler.specs import VALID, trialrun


def test_every_matrix_combination_is_one_solo_trial_then_colocation_trials() -> None:
    trials = expand(parse_trialrun(trialrun(colocateWith=None)).spec)
    configs = [(t.gpu_model, t.gpu_count, t.batch_size) for t in trials]
    assert configs == [("H100", 1, 64), ("H100", 2, 64), ("A100", 1, 64), ("A100", 2, 64)]
    assert [t.id for t in trials] == ["t000", "t001", "t002", "t003"]
    assert all(t.kind is TrialKind.SOLO for t in trials)


def test_colocation_adds_partner_solos_and_pairs_without_duplicating_solos() -> None:
    trials = expand(parse_trialrun(VALID).spec)
    solos = [t for t in trials if t.kind is TrialKind.SOLO]
    pairs = [t for t in trials if t.kind is TrialKind.PAIR]
    assert len(solos) == 4 + 2  # the matrix (resnet 1-GPU solos already there) + lstm on each model
    assert [(p.gpu_model, p.gpu_count, p.workload, p.sides[1].workload) for p in pairs] == [
        ("H100", 1, "resnet50", "lstm"),
        ("A100", 1, "resnet50", "lstm"),
    ]
    for pair in pairs:
        for side in pair.sides:
            assert solo_of(trials, side, pair.gpu_model).gpu_model == pair.gpu_model
    assert pairs[0].sides[1].batch_size == 20


def test_pairs_get_a_one_gpu_solo_even_when_the_matrix_has_none() -> None:
    doc = trialrun(matrix={"gpuCounts": [4]})
    trials = expand(parse_trialrun(doc).spec)
    assert [(t.kind, t.workload, t.gpu_count) for t in trials] == [
        (TrialKind.SOLO, "resnet50", 4),
        (TrialKind.SOLO, "lstm", 1),
        (TrialKind.SOLO, "resnet50", 1),
        (TrialKind.PAIR, "resnet50", 1),
    ]


def test_expansion_is_deterministic_and_sides_carry_their_batch_size() -> None:
    spec = parse_trialrun(VALID).spec
    assert expand(spec) == expand(spec)
    first = expand(spec)[0].sides[0]
    assert (ENV_BATCH_SIZE, "64") in first.env
    assert ("NCCL_DEBUG", "WARN") in first.env


def test_command_substitution_follows_kubernetes_rules() -> None:
    env = {"GPUADVISOR_BATCH_SIZE": "64"}
    command = ("train", "--bs=$(GPUADVISOR_BATCH_SIZE)", "$(UNSET)", "$$(GPUADVISOR_BATCH_SIZE)")
    assert expand_command(command, env) == ["train", "--bs=64", "$(UNSET)", "$(GPUADVISOR_BATCH_SIZE)"]
