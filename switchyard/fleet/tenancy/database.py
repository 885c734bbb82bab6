"""The tenants database: a SQLite file by default, PostgreSQL when given a URL; one small interface for both.

    switchyard fleet serve --tenants-db ~/.switchyard/tenants.db ...      (the default file)
    switchyard fleet serve --tenants-db postgresql://gateway@db/switchyard ...

The SQL the stores use is the subset both speak (`ON CONFLICT ... DO UPDATE`, `DOUBLE PRECISION`, `?`
placeholders, rewritten to `%s` for psycopg). SQLite runs in WAL mode with `synchronous=FULL`: a key issued
or a usage row written is on disk when the call returns. Calls are serialised by a lock, so the gateway may
use the database from a worker thread while a CLI process uses the same file.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from switchyard.errors import SwitchyardError
from switchyard.extras import require_extra
from switchyard.home import switchyard_home

POSTGRES_SCHEMES = ("postgres://", "postgresql://")

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS tenants (
        name TEXT PRIMARY KEY,
        priority INTEGER NOT NULL,
        weight DOUBLE PRECISION NOT NULL,
        created DOUBLE PRECISION NOT NULL,
        eval_sample DOUBLE PRECISION
    )""",
    """CREATE TABLE IF NOT EXISTS api_keys (
        key_id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL REFERENCES tenants(name),
        key_hash TEXT NOT NULL UNIQUE,
        shown_prefix TEXT NOT NULL,
        requests_per_minute INTEGER,
        tokens_per_minute INTEGER,
        max_concurrent INTEGER,
        models TEXT,
        created DOUBLE PRECISION NOT NULL,
        revoked DOUBLE PRECISION
    )""",
    "CREATE INDEX IF NOT EXISTS api_keys_by_tenant ON api_keys (tenant)",
    """CREATE TABLE IF NOT EXISTS usage_minutes (
        tenant TEXT NOT NULL,
        model TEXT NOT NULL,
        minute BIGINT NOT NULL,
        requests BIGINT NOT NULL,
        cache_hits BIGINT NOT NULL,
        prompt_tokens BIGINT NOT NULL,
        cached_tokens BIGINT NOT NULL,
        output_tokens BIGINT NOT NULL,
        cost DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (tenant, model, minute)
    )""",
)

ADDED_COLUMNS = (("tenants", "eval_sample", "DOUBLE PRECISION"),)
"""(table, column, type) added since the first schema: `Database` adds them where they are missing."""


class TenantsDatabaseError(SwitchyardError):
    """The tenants database cannot be opened or used; the message names it."""


def default_tenants_db() -> Path:
    """`$SWITCHYARD_HOME/tenants.db`."""
    return switchyard_home() / "tenants.db"


class Database:
    """A connection and the lock that serialises its use; `execute` runs one statement, `transaction` groups
    several so that they apply together or not at all."""

    def __init__(self, connection: Any, placeholder: str, location: str) -> None:
        self._connection = connection
        self._placeholder = placeholder
        self.location = location
        """The file or URL (with any password removed), for messages."""
        self._lock = threading.RLock()
        for statement in SCHEMA:
            self.execute(statement)
        self._add_missing_columns()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The statement's rows (none for a write)."""
        if self._placeholder != "?":
            sql = sql.replace("?", self._placeholder)
        with self._lock:
            try:
                cursor = self._connection.execute(sql, tuple(params))
                return [tuple(row) for row in cursor.fetchall()] if cursor.description else []
            except Exception as exc:
                if _is_database_error(exc):
                    raise TenantsDatabaseError(f"{self.location}: {exc}") from exc
                raise

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._lock:
            self._begin()
            try:
                yield
            except BaseException:
                self._connection.execute("ROLLBACK")
                raise
            self._connection.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._connection.close()

    def _add_missing_columns(self) -> None:
        """Columns added after a database was first made (a store written by an older gateway keeps working)."""
        for table, column, kind in ADDED_COLUMNS:
            if self._placeholder != "?":
                self.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {kind}")
            elif column not in {row[1] for row in self.execute(f"PRAGMA table_info({table})")}:
                self.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")

    def _begin(self) -> None:
        # SQLite: take the write lock at the start, so two writers never deadlock upgrading read locks.
        self._connection.execute("BEGIN IMMEDIATE" if self._placeholder == "?" else "BEGIN")


def open_database(location: str | Path | None = None) -> Database:
    """The database at `location`: a PostgreSQL URL, a file path, or None for `$SWITCHYARD_HOME/tenants.db`."""
    target = str(location) if location is not None else str(default_tenants_db())
    if target.startswith(POSTGRES_SCHEMES):
        return _open_postgres(target)
    return _open_sqlite(Path(target).expanduser())


def _open_sqlite(path: Path) -> Database:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(str(path), timeout=30.0, isolation_level=None, check_same_thread=False)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=FULL")
        connection.execute("PRAGMA foreign_keys=ON")
        return Database(connection, "?", str(path))
    except (OSError, sqlite3.Error) as exc:
        raise TenantsDatabaseError(f"{path}: cannot open the tenants database: {exc}") from exc


def _open_postgres(url: str) -> Database:
    with require_extra("postgres"):
        import psycopg
    shown = _without_password(url)
    try:
        connection = psycopg.connect(url, autocommit=True)
    except psycopg.Error as exc:
        raise TenantsDatabaseError(f"{shown}: cannot connect: {exc}") from exc
    return Database(connection, "%s", shown)


def _without_password(url: str) -> str:
    scheme, _, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at:
        return url
    user = credentials.partition(":")[0]
    return f"{scheme}://{user}@{host}"


def _is_database_error(exc: Exception) -> bool:
    """sqlite3's errors, or psycopg's (imported only when PostgreSQL is in use)."""
    if isinstance(exc, sqlite3.Error):
        return True
    return any(cls.__module__.startswith("psycopg") and cls.__name__ == "Error" for cls in type(exc).__mro__)
