"""TLS as the AWS tools do it: a private CA trusted through ``AWS_CA_BUNDLE``, the profile's
``ca_bundle`` or ``Config.ca_bundle``; verification turned off only with a warning.

The server is the loopback Kinesis behind a TLS front on 127.0.0.1, whose certificate is signed
by a certificate authority made here (with ``cryptography``, which moto brings): the system's
certificates do not trust it, as those of a company's TLS proxy. Real sockets, so real event
loops: every test runs on plain asyncio (aiohttp) and trio (httpx).

botocore reads ``AWS_CA_BUNDLE`` and the profile's ``ca_bundle`` only when it is given
``verify=None``; the producer gave it ``verify=True`` whenever verification was on, so a private
CA could be trusted only by turning verification off.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import ByteStream, SocketAttribute
from anyio.streams.tls import TLSListener
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from aiokpl import Config, ConfigError, Producer, RecordResult
from aiokpl._kinesis import INSECURE_WARNING
from aiokpl.testing import FakeKinesis, LoopbackKinesis
from integration.helpers import config as local_config

pytestmark = pytest.mark.anyio

STREAM = "tls"


@pytest.fixture(params=[pytest.param("asyncio", id="asyncio"), pytest.param("trio", id="trio")])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return (request.param, {})


# --- a certificate authority of our own -----------------------------------------------------


@dataclass(frozen=True)
class Authority:
    """A private CA's certificate (PEM file) and a server certificate it signed for
    127.0.0.1 and localhost (chain and key in PEM files)."""

    ca_file: Path
    cert_file: Path
    key_file: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_authority(directory: Path) -> Authority:
    now = datetime.datetime.now(datetime.timezone.utc)
    valid = (now - datetime.timedelta(days=1), now + datetime.timedelta(days=1))
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("aiokpl test CA"))
        .issuer_name(_name("aiokpl test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("localhost"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.OID_SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    authority = Authority(directory / "ca.pem", directory / "server.pem", directory / "key.pem")
    authority.ca_file.write_bytes(ca_cert.public_bytes(pem))
    authority.cert_file.write_bytes(cert.public_bytes(pem))
    authority.key_file.write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return authority


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return make_authority(tmp_path_factory.mktemp("ca"))


# --- the server: the loopback Kinesis behind a TLS front ------------------------------------


async def _pipe(source: ByteStream, sink: ByteStream, done: Callable[[], None]) -> None:
    try:
        async for chunk in source:
            await sink.send(chunk)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, ssl.SSLError, OSError):
        pass
    finally:
        done()


@pytest.fixture
async def tls_endpoint(authority: Authority) -> AsyncIterator[tuple[str, FakeKinesis]]:
    """``https://127.0.0.1:PORT`` of a loopback Kinesis with stream ``tls``, and its fake."""
    fake = FakeKinesis()
    fake.add_stream(STREAM, shard_count=1)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(authority.cert_file, authority.key_file)
    async with LoopbackKinesis(fake) as server:
        upstream_port = int(server.endpoint_url.rsplit(":", 1)[1])

        async def relay(client: ByteStream) -> None:
            async with (
                client,
                await anyio.connect_tcp("127.0.0.1", upstream_port) as upstream,
                anyio.create_task_group() as pair,
            ):
                stop = pair.cancel_scope.cancel
                pair.start_soon(_pipe, client, upstream, stop)
                pair.start_soon(_pipe, upstream, client, stop)

        tcp = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = tcp.extra(SocketAttribute.local_port)
        listener = TLSListener(tcp, context, standard_compatible=False)
        async with listener, anyio.create_task_group() as group:
            group.start_soon(listener.serve, relay)
            try:
                yield f"https://127.0.0.1:{port}", fake
            finally:
                group.cancel_scope.cancel()


def _config(endpoint: str, **changes: Any) -> Config:
    options: dict[str, Any] = {
        "record_max_buffered_time_ms": 10,
        "record_ttl_ms": 5_000,  # a record the TLS setup fails does not wait 30 s to say so
    }
    return local_config(endpoint, **{**options, **changes})


async def _put(config: Config) -> RecordResult:
    async with Producer(config) as producer:
        outcome = await producer.put_record(stream=STREAM, partition_key="k", data=b"over tls")
    return await outcome


def _delivered(result: RecordResult, fake: FakeKinesis) -> None:
    assert result.success, (result.error_code, result.error_message)
    assert [record.data for record in fake.stored_records(STREAM)] == [b"over tls"]


# --- the tests ------------------------------------------------------------------------------


async def test_a_private_ca_is_not_trusted_by_default(
    tls_endpoint: tuple[str, FakeKinesis],
) -> None:
    endpoint, fake = tls_endpoint
    result = await _put(_config(endpoint, record_ttl_ms=1_500))
    assert not result.success
    messages = " ".join(attempt.error_message or "" for attempt in result.attempts)
    assert "certificate verify failed" in messages.lower(), messages
    assert fake.stored_records(STREAM) == []


async def test_aws_ca_bundle_is_honoured(
    tls_endpoint: tuple[str, FakeKinesis], authority: Authority, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, fake = tls_endpoint
    monkeypatch.setenv("AWS_CA_BUNDLE", str(authority.ca_file))
    _delivered(await _put(_config(endpoint)), fake)


async def test_the_profiles_ca_bundle_is_honoured(
    tls_endpoint: tuple[str, FakeKinesis],
    authority: Authority,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    endpoint, fake = tls_endpoint
    profile = tmp_path / "config"
    profile.write_text(f"[profile private-ca]\nca_bundle = {authority.ca_file}\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(profile))
    _delivered(await _put(_config(endpoint, profile_name="private-ca")), fake)


async def test_config_ca_bundle_is_honoured_and_wins_over_the_variable(
    tls_endpoint: tuple[str, FakeKinesis],
    authority: Authority,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    endpoint, fake = tls_endpoint
    # The variable names a bundle that does not hold the CA; the Config's does.
    other = make_authority(tmp_path)
    monkeypatch.setenv("AWS_CA_BUNDLE", str(other.ca_file))
    _delivered(await _put(_config(endpoint, ca_bundle=authority.ca_file)), fake)


async def test_a_missing_bundle_fails_the_start(
    tls_endpoint: tuple[str, FakeKinesis], tmp_path: Path
) -> None:
    endpoint, _ = tls_endpoint
    missing = tmp_path / "nowhere.pem"
    with pytest.raises(ConfigError, match="ca_bundle: no such file"):
        async with Producer(_config(endpoint, ca_bundle=str(missing))):
            pass


async def test_verification_off_works_and_warns_once(
    tls_endpoint: tuple[str, FakeKinesis], caplog: pytest.LogCaptureFixture
) -> None:
    endpoint, fake = tls_endpoint
    with caplog.at_level(logging.WARNING, logger="aiokpl"):
        result = await _put(_config(endpoint, verify_ssl=False))
    _delivered(result, fake)
    warnings = [r.getMessage() for r in caplog.records if "verify_ssl=False" in r.getMessage()]
    assert warnings == [INSECURE_WARNING]
