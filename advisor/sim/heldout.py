"""What the advisor believes in the Gavel experiment: predictions of `advisor.models`, trained on a disjoint part of
the Gavel data, so that the advisor is not scored on numbers it has seen.

* Throughput: the 7 job families are split in two halves (alternating, sorted by name). A job of one half is
  predicted by a `ThroughputModel` trained on every measurement of the other half plus the job's own half's trial
  runs, which depend on `knowledge`:
  - `cold` (the default): the job measured on the `reference_gpu` only (a trial run on the cheapest GPU type), so
    every P100/V100 speed of a job, for every GPU count, is a prediction from its K80 profile and what the model
    learnt on other families;
  - `profiled`: also measured on one GPU of every GPU type (the profiler's trial-run matrix of GPU types,
    docs/design.md §4), so the 1-GPU speeds are measurements and the multi-GPU ones predictions from them.
* Interference: the pair (a, b) is predicted by an `InterferenceModel` trained on the pairs in which neither side
  belongs to a's or b's family (leave-both-families-out: 28 models for 7 families), with the solo throughputs of a
  and b replaced by their predicted ones.

Both use the models' own code with 150 boosting rounds at learning rate 0.1 (instead of their defaults) so that the
30 trainings take seconds, not minutes, on two cores.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pandas as pd

from advisor.datasets import gavel_job, load_gavel
from advisor.models.interference import InterferenceModel
from advisor.models.throughput import ThroughputModel
from advisor.sim.rates import RateTable

REFERENCE_GPU = "k80"
KNOWLEDGE = ("cold", "profiled")
_ROUNDS = 150
_LEARNING_RATE = 0.1


def _steps_per_s(frame: pd.DataFrame, samples_per_s: np.ndarray) -> np.ndarray:
    """Invert `advisor.datasets.load_gavel`'s samples/s = steps/s × batch per GPU × GPUs."""
    per_gpu_batch = np.array([gavel_job(w)[1] for w in frame["workload"]], dtype=np.float64)
    scale = frame["gpu_count"].to_numpy(np.float64) * np.where(per_gpu_batch > 0, per_gpu_batch, 1.0)
    steps: np.ndarray = samples_per_s / scale
    return steps


def heldout_table(
    gavel_json: Path,
    *,
    knowledge: str = "cold",
    reference_gpu: str = REFERENCE_GPU,
    rounds: int = _ROUNDS,
    num_threads: int = 2,
) -> RateTable:
    if knowledge not in KNOWLEDGE:
        raise ValueError(f"knowledge must be one of {', '.join(KNOWLEDGE)}, not {knowledge!r}")
    data = load_gavel(gavel_json)
    thr = data.throughputs.reset_index(drop=True)
    family = np.array([gavel_job(w)[0] for w in thr["workload"]])
    families = sorted(set(family))
    halves = (set(families[0::2]), set(families[1::2]))
    predicted = np.full(len(thr), np.nan)
    for half in halves:
        target = np.isin(family, list(half))
        trial = (thr["gpu_model"] == reference_gpu).to_numpy().copy()
        if knowledge == "profiled":
            trial |= ((thr["gpu_count"] == 1) & (thr["nodes"] == 1)).to_numpy()
        known = thr[~target | trial]
        speeds = ThroughputModel(num_boost_round=rounds, learning_rate=_LEARNING_RATE, num_threads=num_threads)
        predicted[target] = speeds.fit(known.reset_index(drop=True)).predict_frame(thr[target].reset_index(drop=True))
    steps = _steps_per_s(thr, predicted)
    isolated: dict[tuple[str, str, int, bool], float] = {}
    samples: dict[tuple[str, str], float] = {}
    columns = zip(
        thr["gpu_model"].astype(str),
        thr["workload"].astype(str),
        thr["gpu_count"].astype(int),
        thr["nodes"].astype(int),
        steps,
        predicted,
        strict=True,
    )
    for gpu, workload, count, nodes, value, raw in columns:
        isolated[(gpu, workload, int(count), int(nodes) == 1)] = float(value)
        if count == 1 and nodes == 1:
            samples[(gpu, workload)] = float(raw)

    pairs = data.colocations.reset_index(drop=True)
    pairs = pairs.assign(
        solo_throughput_a=[samples[(g, w)] for g, w in zip(pairs["gpu_model"], pairs["workload_a"], strict=True)],
        solo_throughput_b=[samples[(g, w)] for g, w in zip(pairs["gpu_model"], pairs["workload_b"], strict=True)],
    )
    fam_a = pairs["family_a"].to_numpy()
    fam_b = pairs["family_b"].to_numpy()
    norm: dict[tuple[str, str, str], float] = {}
    models = _pair_models(gavel_json.resolve(), gavel_json.stat().st_mtime_ns, rounds, num_threads)
    for (fa, fb), pairs_model in models.items():
        query = ((fam_a == fa) & (fam_b == fb)) | ((fam_a == fb) & (fam_b == fa))
        rows = pairs[query].reset_index(drop=True)
        out = pairs_model.predict_frame(rows)
        for r, (na, nb) in zip(rows.itertuples(index=False), out, strict=True):
            norm[(str(r.gpu_model), str(r.workload_a), str(r.workload_b))] = float(na)
            norm[(str(r.gpu_model), str(r.workload_b), str(r.workload_a))] = float(nb)
    return RateTable(f"advisor.models (held out, {knowledge})", isolated, norm)


@functools.lru_cache(maxsize=2)
def _pair_models(
    gavel_json: Path, mtime_ns: int, rounds: int, num_threads: int
) -> dict[tuple[str, str], InterferenceModel]:
    """The leave-both-families-out interference models, one per pair of families that has co-locations. They are
    trained on measured pairs only (never on the predicted solo speeds), so they are the same for every `knowledge`
    and are trained once per data file (`mtime_ns` keys a changed file) and training settings."""
    del mtime_ns  # part of the cache key only
    colocations = load_gavel(gavel_json).colocations.reset_index(drop=True)
    fam_a = colocations["family_a"].to_numpy()
    fam_b = colocations["family_b"].to_numpy()
    families = sorted(set(fam_a) | set(fam_b))
    models: dict[tuple[str, str], InterferenceModel] = {}
    for i, fa in enumerate(families):
        for fb in families[i:]:
            if not (((fam_a == fa) & (fam_b == fb)) | ((fam_a == fb) & (fam_b == fa))).any():
                continue
            disjoint = ~np.isin(fam_a, [fa, fb]) & ~np.isin(fam_b, [fa, fb])
            models[(fa, fb)] = InterferenceModel(
                num_boost_round=rounds, learning_rate=_LEARNING_RATE, num_threads=num_threads
            ).fit(colocations[disjoint].reset_index(drop=True))
    return models


def prediction_errors(believed: RateTable, truth: RateTable) -> dict[str, float]:
    """How far `believed` is from `truth`: per GPU model the mean absolute percentage error of the isolated speeds
    (`mape_<model>`), the mean absolute error of the co-located normalised throughputs (`interference_mae`), and for
    how many 1-GPU job types the fastest GPU model is predicted wrongly (`wrong_fastest_model`, of `job_types`)."""
    out: dict[str, float] = {}
    models = sorted({k[0] for k in truth.isolated})
    for model in models:
        keys = [k for k in truth.isolated if k[0] == model and k in believed.isolated]
        if keys:
            errors = [abs(believed.isolated[k] - truth.isolated[k]) / truth.isolated[k] for k in keys]
            out[f"mape_{model}"] = float(np.mean(errors))
    pairs = [k for k in truth.norm if k in believed.norm]
    if pairs:
        out["interference_mae"] = float(np.mean([abs(believed.norm[k] - truth.norm[k]) for k in pairs]))
    types = sorted({k[1] for k in truth.isolated if k[2] == 1 and k[3]})
    wrong = 0
    counted = 0
    for job_type in types:
        true_speed = [truth.speed(m, job_type, 1, True) or 0.0 for m in models]
        guess = [believed.speed(m, job_type, 1, True) or 0.0 for m in models]
        if min(true_speed) > 0:
            counted += 1
            wrong += int(np.argmax(true_speed) != np.argmax(guess))
    out["wrong_fastest_model"] = float(wrong)
    out["job_types"] = float(counted)
    return out
