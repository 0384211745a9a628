"""The profiler's settings refuse a liveness endpoint kopf could not serve, before the operator starts."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from profiler.settings import DEFAULT_LIVENESS_ENDPOINT, ProfilerSettings


def test_liveness_endpoint_defaults_to_the_probed_port_and_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUADVISOR_LIVENESS_ENDPOINT", raising=False)
    assert ProfilerSettings().liveness_endpoint == DEFAULT_LIVENESS_ENDPOINT
    monkeypatch.setenv("GPUADVISOR_LIVENESS_ENDPOINT", "")
    assert ProfilerSettings().liveness_endpoint == ""
    monkeypatch.setenv("GPUADVISOR_LIVENESS_ENDPOINT", "http://127.0.0.1:9090/live")
    assert ProfilerSettings().liveness_endpoint == "http://127.0.0.1:9090/live"


@pytest.mark.parametrize(
    "endpoint", ["https://0.0.0.0:8080/healthz", "http://0.0.0.0/healthz", "http://0.0.0.0:8080", "0.0.0.0:8080"]
)
def test_liveness_endpoint_kopf_cannot_serve_is_refused(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> None:
    monkeypatch.setenv("GPUADVISOR_LIVENESS_ENDPOINT", endpoint)
    with pytest.raises(ValidationError, match=r"liveness_endpoint[\s\S]*expected http://HOST:PORT/PATH"):
        ProfilerSettings()
