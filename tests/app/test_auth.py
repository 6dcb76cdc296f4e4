"""API keys: 401/403 matrix, both headers, revocation, hashing, the initial key."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from app.main import create_app
from app.security import hash_token, role_allows, token_matches
from app.settings import Settings
from tests.app.conftest import OPERATOR_TOKEN, TestClient, auth

# (method, path, body, role needed); ids need not exist: auth is checked before lookup.
ENDPOINTS = [
    ("GET", "/v1/plans", None, "planner"),
    ("GET", "/v1/plans/nope", None, "planner"),
    ("POST", "/v1/plans", {}, "planner"),
    ("POST", "/v1/accounting/epsilon", {}, "planner"),
    ("POST", "/v1/accounting/noise-multiplier", {}, "planner"),
    ("POST", "/v1/accounting/sampling-rate", {}, "planner"),
    ("POST", "/v1/plans/nope/replan", {}, "operator"),
    ("POST", "/v1/plans/nope/rounds", {"round_index": 0}, "operator"),
    ("GET", "/v1/plans/nope/ledger", None, "planner"),
    ("GET", "/v1/populations", None, "planner"),
    ("POST", "/v1/populations", {}, "operator"),
    ("GET", "/v1/populations/nope", None, "planner"),
    ("PATCH", "/v1/populations/nope/groups/g", {"epsilon": 1}, "operator"),
    ("POST", "/v1/populations/nope/groups", {}, "operator"),
    ("GET", "/v1/populations/nope/changes", None, "planner"),
    ("GET", "/v1/console/populations/nope", None, "planner"),
    ("POST", "/v1/console/populations/nope/comparison", None, "planner"),
    ("GET", "/v1/keys/me", None, "planner"),
    ("POST", "/v1/populations/nope/plans", None, "operator"),
    ("GET", "/v1/keys", None, "operator"),
    ("POST", "/v1/keys", {"name": "x"}, "operator"),
    ("DELETE", "/v1/keys/x", None, "operator"),
]


def _call(client: TestClient, method: str, path: str, body: object, headers: dict[str, str]) -> int:
    return client.request(method, path, json=body, headers=headers).status_code


@pytest.mark.parametrize(("method", "path", "body", "role"), ENDPOINTS)
def test_auth_matrix(client: TestClient, planner_token: str, method: str, path: str, body: object,
                     role: str) -> None:
    anonymous = {"Authorization": ""}
    assert _call(client, method, path, body, anonymous) == 401
    assert _call(client, method, path, body, auth("gdpfed_wrong")) == 401
    planner_status = _call(client, method, path, body, auth(planner_token))
    if role == "operator":
        assert planner_status == 403
    else:
        assert planner_status not in (401, 403)
    assert _call(client, method, path, body, auth(OPERATOR_TOKEN)) not in (401, 403)


def test_error_bodies_and_headers(client: TestClient, planner_token: str) -> None:
    missing = client.get("/v1/plans", headers={"Authorization": ""})
    assert missing.json()["code"] == "unauthorized"
    assert missing.headers["www-authenticate"] == "Bearer"
    forbidden = client.post("/v1/populations/x/plans", headers=auth(planner_token))
    assert forbidden.json()["code"] == "forbidden"
    assert "operator" in forbidden.json()["message"]


def test_x_api_key_header_is_accepted(client: TestClient, planner_token: str) -> None:
    response = client.get("/v1/plans", headers={"Authorization": "", "X-API-Key": planner_token})
    assert response.status_code == 200


def test_open_endpoints_need_no_key(client: TestClient) -> None:
    for path in ("/healthz", "/docs", "/openapi.json", "/metrics"):
        assert client.get(path, headers={"Authorization": ""}).status_code == 200, path


def test_metrics_can_require_a_key(db_url: str) -> None:
    settings = Settings(database_url=db_url, initial_api_key=OPERATOR_TOKEN, metrics_require_key=True)
    with TestClient(create_app(settings, announce_key=False)) as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers=auth(OPERATOR_TOKEN)).status_code == 200


def test_revoked_key_is_refused(client: TestClient, planner_token: str) -> None:
    assert client.get("/v1/plans", headers=auth(planner_token)).status_code == 200
    assert client.delete("/v1/keys/planner-1").json()["revoked_at"] is not None
    assert client.get("/v1/plans", headers=auth(planner_token)).status_code == 401


def test_keys_listed_without_tokens_and_names_unique(client: TestClient, planner_token: str) -> None:
    listed = client.get("/v1/keys").json()
    assert [k["name"] for k in listed] == ["initial-operator", "planner-1"]
    assert all("token" not in k and "token_sha256" not in k for k in listed)
    again = client.post("/v1/keys", json={"name": "planner-1", "role": "planner"})
    assert again.status_code == 409 and again.json()["code"] == "conflict"
    bad = client.post("/v1/keys", json={"name": "has space", "role": "admin"})
    assert bad.status_code == 422 and bad.json()["field"] in ("name", "role")


def test_tokens_are_stored_hashed(client: TestClient, planner_token: str, tmp_path: Path) -> None:
    client.get("/v1/plans", headers=auth(planner_token))
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("gdpfed.db"))
    for token in (planner_token, OPERATOR_TOKEN):
        assert token.encode() not in raw
        assert hash_token(token).encode() in raw


def test_initial_key_created_once_and_printed_once(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    settings = Settings(database_url=db_url)
    app = create_app(settings)
    printed = capsys.readouterr().err
    token = next(line.strip() for line in printed.splitlines() if line.strip().startswith("gdpfed_"))
    with TestClient(app) as client:
        assert client.get("/v1/populations", headers=auth(token)).status_code == 200
    create_app(settings)  # a restart on the same database: no new key, nothing printed
    assert "gdpfed_" not in capsys.readouterr().err
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        assert conn.execute("SELECT count(*) FROM api_keys").fetchone() == (1,)


def test_initial_key_none_creates_nothing(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    create_app(Settings(database_url=db_url, initial_key="none"))
    assert "gdpfed_" not in capsys.readouterr().err
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        assert conn.execute("SELECT count(*) FROM api_keys").fetchone() == (0,)


def test_short_initial_api_key_rejected() -> None:
    with pytest.raises(ValueError, match="32 characters"):
        Settings(initial_api_key="short")


def test_create_key_cli(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from app.cli import run

    assert run(["serve", "--database-url", db_url, "--create-key", "ci", "--role", "operator", "--json"]) == 0
    import json

    created = json.loads(capsys.readouterr().out)
    assert created["role"] == "operator" and created["token"].startswith("gdpfed_")
    assert run(["serve", "--database-url", db_url, "--create-key", "ci"]) == 2
    assert "already exists" in capsys.readouterr().err
    with TestClient(create_app(Settings(database_url=db_url), announce_key=False)) as client:
        assert client.get("/v1/keys", headers=auth(created["token"])).status_code == 200


@pytest.mark.parametrize(("name", "problem"), [
    ("", "at least 1 character"), ("x" * 65, "at most 64 characters"), ("a b", "should match pattern"),
])
def test_create_key_cli_names_the_option_of_a_bad_name(db_url: str, name: str, problem: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """``gdpfed serve --create-key NAME`` (docs/service.md §Running): a name ``POST /v1/keys`` would
    refuse, or one already taken, is one line naming the option the user typed, ``create-key``,
    exit 2. Before, the line named KeyCreate's field (``name: String should ...``), an option
    ``gdpfed serve`` does not have."""
    from app.cli import run

    assert run(["serve", "--database-url", db_url, "--create-key", name, "--role", "operator"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("gdpfed serve: error: create-key: ") and problem in err, err
    assert run(["serve", "--database-url", db_url, "--create-key", "ci"]) == 0
    capsys.readouterr()
    assert run(["serve", "--database-url", db_url, "--create-key", "ci"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gdpfed serve: error: create-key: an API key named 'ci' already exists"), err


def test_token_helpers() -> None:
    assert token_matches("abc", hash_token("abc")) and not token_matches("abd", hash_token("abc"))
    assert role_allows("operator", "planner") and not role_allows("planner", "operator")
    assert not role_allows("unknown", "planner")


def test_last_operator_key_cannot_revoke_itself_and_names_can_be_reused(client: TestClient,
                                                                        planner_token: str) -> None:
    """Issue 9 §5: no lock-out; rotation by reusing a revoked key's name."""
    locked_out = client.delete("/v1/keys/initial-operator")
    assert locked_out.status_code == 409 and "last active operator key" in locked_out.json()["message"]
    assert client.get("/v1/keys").status_code == 200  # still works
    second = client.post("/v1/keys", json={"name": "ops-2", "role": "operator"}).json()["token"]
    assert client.delete("/v1/keys/initial-operator").status_code == 200
    assert client.get("/v1/keys").status_code == 401  # the revoked key no longer works
    assert client.delete("/v1/keys/ops-2", headers=auth(second)).status_code == 409
    # rotate planner-1: revoke it, then create a key with the same name
    assert client.delete("/v1/keys/planner-1", headers=auth(second)).status_code == 200
    rotated = client.post("/v1/keys", json={"name": "planner-1", "role": "planner"}, headers=auth(second))
    assert rotated.status_code == 201, rotated.text
    assert client.get("/v1/plans", headers=auth(rotated.json()["token"])).status_code == 200
    assert client.get("/v1/plans", headers=auth(planner_token)).status_code == 401
    names = [k["name"] for k in client.get("/v1/keys", headers=auth(second)).json()]
    assert "planner-1" in names and any(n.startswith("planner-1~revoked-") for n in names)


def test_injected_initial_key_is_never_echoed(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    create_app(Settings(database_url=db_url, initial_api_key=OPERATOR_TOKEN))
    printed = capsys.readouterr().err
    assert OPERATOR_TOKEN not in printed and "not shown" in printed


def test_create_key_cli_against_a_database_it_cannot_open_is_one_line(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """``gdpfed serve --create-key`` (the way back in after losing the operator key, docs/service.md
    §Running) checks the database as ``gdpfed serve`` does: one line naming database-url, exit 2.
    Before, an unreachable database was SQLAlchemy's OperationalError traceback, exit 1."""
    from app.cli import run

    url = f"sqlite:///{tmp_path / 'no-such-directory' / 'gdpfed.db'}"
    assert run(["serve", "--database-url", url, "--create-key", "ci", "--role", "operator"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("gdpfed serve: error: database-url: cannot connect to "), err
