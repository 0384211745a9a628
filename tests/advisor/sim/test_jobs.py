"""JCT mode: event ordering, metrics on traces small enough to compute by hand, sharing and topology effects."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from advisor.placement.config import ScoringConfig
from advisor.sim.heldout import prediction_errors
from advisor.sim.jobs import ExtenderJobPolicy, JobPolicy, JobState, KubeJobPolicy, job_task_mix, run_jct
from advisor.sim.loaders import load_throughputs
from advisor.sim.model import GPU_MILLI, Cluster, Job, SimNode
from advisor.sim.rates import CROSS_NVLINK_GROUP_RATIO, RateTable, truth_table
from advisor.sim.run import SimConfigError, history_lengths, jct_policy, jct_scoring_config, trace_lengths
from tests.advisor.sim.conftest import write

SPREAD = KubeJobPolicy(most=False)


def test_a_job_waits_for_gpus_and_the_metrics_add_up() -> None:
    cluster = Cluster((SimNode("n", "V100", 2),))
    jobs = [Job("big", "x", 0.0, 2, 100.0), Job("small", "x", 10.0, 1, 50.0)]
    r = run_jct(cluster, jobs, SPREAD, None)
    # big runs 0..100; small waits until 100 and runs 100..150.
    assert r.avg_jct_s == pytest.approx((100 + 140) / 2)
    assert r.avg_queue_s == pytest.approx((0 + 90) / 2)
    assert r.makespan_s == pytest.approx(150)
    assert r.gpu_utilization == pytest.approx((2 * 100 + 1 * 50) / (2 * 150))
    assert r.jct_s == [100.0, 140.0]
    assert r.p95_jct_s == pytest.approx(100 + 0.95 * 40)


def test_a_completion_frees_gpus_for_a_job_arriving_at_the_same_instant() -> None:
    cluster = Cluster((SimNode("n", "V100", 1),))
    jobs = [Job("first", "x", 0.0, 1, 100.0), Job("second", "x", 100.0, 1, 10.0)]
    r = run_jct(cluster, jobs, SPREAD, None)
    assert r.avg_queue_s == 0.0
    assert r.makespan_s == pytest.approx(110)


def test_backfilling_lets_a_small_job_pass_a_blocked_big_one() -> None:
    cluster = Cluster((SimNode("n", "V100", 2),))
    jobs = [Job("a", "x", 0.0, 1, 100.0), Job("big", "x", 1.0, 2, 10.0), Job("c", "x", 2.0, 1, 10.0)]
    r = run_jct(cluster, jobs, SPREAD, None)
    # c starts at 2 on the free GPU; big waits for both GPUs until 100.
    assert sorted(r.jct_s) == pytest.approx([10.0, 100.0, 109.0])


def test_a_job_larger_than_the_cluster_is_reported_not_run() -> None:
    cluster = Cluster((SimNode("n", "V100", 2),))
    r = run_jct(cluster, [Job("huge", "x", 0.0, 4, 1.0), Job("ok", "x", 0.0, 1, 5.0)], SPREAD, None)
    assert r.jobs == 1
    assert r.unschedulable_jobs == 1


def test_sharing_slows_both_jobs_by_the_measured_ratios(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.csv",
        "gpu_model,workload_a,workload_b,solo_throughput_a,solo_throughput_b,coloc_throughput_a,coloc_throughput_b\n"
        "V100,a,b,10,10,5,8",
    )
    truth = truth_table(load_throughputs(path))
    cluster = Cluster((SimNode("n", "V100", 1),))
    jobs = [Job("ja", "a", 0.0, 1, 100.0), Job("jb", "b", 0.0, 1, 40.0)]
    r = run_jct(cluster, jobs, SPREAD, truth)
    # Shared: a at 5 steps/s, b at 8 → b done at 5 s; a has 75 steps left alone at 10/s → done at 12.5 s.
    assert r.jct_s == pytest.approx([5.0, 12.5])


def test_a_pair_that_cannot_share_waits(gavel_json: Path) -> None:
    truth = truth_table(load_throughputs(gavel_json))
    cluster = Cluster((SimNode("n", "K80", 1),))
    jobs = [Job("ja", "A (batch size 32)", 0.0, 1, 20.0), Job("jb", "B (batch size 64)", 0.0, 1, 40.0)]
    r = run_jct(cluster, jobs, SPREAD, truth)
    assert r.jct_s == pytest.approx([10.0, 20.0])  # a alone at 2/s (10 s), then b alone at 4/s


def test_heterogeneity_aware_oracle_puts_the_job_on_the_fast_gpu(gavel_json: Path) -> None:
    truth = truth_table(load_throughputs(gavel_json))
    cluster = Cluster((SimNode("slow", "K80", 1), SimNode("fast", "V100", 1)))
    jobs = [Job("ja", "A (batch size 32)", 0.0, 1, 100.0)]
    oracle = ExtenderJobPolicy("oracle", cluster, truth, ScoringConfig())
    assert run_jct(cluster, jobs, oracle, truth).avg_jct_s == pytest.approx(10.0)
    first = KubeJobPolicy(most=False, seed=None)  # ties to the first node listed: K80
    assert run_jct(cluster, jobs, first, truth).avg_jct_s == pytest.approx(50.0)


def test_spread_breaks_ties_between_equal_nodes_at_random_like_kube(gavel_json: Path) -> None:
    truth = truth_table(load_throughputs(gavel_json))
    cluster = Cluster((SimNode("slow", "K80", 1), SimNode("fast", "V100", 1)))
    jobs = [Job("ja", "A (batch size 32)", 0.0, 1, 100.0)]
    outcomes = {run_jct(cluster, jobs, KubeJobPolicy(most=False, seed=s), truth).avg_jct_s for s in range(20)}
    assert sorted(outcomes) == pytest.approx([10.0, 50.0])  # sometimes the V100, sometimes the K80
    again = {run_jct(cluster, jobs, KubeJobPolicy(most=False, seed=3), truth).avg_jct_s for _ in range(3)}
    assert len(again) == 1  # a seed fixes the draws


def test_the_advisors_kube_term_counts_a_share_as_half_a_gpu(gavel_json: Path) -> None:
    truth = truth_table(load_throughputs(gavel_json))
    cluster = Cluster((SimNode("one", "K80", 1), SimNode("two", "K80", 2)))
    job = Job("ja", "A (batch size 32)", 0.0, 1, 100.0)
    for seed in range(10):
        state = JobState(cluster, truth)
        state.assign(Job("whole", "B (batch size 64)", 0.0, 2, 1.0), 1, (0,), GPU_MILLI, None)
        # LeastAllocated after half a GPU: "one" 50 % free, "two" 25 % free; counting a whole GPU made them tie at 0.
        advisor = ExtenderJobPolicy("advisor", cluster, truth, ScoringConfig(), extender_weight=0.0, seed=seed)
        assert advisor.choose(job, 1, True, None, state) == (0, (0,))


def test_topology_aware_advisor_keeps_a_4_gpu_job_inside_one_nvlink_group() -> None:
    cluster = Cluster((SimNode("n", "V100", 8, nvlink_groups=((0, 1, 2, 3), (4, 5, 6, 7))),))
    jobs = [Job("pair", "x", 0.0, 2, 1000.0), Job("quad", "x", 1.0, 4, 100.0)]
    advisor = run_jct(cluster, jobs, ExtenderJobPolicy("advisor", cluster, None, ScoringConfig()), None)
    assert advisor.jct_s[0] == pytest.approx(100.0)
    assert advisor.cross_nvlink_group_jobs == 0
    # spread takes the lowest free GPUs 2,3,4,5: across the two groups.
    spread = run_jct(cluster, jobs, SPREAD, None)
    assert spread.jct_s[0] == pytest.approx(100.0 / CROSS_NVLINK_GROUP_RATIO)
    assert spread.cross_nvlink_group_jobs == 1


def test_binpack_shares_a_gpu_where_spread_uses_a_free_one(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.csv",
        "gpu_model,workload_a,workload_b,solo_throughput_a,solo_throughput_b,coloc_throughput_a,coloc_throughput_b\n"
        "V100,a,a,10,10,5,5",
    )
    truth = truth_table(load_throughputs(path))
    cluster = Cluster((SimNode("n", "V100", 2),))
    jobs = [Job("j1", "a", 0.0, 1, 100.0), Job("j2", "a", 0.0, 1, 100.0)]
    assert run_jct(cluster, jobs, SPREAD, truth).jct_s == pytest.approx([10.0, 10.0])
    assert run_jct(cluster, jobs, KubeJobPolicy(most=True), truth).jct_s == pytest.approx([20.0, 20.0])


def test_a_job_needing_both_nvlink_groups_is_not_slowed() -> None:
    cluster = Cluster((SimNode("n", "V100", 8, nvlink_groups=((0, 1, 2, 3), (4, 5, 6, 7))),))
    r = run_jct(cluster, [Job("eight", "x", 0.0, 8, 100.0)], SPREAD, None)
    assert r.jct_s == pytest.approx([100.0])
    assert r.cross_nvlink_group_jobs == 0


def test_the_task_mix_of_a_jct_run_counts_half_gpus_and_gang_members() -> None:
    jobs = [
        Job("a", "x", 0.0, 1, 1.0),
        Job("b", "x", 0.0, 1, 1.0),
        Job("c", "x", 0.0, 2, 1.0),
        Job("d", "x", 0.0, 6, 1.0),
    ]
    # d runs as a gang of a 4-GPU and a 2-GPU member: 5 requests in all.
    assert job_task_mix(jobs, 4, sharing=True) == ((1, 500, 0.4), (2, 1000, 0.4), (4, 1000, 0.2))
    assert job_task_mix(jobs, 4, sharing=False) == ((1, 1000, 0.4), (2, 1000, 0.4), (4, 1000, 0.2))


def test_prediction_errors_are_zero_for_the_truth_and_count_a_wrong_fastest_gpu(gavel_json: Path) -> None:
    truth = truth_table(load_throughputs(gavel_json))
    exact = prediction_errors(truth, truth)
    assert exact["mape_k80"] == 0.0
    assert exact["mape_v100"] == 0.0
    assert exact["interference_mae"] == 0.0
    assert (exact["wrong_fastest_model"], exact["job_types"]) == (0.0, 2.0)
    # Believing job A is as fast on the K80 as on the V100 (2 steps/s) gets A's fastest GPU wrong (argmax: K80).
    isolated = dict(truth.isolated)
    isolated[("v100", "A (batch size 32)", 1, True)] = 2.0
    wrong = prediction_errors(RateTable("guess", isolated, dict(truth.norm)), truth)
    assert wrong["mape_v100"] == pytest.approx((8.0 / 10.0) / 2)
    assert wrong["wrong_fastest_model"] == 1.0


def _fast_and_slow() -> tuple[Cluster, RateTable]:
    cluster = Cluster((SimNode("slow", "K80", 1), SimNode("fast", "V100", 1)))
    return cluster, RateTable("truth", {("k80", "x", 1, True): 1.0, ("v100", "x", 1, True): 4.0})


@pytest.mark.parametrize(
    ("first_work", "expected_second_jct"),
    [
        (400.0, 190.0),  # the V100 frees at 100: waiting, 100 + 100 = 200 (190 after arrival), beats 400 on the K80
        (4000.0, 400.0),  # it frees at 1000: waiting would finish at 1100, the K80 at 410
    ],
)
def test_the_extender_filter_makes_a_job_wait_for_a_faster_gpu_when_that_finishes_sooner(
    first_work: float, expected_second_jct: float
) -> None:
    cluster, truth = _fast_and_slow()
    jobs = [Job("first", "x", 0.0, 1, first_work), Job("second", "x", 10.0, 1, 400.0)]
    oracle = ExtenderJobPolicy("oracle", cluster, truth, ScoringConfig())
    r = run_jct(cluster, jobs, oracle, truth)
    assert sorted(r.jct_s) == pytest.approx(sorted([first_work / 4, expected_second_jct]))


def test_without_wait_slack_the_job_takes_the_slow_gpu_at_once() -> None:
    cluster, truth = _fast_and_slow()
    jobs = [Job("first", "x", 0.0, 1, 400.0), Job("second", "x", 10.0, 1, 400.0)]
    oracle = ExtenderJobPolicy("oracle", cluster, truth, ScoringConfig(wait_slack=None))
    assert sorted(run_jct(cluster, jobs, oracle, truth).jct_s) == pytest.approx([100.0, 400.0])


def test_a_job_waits_on_what_the_advisor_believes_not_on_the_truth() -> None:
    cluster, truth = _fast_and_slow()
    # The advisor believes the V100 only 1.1x faster: at 10 s, waiting for it (room in 100 / 1.1 - 10 = 81 s, then
    # 400 / 1.1 = 364 s) loses to the K80's 400 s, so the second job takes the K80 although the truth says waiting
    # (the V100 truly frees at 25 s) would have finished it at 125 s.
    believed = RateTable("believed", {("k80", "x", 1, True): 1.0, ("v100", "x", 1, True): 1.1})
    jobs = [Job("first", "x", 0.0, 1, 100.0), Job("second", "x", 10.0, 1, 400.0)]
    advisor = ExtenderJobPolicy("advisor", cluster, believed, ScoringConfig())
    assert sorted(run_jct(cluster, jobs, advisor, truth).jct_s) == pytest.approx([25.0, 400.0])
    oracle = ExtenderJobPolicy("oracle", cluster, truth, ScoringConfig())
    assert sorted(run_jct(cluster, jobs, oracle, truth).jct_s) == pytest.approx([25.0, 115.0])


@pytest.mark.parametrize(
    ("hold", "expected"),
    [
        # The 2-GPU job is blocked at 1 s (one GPU free). Held: node a is its from 100 s (when j1 ends); the long job
        # (1000 s) may not take the free GPU, the short one (50 s, done before 100 s) may; big runs 100-200 s.
        (True, {"j1": 100.0, "big": 199.0, "long": 1198.0, "short": 50.0}),
        # Not held: the long job takes the free GPU at 2 s and big waits for it to end (1002 s).
        (False, {"j1": 100.0, "big": 1101.0, "long": 1000.0, "short": 147.0}),
    ],
)
def test_a_blocked_job_holds_the_nodes_it_starts_on_first_and_short_jobs_backfill(
    hold: bool, expected: dict[str, float]
) -> None:
    cluster = Cluster((SimNode("a", "K80", 2),))
    truth = RateTable("truth", {("k80", "x", 1, True): 1.0, ("k80", "x", 2, True): 2.0})
    jobs = [
        Job("j1", "x", 0.0, 1, 100.0),
        Job("big", "x", 1.0, 2, 200.0),
        Job("long", "x", 2.0, 1, 1000.0),
        Job("short", "x", 3.0, 1, 50.0),
    ]
    oracle = ExtenderJobPolicy("oracle", cluster, truth, ScoringConfig(hold_for_blocked=hold))
    r = run_jct(cluster, jobs, oracle, truth)
    assert sorted(r.jct_s) == pytest.approx(sorted(expected.values()))
    spread = run_jct(cluster, jobs, KubeJobPolicy(most=False), truth)  # kube-scheduler holds nothing
    assert sorted(spread.jct_s) == pytest.approx(sorted([100.0, 1101.0, 1000.0, 147.0]))


@pytest.mark.parametrize(
    ("shortest_first", "expected"),
    [
        # At 100 s the GPU frees: `long` (1000 s) has waited 90 s, ratio 1.09; `short` (10 s) 50 s, ratio 6. Served
        # by ratio, short runs 100-110 s and long 110-1110 s.
        (True, {"r": 100.0, "long": 1100.0, "short": 60.0}),
        # First come, first served: long runs 100-1100 s, short 1100-1110 s.
        (False, {"r": 100.0, "long": 1090.0, "short": 1060.0}),
    ],
)
def test_shortest_first_serves_the_queue_by_response_ratio(shortest_first: bool, expected: dict[str, float]) -> None:
    cluster = Cluster((SimNode("a", "K80", 1),))
    truth = RateTable("truth", {("k80", "x", 1, True): 1.0})
    jobs = [Job("r", "x", 0.0, 1, 100.0), Job("long", "x", 10.0, 1, 1000.0), Job("short", "x", 50.0, 1, 10.0)]
    oracle = ExtenderJobPolicy("oracle", cluster, truth, ScoringConfig(shortest_first=shortest_first))
    assert sorted(run_jct(cluster, jobs, oracle, truth).jct_s) == pytest.approx(sorted(expected.values()))


@pytest.mark.parametrize("policy", ["advisor", "oracle"])  # the oracle knows the true speeds, not the lengths
@pytest.mark.parametrize(
    ("lengths", "expected"),
    [
        # What the advisor believes matches the jobs: short runs first.
        ({"r": 100.0, "long": 1000.0, "short": 10.0}, {"r": 100.0, "long": 1100.0, "short": 60.0}),
        # It believes long short and short long: at 100 s long's believed ratio is (90 + 10) / 10 = 10 and
        # short's (50 + 1000) / 1000 = 1.05, so the advisor serves long first — first come, first served here.
        ({"r": 100.0, "long": 10.0, "short": 1000.0}, {"r": 100.0, "long": 1090.0, "short": 1060.0}),
    ],
)
def test_the_advisor_orders_by_the_lengths_it_believes_not_the_jobs_own(
    policy: str, lengths: dict[str, float], expected: dict[str, float]
) -> None:
    cluster = Cluster((SimNode("a", "K80", 1),))
    truth = RateTable("truth", {("k80", "x", 1, True): 1.0, ("k80", "y", 1, True): 1.0})
    jobs = [Job("r", "x", 0.0, 1, 100.0), Job("long", "x", 10.0, 1, 1000.0), Job("short", "y", 50.0, 1, 10.0)]
    chosen = jct_policy(policy, cluster, truth, truth, ScoringConfig(shortest_first=True), lengths=lengths)
    assert sorted(run_jct(cluster, jobs, chosen, truth).jct_s) == pytest.approx(sorted(expected.values()))


def test_history_lengths_are_each_job_types_median_over_past_jobs() -> None:
    past = [Job("p1", "x", 0.0, 1, 100.0), Job("p2", "x", 0.0, 1, 300.0), Job("p3", "x", 0.0, 1, 900.0)]
    past += [Job("p4", "y", 0.0, 1, 20.0)]
    jobs = [Job("j1", "x", 0.0, 1, 5.0), Job("j2", "y", 0.0, 1, 5.0), Job("j3", "z", 0.0, 1, 5.0)]
    # z has no history: the median over every past job (100, 300, 900, 20 -> 200).
    assert history_lengths(past, jobs) == {"j1": 300.0, "j2": 20.0, "j3": 200.0}
    with pytest.raises(SimConfigError, match="the length history has no job"):
        history_lengths([], jobs)


def test_trace_lengths_leave_each_job_out_of_its_own_estimate() -> None:
    works = {"a": 10.0, "b": 20.0, "c": 40.0, "d": 80.0}  # type x
    jobs = [Job(k, "x", 0.0, 1, w) for k, w in works.items()] + [Job("solo", "y", 0.0, 1, 1000.0)]
    # a: median of 20, 40, 80; b: of 10, 40, 80; c: of 10, 20, 80; d: of 10, 20, 40; solo, alone of its type: the
    # median of the four others (30).
    assert trace_lengths(jobs) == {"a": 40.0, "b": 40.0, "c": 20.0, "d": 20.0, "solo": 30.0}
    assert trace_lengths([Job("only", "x", 0.0, 1, 5.0)]) == {}  # nothing else to learn from: its own


def test_shortest_first_lets_a_long_job_go_once_its_wait_outgrows_the_short_ones() -> None:
    """Shorts (10 s) arrive every 10 s on one GPU behind a long job (100 s): they do not pass it for ever."""
    cluster = Cluster((SimNode("a", "K80", 1),))
    truth = RateTable("truth", {("k80", "x", 1, True): 1.0})
    shorts = [Job(f"s{i}", "x", 5.0 + 10.0 * i, 1, 10.0) for i in range(40)]
    jobs = [Job("r", "x", 0.0, 1, 10.0), Job("long", "x", 1.0, 1, 100.0), *shorts]
    oracle = ExtenderJobPolicy("oracle", cluster, truth, ScoringConfig(shortest_first=True))
    result = run_jct(cluster, jobs, oracle, truth)
    assert result.jobs == len(jobs)
    # Each release finds a short that has waited 5 s (ratio 1.5) until long has waited over 50 s: at 60 s its ratio
    # is 1.59 and it runs 60-160 s (JCT 159 s, the longest); after it the backlog of shorts is served oldest first.
    assert max(result.jct_s) == pytest.approx(159.0)


def _queued_jobs(*, seed: int, every_s: float) -> tuple[Cluster, list[Job]]:
    """Six 4-GPU nodes (K80 and V100) and 150 jobs of 1-8 GPUs of two types arriving every `every_s` seconds."""
    rng = np.random.default_rng(seed)
    cluster = Cluster(tuple(SimNode(f"n{i}", "V100" if i % 3 else "K80", 4) for i in range(6)))
    jobs = [
        Job(
            f"j{i}",
            str(rng.choice(["A (batch size 32)", "B (batch size 64)"])),
            float(i * every_s),
            int(rng.choice([1, 1, 1, 2, 4, 8])),
            float(rng.integers(50, 2000)),
        )
        for i in range(150)
    ]
    return cluster, jobs


@pytest.mark.parametrize(
    ("name", "every_s", "expected"),
    [
        ("spread", 7, (172.41226666666665, 69.7886976190476, 0.49969177043063917)),
        ("binpack", 7, (125.24044419642858, 9.571769047619052, 0.6514316896670582)),
        ("oracle", 7, (91.74216904761904, 8.630392857142857, 0.6318196945100354)),
        ("oracle-hold-shortest", 7, (84.98302619047618, 6.576595238095234, 0.5834854388036206)),
        ("oracle-trace-lengths", 7, (95.4359261904762, 11.532833333333338, 0.6513317468516333)),
        ("oracle", 3, (229.58107023809524, 113.78727857142857, 0.8476939289099937)),
        ("oracle-hold", 3, (228.82316309523807, 114.01438333333334, 0.8774904293995441)),
        ("oracle-shortest", 3, (207.0862011904762, 96.91454047619048, 0.8656888815408648)),
        ("oracle-hold-shortest", 3, (210.6217119047619, 100.18278571428571, 0.8537560680188109)),
        ("oracle-trace-lengths-shortest", 3, (221.67326190476194, 107.09449642857143, 0.8975737092761973)),
    ],
)
def test_a_queued_run_keeps_the_outcomes_of_the_engine_before_its_speed_ups(
    gavel_json: Path, name: str, every_s: float, expected: tuple[float, float, float]
) -> None:
    """150 jobs (1-8 GPUs: shares, whole GPUs, gangs over 4-GPU nodes) queue on K80 and V100 nodes (the oracle
    believing each job's own length, or its type's from the other jobs, as the CLI by default), arriving every 7 s, or
    every 3 s (busier: jobs wait for the V100s, each on its own predicted times), with holding and shortest first
    alone or together. The figures are what commit 2c864a6 computed, before the engine kept running jobs in arrays
    and stopped scanning the queue once no remaining job could find room (the busier runs with holding or shortest
    first: commit 9d99c39, the same engine, before waiting jobs' verdicts were kept across tries and the wait rule
    stopped reading every node): the evaluation's numbers depend on the same placements, bit for bit."""
    truth = truth_table(load_throughputs(gavel_json))
    cluster, jobs = _queued_jobs(seed=11, every_s=every_s)
    config = jct_scoring_config(cluster, jobs, truth)
    policies: dict[str, JobPolicy] = {
        "spread": KubeJobPolicy(most=False, seed=3),
        "binpack": KubeJobPolicy(most=True, seed=3),
        "oracle": ExtenderJobPolicy("oracle", cluster, truth, config, seed=3),
        "oracle-hold-shortest": ExtenderJobPolicy(
            "oracle", cluster, truth, replace(config, hold_for_blocked=True, shortest_first=True), seed=3
        ),
        "oracle-trace-lengths": ExtenderJobPolicy(
            "oracle", cluster, truth, config, seed=3, lengths=trace_lengths(jobs)
        ),  # jobs of a type alike to the wait rule: it decides once for them per pass
        "oracle-hold": ExtenderJobPolicy("oracle", cluster, truth, replace(config, hold_for_blocked=True), seed=3),
        "oracle-shortest": ExtenderJobPolicy("oracle", cluster, truth, replace(config, shortest_first=True), seed=3),
        "oracle-trace-lengths-shortest": ExtenderJobPolicy(
            "oracle", cluster, truth, replace(config, shortest_first=True), seed=3, lengths=trace_lengths(jobs)
        ),
    }
    r = run_jct(cluster, jobs, policies[name], truth)
    assert (r.avg_jct_s, r.avg_queue_s, r.gpu_utilization) == expected
    assert (r.jobs, r.multi_node_jobs) == (150, 19)


class _CheckedPolicy(ExtenderJobPolicy):
    """The oracle, asking `choose` each time it says it would pass a job over: counts those, and any that `choose`
    would have placed or that drew a random number."""

    passed = wrong = drew = 0  # per instance once counted

    def passes_over(self, job: Job, gpus: int, share: bool, gang: str | None, state: JobState) -> bool:
        known = super().passes_over(job, gpus, share, gang, state)
        if known:
            self.passed += 1
            draws = self._rng.bit_generator.state if self._rng is not None else None
            self.wrong += self.choose(job, gpus, share, gang, state) is not None
            self.drew += (self._rng.bit_generator.state if self._rng is not None else None) != draws
        return known


class _TryingEveryJob(ExtenderJobPolicy):
    """The oracle as it was before it kept verdicts across tries: the engine tries every waiting job."""

    def passes_over(self, job: Job, gpus: int, share: bool, gang: str | None, state: JobState) -> bool:
        return False


@pytest.mark.parametrize(
    ("every_s", "hold", "shortest", "lengths"),
    [
        (3, False, False, False),
        (3, False, False, True),
        (3, True, False, False),
        (3, False, True, True),
        (3, True, True, False),
        (7, True, True, True),
    ],
)
def test_a_job_the_oracle_passes_over_without_trying_is_one_it_would_refuse_without_a_draw(
    gavel_json: Path, every_s: float, hold: bool, shortest: bool, lengths: bool
) -> None:
    """The engine does not try a waiting job whose verdict the policy already knows (an alike job was filtered since
    the cluster last changed and every candidate was passed over): asked anyway, `choose` refuses it and draws
    nothing, and the run is the same as one that tries every job."""
    truth = truth_table(load_throughputs(gavel_json))
    cluster, jobs = _queued_jobs(seed=5, every_s=every_s)
    config = replace(jct_scoring_config(cluster, jobs, truth), hold_for_blocked=hold, shortest_first=shortest)
    believed = trace_lengths(jobs) if lengths else None
    checked = _CheckedPolicy("oracle", cluster, truth, config, seed=3, lengths=believed)
    result = run_jct(cluster, jobs, checked, truth)
    plain = run_jct(cluster, jobs, _TryingEveryJob("oracle", cluster, truth, config, seed=3, lengths=believed), truth)
    assert checked.passed > 0
    assert (checked.wrong, checked.drew) == (0, 0)
    assert result.jct_s == plain.jct_s
