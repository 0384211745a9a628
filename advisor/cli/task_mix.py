"""`gpuadvisor advisor task-mix`: the packing component's target workload, read from a pod history, as the service's
settings.

The advisor's packing keeps room for the requests a cluster typically sees (`GPUADVISOR_TASK_MIX`) and, where some
requests accept only some GPU models, for each model's own view of them (`GPUADVISOR_MODEL_TASK_MIX`: requests that
cannot use the model, room scarce for the ones that must). Writing these by hand from the formula is error-prone; this
command computes them exactly as the simulator's runs of the advisor do (`advisor.sim.target_workload`), from the same
node and pod lists (docs/formats.md), and prints them as `KEY='JSON'` lines for a ConfigMap or a shell.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from advisor.cli.common import fail, settings_error


def task_mix(
    cluster: Annotated[Path, typer.Option(help="Node list CSV (the simulator's --cluster).")],
    trace: Annotated[Path, typer.Option(help="Pod list CSV (the simulator's --trace in fragmentation mode).")],
    gpu_only: Annotated[
        bool, typer.Option("--gpu-only", help="GPU shapes only, no CPU/memory per task (GPU-only packing).")
    ] = False,
    coverage: Annotated[
        float,
        typer.Option(
            help="Keep room only for the most popular pod specs covering this share of the pods (the packing "
            "profile: 0.95, FGD's target workload, as the simulator runs it); 1: every request.",
        ),
    ] = 1.0,
) -> None:
    """Print GPUADVISOR_TASK_MIX (and GPUADVISOR_MODEL_TASK_MIX where pods constrain GPU models) for a pod history."""
    from advisor.settings import AdvisorSettings
    from advisor.sim.loaders import load_cluster, load_trace
    from advisor.sim.model import Pod
    from advisor.sim.target_workload import model_task_mixes, popular_pods, task_mix_of
    from profiler.csv_formats import InputDataError

    if not 0.0 < coverage <= 1.0:
        fail(f"--coverage: {coverage:g} is not a share of the pods: give a number above 0 and at most 1")
    try:
        nodes = load_cluster(cluster)
        trace_rows = load_trace(trace)
    except InputDataError as e:
        fail(str(e))
    except OSError as e:
        fail(f"{e.filename}: {e.strerror}")
    pods = [p for p in trace_rows if isinstance(p, Pod)]
    if not pods:
        fail(f"--trace: {trace} is not a pod list (name, num_gpu, gpu_milli, …): the task mix is read from pods")
    try:
        target = pods if coverage >= 1.0 else popular_pods(pods, coverage)
        values: dict[str, object] = {"task_mix": task_mix_of(target, with_resources=not gpu_only)}
    except ValueError as e:
        fail(f"--trace: {trace}: {e}")
    if not gpu_only and (per_model := model_task_mixes(nodes, pods)):
        values["model_task_mix"] = per_model
    try:  # what is printed is what the service reads: checked through its own settings
        AdvisorSettings.model_validate(json.loads(json.dumps(values)))
    except ValidationError as e:
        fail(settings_error(e))
    for name, value in values.items():
        typer.echo(f"GPUADVISOR_{name.upper()}='{json.dumps(value, separators=(',', ':'))}'")
