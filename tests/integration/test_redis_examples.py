"""Powertools' documented Redis/Valkey patterns, after the import swap, on a real redis-server.

One test per published example, written in its style: the store built the way the example
builds it (connection options with TLS on by default, a ready redis-py client, valkey-glide's
client, client certificates, renamed fields) and a handler called twice, which must run once and
replay. Only the import prefix differs from Powertools', and the host and port point at the
test's own server. TLS servers use a self-signed certificate that the tests trust through
``SSL_CERT_FILE``, as a deployment would trust its CA.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

from idempotent_lambda import IdempotencyConfig, idempotent
from idempotent_lambda.persistence.cache import CachePersistenceLayer
from idempotent_lambda.persistence.redis import RedisCachePersistenceLayer
from tests.integration._redis_server import TlsFiles


@pytest.fixture
def lambda_context() -> Any:
    """A Lambda context as Powertools' test examples build it."""

    @dataclass
    class LambdaContext:
        function_name: str = "test"
        memory_limit_in_mb: int = 128
        invoked_function_arn: str = "arn:aws:lambda:eu-west-1:809313241:function:test"
        aws_request_id: str = "52fdfc07-2182-154f-163f-5f0f9a621d72"

        def get_remaining_time_in_millis(self) -> int:
            return 1000

    return LambdaContext()


@pytest.fixture
def tls_server(redis_tls: tuple[int, TlsFiles], monkeypatch: pytest.MonkeyPatch) -> int:
    """Return the TLS server's port, its certificate trusted and its database emptied."""
    port, tls = redis_tls
    monkeypatch.setenv("SSL_CERT_FILE", tls.ca)
    redis.Redis(host="localhost", port=port, ssl=True).flushdb()
    return port


@dataclass
class Payment:
    user_id: str
    product_id: str
    payment_id: str = field(default_factory=lambda: f"{uuid.uuid4()}")


def payment_handler(persistence_layer: Any, runs: list[str]) -> Any:
    """Build the getting-started handler of Powertools' Redis examples on ``persistence_layer``."""

    @idempotent(persistence_store=persistence_layer)
    def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        payment = Payment(**event)
        runs.append(payment.payment_id)
        return {"payment_id": payment.payment_id, "message": "success", "statusCode": 200}

    return lambda_handler


def assert_runs_once_and_replays(handler: Any, lambda_context: Any, runs: list[str]) -> None:
    """Call ``handler`` twice with one event: one run, and the replay returns its result."""
    event = {"user_id": "user-1", "product_id": "product-9"}
    first = handler(event, lambda_context)
    second = handler(event, lambda_context)
    assert first == second
    assert [first["payment_id"]] == runs


def test_redis_config_example(tls_server: int, lambda_context: Any) -> None:
    """``RedisCachePersistenceLayer(host=..., port=...)``: TLS by default, as in Powertools."""
    persistence_layer = RedisCachePersistenceLayer(host="localhost", port=tls_server)
    runs: list[str] = []
    assert_runs_once_and_replays(payment_handler(persistence_layer, runs), lambda_context, runs)


def test_cache_config_example(tls_server: int, lambda_context: Any) -> None:
    """``CachePersistenceLayer(host=..., port=...)``, Powertools' newer name."""
    persistence_layer = CachePersistenceLayer(host="localhost", port=tls_server)
    runs: list[str] = []
    assert_runs_once_and_replays(payment_handler(persistence_layer, runs), lambda_context, runs)


def test_redis_client_example(redis_client: redis.Redis, lambda_context: Any) -> None:
    """A ready redis-py client with timeouts and a pool size, passed as ``client=``."""
    port = redis_client.connection_pool.connection_kwargs["port"]
    client = redis.Redis(
        host="localhost",
        port=port,
        socket_connect_timeout=5,
        socket_timeout=5,
        max_connections=1000,
    )
    persistence_layer = RedisCachePersistenceLayer(client=client)
    runs: list[str] = []
    assert_runs_once_and_replays(payment_handler(persistence_layer, runs), lambda_context, runs)


def test_valkey_glide_client_example(redis_client: redis.Redis, lambda_context: Any) -> None:
    """valkey-glide's asyncio ``GlideClient.create(...)``, passed as the client unawaited.

    Under Powertools 3.37 this example fails at the first call ('coroutine' object has no
    attribute 'set'); here the store creates and drives the client on a loop of its own.
    """
    glide = pytest.importorskip("glide", reason="valkey-glide is not installed")
    port = redis_client.connection_pool.connection_kwargs["port"]
    client_config = glide.GlideClientConfiguration(
        addresses=[glide.NodeAddress(host="localhost", port=port)],
        request_timeout=30_000,  # not published: glide's 250 ms default is too tight under load
    )
    client = glide.GlideClient.create(config=client_config)
    persistence_layer = CachePersistenceLayer(client=client)  # type: ignore[arg-type]
    runs: list[str] = []
    assert_runs_once_and_replays(payment_handler(persistence_layer, runs), lambda_context, runs)


@pytest.mark.parametrize("prefix", ["CACHE", "REDIS"])  # the cache_ and redis_ variants
def test_glide_client_with_aws_secrets_example(
    tls_server: int,
    dynamodb_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
    lambda_context: Any,
    prefix: str,
) -> None:
    """Connection settings from Secrets Manager (moto), TLS and a password, glide's client."""
    glide = pytest.importorskip("glide", reason="valkey-glide is not installed")
    import boto3
    from aws_lambda_powertools.utilities import parameters

    monkeypatch.setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", dynamodb_endpoint)
    name = f"cache_info_{uuid.uuid4().hex[:8]}"
    secret = {f"{prefix}_HOST": "localhost", f"{prefix}_PORT": tls_server}
    secret[f"{prefix}_PASSWORD"] = "s3cret"
    boto3.client("secretsmanager").create_secret(Name=name, SecretString=json.dumps(secret))
    admin = redis.Redis(host="localhost", port=tls_server, ssl=True)
    admin.config_set("requirepass", "s3cret")
    try:
        cache_values: dict[str, Any] = parameters.get_secret(name, transform="json")
        client_config = glide.GlideClientConfiguration(
            addresses=[
                glide.NodeAddress(
                    host=cache_values.get(f"{prefix}_HOST", "localhost"),
                    port=cache_values.get(f"{prefix}_PORT", 6379),
                ),
            ],
            credentials=glide.ServerCredentials(
                password=cache_values.get(f"{prefix}_PASSWORD", ""),
            ),
            request_timeout=30_000,  # published: 10, which glide reads as ms; too tight for CI
            use_tls=True,
            reconnect_strategy=glide.BackoffStrategy(num_of_retries=10, factor=2, exponent_base=1),
        )
        valkey_client = glide.GlideClient.create(config=client_config)
        persistence_layer = CachePersistenceLayer(client=valkey_client)  # type: ignore[arg-type]
        config = IdempotencyConfig(expires_after_seconds=2 * 60)
        runs: list[int] = []

        @idempotent(config=config, persistence_store=persistence_layer)
        def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, str]:
            runs.append(1)
            return {"message": "Hello"}

        assert {"message": "Hello"} == lambda_handler({"id": 1}, lambda_context)
        assert {"message": "Hello"} == lambda_handler({"id": 1}, lambda_context)
        assert [1] == runs
    finally:
        admin.config_set("requirepass", "")


def test_customized_field_names_example(redis_client: redis.Redis, lambda_context: Any) -> None:
    """The attribute-name options name the record's fields (Powertools' JSON, by default)."""
    persistence_layer = RedisCachePersistenceLayer(
        client=redis_client,
        in_progress_expiry_attr="lease_end",
        expiry_attr="expires",
        status_attr="state",
        data_attr="result",
        validation_key_attr="checksum",
    )
    config = IdempotencyConfig(payload_validation_jmespath="amount")

    @idempotent(persistence_store=persistence_layer, config=config)
    def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return event

    assert {"amount": 3} == lambda_handler({"amount": 3}, lambda_context)
    (key,) = redis_client.keys("*")
    expected = {"state", "expires", "result", "checksum", "owner"}
    assert expected == set(json.loads(redis_client.get(key)))
    assert {"amount": 3} == lambda_handler({"amount": 3}, lambda_context)


@pytest.mark.filterwarnings("ignore:.*retry_on_timeout:DeprecationWarning")  # as published
def test_client_certificates_example(
    redis_tls: tuple[int, TlsFiles], tls_server: int, lambda_context: Any
) -> None:
    """A redis-py client with TLS client certificates and decoded responses, as ``client=``."""
    _, tls = redis_tls
    redis_client = redis.Redis(
        host="localhost",
        port=tls_server,
        decode_responses=True,
        socket_timeout=10.0,
        ssl=True,
        retry_on_timeout=True,
        ssl_certfile=tls.cert,
        ssl_keyfile=tls.key,
        ssl_ca_certs=tls.ca,
    )
    persistence_layer = CachePersistenceLayer(client=redis_client)
    config = IdempotencyConfig(expires_after_seconds=2 * 60)
    runs: list[int] = []

    @idempotent(config=config, persistence_store=persistence_layer)
    def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, str]:
        runs.append(1)
        return {"message": "Hello"}

    assert {"message": "Hello"} == lambda_handler({"id": 1}, lambda_context)
    assert {"message": "Hello"} == lambda_handler({"id": 1}, lambda_context)
    assert [1] == runs


def test_real_redis_test_example(redis_client: redis.Redis, lambda_context: Any) -> None:
    """Powertools' "test with a real Redis" pattern: a decoding client and one assertion."""
    port = redis_client.connection_pool.connection_kwargs["port"]
    persistence_layer = RedisCachePersistenceLayer(
        client=redis.Redis(host="localhost", port=str(port), decode_responses=True)
    )

    @idempotent(persistence_store=persistence_layer)
    def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"payment_id": 12345, "message": "success", "statusCode": 200}

    result = lambda_handler({"testkey": "testvalue"}, lambda_context)
    assert 12345 == result["payment_id"]
    assert 1 == len(redis_client.keys("*"))
