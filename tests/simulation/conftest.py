"""Fixtures of the simulator's tests: the integration suite's moto server on loopback."""

from __future__ import annotations

from tests.integration.conftest import dynamodb_endpoint

__all__ = ["dynamodb_endpoint"]
