"""TLS to Redis checks the server's host name on every supported redis-py.

redis-py before 6.0 does not check it by default (``ssl_check_hostname=False``), so the store
asks for it whenever it builds a TLS client: from connection options and from a ``rediss://``
URL, standalone and cluster. The servers present a certificate for localhost/127.0.0.1 signed by
a test CA, trusted through ``SSL_CERT_FILE``.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from idempotent_lambda.exceptions import IdempotencyPersistenceConfigError
from idempotent_lambda.persistence.redis import RedisCachePersistenceLayer
from idempotent_lambda.record import IdempotencyRecord, Status
from tests.integration._redis_server import TlsFiles

redis = pytest.importorskip("redis", reason="redis-py is not installed (pip install redis)")
#: redis-py 5's cluster client drops ``ssl_check_hostname``: the store refuses TLS clusters there.
CLUSTER_CHECKS_HOST_NAMES = redis.VERSION[0] >= 6

#: How the store is told to use TLS: connection options (``ssl=True``, the default), or a URL.
WAYS = {
    "options": lambda port, mode: RedisCachePersistenceLayer(
        host="localhost", port=port, mode=mode
    ),
    "url": lambda port, mode: RedisCachePersistenceLayer(
        url=f"rediss://localhost:{port}", mode=mode
    ),
}


def pool_of(client: Any) -> Any:
    """Return the connection pool the client's commands use (a cluster's: its node's)."""
    if isinstance(client, redis.cluster.RedisCluster):
        client = client.get_default_node().redis_connection
    return client.connection_pool


@pytest.fixture(params=["standalone", "cluster"])
def tls_server(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> tuple[str, int]:
    """Return the mode and port of a TLS-only server of that mode, its certificate trusted."""
    mode = request.param
    if mode == "cluster" and not CLUSTER_CHECKS_HOST_NAMES:
        pytest.skip("redis-py 5 cannot check cluster host names (the refusal is tested instead)")
    served: tuple[int, TlsFiles] = request.getfixturevalue(
        "redis_tls" if mode == "standalone" else "redis_tls_cluster"
    )
    port, tls = served
    monkeypatch.setenv("SSL_CERT_FILE", tls.ca)
    return mode, port


@pytest.mark.parametrize("way", WAYS)
def test_a_tls_client_checks_the_host_name(tls_server: tuple[str, int], way: str) -> None:
    """The client the store builds verifies the certificate names the host, and it works."""
    mode, port = tls_server
    store = WAYS[way](port, mode)
    key = f"tls#{uuid.uuid4().hex}"
    record = IdempotencyRecord(key, Status.IN_PROGRESS, 4_000_000_000, owner="o")

    assert store.claim(record, now_ms=0, lease_cutoff_ms=0).claimed
    assert record == store.get(key)
    pool = pool_of(store.client)
    connection = pool.make_connection()  # as the pool opens them; not connected
    assert (redis.connection.SSLConnection, True) == (type(connection), connection.check_hostname)


@pytest.mark.parametrize("way", WAYS)
def test_the_store_asks_for_the_check_whatever_the_default(way: str) -> None:
    """The check is in the options the store gives redis-py, not left to redis-py's default."""
    store = WAYS[way](6379, "standalone")  # a standalone client connects on its first command
    assert True is store.client.connection_pool.connection_kwargs.get("ssl_check_hostname")


def test_a_url_that_turns_the_checks_off_is_obeyed(redis_tls: tuple[int, TlsFiles]) -> None:
    """``ssl_check_hostname=false`` or ``ssl_cert_reqs=none`` in the URL are the user's choice."""
    port, _ = redis_tls
    unchecked = RedisCachePersistenceLayer(
        url=f"rediss://localhost:{port}?ssl_check_hostname=false"
    )
    unverified = RedisCachePersistenceLayer(url=f"rediss://localhost:{port}?ssl_cert_reqs=none")

    assert False is pool_of(unchecked.client).make_connection().check_hostname
    assert unverified.get(f"tls#{uuid.uuid4().hex}") is None  # no CA trusted, none needed


@pytest.mark.skipif(CLUSTER_CHECKS_HOST_NAMES, reason="redis-py 6 and later check cluster nodes")
@pytest.mark.parametrize("way", WAYS)
def test_tls_to_a_cluster_is_refused_where_redis_py_cannot_check_host_names(way: str) -> None:
    """redis-py 5 would talk TLS to cluster nodes unchecked: a configuration error names the fix."""
    store = WAYS[way](6379, "cluster")
    with pytest.raises(IdempotencyPersistenceConfigError, match="redis>=6"):
        store.get("any")
