"""Fixtures for tests against a real ``redis-server`` on loopback (imported by the conftest).

The server starts once per session on 127.0.0.1 with a free port, in a temporary directory,
without persistence, and is stopped at the end of the session. Tests skip, naming the reason,
when ``redis-server`` or redis-py is not installed (``.ci/run`` installs the server).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from idempotent_lambda.persistence.redis import RedisCachePersistenceLayer

START_TIMEOUT_S = 60


@contextmanager
def requests_seen_by_server(port: int) -> Iterator[list[str]]:
    """Yield a list that fills with the commands clients send the server meanwhile (MONITOR).

    Commands that scripts run inside the server are not requests and are left out. The monitor
    has a client of its own, so the store's (already connected) connection stays its own.
    """
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    marking = redis.Redis(host="127.0.0.1", port=port)
    marking.ping()  # connected before monitoring starts
    marker = f"end-{uuid.uuid4().hex}"
    seen: list[str] = []
    with client.monitor() as monitor:  # MONITOR is acknowledged before this returns

        def read() -> None:
            while True:
                entry = monitor.next_command()
                if marker in entry["command"]:
                    return
                if entry["client_type"] != "lua":
                    seen.append(entry["command"].split(" ", 1)[0].upper())

        reader = threading.Thread(target=read)
        reader.start()
        try:
            yield seen
        finally:
            marking.echo(marker)
            reader.join(60)
    client.close()
    marking.close()


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def start_redis_server(
    directory: Path, *extra: str, tls: TlsFiles | None = None, cluster: bool = False
) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``redis-server`` on a free loopback port; return the process once it answers PING.

    With ``tls`` it listens with TLS only (client certificates optional). With ``cluster`` the
    cluster bus gets a free port of its own: by default it is the port + 10,000, which does not
    exist for the ephemeral ports above 55535 (the server then refuses to start). Retries with a
    new port if the first one was taken in the meantime (the server exits, or another one answers
    there).
    """
    executable = shutil.which("redis-server")
    if executable is None:
        pytest.skip("redis-server is not installed (apt-get install -y redis-server)")
    redis = pytest.importorskip("redis", reason="redis-py is not installed (pip install redis)")
    for _ in range(3):
        port = free_port()
        listen = ["--port", str(port)]
        ping_options: dict[str, Any] = {}
        if tls is not None:
            listen = ["--port", "0", "--tls-port", str(port), "--tls-auth-clients", "optional",
                      "--tls-cert-file", tls.cert, "--tls-key-file", tls.key,
                      "--tls-ca-cert-file", tls.ca]  # fmt: skip
            ping_options = {"ssl": True, "ssl_ca_certs": tls.ca}
        if cluster:
            listen += ["--cluster-enabled", "yes", "--cluster-port", str(free_port())]
        process = subprocess.Popen(
            [executable, *listen, "--bind", "127.0.0.1", "--dir", str(directory),
             "--save", "", "--appendonly", "no", "--daemonize", "no", *extra],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while process.poll() is None and time.monotonic() < deadline:
            try:
                probe = redis.Redis(host="localhost", port=port, socket_timeout=5, **ping_options)
                with probe:
                    answering = probe.info("server")["process_id"]
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                time.sleep(0.05)
                continue
            if answering == process.pid:  # not another process's server that took the port
                return process, port
            break
        stop(process)
    pytest.fail("redis-server did not start on 127.0.0.1")


@dataclass(frozen=True)
class TlsFiles:
    """A test CA, and a certificate it signed for ``localhost``/127.0.0.1 with its key.

    The server presents the certificate; a client may present the same one (no usage limits).
    """

    ca: str
    cert: str
    key: str


def make_tls_files(directory: Path) -> TlsFiles:
    """Write a fresh CA and a server certificate signed by it into ``directory``."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def certificate(subject: str, key: Any, issuer: str, signer: Any, *, ca: bool) -> Any:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_cert = certificate("test CA", ca_key, "test CA", ca_key, ca=True)
    cert = certificate("localhost", key, "test CA", ca_key, ca=False)
    paths = TlsFiles(
        ca=str(directory / "ca.crt"),
        cert=str(directory / "redis.crt"),
        key=str(directory / "redis.key"),
    )
    Path(paths.ca).write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    Path(paths.cert).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    Path(paths.key).write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop a server started by `start_redis_server` and wait for it."""
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


@pytest.fixture(scope="session")
def redis_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """Start the session's ``redis-server``; yield its port on 127.0.0.1."""
    process, port = start_redis_server(tmp_path_factory.mktemp("redis"))
    yield port
    stop(process)


@pytest.fixture(scope="session")
def redis_tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, TlsFiles]]:
    """Start a TLS-only ``redis-server``; yield its port and its certificate (trust it)."""
    directory = tmp_path_factory.mktemp("redis-tls")
    tls = make_tls_files(directory)
    process, port = start_redis_server(directory, tls=tls)
    yield port, tls
    stop(process)


@contextmanager
def one_node_cluster(directory: Path, tls: TlsFiles | None = None) -> Iterator[int]:
    """Run a one-node Redis Cluster serving every slot (TLS only with ``tls``); yield its port."""
    import redis

    # Over TLS the node must announce its TLS port (and talk TLS on the cluster bus).
    announce = () if tls is None else ("--tls-cluster", "yes")
    process, port = start_redis_server(
        directory,
        "--cluster-config-file",
        str(directory / "nodes"),
        *announce,
        tls=tls,
        cluster=True,
    )
    tls_options: dict[str, Any] = {} if tls is None else {"ssl": True, "ssl_ca_certs": tls.ca}
    node = redis.Redis(host="127.0.0.1", port=port, **tls_options)
    try:
        node.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        deadline = time.monotonic() + START_TIMEOUT_S
        while node.cluster("info")["cluster_state"] != "ok":
            if time.monotonic() > deadline:
                pytest.fail("the one-node cluster did not come up")
            time.sleep(0.05)
        yield port
    finally:
        node.close()
        stop(process)


@pytest.fixture(scope="session")
def redis_cluster_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """Start a one-node Redis Cluster that serves every slot; yield its port."""
    with one_node_cluster(tmp_path_factory.mktemp("redis-cluster")) as port:
        yield port


@pytest.fixture(scope="session")
def redis_tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, TlsFiles]]:
    """Start a TLS-only one-node Redis Cluster; yield its port and its certificate (trust it)."""
    directory = tmp_path_factory.mktemp("redis-tls-cluster")
    tls = make_tls_files(directory)
    with one_node_cluster(directory, tls) as port:
        yield port, tls


@pytest.fixture
def redis_client(redis_port: int) -> Iterator[Any]:
    """Return a redis-py client on an emptied database (the default: bytes replies)."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=redis_port)
    client.flushdb()
    yield client
    client.close()


@pytest.fixture
def redis_store(redis_client: Any) -> RedisCachePersistenceLayer:
    """Return a `RedisCachePersistenceLayer` on the emptied test database."""
    return RedisCachePersistenceLayer(client=redis_client)
