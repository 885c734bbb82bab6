"""The OpenAI-compatible HTTP server: the only part of Switchyard that speaks HTTP."""

from switchyard.server.app import build_app
from switchyard.server.state import ServerSettings

__all__ = ["ServerSettings", "build_app"]
