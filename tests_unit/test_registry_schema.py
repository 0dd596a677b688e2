"""Property-based run of schemathesis against the served OpenAPI schema: whatever it generates
(valid and invalid requests), the API answers no 5xx and only what its schema documents."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from server.main import create_app
from server.registry.config import RateLimit, RegistryConfig
from server.settings import Paths

GENEROUS = {
    kind: RateLimit(burst=10_000, per_minute=10_000) for kind in ("upload", "delete", "permit")
}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_api_matches_its_schema(
    registry_config: RegistryConfig, tmp_path: Path, mode: GenerationMode
) -> None:
    app = create_app(
        Paths(cache=tmp_path / "cache"), dataclasses.replace(registry_config, rate_limits=GENEROUS)
    )
    schema = schemathesis.openapi.from_asgi("/openapi.json", app).include(
        path_regex="^/api/(models|training)"
    )
    statuses: Counter[str] = Counter()

    @given(case=schema.as_strategy(mode))
    @settings(
        max_examples=80, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    def requests_conform(case: Case) -> None:
        response = case.call_and_validate(checks=CHECKS)
        statuses[f"{case.method} {case.path} {response.status_code}"] += 1

    requests_conform()
    print(
        f"schemathesis {mode}: {sum(statuses.values())} requests:", dict(sorted(statuses.items()))
    )
    if mode == GenerationMode.POSITIVE:
        # Valid requests reached the registry's success paths, not only its error answers.
        assert any(key.endswith((" 200", " 201")) for key in statuses)
