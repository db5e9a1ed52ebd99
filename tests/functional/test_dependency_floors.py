"""pyproject.toml's dependency floors: none admits a known vulnerability or a release that fails.

Each floor is written here with its reason; raising one is a decision made in this file too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11+")

ROOT = Path(__file__).resolve().parents[2]

#: What users install: the dependencies and the extras, floor by floor.
PUBLISHED_FLOORS = {
    "boto3": ("1.28", "botocore 1.31: ReturnValuesOnConditionCheckFailure, AWS_ENDPOINT_URL_*"),
    "jmespath": ("1.0", "boto3 accepts 0.7; no advisory; 1.0 is the first Python 3-only"),
    "pydantic": ("2.4", "CVE-2024-3772 (ReDoS in email validation) is fixed in 2.4.0"),
    "redis": ("5", "issue 20 item 10 decides this one (ssl_check_hostname)"),
    "valkey-glide-sync": ("2.1", "the first release; it ships glide_shared, whose errors we map"),
    "moto": ("5.0", "the testing extra (local_dynamodb); no advisory against 5.x"),
    "aws-durable-execution-sdk-python": ("3.0", "the durable extra: the SDK whose API we read"),
    "opentelemetry-api": ("1.20", "the otel extra; no advisory; the tracing tests pass on 1.20.0"),
}
#: Floors that the repository's own tool groups must respect where they name the package.
TOOL_FLOORS = {
    **PUBLISHED_FLOORS,
    "flask": ("2.3.2", "CVE-2023-30861"),
    "flask-cors": ("6.0", "CVE-2024-6221, CVE-2024-6844, CVE-2024-6866, CVE-2024-6839"),
    "valkey-glide": ("2.1", "2.0 has no glide_shared: its errors would escape untranslated"),
    "aws-durable-execution-sdk-python-testing": ("1.4", "the runner the durable tests use"),
    "opentelemetry-sdk": ("1.20", "the tests' tracer provider, the API's own release"),
}


def project() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as stream:
        return tomllib.load(stream)


def floor_of(requirement: Requirement) -> Version | None:
    """Return the `>=` bound of `requirement`, None without one."""
    bounds = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
    return max(bounds) if bounds else None


def published() -> list[Requirement]:
    config = project()["project"]
    names = [*config["dependencies"]]
    for extra in config["optional-dependencies"].values():
        names.extend(extra)
    return [Requirement(name) for name in names]


def grouped() -> list[Requirement]:
    found = []
    for group in project()["dependency-groups"].values():
        found.extend(Requirement(entry) for entry in group if isinstance(entry, str))
    return found


def test_every_published_requirement_has_its_reasoned_floor() -> None:
    """Dependencies and extras: each has exactly the floor written above, nothing unreasoned."""
    floors = {r.name: floor_of(r) for r in published()}
    assert set(PUBLISHED_FLOORS) == set(floors)
    for name, (floor, reason) in PUBLISHED_FLOORS.items():
        assert Version(floor) == floors[name], f"{name}: {reason}"


def test_pydantic_is_at_least_2_4_everywhere() -> None:
    """No extra or tool group admits a pydantic with CVE-2024-3772."""
    mentions = [r for r in published() + grouped() if r.name == "pydantic"]
    assert len(mentions) >= 3
    for requirement in mentions:
        floor = floor_of(requirement)
        assert floor is not None, requirement
        assert floor >= Version("2.4"), requirement


def test_tool_groups_respect_the_floors_of_what_they_name() -> None:
    """Where a group names a package with a floor above, it asks for at least that floor."""
    for requirement in grouped():
        if requirement.name in TOOL_FLOORS:
            floor, reason = TOOL_FLOORS[requirement.name]
            found = floor_of(requirement)
            assert found is not None, f"{requirement}: {reason}"
            assert found >= Version(floor), f"{requirement}: {reason}"


def test_the_cdk_distribution_stays_on_cdk_v2() -> None:
    """cdk/pyproject.toml: aws-cdk-lib 2 from 2.180 on, constructs 10."""
    with (ROOT / "cdk" / "pyproject.toml").open("rb") as stream:
        dependencies = [Requirement(d) for d in tomllib.load(stream)["project"]["dependencies"]]
    by_name = {r.name: r for r in dependencies}
    assert {"aws-cdk-lib", "constructs"} == set(by_name)
    assert Version("2.180") == floor_of(by_name["aws-cdk-lib"])
    assert not by_name["aws-cdk-lib"].specifier.contains("3.0.0")
    assert not by_name["constructs"].specifier.contains("11.0.0")
