"""TrialRun documents shared by the profiler tests."""

from __future__ import annotations

import copy
from typing import Any

VALID: dict[str, Any] = {
    "apiVersion": "gpuadvisor.io/v1alpha1",
    "kind": "TrialRun",
    "metadata": {"name": "resnet-sweep", "namespace": "ml"},
    "spec": {
        "workload": "resnet50",
        "image": "registry.local/resnet:1",
        "command": ["python", "train.py", "--batch-size", "$(GPUADVISOR_BATCH_SIZE)"],
        "env": [{"name": "NCCL_DEBUG", "value": "WARN"}],
        "matrix": {"gpuModels": ["H100", "A100"], "gpuCounts": [1, 2], "batchSizes": [64]},
        "colocateWith": [{"workload": "lstm", "command": ["python", "lstm.py"], "batchSize": 20}],
        "maxDurationSeconds": 300,
        "repeats": 1,  # one round; the tests of repeats ask for more
    },
}


def trialrun(**spec_changes: Any) -> dict[str, Any]:
    """A copy of VALID with top-level spec fields replaced (a value of None removes the field)."""
    doc = copy.deepcopy(VALID)
    for key, value in spec_changes.items():
        if value is None:
            doc["spec"].pop(key, None)
        else:
            doc["spec"][key] = value
    return doc
