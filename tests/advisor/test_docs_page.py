"""`/docs` works without internet access: the Swagger UI page references only assets the advisor serves itself."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from advisor.api import create_app
from advisor.settings import AdvisorSettings


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = AdvisorSettings(db_url=f"sqlite:///{tmp_path}/a.db", no_kube=True)
    with TestClient(create_app(settings)) as c:
        yield c


def test_docs_page_and_every_asset_it_references_are_served_locally(client: TestClient) -> None:
    page = client.get("/docs")
    assert page.status_code == 200
    html = page.text
    assert "SwaggerUIBundle" in html
    assert not re.search(r"(src|href)=['\"](https?:)?//", html), "an asset from another host: blank offline"
    references = re.findall(r"(?:src|href)=['\"]([^'\"]+)['\"]", html)
    assert {"js", "css", "png"} <= {ref.rsplit(".", 1)[-1] for ref in references}
    expected_type = {"js": "javascript", "css": "text/css", "png": "image/png"}
    for ref in references:
        asset = client.get(ref)
        assert asset.status_code == 200, ref
        assert expected_type[ref.rsplit(".", 1)[-1]] in asset.headers["content-type"]
        assert len(asset.content) > 500
    spec_url = re.search(r"url: ['\"]([^'\"]+)['\"]", html)
    assert spec_url is not None
    assert client.get(spec_url.group(1)).json()["info"]["title"] == "gpuadvisor"
    assert client.get("/docs/oauth2-redirect").status_code == 200
