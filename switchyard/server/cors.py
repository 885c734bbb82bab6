"""Cross-origin access for browser clients (`serve --allowed-origins`), off unless origins are named.

A browser page may call the API from another origin only when the server says so in CORS headers. vLLM
allows every origin by default; here it is opt-in, because a server on localhost that allows every origin
lets any web page the user visits read its replies. Starlette's middleware does the protocol; it sits outside
the API-key check, since a browser's preflight request carries no credentials, and it adds its headers to
refusals too, so a page can read the error.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware


@dataclass(frozen=True)
class CorsPolicy:
    allowed_origins: tuple[str, ...]
    """Origins (scheme://host[:port]) whose pages may call the API; "*" allows any."""
    allowed_methods: tuple[str, ...] = ("*",)
    allowed_headers: tuple[str, ...] = ("*",)
    allow_credentials: bool = False
    """Let pages send cookies or HTTP authentication; only with origins listed by name."""

    def __post_init__(self) -> None:
        if not self.allowed_origins:
            raise ValueError("allowed_origins must name at least one origin (or '*')")
        for origin in self.allowed_origins:
            if origin != "*" and not _is_origin(origin):
                raise ValueError(
                    f"allowed origin {origin!r} is not an origin: expected scheme://host[:port], e.g. "
                    "https://app.example.com, or '*'"
                )
        if self.allow_credentials and "*" in self.allowed_origins:
            raise ValueError(
                "allow_credentials with allowed origin '*' would let every site send its users' credentials; "
                "list the origins by name"
            )


def _is_origin(text: str) -> bool:
    """scheme://host[:port] and nothing more: a browser sends exactly that in its Origin header."""
    parts = urlsplit(text)
    return bool(parts.scheme and parts.netloc) and not (parts.path or parts.query or parts.fragment)


def add_cors(app: FastAPI, policy: CorsPolicy) -> None:
    """Answer preflight requests and mark responses for the policy's origins (call after the other middleware,
    so this one is outside them)."""
    app.add_middleware(
        CORSMiddleware,
        allow_origins=list(policy.allowed_origins),
        allow_methods=list(policy.allowed_methods),
        allow_headers=list(policy.allowed_headers),
        allow_credentials=policy.allow_credentials,
        expose_headers=["x-request-id", "retry-after"],
    )
