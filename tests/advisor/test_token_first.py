"""Write routes check the token before they read the body (issue 40): without it, a malformed or huge body is a 401,
never a 422 that would tell the caller what the route expects (or cost a parse)."""

from __future__ import annotations

from collections.abc import Iterator
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


TELEMETRY, TRAINING, TRIALRUNS = "telemetry-token", "training-token", "trialrun-token"


@pytest.fixture
def separate(tmp_path: Path) -> Iterator[TestClient]:
    settings = AdvisorSettings(
        db_url=f"sqlite:///{tmp_path}/w.db",
        no_kube=True,
        api_token=TELEMETRY,
        training_token=TRAINING,
        trialrun_token=TRIALRUNS,
    )
    with TestClient(create_app(settings)) as client:
        yield client


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def test_each_write_takes_only_its_own_token_when_separate_tokens_are_set(separate: TestClient) -> None:
    """The telemetry token every node holds neither trains nor submits trial runs, nor do the two others push
    telemetry; each route's own token gets past the check (a body that is then judged: 422 for `{not json`)."""
    routes = {
        "/v1/telemetry": (TELEMETRY, "GPUADVISOR_API_TOKEN"),
        "/v1/models/train": (TRAINING, "GPUADVISOR_TRAINING_TOKEN"),
        "/v1/trialruns": (TRIALRUNS, "GPUADVISOR_TRIALRUN_TOKEN"),
    }
    for path, (own, setting) in routes.items():
        for token in {TELEMETRY, TRAINING, TRIALRUNS} - {own}:
            refused = separate.post(path, content=b"{not json", headers=_bearer(token))
            assert refused.status_code == 401, (path, token, refused.text[:200])
        assert setting in refused.json()["detail"]
        taken = separate.post(path, content=b"{not json", headers=_bearer(own))
        assert taken.status_code == 422, (path, taken.text[:200])


def test_training_with_its_own_token_starts_a_job(separate: TestClient) -> None:
    response = separate.post("/v1/models/train", json={"kinds": ["jct"]}, headers=_bearer(TRAINING))
    assert response.status_code == 202, response.text[:300]


def test_without_separate_tokens_the_shared_token_serves_every_write(tmp_path: Path) -> None:
    settings = AdvisorSettings(db_url=f"sqlite:///{tmp_path}/w.db", no_kube=True, api_token=TOKEN)
    with TestClient(create_app(settings)) as client:
        for path in ("/v1/models/train", "/v1/trialruns", "/v1/telemetry"):
            assert client.post(path, content=b"{not json", headers=_bearer(TOKEN)).status_code == 422, path
