"""The ledger on disk: written ahead, replayed on restart, idempotent, and whole after a crash between append
and apply (injected in-process, and as a real SIGKILL of a writing process)."""

from __future__ import annotations

import math
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ledger_model import QUERY_TIMES, TENANTS, LedgerModel, ledger_events, scripted_events

from switchyard.fleet.ledger.errors import InsufficientCreditError, LedgerConflictError
from switchyard.fleet.ledger.event_log import EventLog
from switchyard.fleet.ledger.events import Grant, LedgerEvent, Settle, Spend
from switchyard.fleet.ledger.ledger import Ledger

WRITER = Path(__file__).with_name("ledger_writer.py")
REPO = Path(__file__).resolve().parents[3]


class SimulatedCrash(Exception):
    """The process 'dies' here: after the event is committed to the log, before the ledger applies it."""


class CrashAfterAppend(EventLog):
    def __init__(self, path: Path, crash_on: set[str]) -> None:
        super().__init__(path)
        self.crash_on = crash_on

    def append(self, event: LedgerEvent) -> bool:
        appended = super().append(event)
        if event.event_id in self.crash_on:
            self.crash_on.discard(event.event_id)
            raise SimulatedCrash(event.event_id)
        return appended


def assert_balances(ledger: Ledger, model: LedgerModel) -> None:
    for tenant in TENANTS:
        for at in QUERY_TIMES:
            assert ledger.balance(tenant, at) == model.balance(tenant, at), (tenant, at)


def test_the_log_is_a_wal_database_synced_in_full(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "ledger.db")
    log.append(Grant("g", "acme", 5, at=0))
    assert log._conn.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL: fsync on every commit
    log.close()
    with sqlite3.connect(tmp_path / "ledger.db") as other:
        assert other.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert other.execute("SELECT event_id, amount FROM ledger_events").fetchall() == [("g", 5)]


def test_a_restart_replays_the_log_to_the_same_balances_and_history(tmp_path: Path) -> None:
    events = scripted_events(seed=7, count=120)
    ledger = Ledger.open(tmp_path / "ledger.db")
    for event in events:
        assert ledger.record(event) is True
    history = {tenant: ledger.history(tenant, math.inf) for tenant in TENANTS}
    ledger.close()
    reopened = Ledger.open(tmp_path / "ledger.db")
    assert_balances(reopened, LedgerModel(events))
    assert {tenant: reopened.history(tenant, math.inf) for tenant in TENANTS} == history
    assert reopened.tenants() == sorted({event.tenant for event in events})


def test_a_resent_event_is_recorded_once_and_a_reused_id_is_refused(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path / "ledger.db")
    assert ledger.record(Grant("g", "acme", 10, at=0)) is True
    assert ledger.record(Grant("g", "acme", 10, at=0)) is False
    assert ledger.balance("acme", 1) == 10
    with pytest.raises(LedgerConflictError):
        ledger.record(Grant("g", "acme", 11, at=0))
    ledger.record(Spend("s", "acme", 8, at=1))
    assert ledger.record(Settle("s/settle", "acme", "s", 3, at=5)) is True
    assert ledger.record(Settle("s/settle", "acme", "s", 3, at=9, note="re-sent later")) is False
    with pytest.raises(LedgerConflictError):
        ledger.record(Settle("s/settle", "acme", "s", 4, at=9))
    with pytest.raises(LedgerConflictError):  # a second settlement of one spend, under another id
        ledger.record(Settle("other", "acme", "s", 4, at=9))
    ledger.record(Spend("s2", "acme", 0, at=1))
    with pytest.raises(LedgerConflictError):  # a settlement must name a spend of its own tenant
        ledger.record(Settle("s2/settle", "globex", "s2", 0, at=9))
    with pytest.raises(LedgerConflictError):
        ledger.record(Settle("g/settle", "acme", "g", 0, at=9))
    assert ledger.balance("acme", 10) == 7
    assert ledger.event("s/settle") == Settle("s/settle", "acme", "s", 3, at=5)


def test_ledgers_sharing_a_file_see_each_others_events(tmp_path: Path) -> None:
    gateway = Ledger.open(tmp_path / "ledger.db")
    operator = Ledger.open(tmp_path / "ledger.db")  # `switchyard credits grant` while the gateway runs
    operator.record(Grant("g", "acme", 10, at=0))
    assert gateway.balance("acme", 1) == 10
    gateway.record(Spend("s", "acme", 4, at=1))
    assert operator.balance("acme", 2) == 6


def test_a_covered_spend_checks_what_other_writers_spent_first(tmp_path: Path) -> None:
    first = Ledger.open(tmp_path / "ledger.db")
    second = Ledger.open(tmp_path / "ledger.db")
    first.record(Grant("g", "acme", 10, at=0))
    assert first.spend_if_covered(Spend("a", "acme", 6, at=1)) == 10
    with pytest.raises(InsufficientCreditError) as refused:
        second.spend_if_covered(Spend("b", "acme", 6, at=1))
    assert (refused.value.needed, refused.value.available) == (6, 4)
    assert second.event("b") is None and first.balance("acme", 2) == 4


@settings(max_examples=60, deadline=None)
@given(events=ledger_events(max_events=20), data=st.data())
def test_a_crash_between_append_and_apply_loses_nothing_and_applies_nothing_twice(
    events: list[LedgerEvent], data: st.DataObject
) -> None:
    arrival = data.draw(st.permutations(events), label="arrival order")
    crash_on = data.draw(
        st.sets(st.sampled_from([e.event_id for e in events])), label="crash after appending"
    )
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ledger.db"
        ledger = Ledger(CrashAfterAppend(path, set(crash_on)))
        model = LedgerModel()
        for event in arrival:
            try:
                assert ledger.record(event) is True
            except SimulatedCrash:
                if data.draw(st.booleans(), label=f"restart after {event.event_id}"):
                    ledger.close()
                    ledger = Ledger(CrashAfterAppend(path, set()))
                if data.draw(st.booleans(), label=f"resend {event.event_id}"):
                    assert ledger.record(event) is False  # the writer never got its answer, so it retries
            model.add(event)  # appended, so it counts, resent or not
            assert_balances(ledger, model)
        ledger.close()
        assert_balances(Ledger.open(path), model)


def _writer(path: Path, seed: int, count: int, *kill_at: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, str(WRITER), str(path), str(seed), str(count), *map(str, kill_at)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.parametrize("kill_at", [0, 17, 63])
def test_a_process_killed_between_append_and_apply_keeps_the_event_once(tmp_path: Path, kill_at: int) -> None:
    path = tmp_path / "ledger.db"
    events = scripted_events(seed=kill_at, count=80)
    writer = _writer(path, kill_at, 80, kill_at)
    acknowledged = writer.communicate(timeout=60)[0].split()
    assert writer.returncode == -signal.SIGKILL
    assert acknowledged == ["ready"] + [event.event_id for event in events[:kill_at]]

    ledger = Ledger.open(path)
    assert ledger.event(events[kill_at].event_id) == events[kill_at]  # appended before the kill: kept
    assert ledger.event(events[kill_at + 1].event_id) is None
    assert_balances(ledger, LedgerModel(events[: kill_at + 1]))
    for event in events:  # the writer, restarted, sends everything it was not sure of again
        ledger.record(event)
    assert_balances(ledger, LedgerModel(events))


def test_a_writer_killed_at_a_random_moment_keeps_every_acknowledged_event(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    events = scripted_events(seed=3, count=5000)
    writer = _writer(path, 3, 5000)
    assert writer.stdout is not None
    assert writer.stdout.readline().strip() == "ready"
    acknowledged = [writer.stdout.readline().strip() for _ in range(150)]
    writer.send_signal(signal.SIGKILL)
    writer.communicate(timeout=60)
    assert writer.returncode == -signal.SIGKILL

    ledger = Ledger.open(path)
    logged = [event for event in events if ledger.event(event.event_id) is not None]
    assert logged == events[: len(logged)]  # written in order, nothing half-written
    assert len(logged) >= len(acknowledged) and acknowledged == [
        e.event_id for e in logged[: len(acknowledged)]
    ]
    assert len(logged) < len(events), "the writer finished before the kill; the test proves nothing"
    assert_balances(ledger, LedgerModel(logged))
    ledger.close()
    ledger = Ledger.open(path)
    for event in events:
        ledger.record(event)
    assert_balances(ledger, LedgerModel(events))
