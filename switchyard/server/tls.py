"""HTTPS for `serve` (`--ssl-certfile`, `--ssl-keyfile`), and client certificates (`--ssl-ca-certs`).

uvicorn terminates TLS with these files. They are loaded once at start, before the model, so a missing file, a
key that does not match its certificate, a password-protected key or a CA file without certificates is a clear
error instead of a failure after minutes of loading.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

ClientCertificates = Literal["none", "optional", "required"]

CERT_REQS: dict[ClientCertificates, ssl.VerifyMode] = {
    "none": ssl.CERT_NONE,
    "optional": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


@dataclass(frozen=True)
class TlsFiles:
    certfile: Path
    """PEM certificate chain (server certificate first); may also hold the private key."""
    keyfile: Path | None = None
    """PEM private key, when it is not in `certfile`."""
    ca_certs: Path | None = None
    """PEM certificates of the authorities whose client certificates are trusted (mutual TLS)."""
    client_certificates: ClientCertificates | None = None
    """Whether clients must present a certificate signed by `ca_certs`. None means "required" when `ca_certs` is
    given: a trusted CA that no handshake asks for would look like mutual TLS while letting anyone in."""

    @property
    def cert_reqs(self) -> ssl.VerifyMode:
        mode = self.client_certificates or ("required" if self.ca_certs is not None else "none")
        return CERT_REQS[mode]

    def check(self) -> None:
        """ValueError naming the flag when the files cannot serve TLS."""
        files = (
            ("--ssl-certfile", self.certfile),
            ("--ssl-keyfile", self.keyfile),
            ("--ssl-ca-certs", self.ca_certs),
        )
        for flag, path in files:
            if path is not None and not path.is_file():
                raise ValueError(f"{flag}: no such file: {path}")
        if self.client_certificates not in (None, "none") and self.ca_certs is None:
            raise ValueError(
                f"--ssl-cert-reqs {self.client_certificates} needs --ssl-ca-certs: the authorities that sign "
                "client certificates"
            )
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            # A password callback that fails keeps OpenSSL from prompting on the terminal for an encrypted key.
            context.load_cert_chain(self.certfile, self.keyfile, password=_no_password)
        except (ssl.SSLError, OSError, TypeError) as exc:
            raise ValueError(
                f"--ssl-certfile/--ssl-keyfile cannot be used: {exc} (a PEM certificate and its unencrypted "
                "private key are needed)"
            ) from None
        if self.ca_certs is not None:
            try:
                context.load_verify_locations(cafile=self.ca_certs)
            except (ssl.SSLError, OSError) as exc:
                raise ValueError(
                    f"--ssl-ca-certs cannot be used: {exc} (PEM certificates are needed)"
                ) from None


def _no_password() -> str:
    raise TypeError("the private key is encrypted")
