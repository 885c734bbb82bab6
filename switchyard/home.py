"""Where Switchyard keeps its state on this machine: `$SWITCHYARD_HOME`, else `~/.switchyard`.

One place for every store that keeps a file there (agent memory, RAG, the fleet's tenants), so they agree.
"""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "SWITCHYARD_HOME"
"""Environment variable naming where Switchyard keeps its state (default `~/.switchyard`)."""


def switchyard_home() -> Path:
    """`$SWITCHYARD_HOME`, or `~/.switchyard` when unset."""
    value = os.environ.get(HOME_ENV)
    return Path(value).expanduser() if value else Path.home() / ".switchyard"
