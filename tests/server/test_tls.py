"""`serve --ssl-certfile/--ssl-keyfile`: HTTPS on loopback with a certificate made here; files that cannot serve
TLS are a clear error at start, before the model loads."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from collections.abc import Iterator
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


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key."""
    folder = tmp_path_factory.mktemp("tls")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "switchyard test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    certfile = folder / "cert.pem"
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
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
