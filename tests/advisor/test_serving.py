"""Promoted models in the service: what the scorer asks them, the API that lists and trains them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from advisor.api import create_app
from advisor.datasets import GavelData, gavel_trace_executions, load_gavel
from advisor.models.interference import InterferenceModel
from advisor.models.jct import JctModel
from advisor.models.reference import GAVEL_THROUGHPUTS, GAVEL_TRACES, bundled_gavel_dir
from advisor.models.registry import load_promoted, register, save_trained
from advisor.models.throughput import ThroughputModel
from advisor.models.training import Model, Trained
from advisor.placement.types import Resident
from advisor.predictors import SpecSpeed, UsageProfile
from advisor.serving import SPEED_REFERENCE_GPU, ProfileIndex, WorkloadSpeed, _Solo, build_predictors
from advisor.settings import AdvisorSettings
from profiler.records import ProfileRecord
from profiler.store import db, repo
from tests.advisor.factories import snapshot, v1_pod

TOKEN = "t0ken"


@pytest.fixture(scope="module")
def gavel() -> GavelData:
    return load_gavel(bundled_gavel_dir() / GAVEL_THROUGHPUTS)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, gavel: GavelData) -> tuple[str, Path]:
    """A store with small (fast to fit) promoted models of every kind, trained on slices of the bundled Gavel data."""
    root = tmp_path_factory.mktemp("serving")
    url = f"sqlite:///{root}/store.db"
    engine = db.make_engine(url)
    db.upgrade(engine)
    sessions = db.session_factory(engine)
    executions = gavel_trace_executions(bundled_gavel_dir() / GAVEL_TRACES, gavel.throughputs).head(400)
    # One thread: LightGBM's thread pool only adds contention on a small, busy machine.
    models: list[Model] = [
        InterferenceModel(num_boost_round=20, num_threads=1).fit(gavel.colocations.head(400)),
        JctModel(num_boost_round=20, num_threads=1).fit(executions),
        ThroughputModel(num_boost_round=20, num_threads=1).fit(gavel.throughputs),
    ]
    for model in models:
        directory = root / "models" / model.kind
        save_trained(Trained(model=model, metrics={}, training_summary={"source": f"gavel {model.kind}"}), directory)
        register(sessions, model.kind, directory)
    engine.dispose()
    return url, root


@pytest.fixture
def sessions(store: tuple[str, Path]) -> Iterator[sessionmaker[Session]]:
    engine = db.make_engine(store[0])
    yield db.session_factory(engine)
    engine.dispose()


def test_promoted_models_answer_jct_and_interference(sessions: sessionmaker[Session], gavel: GavelData) -> None:
    predictors = build_predictors(sessions)
    names = predictors.names()
    assert names["jct"] == "jct v1"
    assert names["interference"] == "interference v1"
    workload = str(gavel.colocations["workload_a"].iloc[0])
    partner = str(gavel.colocations["workload_b"].iloc[0])
    gpu = str(gavel.colocations["gpu_model"].iloc[0])
    jct = predictors.jct.jct_seconds(workload, gpu, 1)
    assert jct is not None
    assert jct > 0
    assert predictors.jct.jct_seconds(None, gpu, 1) is None
    resident = Resident("ml/other", workload=partner, sm_utilization_ratio=0.5, memory_bandwidth_utilization_ratio=0.4)
    pod_slow, resident_slow = predictors.interference.slowdowns(gpu, workload, UsageProfile(0.5, 0.4), [resident])
    assert pod_slow >= 1.0
    assert resident_slow >= 1.0
    unknown = Resident(
        "ml/x", workload="never-profiled", sm_utilization_ratio=0.9, memory_bandwidth_utilization_ratio=0.9
    )
    heuristic = predictors.interference.slowdowns(gpu, workload, UsageProfile(0.9, 0.9), [unknown])
    assert heuristic[0] == pytest.approx(1.8 * 1.05)


def test_jct_follows_the_gpu_type_even_for_types_the_history_lacks(sessions: sessionmaker[Session]) -> None:
    jct = build_predictors(sessions).jct
    on = {gpu: jct.jct_seconds("ResNet-50 (batch size 64)", gpu, 1) for gpu in ("NVIDIA H100 80GB HBM3", "V100", "K80")}
    assert all(v is not None for v in on.values()), on
    assert on["NVIDIA H100 80GB HBM3"] < on["V100"] < on["K80"]  # type: ignore[operator]


def test_jct_follows_the_workloads_own_speed_on_each_gpu_type(sessions: sessionmaker[Session]) -> None:
    """On Gavel's measurements the Recommendation jobs run 2.3× faster on a P100 than on a V100 and even a K80 beats
    the V100, against the data sheets; the JCT estimate follows the workload (the promoted throughput model)."""
    jct = build_predictors(sessions).jct
    rec = {gpu: jct.jct_seconds("Recommendation (batch size 1024)", gpu, 1) for gpu in ("P100", "V100", "K80")}
    assert rec["P100"] < rec["K80"] < rec["V100"]  # type: ignore[operator]
    assert rec["V100"] / rec["P100"] == pytest.approx(2.31, rel=0.05)  # type: ignore[operator]
    resnet = {gpu: jct.jct_seconds("ResNet-50 (batch size 64)", gpu, 1) for gpu in ("P100", "V100", "K80")}
    assert resnet["V100"] < resnet["P100"] < resnet["K80"]  # type: ignore[operator]


def test_workload_speed_prefers_profiles_then_the_throughput_model_then_the_data_sheets(
    sessions: sessionmaker[Session],
) -> None:
    spec = SpecSpeed(SPEED_REFERENCE_GPU)
    model = load_promoted(sessions).throughput
    assert model is not None
    measured = ProfileIndex(
        {
            ("bert", "t4"): _Solo(throughput=300.0, batch_size=32, usage=None),
            ("bert", "v100"): _Solo(throughput=100.0, batch_size=32, usage=None),
            ("gpt", "t4"): _Solo(throughput=300.0, batch_size=32, usage=None),
            ("gpt", "v100"): _Solo(throughput=100.0, batch_size=64, usage=None),  # another batch size: not compared
        }
    )
    speed = WorkloadSpeed(spec, model, measured)

    def answer(workload: str, gpu: str, count: int = 1) -> tuple[float, str]:
        ratio, source = speed.ratio(workload, gpu, "v100", count)
        return round(ratio, 3), source

    def data_sheets(gpu: str) -> tuple[float, str]:
        return round(spec.relative_speed(gpu) / spec.relative_speed("v100"), 3), "data sheets"

    assert answer("bert", "Tesla T4") == (3.0, "measured")
    assert answer("bert", "t4", 2) == data_sheets("t4")  # single-GPU profiles say nothing of 2 GPUs
    assert answer("gpt", "t4") == data_sheets("t4")
    ratio, source = speed.ratio("Recommendation (batch size 1024)", "p100", "v100", 1)
    assert source == "throughput model"
    assert ratio == pytest.approx(2.31, rel=0.05)
    assert answer("never-seen", "k80") == data_sheets("k80")
    untrained = WorkloadSpeed(spec, None, ProfileIndex({}))  # no throughput model promoted
    assert untrained.ratio("Recommendation (batch size 1024)", "p100", "v100", 1)[1] == "data sheets"


def test_the_service_serves_promoted_models_and_lists_them(store: tuple[str, Path], gavel: GavelData) -> None:
    settings = AdvisorSettings(db_url=store[0], no_kube=True, api_token=TOKEN, model_dir=store[1] / "trained")
    workload = str(gavel.throughputs["workload"].iloc[0])
    with TestClient(create_app(settings)) as client:
        listed = client.get("/v1/models").json()
        assert {v["kind"] for v in listed["versions"] if v["promoted"]} == {"interference", "jct", "throughput"}
        assert listed["serving"]["jct"] == "jct v1"
        client.post(
            "/v1/telemetry",
            json=snapshot("n1", model="Tesla V100-SXM2-16GB"),
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        pod = v1_pod(gpus=1, labels={"gpuadvisor.io/workload": workload})
        scored = client.post("/v1/score", json={"pod": {"metadata": pod["metadata"], "spec": pod["spec"]}}).json()
        [verdict] = scored["scores"]
        assert verdict["predicted_jct_seconds"] > 0
        assert verdict["predicted_jct_seconds"] == round(verdict["predicted_jct_seconds"], 1)  # no 15 decimals
        assert "jct model" in verdict["reason"]
        assert scored["models"]["jct"] == "jct v1"
        answer = client.post("/v1/predict/jct", json={"workload": workload, "gpu_model": "V100"}).json()
        assert answer["model"] == "jct v1"
        assert answer["jct_seconds"] > 0
        rec = {"workload": "Recommendation (batch size 1024)", "gpu_model": "Tesla P100-PCIE-16GB"}
        answer = client.post("/v1/predict/jct", json=rec).json()
        assert answer["relative_speed"] == pytest.approx(2.31, rel=0.05)  # the data sheets say 0.35
        assert answer["reason"].endswith("runs 2.31 x its V100 speed here (measured)")
        after = client.get("/v1/models").json()
        assert after["served"]["jct"] == {"version": 1, "source": "gavel jct"}
        assert after["served"]["interference"] == {"version": 1, "source": "gavel interference"}
        assert after["answers"]["speed"]["measured"] >= 1


def test_training_runs_in_the_background_and_reports_its_state(store: tuple[str, Path]) -> None:
    settings = AdvisorSettings(db_url=store[0], no_kube=True, api_token=TOKEN, model_dir=store[1] / "trained")
    with TestClient(create_app(settings)) as client:
        assert client.post("/v1/models/train", json={"kinds": ["jct"]}).status_code == 401
        started = client.post("/v1/models/train", headers={"Authorization": f"Bearer {TOKEN}"})  # no body: all kinds
        assert started.status_code == 202
        status_url = started.json()["status_url"]
        deadline = time.monotonic() + 60
        job = client.get(status_url).json()
        while job["state"] in ("queued", "running") and time.monotonic() < deadline:
            time.sleep(0.1)
            job = client.get(status_url).json()
        # The store holds no profiles, co-locations or executions of its own: a failed job that says why.
        assert job["state"] == "failed"
        assert job["kinds"] == ["throughput", "interference", "jct"]
        assert "usable row(s)" in job["error"]
        assert client.get("/v1/models/train/nope").status_code == 404


RESNET = "resnet50-bs64"  # a pod's label-safe signature of Gavel's "ResNet-50 (batch size 64)"


def test_every_spelling_of_a_gpu_gets_one_speed_and_newer_gpus_are_faster(sessions: sessionmaker[Session]) -> None:
    speed = build_predictors(sessions).speed
    spellings = {
        "v100": ("V100", "v100", "Tesla V100-SXM2-16GB", "Tesla-V100-SXM2-16GB", "Tesla V100-SXM2-32GB", "V100M32"),
        "h100": ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3", "H100", "h100-sxm"),
        "a100": ("NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB", "a100-80g", "A100-80GB"),
        "t4": ("Tesla T4", "Tesla-T4", "T4", "NVIDIA T4"),
    }
    ratio: dict[str, float] = {}
    for key, names in spellings.items():
        answers = {speed.speed_of(RESNET, name, 1)[0] for name in names}
        assert len(answers) == 1, (key, answers)
        [value] = answers
        assert value is not None
        ratio[key] = value
    assert ratio["h100"] > ratio["a100"] > ratio["v100"] > ratio["t4"]


def test_the_throughput_model_answers_only_inside_its_gpu_types(sessions: sessionmaker[Session]) -> None:
    speed = build_predictors(sessions).speed
    assert speed.name == "throughput v1"
    inside = speed.speed_of(RESNET, "p100", 2)  # 2 GPUs: not a measured single-GPU profile
    assert inside[1] == "throughput v1"
    outside = speed.speed_of(RESNET, "NVIDIA L4", 1)
    assert outside[1] == "throughput v1 × data sheets beyond its GPU types (l4)"
    never_seen = speed.speed_of("my-own-model", "NVIDIA L4", 1)
    assert never_seen[1] == "data sheets"


def test_an_unknown_gpu_is_answered_as_unknown(sessions: sessionmaker[Session]) -> None:
    predictors = build_predictors(sessions)
    value, how = predictors.speed.speed_of(RESNET, "NVIDIA Future GPU 9000", 1)
    assert value is None
    assert "unknown GPU model 'NVIDIA Future GPU 9000'" in how
    assert predictors.jct.jct_seconds(RESNET, "NVIDIA Future GPU 9000", 1) is None


def test_jct_without_history_is_null_never_one_constant(sessions: sessionmaker[Session]) -> None:
    jct = build_predictors(sessions).jct
    assert [jct.jct_seconds("my-own-model", "V100", n) for n in (1, 8, 1024)] == [None, None, None]
    assert jct.jct_seconds(RESNET, "V100", 1) is not None
    assert jct.jct_seconds(RESNET, "V100", 1024) is None  # beyond every GPU count of the history


def test_predict_jct_and_score_say_what_answered(store: tuple[str, Path]) -> None:
    settings = AdvisorSettings(db_url=store[0], no_kube=True, api_token=TOKEN, model_dir=store[1] / "trained")
    with TestClient(create_app(settings)) as client:
        unknown = client.post("/v1/predict/jct", json={"workload": RESNET, "gpu_model": "Mystery GPU"}).json()
        assert unknown["jct_seconds"] is None
        assert unknown["relative_speed"] is None
        assert "unknown GPU model 'Mystery GPU'" in unknown["reason"]
        metrics = client.get("/metrics").text
        assert 'gpuadvisor_advisor_unknown_gpu_models_total{endpoint="predict_jct"} 1.0' in metrics
        new = client.post("/v1/predict/jct", json={"workload": "my-own-model", "gpu_model": "H100"}).json()
        assert new["jct_seconds"] is None
        assert new["models"] == {"jct": "heuristic: no estimate", "speed": "data sheets"}
        assert "no history of workload 'my-own-model'" in new["reason"]
        known = client.post("/v1/predict/jct", json={"workload": RESNET, "gpu_model": "NVIDIA-H100-80GB-HBM3"}).json()
        assert known["models"]["jct"] == "jct v1"
        assert known["models"]["speed"].startswith("throughput v1 × data sheets")
        for name, model in (("h", "NVIDIA H100 80GB HBM3"), ("a", "NVIDIA A100-SXM4-40GB"), ("t", "Tesla T4")):
            client.post("/v1/telemetry", json=snapshot(name, model=model), headers={"Authorization": f"Bearer {TOKEN}"})
        scored = client.post("/v1/score", json={"pod": {"gpus": 1, "workload": RESNET}}).json()
        jct = {s["node"]: s["predicted_jct_seconds"] for s in scored["scores"]}
        assert jct["h"] < jct["a"] < jct["t"]
        assert scored["models"]["jct"] == "jct v1"
        assert "data sheets beyond its GPU types" in scored["models"]["speed"]
        assert scored["models"]["sharing"].startswith("time-slicing on 3 nodes (assumed: default compute mode")
        pair = {
            "gpu_model": "V100",
            "workload_a": "ResNet-50 (batch size 64)",
            "workload_b": "lm-bs20",
            "usage_a": {"sm_utilization_ratio": 0.12, "memory_bandwidth_utilization_ratio": 0.05},
            "usage_b": {"sm_utilization_ratio": 0.9, "memory_bandwidth_utilization_ratio": 0.3},
        }
        turns = client.post("/v1/predict/interference", json=pair | {"sharing": "time-slicing"}).json()
        # ResNet-50's steps on a V100 (Gavel: 64 samples at ~0.2 s) are long against a 2 ms time slice: the light
        # side waits out few turns (advisor.sharing.turn_taking; a 1 ms step would lose about half).
        assert 0.85 < turns["normalized_throughput_a"] < 0.95
        assert "time-slicing prior (interference v1 has no pairs measured that way)" in turns["reason"]
        unknown = client.post("/v1/predict/interference", json=pair).json()
        assert unknown["reason"].startswith("from interference v1;")
        assert unknown["normalized_throughput_a"] > 0.8  # kernels at once: the light side hardly waits
        bad = client.post("/v1/predict/interference", json=pair | {"sharing": "sometimes"})
        assert bad.status_code == 422


def test_jct_without_history_from_requested_steps_scales_with_gpu_count(
    store: tuple[str, Path], tmp_path: Path
) -> None:
    """A workload the JCT history lacks, profiled on one V100: with `steps` its JCT is the steps over its steps/s
    on that GPU over the data-parallel speed-up, so it falls with the GPU count (never one constant) and with a
    faster GPU; without `steps` it stays null and says what would give an estimate."""
    copy = tmp_path / "store.db"
    copy.write_bytes(Path(store[0].removeprefix("sqlite:///")).read_bytes())
    url = f"sqlite:///{copy}"
    engine = db.make_engine(url)
    with db.session_factory(engine)() as session, session.begin():
        repo.save_profile(
            session=session,
            profile=ProfileRecord(
                workload="my-new-model", gpu_model="Tesla V100-SXM2-16GB", throughput_samples_per_s=320.0, batch_size=32
            ),
        )
    engine.dispose()
    settings = AdvisorSettings(db_url=url, no_kube=True, api_token=TOKEN, model_dir=tmp_path / "trained")
    with TestClient(create_app(settings)) as client:
        ask = {"workload": "my-new-model", "gpu_model": "V100", "steps": 10_000}
        answers = [client.post("/v1/predict/jct", json=ask | {"gpu_count": n}).json() for n in (1, 8, 1024)]
        jct = [a["jct_seconds"] for a in answers]
        assert jct[0] == pytest.approx(10_000 / 10.0)  # 320 samples/s at 32 per step: 10 steps/s, measured
        assert jct[1] == pytest.approx(jct[0] / (8 * 0.9**3))
        assert jct[2] == pytest.approx(jct[0] / (1024 * 0.9**10))
        assert answers[0]["models"]["jct"] == "requested steps / throughput"
        assert "10000 steps at 10 steps/s on one V100 (measured)" in answers[0]["reason"]
        assert "no history of workload 'my-new-model'" in answers[0]["reason"]
        h100 = client.post("/v1/predict/jct", json=ask | {"gpu_model": "H100"}).json()
        assert h100["jct_seconds"] < jct[0]
        assert "its profile on v100 × data sheets" in h100["reason"]
        without = client.post("/v1/predict/jct", json={"workload": "my-new-model", "gpu_model": "V100"}).json()
        assert without["jct_seconds"] is None
        assert "give the job's `steps`" in without["reason"]
        unprofiled = client.post("/v1/predict/jct", json=ask | {"workload": "never-profiled"}).json()
        assert unprofiled["jct_seconds"] is None
        assert "no profile of workload 'never-profiled'" in unprofiled["reason"]
        bad = client.post("/v1/predict/jct", json=ask | {"steps": 0})
        assert bad.status_code == 422
        assert "steps" in bad.text
