"""bench/plugin_call_http.py's `--client go`: the request bytes it writes are those gpuadvisor-scheduler's net/http
writes (k8s/plugin/gpuadvisor/client.go `appendRequest`, then net/http's head). The bench itself serves an advisor for
minutes; this part is a plain function."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    sys.path.insert(0, str(BENCH))  # the bench imports its sibling modules
    try:
        spec = importlib.util.spec_from_file_location("plugin_call_http", BENCH / "plugin_call_http.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


def test_a_request_is_written_as_net_http_writes_the_plugins_call(bench: ModuleType) -> None:
    body = {"detail": "brief", "assumed": [], "pod": {"metadata": {"name": "p"}}, "nodes": ["a", "b"]}
    body |= {"unknown_nodes": "neutral", "since": "t1"}
    raw = bench.go_request(8080, body)
    head, sent = raw.split(b"\r\n\r\n", 1)
    assert head.split(b"\r\n") == [
        b"POST /v1/score HTTP/1.1",
        b"Host: 127.0.0.1:8080",
        b"User-Agent: Go-http-client/1.1",
        b"Content-Length: %d" % len(sent),
        b"Content-Type: application/json",
        b"Accept-Encoding: gzip",
    ]
    # appendRequest's key order, compact, an empty `assumed` left out (omitempty)
    expected = b'{"pod":{"metadata":{"name":"p"}},"nodes":["a","b"],"unknown_nodes":"neutral","detail":"brief",'
    assert sent == expected + b'"since":"t1"}'
    assumed = [{"node": "a", "pod": {"metadata": {"name": "q"}}}]
    with_assumed = bench.go_request(8080, {**body, "assumed": assumed}).split(b"\r\n\r\n", 1)[1]
    assert list(json.loads(with_assumed)) == ["pod", "nodes", "unknown_nodes", "assumed", "detail", "since"]
