"""The tenants database: keys stored hashed, rotation, limits, and usage sums, on a real SQLite file and, when
$SWITCHYARD_TEST_POSTGRES_URL names a database to use (its tables are dropped), on PostgreSQL."""

from __future__ import annotations

import importlib.util
import os
import sqlite3
from pathlib import Path

import pytest

from switchyard.errors import SwitchyardError
from switchyard.fleet.tenancy.database import open_database
from switchyard.fleet.tenancy.keys import KEY_PREFIX, key_hash
from switchyard.fleet.tenancy.records import KeyLimits
from switchyard.fleet.tenancy.store import TenantExistsError, TenantNotFoundError, TenantStore
from switchyard.fleet.tenancy.usage_log import UsageLog
from switchyard.fleet.usage import TokenUsage

POSTGRES_URL = os.environ.get("SWITCHYARD_TEST_POSTGRES_URL")


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a test's database is: a fresh SQLite file, or the test PostgreSQL database emptied."""
    if request.param == "sqlite":
        return str(tmp_path / "tenants.db")
    if POSTGRES_URL is None or importlib.util.find_spec("psycopg") is None:
        pytest.skip("set SWITCHYARD_TEST_POSTGRES_URL (and install the postgres extra) to test PostgreSQL")
    database = open_database(POSTGRES_URL)
    for table in ("usage_minutes", "api_keys", "tenants"):
        database.execute(f"DROP TABLE IF EXISTS {table}")
    database.close()
    return POSTGRES_URL


@pytest.fixture
def store(location: str) -> TenantStore:
    return TenantStore(open_database(location), clock=lambda: 1_700_000_000.0)


def test_a_key_is_shown_once_and_stored_only_as_its_hash(store: TenantStore, location: str) -> None:
    issued = store.add("alice", limits=KeyLimits(requests_per_minute=5), models=["chat"])
    assert issued.key.startswith(KEY_PREFIX) and len(issued.key) > 40
    assert issued.record.key_hash == key_hash(issued.key)
    if not location.startswith("postgres"):
        folder = Path(location).parent
        raw = b"".join(p.read_bytes() for p in folder.iterdir() if p.name.startswith("tenants.db"))
        assert issued.key.encode() not in raw
    (stored,) = open_database(location).execute("SELECT key_hash FROM api_keys")
    assert stored == (key_hash(issued.key),)
    caller = store.resolve(issued.key)
    assert caller is not None and caller.tenant.name == "alice"
    assert caller.key.limits == KeyLimits(requests_per_minute=5)
    assert caller.key.may_use("chat") and not caller.key.may_use("code")
    assert store.resolve(issued.key + "x") is None
    assert store.resolve("") is None


def test_rotating_a_key_invalidates_the_old_one_and_keeps_its_limits(store: TenantStore) -> None:
    old = store.add("alice", limits=KeyLimits(tokens_per_minute=100), models=["chat", "code"])
    new = store.rotate_key("alice")
    assert new.key != old.key
    assert store.resolve(old.key) is None
    caller = store.resolve(new.key)
    assert caller is not None
    assert caller.key.limits == KeyLimits(tokens_per_minute=100)
    assert caller.key.models == frozenset({"chat", "code"})
    listing = store.listing("alice")
    assert [key.revoked is None for key in listing.keys] == [False, True]


def test_set_limits_changes_what_is_given_and_leaves_the_rest(store: TenantStore) -> None:
    issued = store.add("alice", priority=1, weight=2.0, limits=KeyLimits(requests_per_minute=5), models=["a"])
    store.set_limits("alice", limits=KeyLimits(requests_per_minute=5, max_concurrent=2), priority=-3)
    caller = store.resolve(issued.key)
    assert caller is not None
    assert caller.key.limits.max_concurrent == 2 and caller.key.models == frozenset({"a"})
    assert caller.tenant.priority == -3 and caller.tenant.weight == 2.0
    store.set_limits("alice", all_models=True, weight=0.5)
    caller = store.resolve(issued.key)
    assert caller is not None and caller.key.models is None and caller.tenant.weight == 0.5


def test_a_tenant_opts_in_to_online_eval_and_back_to_the_default(store: TenantStore) -> None:
    issued = store.add("alice", eval_sample=0.25)
    store.set_limits("alice", weight=3.0)  # other settings leave the opt-in as it is
    caller = store.resolve(issued.key)
    assert caller is not None and caller.tenant.eval_sample == 0.25 and caller.tenant.weight == 3.0
    store.set_limits("alice", eval_sample=None)
    caller = store.resolve(issued.key)
    assert caller is not None and caller.tenant.eval_sample is None
    with pytest.raises(SwitchyardError):
        store.set_limits("alice", eval_sample=1.5)


def test_a_database_from_before_the_opt_in_column_still_opens(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = sqlite3.connect(path)
    old.execute(
        "CREATE TABLE tenants (name TEXT PRIMARY KEY, priority INTEGER NOT NULL, "
        "weight DOUBLE PRECISION NOT NULL, created DOUBLE PRECISION NOT NULL)"
    )
    old.execute("INSERT INTO tenants VALUES ('alice', 0, 1.0, 0.0)")
    old.commit()
    old.close()
    store = TenantStore(open_database(path))
    assert store.listing("alice").tenant.eval_sample is None
    store.add("bob", eval_sample=0.5)
    assert TenantStore(open_database(path)).listing("bob").tenant.eval_sample == 0.5


def test_names_are_unique_and_checked(store: TenantStore) -> None:
    store.add("alice")
    with pytest.raises(TenantExistsError):
        store.add("alice")
    with pytest.raises(TenantNotFoundError):
        store.rotate_key("bob")
    with pytest.raises(SwitchyardError):
        store.add("not a name")
    with pytest.raises(SwitchyardError):
        store.add("bob", weight=0)
    assert [listing.tenant.name for listing in store.list()] == ["alice"]


def test_a_second_connection_sees_changes_at_once(store: TenantStore, location: str) -> None:
    """The CLI and the gateway are two processes on one database: a rotation is visible to the other at once."""
    issued = store.add("alice")
    gateway_view = TenantStore(open_database(location))
    assert gateway_view.resolve(issued.key) is not None
    store.rotate_key("alice")
    assert gateway_view.resolve(issued.key) is None


def test_usage_sums_by_tenant_and_model_over_a_span(location: str) -> None:
    log = UsageLog(open_database(location))
    minute = 1_700_000_040.0
    log.record("alice", "chat", minute + 1, TokenUsage(10, 4, 5), cost=0.5)
    log.record("alice", "chat", minute + 59, TokenUsage(20, 0, 7), cost=0.25)
    log.record("alice", "chat", minute + 60, TokenUsage(1, 0, 1), cost=0.0, cache_hit=True)
    log.record("alice", "code", minute + 61, TokenUsage(3, 0, 3), cost=1.0)
    log.record("bob", "chat", minute, TokenUsage(100, 0, 100), cost=2.0)
    everything = {(row.tenant, row.model): row for row in log.totals()}
    chat = everything[("alice", "chat")]
    assert (chat.requests, chat.cache_hits, chat.usage, chat.cost) == (3, 1, TokenUsage(31, 4, 13), 0.75)
    assert everything[("bob", "chat")].usage == TokenUsage(100, 0, 100)
    later = log.totals("alice", start=minute + 60)
    assert {(row.model, row.requests) for row in later} == {("chat", 1), ("code", 1)}
    earlier = log.totals("alice", end=minute + 60)
    assert [(row.model, row.requests) for row in earlier] == [("chat", 2)]
