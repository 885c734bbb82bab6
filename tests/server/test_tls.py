"""`serve --ssl-certfile/--ssl-keyfile`: HTTPS on loopback with a certificate made here; files that cannot serve
TLS are a clear error at start, before the model loads."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from harness import MODEL, RunningServer, start_server

from switchyard.cli import main
from switchyard.server.tls import TlsFiles


def write_key(path: Path, key: ec.EllipticCurvePrivateKey, password: bytes | None = None) -> Path:
    encryption = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    )
    return path


def issue(
    common_name: str,
    key: ec.EllipticCurvePrivateKey,
    *,
    signer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None = None,
    ca: bool = False,
) -> x509.Certificate:
    """A certificate for `key`, valid for 127.0.0.1, signed by `signer` (self-signed without one)."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    issuer_name, signing_key = (name, key) if signer is None else (signer[0].subject, signer[1])
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=ca or signer is None, path_length=None), critical=True)
        .sign(signing_key, hashes.SHA256())
    )


def write_certificate(path: Path, certificate: x509.Certificate) -> Path:
    path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return path


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key."""
    folder = tmp_path_factory.mktemp("tls")
    key = ec.generate_private_key(ec.SECP256R1())
    certfile = write_certificate(folder / "cert.pem", issue("switchyard test", key))
    return certfile, write_key(folder / "key.pem", key)


@pytest.fixture(scope="module")
def https_server(tiny_model_dir: Path, certificate: tuple[Path, Path]) -> Iterator[RunningServer]:
    running = start_server(tiny_model_dir, tls=TlsFiles(*certificate))
    yield running
    running.stop()


def test_the_openai_client_is_served_over_https(
    https_server: RunningServer, certificate: tuple[Path, Path]
) -> None:
    assert https_server.base_url.startswith("https://")
    trusting = httpx.Client(verify=ssl.create_default_context(cafile=str(certificate[0])))
    client = https_server.client(http_client=trusting)
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    assert reply.choices[0].finish_reason in ("length", "stop")
    # A client that does not trust the certificate is refused in the handshake: the connection is TLS.
    with pytest.raises(openai.APIConnectionError):
        https_server.client().models.list()


def test_files_that_cannot_serve_tls_are_refused_before_loading(
    tmp_path: Path, tiny_model_dir: Path, certificate: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    certfile, keyfile = certificate
    other_key = write_key(tmp_path / "other.pem", ec.generate_private_key(ec.SECP256R1()))
    locked_key = write_key(tmp_path / "locked.pem", ec.generate_private_key(ec.SECP256R1()), b"secret")
    cases = [
        (["--ssl-certfile", str(tmp_path / "missing.pem")], "--ssl-certfile: no such file"),
        (
            ["--ssl-certfile", str(certfile), "--ssl-keyfile", str(tmp_path / "gone.pem")],
            "--ssl-keyfile: no such",
        ),
        (["--ssl-keyfile", str(keyfile)], "--ssl-keyfile needs --ssl-certfile"),
        (["--ssl-certfile", str(certfile), "--ssl-keyfile", str(other_key)], "cannot be used"),
        (["--ssl-certfile", str(certfile), "--ssl-keyfile", str(locked_key)], "private key is encrypted"),
        (["--ssl-certfile", str(certfile)], "cannot be used"),  # no key anywhere
    ]
    for flags, message in cases:
        assert main(["serve", str(tiny_model_dir), *flags]) == 2, flags
        assert message in capsys.readouterr().err, flags


@dataclass(frozen=True)
class ClientAuthority:
    """A CA for client certificates, and one client certificate it signed (files)."""

    ca_certs: Path
    client_cert: Path
    client_key: Path


def client_authority(folder: Path, name: str) -> ClientAuthority:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = issue(f"{name} CA", ca_key, ca=True)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = issue(f"{name} client", client_key, signer=(ca, ca_key))
    return ClientAuthority(
        ca_certs=write_certificate(folder / f"{name}-ca.pem", ca),
        client_cert=write_certificate(folder / f"{name}-client.pem", client),
        client_key=write_key(folder / f"{name}-client-key.pem", client_key),
    )


@pytest.fixture(scope="module")
def authorities(tmp_path_factory: pytest.TempPathFactory) -> tuple[ClientAuthority, ClientAuthority]:
    """The authority the server trusts for client certificates, and one it does not."""
    folder = tmp_path_factory.mktemp("client-ca")
    return client_authority(folder, "trusted"), client_authority(folder, "stranger")


def client_context(server_certificate: Path, client: ClientAuthority | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(server_certificate))
    if client is not None:
        context.load_cert_chain(client.client_cert, client.client_key)
    return context


def test_client_certificates_are_required_when_authorities_are_named(
    tiny_model_dir: Path,
    certificate: tuple[Path, Path],
    authorities: tuple[ClientAuthority, ClientAuthority],
) -> None:
    trusted, stranger = authorities
    running = start_server(tiny_model_dir, tls=TlsFiles(*certificate, ca_certs=trusted.ca_certs))
    try:
        signed = running.client(http_client=httpx.Client(verify=client_context(certificate[0], trusted)))
        assert [model.id for model in signed.models.list()] == [MODEL]
        for refused in (
            None,
            stranger,
        ):  # no certificate, and one from an authority the server does not trust
            client = running.client(http_client=httpx.Client(verify=client_context(certificate[0], refused)))
            with pytest.raises(openai.APIConnectionError):
                client.models.list()
    finally:
        running.stop()


def test_optional_client_certificates_let_clients_without_one_in(
    tiny_model_dir: Path,
    certificate: tuple[Path, Path],
    authorities: tuple[ClientAuthority, ClientAuthority],
) -> None:
    trusted, stranger = authorities
    tls = TlsFiles(*certificate, ca_certs=trusted.ca_certs, client_certificates="optional")
    running = start_server(tiny_model_dir, tls=tls)
    try:
        for client_files in (None, trusted):
            client = running.client(
                http_client=httpx.Client(verify=client_context(certificate[0], client_files))
            )
            assert [model.id for model in client.models.list()] == [MODEL]
        # A certificate that is presented is still checked.
        client = running.client(http_client=httpx.Client(verify=client_context(certificate[0], stranger)))
        with pytest.raises(openai.APIConnectionError):
            client.models.list()
    finally:
        running.stop()


def test_client_certificate_flags_that_cannot_work_are_refused_before_loading(
    tmp_path: Path,
    tiny_model_dir: Path,
    certificate: tuple[Path, Path],
    authorities: tuple[ClientAuthority, ClientAuthority],
    capsys: pytest.CaptureFixture[str],
) -> None:
    certfile, keyfile = certificate
    https = ["--ssl-certfile", str(certfile), "--ssl-keyfile", str(keyfile)]
    not_pem = tmp_path / "ca.txt"
    not_pem.write_text("no certificates here\n")
    cases = [
        (["--ssl-ca-certs", str(authorities[0].ca_certs)], "need --ssl-certfile"),
        (["--ssl-cert-reqs", "required"], "need --ssl-certfile"),
        ([*https, "--ssl-cert-reqs", "required"], "needs --ssl-ca-certs"),
        ([*https, "--ssl-cert-reqs", "optional"], "needs --ssl-ca-certs"),
        ([*https, "--ssl-ca-certs", str(tmp_path / "gone.pem")], "--ssl-ca-certs: no such file"),
        ([*https, "--ssl-ca-certs", str(not_pem)], "--ssl-ca-certs cannot be used"),
    ]
    for flags, message in cases:
        assert main(["serve", str(tiny_model_dir), *flags]) == 2, flags
        assert message in capsys.readouterr().err, flags


def test_naming_authorities_without_a_mode_requires_certificates() -> None:
    files = TlsFiles(Path("cert.pem"), ca_certs=Path("ca.pem"))
    assert files.cert_reqs == ssl.CERT_REQUIRED
    assert TlsFiles(Path("cert.pem")).cert_reqs == ssl.CERT_NONE
    assert (
        TlsFiles(Path("cert.pem"), ca_certs=Path("ca.pem"), client_certificates="none").cert_reqs
        == ssl.CERT_NONE
    )
