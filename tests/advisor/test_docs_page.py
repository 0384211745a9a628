"""`/docs` and `/redoc` work without internet access: their pages reference only assets the advisor serves itself."""

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


@pytest.mark.parametrize(("page_path", "marker"), [("/docs", "SwaggerUIBundle"), ("/redoc", "<redoc")])
def test_docs_page_and_every_asset_it_references_are_served_locally(
    client: TestClient, page_path: str, marker: str
) -> None:
    page = client.get(page_path)
    assert page.status_code == 200
    html = page.text
    assert marker in html
    assert not re.search(r"(src|href)=['\"](https?:)?//", html), "an asset from another host: blank offline"
    references = re.findall(r"(?:src|href)=['\"]([^'\"]+)['\"]", html)
    assert {"js", "png"} <= {ref.rsplit(".", 1)[-1] for ref in references}
    expected_type = {"js": "javascript", "css": "text/css", "png": "image/png"}
    for ref in references:
        asset = client.get(ref)
        assert asset.status_code == 200, ref
        assert expected_type[ref.rsplit(".", 1)[-1]] in asset.headers["content-type"]
        assert len(asset.content) > 500
    spec_url = re.search(r"(?:url: |spec-url=)['\"]([^'\"]+)['\"]", html)
    assert spec_url is not None
    assert client.get(spec_url.group(1)).json()["info"]["title"] == "gpuadvisor"


def test_swagger_ui_is_a_version_that_renders_openapi_3_1(client: TestClient) -> None:
    """Swagger UI 4 answers "Unable to render this definition" for FastAPI's OpenAPI 3.1 document."""
    assert client.get("/openapi.json").json()["openapi"].startswith("3.1")
    bundle = client.get("/docs/assets/swagger-ui-bundle.js").text
    assert "isOAS31" in bundle  # Swagger UI 5's OpenAPI 3.1 support (absent from 4.x)
    assert client.get("/docs/oauth2-redirect").status_code == 200


def _refs(node: object, where: str = "#") -> Iterator[tuple[str, str]]:
    """(JSON pointer of the object holding it, target) of every `$ref` in a JSON document."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield where, value
            else:
                yield from _refs(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _refs(value, f"{where}/{i}")


def _resolve(document: dict[str, object], ref: str) -> object:
    """The target of a local `$ref` (RFC 6901 pointer), or KeyError naming the step that does not exist."""
    assert ref.startswith("#/"), f"not a local reference: {ref}"
    node: object = document
    for token in ref[2:].split("/"):
        step = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and step in node:
            node = node[step]
        elif isinstance(node, list) and step.isdigit() and int(step) < len(node):
            node = node[int(step)]
        else:
            raise KeyError(f"{ref}: no {step!r}")
    return node


def test_every_reference_of_the_openapi_document_resolves(client: TestClient) -> None:
    """Swagger UI ("Resolver error") and ReDoc ("Invalid reference token") fail on a `$ref` that points at nothing,
    as the Volcano request bodies' `#/$defs/...` did."""
    document = client.get("/openapi.json").json()
    refs = list(_refs(document))
    assert len(refs) > 50
    dangling = []
    for where, ref in refs:
        try:
            target = _resolve(document, ref)
        except KeyError as e:
            dangling.append(f"{where}: {e}")
            continue
        assert isinstance(target, dict), f"{where}: {ref} is not a schema"
    assert dangling == []
    for path in ("/volcano/prioritize", "/volcano/predicate", "/v1/telemetry"):
        body = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert "properties" in _resolve(document, body["$ref"])
