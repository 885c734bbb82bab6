"""HTTPS for `serve` (`--ssl-certfile`, `--ssl-keyfile`): uvicorn terminates TLS with these files.

They are loaded once at start, before the model, so a missing file, a key that does not match its
certificate or a password-protected key is a clear error instead of a failure after minutes of loading.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TlsFiles:
    certfile: Path
    """PEM certificate chain (server certificate first); may also hold the private key."""
    keyfile: Path | None = None
    """PEM private key, when it is not in `certfile`."""

    def check(self) -> None:
        """ValueError naming the flag when the files cannot serve TLS."""
        for flag, path in (("--ssl-certfile", self.certfile), ("--ssl-keyfile", self.keyfile)):
            if path is not None and not path.is_file():
                raise ValueError(f"{flag}: no such file: {path}")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            # A password callback that fails keeps OpenSSL from prompting on the terminal for an encrypted key.
            context.load_cert_chain(self.certfile, self.keyfile, password=_no_password)
        except (ssl.SSLError, OSError, TypeError) as exc:
            raise ValueError(
                f"--ssl-certfile/--ssl-keyfile cannot be used: {exc} (a PEM certificate and its unencrypted "
                "private key are needed)"
            ) from None


def _no_password() -> str:
    raise TypeError("the private key is encrypted")
