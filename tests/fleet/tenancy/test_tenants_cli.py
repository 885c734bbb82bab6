"""`switchyard tenants` against a real database file, the fleet flags and file that turn tenancy on, and the
weights file launched replicas read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from switchyard.cli import main as switchyard_main
from switchyard.fleet.cli import build_parser, config_from_args
from switchyard.fleet.config import fleet_config_from_mapping
from switchyard.fleet.errors import FleetConfigError
from switchyard.fleet.prices import ModelPrice
from switchyard.fleet.response_cache import ResponseCacheConfig
from switchyard.fleet.tenancy.cli import main as tenants_main
from switchyard.fleet.tenancy.database import open_database
from switchyard.fleet.tenancy.records import Tenant
from switchyard.fleet.tenancy.store import TenantStore
from switchyard.fleet.tenancy.weights_file import weights_toml, with_weights_file
from switchyard.server.tenants import load_tenants


def run(capsys: pytest.CaptureFixture[str], db: Path, *argv: str) -> tuple[int, str, str]:
    code = tenants_main([*argv[:1], "--db", str(db), *argv[1:]])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_add_list_rotate_and_set_limits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "tenants.db"
    code, out, _ = run(
        capsys, db, "add", "alice", "--rpm", "60", "--models", "chat,code", "--weight", "2", "--json"
    )
    assert code == 0
    first = json.loads(out)["api_key"]
    store = TenantStore(open_database(db))
    caller = store.resolve(first)
    assert caller is not None and caller.key.limits.requests_per_minute == 60 and caller.tenant.weight == 2.0

    code, out, _ = run(capsys, db, "rotate-key", "alice")
    assert code == 0
    second = out.strip().splitlines()[-1]
    assert store.resolve(first) is None and store.resolve(second) is not None

    code, out, _ = run(capsys, db, "set-limits", "alice", "--tpm", "1000", "--rpm", "none", "--all-models")
    assert code == 0 and "tokens_per_minute 1000" in out and "requests_per_minute unlimited" in out
    caller = store.resolve(second)
    assert caller is not None and caller.key.models is None
    assert caller.key.limits.tokens_per_minute == 1000 and caller.key.limits.requests_per_minute is None

    code, out, _ = run(capsys, db, "set-limits", "alice", "--eval-sample", "0.2")
    assert code == 0 and "eval sample 0.2" in out
    with pytest.raises(SystemExit) as refused:
        run(capsys, db, "set-limits", "alice", "--eval-sample", "2")
    assert refused.value.code == 2 and "[0, 1]" in capsys.readouterr().err

    code, out, _ = run(capsys, db, "list", "--json")
    (row,) = json.loads(out)
    assert row["tenant"] == "alice" and row["rotated_keys"] == 1 and second.startswith(row["key"]["prefix"])
    assert row["eval_sample"] == 0.2
    assert second not in out


def test_errors_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "tenants.db"
    assert run(capsys, db, "rotate-key", "nobody")[0] == 2
    run(capsys, db, "add", "alice")
    code, _, err = run(capsys, db, "add", "alice")
    assert code == 2 and "already exists" in err
    with pytest.raises(SystemExit):
        run(capsys, db, "add", "bob", "--rpm", "0")


def test_the_front_door_delegates_tenants(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert switchyard_main(["tenants", "list", "--db", str(tmp_path / "t.db")]) == 0
    assert "no tenants" in capsys.readouterr().out


def test_the_weights_file_is_what_a_replica_reads(tmp_path: Path) -> None:
    path = tmp_path / "weights.toml"
    path.write_text(weights_toml([Tenant("alice", weight=3.0), Tenant("team.b", weight=0.5)]))
    assert load_tenants(path).weights == {"alice": 3.0, "team.b": 0.5}
    assert with_weights_file(("--dtype", "float32"), path) == ("--dtype", "float32", "--tenants", str(path))
    assert with_weights_file(("--tenants=mine.toml",), path) == ("--tenants=mine.toml",)


def test_fleet_flags_and_file_turn_tenancy_cache_and_prices_on(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["serve", "--worker", "http://h:1@chat", "--tenants-db", "x.db", "--response-cache-ttl", "30"]
    )
    config = config_from_args(args, [])
    assert config.tenants_db == "x.db" and config.response_cache == ResponseCacheConfig(ttl=30.0)
    plain = config_from_args(build_parser().parse_args(["serve", "--worker", "http://h:1@chat"]), [])
    assert plain.tenants_db is None and plain.response_cache is None
    document = {
        "tenants_db": "postgresql://gw@db/sy",
        "response_cache": {"max_entries": 10},
        "prices": {"chat": {"input": 1, "cached_input": 0.25, "output": 4}},
        "pools": {"chat": {"workers": ["http://h:1"]}},
    }
    config = fleet_config_from_mapping(document)
    assert config.prices.price("chat") == ModelPrice(input=1.0, cached_input=0.25, output=4.0)
    assert config.response_cache == ResponseCacheConfig(max_entries=10)
    with pytest.raises(FleetConfigError, match="unknown setting"):
        fleet_config_from_mapping({**document, "prices": {"chat": {"inptu": 1}}})
    with pytest.raises(FleetConfigError, match=">= 0"):
        fleet_config_from_mapping({**document, "prices": {"chat": {"input": -1, "output": 1}}})
