"""Opens the SQLite databases memory and RAG live in: WAL mode, sqlite-vec loaded, one place for both.

Why a module: Python's built-in sqlite3 is often compiled without extension loading, so sqlite-vec needs
`pysqlite3` (the binary wheel bundles a recent SQLite with FTS5); every store opens its files the same way.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from switchyard.errors import SwitchyardError
from switchyard.extras import install_hint, require_extra


class StoreError(SwitchyardError):
    """A memory or document store cannot be opened or used (missing extension, corrupt file, bad name)."""


def _sqlite_module() -> Any:
    try:
        import pysqlite3.dbapi2 as module  # type: ignore[import-not-found]
    except ImportError:
        module = sqlite3
    return module


def connect(path: str | os.PathLike[str], *, vectors: bool = False) -> sqlite3.Connection:
    """Open (creating its folder) the database at `path` in WAL mode; with `vectors`, load sqlite-vec.

    WAL lets readers in other processes work while one writer appends, which is how sessions are shared.
    """
    module = _sqlite_module()
    target = Path(path)
    if str(path) != ":memory:":
        target.parent.mkdir(parents=True, exist_ok=True)
    try:
        conn = module.connect(str(target), timeout=30.0, isolation_level=None, check_same_thread=False)
    except module.Error as error:
        raise StoreError(f"{target}: cannot open database: {error}") from error
    conn.row_factory = module.Row
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    if vectors:
        _load_sqlite_vec(conn)
    return conn


def _load_sqlite_vec(conn: sqlite3.Connection) -> None:
    with require_extra("rag"):
        import sqlite_vec  # type: ignore[import-untyped]
    if not hasattr(conn, "enable_load_extension"):
        raise StoreError(
            "this Python's sqlite3 cannot load extensions; the 'rag' extra brings pysqlite3-binary for "
            f"sqlite-vec on Linux ({install_hint('rag')})"
        )
    conn.enable_load_extension(True)
    sqlite_vec.load(conn)
    conn.enable_load_extension(False)
