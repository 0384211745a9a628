"""/docs (Swagger UI) and /redoc render the advisor's OpenAPI document in a real browser (headless Chromium) without
an error: ReDoc said "Something went wrong… Invalid reference token: $defs" and Swagger UI "Resolver error" for the
Volcano bodies' dangling `$ref`s, which only a renderer that resolves them shows."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from advisor.api import create_app
from advisor.settings import AdvisorSettings
from tests.support.binaries import require_binary
from tests.support.net import free_port, wait_until

ERROR_TEXTS = ("Resolver error", "Something went wrong", "Invalid reference token", "Unable to render", "Errors")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--virtual-time-budget=15000",
]


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    db = tmp_path_factory.mktemp("docs") / "d.db"
    app = create_app(AdvisorSettings(db_url=f"sqlite:///{db}", no_kube=True))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", log_config=None))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    assert wait_until(lambda: server.started, 60)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(15)


def _rendered(chromium: str, url: str, tmp_path: Path) -> str:
    result = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.mark.parametrize(
    ("page", "rendered_marker"),
    [
        ("/redoc", "/volcano/prioritize"),  # ReDoc lists every operation once the document is resolved
        ("/docs#/volcano/prioritize_volcano_prioritize_post", "opblock-body"),  # that operation open, its body shown
        ("/docs#/volcano/predicate_volcano_predicate_post", "opblock-body"),
    ],
)
def test_the_docs_pages_render_every_operation_without_an_error(
    base_url: str, page: str, rendered_marker: str, tmp_path: Path
) -> None:
    chromium = require_binary("chromium", "headless Chromium renders /docs and /redoc")
    dom = _rendered(chromium, base_url + page, tmp_path)
    assert rendered_marker in dom, dom[-2000:]
    assert [text for text in ERROR_TEXTS if text in dom] == []
