"""`switchyard credits grant|balance|history`, and the [credits] settings the gateway reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from switchyard.cli import main as switchyard_main
from switchyard.fleet.config import fleet_config_from_mapping
from switchyard.fleet.errors import FleetConfigError
from switchyard.fleet.ledger.cli import main, parse_duration, parse_time
from switchyard.fleet.ledger.config import default_ledger_path
from switchyard.fleet.ledger.events import Spend
from switchyard.fleet.ledger.ledger import Ledger

JAN_1 = 1735689600.0  # 2025-01-01T00:00:00Z


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_grant_balance_and_history_at_past_times(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = ["--ledger-db", str(tmp_path / "ledger.db")]
    code, out, _ = run(
        capsys, "grant", "acme", "100", "--at", "2025-01-01T00:00:00Z", "--expires-in", "30d", *db
    )
    assert code == 0 and "granted 100 credits to acme at 2025-01-01T00:00:00Z" in out
    assert "expiring 2025-01-31T00:00:00Z" in out
    run(
        capsys,
        "grant",
        "acme",
        "2.5",
        "--at",
        str(JAN_1 + 86400),
        "--id",
        "invoice-7",
        "--note",
        "top-up",
        *db,
    )
    ledger = Ledger.open(tmp_path / "ledger.db")
    ledger.record(Spend("s1", "acme", 40_000_000, at=JAN_1 + 2 * 86400, note="chat: reserved"))
    ledger.close()

    _, out, _ = run(capsys, "balance", "--at", "2025-01-01T12:00:00", *db)
    assert out.splitlines() == ["balances at 2025-01-01T12:00:00Z (credits)", "acme  100"]
    _, out, _ = run(capsys, "balance", "acme", "--at", "2025-01-03T00:00:00+00:00", *db)
    assert out.splitlines()[1] == "acme  62.5"
    _, out, _ = run(capsys, "balance", "acme", "--at", "2025-02-01", *db)  # the 30-day grant lapsed
    assert out.splitlines()[1] == "acme  2.5"

    _, out, _ = run(capsys, "history", "acme", *db)
    lines = out.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith(
        "2025-01-01T00:00:00Z  grant  +100 (expires 2025-01-31T00:00:00Z)  balance 100"
    )
    assert lines[1].endswith("balance 102.5  [invoice-7]  top-up")
    assert "spend  -40 (reserved, not settled yet)  balance 62.5  [s1]  chat: reserved" in lines[2]
    _, out, _ = run(capsys, "history", "acme", "--at", "2025-01-01T23:00:00Z", *db)
    assert len(out.splitlines()) == 1


def test_a_grant_resent_under_its_id_is_recorded_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = ["--ledger-db", str(tmp_path / "ledger.db")]
    run(capsys, "grant", "acme", "10", "--id", "invoice-1", *db)
    code, out, _ = run(capsys, "grant", "acme", "10", "--id", "invoice-1", *db)  # a retry, a moment later
    assert code == 0 and out.startswith("already recorded: grant invoice-1")
    code, _, err = run(capsys, "grant", "globex", "10", "--id", "invoice-1", *db)
    assert code == 1 and "choose another id" in err
    _, out, _ = run(capsys, "balance", *db)
    assert out.splitlines()[1:] == ["acme  10"]


def test_bad_amounts_and_times_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = ["--ledger-db", str(tmp_path / "ledger.db")]
    code, _, err = run(capsys, "grant", "acme", "1.0000001", *db)
    assert code == 1 and "at most 6 decimals" in err
    code, _, err = run(capsys, "grant", "acme", "5", "--at", "100", "--expires-at", "50", *db)
    assert code == 1 and "expire after" in err
    with pytest.raises(SystemExit):
        main(["balance", "--at", "yesterday", *db])
    assert "is not a time" in capsys.readouterr().err


def test_times_and_durations_parse() -> None:
    assert parse_time("2025-01-01T00:00:00Z") == JAN_1 == parse_time("2025-01-01") == parse_time(str(JAN_1))
    assert parse_time("2025-01-01T01:00:00+01:00") == JAN_1
    assert [parse_duration(d) for d in ("90", "90s", "15m", "12h", "30d", "2w")] == [
        90,
        90,
        900,
        43200,
        2592000,
        1209600,
    ]


def test_the_front_door_runs_credits_and_the_default_file_is_under_switchyard_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SWITCHYARD_HOME", str(tmp_path / "home"))
    assert default_ledger_path() == tmp_path / "home" / "ledger.db"
    assert switchyard_main(["credits", "grant", "acme", "3"]) == 0
    assert (tmp_path / "home" / "ledger.db").exists()
    assert switchyard_main(["credits", "balance", "acme"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "acme  3"


def test_the_credits_table_turns_the_check_on(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SWITCHYARD_HOME", str(tmp_path))
    pool = {"pools": {"chat": {"workers": ["http://127.0.0.1:9"]}}}
    prices = {"prices": {"chat": {"input": 1, "output": 2}}}
    assert fleet_config_from_mapping({**pool, **prices}).credits_db is None
    config = fleet_config_from_mapping({**pool, **prices, "credits": {}})
    assert config.credits_db == str(tmp_path / "ledger.db")
    assert config.prices.price("chat").output == 2
    config = fleet_config_from_mapping({**pool, **prices, "credits": {"ledger_db": "/srv/ledger.db"}})
    assert config.credits_db == "/srv/ledger.db"
    with pytest.raises(FleetConfigError, match="unknown setting"):
        fleet_config_from_mapping({**pool, **prices, "credits": {"ledger": "x"}})
    with pytest.raises(FleetConfigError, match="no price for `chat`"):
        fleet_config_from_mapping({**pool, "credits": {}})
