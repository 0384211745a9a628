"""Write routes check the token before they read the body (issue 40): without it, a malformed or huge body is a 401,
never a 422 that would tell the caller what the route expects (or cost a parse)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from advisor.api import create_app
from advisor.settings import AdvisorSettings

TOKEN = "s3cret"


@pytest.mark.parametrize("path", ["/v1/models/train", "/v1/trialruns"])
def test_a_write_without_the_token_is_a_401_whatever_its_body(tmp_path: Path, path: str) -> None:
    settings = AdvisorSettings(db_url=f"sqlite:///{tmp_path}/w.db", no_kube=True, api_token=TOKEN)
    with TestClient(create_app(settings)) as client:
        for body in (b"{not json", b'{"a":' * 2000 + b"1" + b"}" * 2000, b"[]"):
            response = client.post(path, content=body, headers={"Content-Type": "application/json"})
            assert response.status_code == 401, (path, response.text[:200])
            assert response.headers["www-authenticate"] == "Bearer"
        wrong = client.post(path, content=b"{not json", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        # with the token the body is judged as before
        bad = client.post(path, content=b"{not json", headers={"Authorization": f"Bearer {TOKEN}"})
        assert bad.status_code == 422
