"""Ports and addresses for replicas a launcher starts: a free port to listen on, the URL to reach it at."""

from __future__ import annotations

import ipaddress
import socket

ALL_INTERFACES = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}
"""Bind addresses that mean "every interface", and the loopback address a client on this machine uses."""


def _family(host: str) -> socket.AddressFamily:
    try:
        return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:  # a host name
        return socket.AF_INET


def port_is_free(host: str, port: int) -> bool:
    """Whether a server could listen on `host:port` now (the same test uvicorn's bind will make)."""
    with socket.socket(_family(host), socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str) -> int:
    """A port nothing listens on at `host`, chosen by the kernel.

    Another process could take it before the replica binds it; the replica then exits and its launcher
    restarts it on another port, so the race costs a restart, never a wrong answer.
    """
    with socket.socket(_family(host), socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def http_url(bind_host: str, port: int) -> str:
    """The base URL a client on this machine reaches a server bound to `bind_host:port` at."""
    host = ALL_INTERFACES.get(bind_host, bind_host)
    if _family(host) == socket.AF_INET6:
        host = f"[{host}]"
    return f"http://{host}:{port}"
