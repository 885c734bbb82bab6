"""Which headers cross the gateway, each way.

Hop-by-hop headers stay on their hop (RFC 9110 §7.6.1), and so do those each hop sets for itself (host,
content-length, server, date). Everything else passes: the client's `x-request-id` (one is made when it sent
none) so a replica's logs match the client's, OpenAI client headers, a session header. Authorization passes
unchanged when the gateway checks no key of its own (clients then authenticate to the workers); when it does,
the client's key is the gateway's and stays here, and the workers get the worker key, if one is set. Replicas are asked for identity encoding, so
bodies pass through as the replica wrote them and the gateway can read usage from them.
"""

from __future__ import annotations

from collections.abc import Iterable

REQUEST_ID_HEADER = "x-request-id"

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
_NOT_FORWARDED_UP = _HOP_BY_HOP | {"host", "content-length", "accept-encoding", "expect"}
_NOT_FORWARDED_DOWN = _HOP_BY_HOP | {"content-length", "content-encoding", "server", "date"}


def upstream_headers(
    client_headers: Iterable[tuple[str, str]],
    request_id: str,
    worker_api_key: str | None,
    gateway_checks_key: bool = False,
) -> list[tuple[str, str]]:
    """The headers of the request to a replica."""
    keep_authorization = worker_api_key is None and not gateway_checks_key
    headers = [
        (name, value)
        for name, value in client_headers
        if name.lower() not in _NOT_FORWARDED_UP
        and name.lower() != REQUEST_ID_HEADER
        and (keep_authorization or name.lower() != "authorization")
    ]
    headers += [(REQUEST_ID_HEADER, request_id), ("accept-encoding", "identity")]
    if worker_api_key is not None:
        headers.append(("authorization", f"Bearer {worker_api_key}"))
    return headers


def downstream_headers(replica_headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The headers of the client's response, from the replica's (the replica's x-request-id echo included)."""
    return {name: value for name, value in replica_headers if name.lower() not in _NOT_FORWARDED_DOWN}
