"""The TrialRun CustomResourceDefinition, generated from the same limits as the pydantic model.

`deploy/crds/trialruns.gpuadvisor.io.yaml` is this function's output (a test keeps the two identical), so the API
server rejects what `profiler.spec` rejects. Unknown fields: a structural schema cannot say
`additionalProperties: false`; the API server's strict field validation (kubectl's default) rejects them instead.
Write the file with `python -m profiler.crd > deploy/crds/trialruns.gpuadvisor.io.yaml` (default cap; an admin who
raises `GPUADVISOR_MAX_TRIAL_DURATION_SECONDS` regenerates it with `render(cap)`).
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

from profiler.csv_formats import MAX_COUNT
from profiler.results import Phase
from profiler.settings import DEFAULT_MAX_TRIAL_DURATION_SECONDS
from profiler.spec import (
    API_GROUP,
    API_VERSION,
    DEFAULT_MAX_DURATION_SECONDS,
    DEFAULT_REPEATS,
    DNS_SUBDOMAIN,
    ENV_NAME,
    KIND,
    MAX_REPEATS,
    PLURAL,
    SECRET_KEY,
)

_STRING = {"type": "string", "minLength": 1}
_POSITIVE = {"type": "integer", "minimum": 1, "maximum": MAX_COUNT}


def _list(items: dict[str, Any], *, min_items: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "array", "items": items}
    if min_items is not None:
        out["minItems"] = min_items
    return out


def _env() -> dict[str, Any]:
    return _list(
        {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {**_STRING, "pattern": ENV_NAME},
                "value": {"type": "string"},
                "valueFrom": {
                    "type": "object",
                    "description": "A Secret of the TrialRun's namespace; no other source.",
                    "required": ["secretKeyRef"],
                    "properties": {
                        "secretKeyRef": {
                            "type": "object",
                            "required": ["name", "key"],
                            "properties": {
                                "name": {**_STRING, "maxLength": 253, "pattern": DNS_SUBDOMAIN},
                                "key": {**_STRING, "maxLength": 253, "pattern": SECRET_KEY},
                                "optional": {"type": "boolean"},
                            },
                        }
                    },
                },
            },
        }
    )


def spec_schema(max_duration_seconds: int) -> dict[str, Any]:
    workload = {**_STRING, "maxLength": 253}
    return {
        "type": "object",
        "required": ["workload", "image", "command", "matrix"],
        "properties": {
            "workload": {**workload, "description": "The workload signature the advisor keys profiles on."},
            "image": _STRING,
            "command": _list(_STRING, min_items=1),
            "env": _env(),
            "matrix": {
                "type": "object",
                "description": "Every combination is one trial; gpuModels omitted means any GPU model.",
                "required": ["gpuCounts"],
                "properties": {
                    "gpuModels": _list(_STRING, min_items=1),
                    "gpuCounts": _list(_POSITIVE, min_items=1),
                    "batchSizes": _list(_POSITIVE, min_items=1),
                },
            },
            "colocateWith": _list(
                {
                    "type": "object",
                    "required": ["workload", "command"],
                    "properties": {
                        "workload": workload,
                        "command": _list(_STRING, min_items=1),
                        "image": _STRING,
                        "env": _env(),
                        "batchSize": _POSITIVE,
                    },
                }
            ),
            "repeats": {**_POSITIVE, "maximum": MAX_REPEATS, "default": DEFAULT_REPEATS},
            "steadySeconds": {"type": "number", "minimum": 0},
            "maxDurationSeconds": {
                **_POSITIVE,
                "maximum": max_duration_seconds,
                "default": min(DEFAULT_MAX_DURATION_SECONDS, max_duration_seconds),
            },
        },
    }


def status_schema() -> dict[str, Any]:
    """The status the controller writes (profiler.results.status_of, profiler.controller.retry_status): the fields a
    user reads are typed and described (`kubectl explain trialrun.status`); each trial's entry stays open, since it
    carries its summaries for the controller's next reconcile."""
    return {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "properties": {
            "phase": {"type": "string", "enum": [str(p) for p in Phase]},
            "message": {"type": "string", "description": "What the run is doing or waiting for, or why it failed."},
            "retry": {
                "type": "object",
                "description": (
                    "Present while the controller waits to retry after a temporary API failure (e.g. HTTP 503); "
                    "removed once a reconcile succeeds."
                ),
                "properties": {
                    "attempts": {"type": "integer", "description": "Attempts that failed so far."},
                    "nextTryTime": {"type": "string", "format": "date-time"},
                    "message": {"type": "string", "description": "The API server's answer to the last attempt."},
                },
            },
            "trials": _list({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
        },
    }


def crd_manifest(max_duration_seconds: int) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{API_GROUP}"},
        "spec": {
            "group": API_GROUP,
            "scope": "Namespaced",
            "names": {"kind": KIND, "plural": PLURAL, "singular": KIND.lower(), "shortNames": ["tr"]},
            "versions": [
                {
                    "name": API_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Workload", "type": "string", "jsonPath": ".spec.workload"},
                        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                        {"name": "Message", "type": "string", "jsonPath": ".status.message"},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "required": ["spec"],
                            "properties": {
                                "spec": spec_schema(max_duration_seconds),
                                "status": status_schema(),
                            },
                        }
                    },
                }
            ],
        },
    }


def render(max_duration_seconds: int) -> str:
    header = "# Generated by `python -m profiler.crd` from profiler/spec.py's limits; do not edit by hand.\n"
    return header + yaml.safe_dump(crd_manifest(max_duration_seconds), sort_keys=False)


if __name__ == "__main__":
    sys.stdout.write(render(DEFAULT_MAX_TRIAL_DURATION_SECONDS))
