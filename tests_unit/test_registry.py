"""The model registry and training permits over HTTP (TestClient), on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import io
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import py_in_browser as pib
from py_in_browser import layers, permits
from py_in_browser.limits import DEFAULT_LIMITS, Limits
from server.main import create_app
from server.registry.config import Budgets, RateLimit, RegistryConfig
from server.registry.database import SCHEMA_VERSION, Database
from server.settings import Paths

GENEROUS = {kind: RateLimit(burst=1000, per_minute=1000) for kind in ("upload", "delete", "permit")}


def model_bytes(units: int = 2, labels: list[str] | None = None, name: str = "mlp") -> bytes:
    model = pib.Sequential(
        [layers.Dense(4, activation="relu", input_shape=(3,)), layers.Dense(units)], name=name
    )
    return asyncio.run(model.save(labels=labels, description="from the file"))


@pytest.fixture(scope="module")
def file_bytes() -> bytes:
    return model_bytes(labels=["left", "right"])


def make_client(config: RegistryConfig, tmp_path: Path) -> TestClient:
    return TestClient(create_app(Paths(cache=tmp_path / "cache"), config))


@pytest.fixture
def client(registry_config: RegistryConfig, tmp_path: Path) -> Iterator[TestClient]:
    config = dataclasses.replace(registry_config, rate_limits=GENEROUS)
    with make_client(config, tmp_path) as test_client:
        yield test_client


def publish(client: TestClient, data: bytes, name: str = "gestures", **fields: str):
    return client.post(
        "/api/models",
        files={"file": ("model.pibmodel", data, "application/zip")},
        data={"name": name, **fields},
    )


# ---- the happy path ----


def test_publish_then_read_metadata_and_file(client: TestClient, file_bytes: bytes) -> None:
    response = publish(client, file_bytes, description="waves and fists")
    assert response.status_code == 201, response.text
    created = response.json()
    assert response.headers["location"] == f"/api/models/{created['id']}"
    assert len(created["owner_token"]) >= 40
    assert created["sha256"] == hashlib.sha256(file_bytes).hexdigest()
    assert (created["name"], created["description"]) == ("gestures", "waves and fists")
    assert created["labels"] == ["left", "right"]
    assert (created["input_shape"], created["output_shape"]) == ([3], [2])
    assert created["param_count"] == 3 * 4 + 4 + 4 * 2 + 2
    assert created["size"] == len(file_bytes)

    info = client.get(f"/api/models/{created['id']}")
    assert info.status_code == 200
    assert info.json() == {k: v for k, v in created.items() if k != "owner_token"}

    fetched = client.get(created["file_url"])
    assert fetched.status_code == 200
    assert fetched.content == file_bytes
    assert fetched.headers["content-type"] == "application/zip"
    assert fetched.headers["etag"] == f'"{created["sha256"]}"'
    # The stored file loads back into a model: what the gallery will do.
    restored = asyncio.run(pib.load_model(fetched.content))
    assert restored.count_params() == created["param_count"]


def test_a_head_on_a_backbone_is_published_naming_it(client: TestClient) -> None:
    from py_in_browser.interop.backbones import HAND_LANDMARK_LITE

    head = pib.Sequential([layers.Dense(3, activation="softmax", input_shape=(672,))])
    head.build()
    data = asyncio.run(head.save(backbone=HAND_LANDMARK_LITE.reference()))
    created = publish(client, data).json()
    assert created["backbone"] == HAND_LANDMARK_LITE.reference()
    assert client.get(f"/api/models/{created['id']}").json()["backbone"] == created["backbone"]


def test_conditional_get_answers_304(client: TestClient, file_bytes: bytes) -> None:
    url = publish(client, file_bytes).json()["file_url"]
    etag = client.get(url).headers["etag"]
    unchanged = client.get(url, headers={"If-None-Match": f'"other", {etag}'})
    assert unchanged.status_code == 304
    assert unchanged.content == b""
    assert unchanged.headers["etag"] == etag
    assert client.get(url, headers={"If-None-Match": '"other"'}).status_code == 200


def test_list_is_newest_first_paginated_and_filtered(client: TestClient) -> None:
    names = ["Alpha", "beta", "ALPHABET", "gamma_1", "gamma%2"]
    ids = [publish(client, model_bytes(), name=name).json()["id"] for name in names]
    page = client.get("/api/models", params={"limit": 2}).json()
    assert page["total"] == 5 and page["limit"] == 2 and page["offset"] == 0
    assert [item["id"] for item in page["items"]] == ids[::-1][:2]
    rest = client.get("/api/models", params={"limit": 10, "offset": 2}).json()
    assert [item["id"] for item in rest["items"]] == ids[::-1][2:]
    alpha = client.get("/api/models", params={"name": "alpha"}).json()
    assert [item["name"] for item in alpha["items"]] == ["ALPHABET", "Alpha"]
    # LIKE's wildcards in the filter are plain characters.
    assert [i["name"] for i in client.get("/api/models", params={"name": "_"}).json()["items"]] == [
        "gamma_1"
    ]
    assert client.get("/api/models", params={"name": "%"}).json()["total"] == 1


def test_labels_can_be_given_for_a_file_without_them(client: TestClient) -> None:
    response = publish(client, model_bytes(units=3), labels='["a", "b", "c"]', input_shape="[3]")
    assert response.status_code == 201, response.text
    assert response.json()["labels"] == ["a", "b", "c"]
    assert response.json()["description"] == "from the file"


def test_delete_needs_the_owner_token(client: TestClient, file_bytes: bytes) -> None:
    created = publish(client, file_bytes).json()
    url = f"/api/models/{created['id']}"
    assert client.delete(url).status_code == 401
    assert client.delete(url, headers={"Authorization": "Bearer wrong"}).status_code == 403
    other = publish(client, file_bytes).json()
    stolen = {"Authorization": f"Bearer {other['owner_token']}"}
    assert client.delete(url, headers=stolen).status_code == 403
    owner = {"Authorization": f"Bearer {created['owner_token']}"}
    assert client.delete(url, headers=owner).status_code == 204
    assert client.get(url).status_code == 404
    assert client.get(url + "/file").status_code == 404
    assert client.delete(url, headers=owner).status_code == 404
    assert [m["id"] for m in client.get("/api/models").json()["items"]] == [other["id"]]


def test_unknown_model_is_404(client: TestClient) -> None:
    for path in ("/api/models/nope", "/api/models/nope/file"):
        response = client.get(path)
        assert response.status_code == 404
        assert "no model nope" in response.json()["detail"]


def test_nul_characters_are_refused_not_a_server_error(
    client: TestClient, file_bytes: bytes
) -> None:
    """PostgreSQL refuses NUL in text: every text a client sends is checked before it gets there
    (schemathesis' negative run found these as 500s)."""
    assert publish(client, file_bytes, name="a\x00b").status_code == 422
    assert publish(client, file_bytes, description="a\x00b").status_code == 422
    assert client.get("/api/models", params={"name": "a\x00"}).status_code == 422
    for path in ("/api/models/a%00b", "/api/models/a%00b/file"):
        assert client.get(path).status_code == 404
    gone = client.delete("/api/models/a%00b", headers={"Authorization": "Bearer x"})
    assert gone.status_code == 404
    source = zipfile.ZipFile(io.BytesIO(file_bytes))
    header = json.loads(source.read("model.json"))
    header["description"] = "NUL \x00 inside"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("model.json", json.dumps(header))
        archive.writestr("weights.bin", source.read("weights.bin"))
    response = publish(client, buffer.getvalue())
    assert response.status_code == 422
    assert "description must not contain NUL characters" in response.json()["detail"]
    assert client.get("/api/models").json()["total"] == 0


# ---- validation of uploads ----


def damaged(data: bytes) -> bytes:
    return data[: len(data) // 2]


def nan_weights(data: bytes) -> bytes:
    source = zipfile.ZipFile(io.BytesIO(data))
    size = len(source.read("weights.bin"))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("model.json", source.read("model.json"))
        archive.writestr("weights.bin", b"\x00\x00\xc0\x7f" * (size // 4))
    return buffer.getvalue()


def huge_shape(data: bytes) -> bytes:
    source = zipfile.ZipFile(io.BytesIO(data))
    header = json.loads(source.read("model.json"))
    header["architecture"]["config"]["layers"][0]["config"]["units"] = 2**40
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("model.json", json.dumps(header))
        archive.writestr("weights.bin", source.read("weights.bin"))
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("mutate", "fields", "message"),
    [
        (damaged, {}, "damaged or truncated"),
        (lambda d: b"\x89PNG" + d[4:], {}, "does not start with a zip header"),
        (nan_weights, {}, "NaN or Inf"),
        (huge_shape, {}, "max_params"),
        (lambda d: d, {"labels": '["a"]'}, "1 labels for an output of 2 classes"),
        (lambda d: d, {"labels": '["x", "y"]'}, "do not match the file's"),
        (lambda d: d, {"labels": "not json"}, "labels must be a JSON array"),
        (lambda d: d, {"input_shape": "[4]"}, "does not match the file's [3]"),
    ],
)
def test_bad_uploads_are_422_naming_the_problem(
    client: TestClient, file_bytes: bytes, mutate, fields: dict[str, str], message: str
) -> None:
    response = publish(client, mutate(file_bytes), **fields)
    assert response.status_code == 422, response.text
    assert message in response.json()["detail"]
    assert client.get("/api/models").json()["total"] == 0


def test_missing_fields_are_422(client: TestClient, file_bytes: bytes) -> None:
    assert client.post("/api/models", data={"name": "x"}).status_code == 422
    no_name = client.post("/api/models", files={"file": ("m", file_bytes)})
    assert no_name.status_code == 422
    assert publish(client, file_bytes, name="").status_code == 422


def test_a_body_over_the_cap_is_413_before_it_is_read(
    registry_config: RegistryConfig, tmp_path: Path, file_bytes: bytes
) -> None:
    config = dataclasses.replace(
        registry_config,
        limits=Limits(max_model_file_bytes=4096),
        form_overhead_bytes=1024,
        rate_limits=GENEROUS,
    )
    with make_client(config, tmp_path) as small:
        assert publish(small, file_bytes).status_code == 201  # under the cap
        declared = publish(small, file_bytes + bytes(8000))
        assert declared.status_code == 413
        assert "over 5,120 bytes" in declared.json()["detail"]
        # No Content-Length (chunked): cut off while streaming.
        body = publish_body(file_bytes + bytes(8000))
        streamed = small.post(
            "/api/models",
            content=iter([body[i : i + 1000] for i in range(0, len(body), 1000)]),
            headers={"content-type": "multipart/form-data; boundary=BOUNDARY"},
        )
        assert streamed.status_code == 413
        assert small.get("/api/models").json()["total"] == 1
        big_json = small.post("/api/training/permits", content=b"{" + b" " * 20000 + b"}")
        assert big_json.status_code == 413


def publish_body(data: bytes) -> bytes:
    return (
        b"--BOUNDARY\r\n"
        b'Content-Disposition: form-data; name="name"\r\n\r\nbig\r\n'
        b"--BOUNDARY\r\n"
        b'Content-Disposition: form-data; name="file"; filename="m"\r\n'
        b"Content-Type: application/zip\r\n\r\n" + data + b"\r\n--BOUNDARY--\r\n"
    )


# ---- rate limits ----


def test_writes_are_rate_limited_per_client_with_retry_after(
    registry_config: RegistryConfig, tmp_path: Path, file_bytes: bytes
) -> None:
    limits = {kind: RateLimit(burst=2, per_minute=1) for kind in ("upload", "delete", "permit")}
    config = dataclasses.replace(registry_config, rate_limits=limits)
    with make_client(config, tmp_path) as limited:
        assert [publish(limited, file_bytes).status_code for _ in range(3)] == [201, 201, 429]
        refused = publish(limited, file_bytes)
        assert refused.status_code == 429
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        assert "too many upload requests" in refused.json()["detail"]
        # Reads are never limited; other kinds of write have their own buckets.
        assert limited.get("/api/models").json()["total"] == 2
        url = limited.get("/api/models").json()["items"][0]["file_url"].removesuffix("/file")
        codes = [
            limited.delete(url, headers={"Authorization": "Bearer x"}).status_code for _ in range(3)
        ]
        assert codes == [403, 403, 429]


def test_rate_limits_hold_across_server_processes(
    registry_config: RegistryConfig, tmp_path: Path, file_bytes: bytes
) -> None:
    """Two apps on one database (two processes behind a load balancer) share the buckets."""
    limits = {kind: RateLimit(burst=3, per_minute=1) for kind in ("upload", "delete", "permit")}
    config = dataclasses.replace(registry_config, rate_limits=limits)
    with (
        make_client(config, tmp_path / "a") as first,
        make_client(config, tmp_path / "b") as second,
    ):
        codes = [publish(c, file_bytes).status_code for c in (first, second, first, second)]
        assert codes == [201, 201, 201, 429]
        assert first.get("/api/models").json()["total"] == 3


# ---- training permits ----

REQUEST = {
    "model": {"input_shape": [64, 64, 3], "param_count": 50_000, "layer_count": 6},
    "samples": 400,
    "epochs": 20,
    "batch_size": 32,
}


def test_a_permit_is_signed_and_bounds_the_training(client: TestClient) -> None:
    response = client.post("/api/training/permits", json=REQUEST)
    assert response.status_code == 201, response.text
    body = response.json()
    registry = client.app.state.registry.get()  # type: ignore[attr-defined]
    permit = permits.verify(body["permit"], registry.permits.key)
    assert (permit.max_epochs, permit.max_samples, permit.max_batch_size) == (20, 400, 32)
    assert permit.input_shape == (64, 64, 3) and permit.param_count == 50_000
    assert body["expires_at"] == permit.expires_at
    with pytest.raises(permits.PermitError, match="not issued by this server"):
        permits.verify(body["permit"], b"another server's key")


LOWERED = Limits(max_epochs=10, max_batch_size=16, max_params=1000, max_input_side=32)


@pytest.mark.parametrize(
    ("change", "cap"),
    [
        ({"epochs": 11}, "max_epochs"),
        ({"batch_size": 17}, "max_batch_size"),
        (
            {"model": {"input_shape": [8, 8, 3], "param_count": 1001, "layer_count": 3}},
            "max_params",
        ),
        (
            {"model": {"input_shape": [33, 8, 3], "param_count": 500, "layer_count": 3}},
            "max_input_side",
        ),
    ],
)
def test_a_config_over_a_servers_cap_is_422_naming_it(
    registry_config: RegistryConfig, tmp_path: Path, change, cap: str
) -> None:
    model = {"input_shape": [8, 8, 3], "param_count": 500, "layer_count": 3}
    config = dataclasses.replace(registry_config, limits=LOWERED, rate_limits=GENEROUS)
    with make_client(config, tmp_path) as client:
        body = {**REQUEST, "epochs": 5, "batch_size": 8, "model": model}
        assert client.post("/api/training/permits", json=body).status_code == 201
        response = client.post("/api/training/permits", json={**body, **change})
        assert response.status_code == 422
        assert cap in response.json()["detail"]


def test_the_schema_states_the_default_caps(client: TestClient) -> None:
    """Past the default caps a request does not even match the schema: 422 naming the field."""
    cap = DEFAULT_LIMITS.max_epochs
    response = client.post("/api/training/permits", json={**REQUEST, "epochs": cap + 1})
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "epochs"] and str(cap) in error["msg"]


def test_malformed_permit_requests_are_422(client: TestClient) -> None:
    for body in ({}, {**REQUEST, "epochs": 0}, {**REQUEST, "epochs": "many"}, [1]):
        assert client.post("/api/training/permits", json=body).status_code == 422


def test_the_hourly_permit_budget_answers_429(
    registry_config: RegistryConfig, tmp_path: Path
) -> None:
    hourly = dataclasses.replace(
        registry_config, budgets=Budgets(permits_per_hour=2), rate_limits=GENEROUS
    )
    with make_client(hourly, tmp_path / "h") as client:
        codes = [client.post("/api/training/permits", json=REQUEST).status_code for _ in range(3)]
        assert codes == [201, 201, 429]
        refused = client.post("/api/training/permits", json=REQUEST)
        assert "2 permits in the last hour" in refused.json()["detail"]
        assert 3500 <= int(refused.headers["retry-after"]) <= 3600


def test_the_daily_work_budget_answers_429(registry_config: RegistryConfig, tmp_path: Path) -> None:
    daily = dataclasses.replace(
        registry_config, budgets=Budgets(work_per_day=20_000), rate_limits=GENEROUS
    )
    with make_client(daily, tmp_path / "d") as client:
        # 20 epochs x 400 samples = 8,000 work each: two fit, the third is over 20,000.
        codes = [client.post("/api/training/permits", json=REQUEST).status_code for _ in range(3)]
        assert codes == [201, 201, 429]
        too_big = client.post("/api/training/permits", json={**REQUEST, "samples": 2000})
        assert too_big.status_code == 422
        assert "work_per_day" in too_big.json()["detail"]


def test_policy_tells_the_page_the_caps(client: TestClient) -> None:
    policy = client.get("/api/training/policy").json()
    assert policy["permits_required"] is False
    assert policy["limits"] == Limits().as_dict()


def test_a_deployment_sets_permits_and_budgets_in_its_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PIB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIB_REQUIRE_PERMITS", "1")
    monkeypatch.setenv("PIB_PERMITS_PER_HOUR", "5")
    monkeypatch.setenv("PIB_WORK_PER_DAY", "1000")
    monkeypatch.setenv("PIB_PERMIT_LIFETIME_S", "90")
    config = RegistryConfig.from_env()
    assert config.budgets == Budgets(permits_per_hour=5, work_per_day=1000, permit_lifetime_s=90)
    with make_client(config, tmp_path) as client:
        policy = client.get("/api/training/policy").json()
        assert (policy["permits_required"], policy["permits_per_hour"]) == (True, 5)
        assert policy["work_per_day"] == 1000


# ---- headers, schema, storage ----


def test_api_responses_carry_the_security_headers(client: TestClient) -> None:
    response = client.get("/api/models")
    csp = response.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "'wasm-unsafe-eval'" in csp
    assert "unsafe-inline" not in csp and "'unsafe-eval'" not in csp
    assert response.headers["referrer-policy"] == "no-referrer"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["cross-origin-embedder-policy"] == "require-corp"
    assert client.get("/api/models/none").headers["referrer-policy"] == "no-referrer"
    # Only the benchmark pages, which run TensorFlow.js, may evaluate strings.
    bench_csp = client.get("/bench/index.html").headers["content-security-policy"]
    assert bench_csp == csp.replace("script-src 'self'", "script-src 'self' 'unsafe-eval'")


def test_openapi_is_served_and_lists_the_api(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    assert set(schema["paths"]) >= {
        "/api/models",
        "/api/models/{model_id}",
        "/api/models/{model_id}/file",
        "/api/training/permits",
        "/api/training/policy",
    }
    assert "429" in schema["paths"]["/api/models"]["post"]["responses"]
    assert not any(path.startswith(("/runtime", "/{relative")) for path in schema["paths"])


def test_schema_is_versioned_and_reopening_is_idempotent(
    registry_config: RegistryConfig, file_bytes: bytes, tmp_path: Path
) -> None:
    with make_client(dataclasses.replace(registry_config, rate_limits=GENEROUS), tmp_path) as c:
        publish(c, file_bytes)
    url = registry_config.database_url
    database = Database(url=url) if url else Database(sqlite_path=registry_config.sqlite_path)
    try:
        assert database.schema_version() == SCHEMA_VERSION
        with database.transaction() as tx:
            assert tx.execute("SELECT count(*) FROM models")[0][0] == 1
            tx.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    finally:
        database.close()
    with pytest.raises(RuntimeError, match="newer than this server's"):
        Database(url=url) if url else Database(sqlite_path=registry_config.sqlite_path)


def test_sqlite_uses_wal(tmp_path: Path) -> None:
    import sqlite3

    Database(sqlite_path=tmp_path / "r.sqlite3").close()
    connection = sqlite3.connect(tmp_path / "r.sqlite3")
    assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    connection.close()
