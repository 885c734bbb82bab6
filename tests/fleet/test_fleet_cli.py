"""`switchyard fleet serve`'s flags, and how they combine with a --config file."""

from __future__ import annotations

from pathlib import Path

import pytest

from switchyard.cli import main as switchyard_main
from switchyard.fleet.cli import build_parser, config_from_args, discover_model, main, split_worker
from switchyard.fleet.errors import FleetConfigError


def config(argv: list[str], serve_args: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    return config_from_args(build_parser().parse_args(["serve", *argv]), serve_args)


def test_workers_group_into_pools_by_model() -> None:
    fleet = config(
        [
            "--worker",
            "http://a:8000@chat",
            "--worker",
            "http://b:8000/@chat",
            "--worker",
            "http://c:8000@code",
        ]
    )
    assert [(pool.model, pool.workers) for pool in fleet.pools] == [
        ("chat", ("http://a:8000", "http://b:8000")),
        ("code", ("http://c:8000",)),
    ]
    named = config(["--worker", "http://a:8000", "--worker-model", "chat", "--policy", "round_robin"])
    assert named.pools[0].model == "chat" and named.pools[0].policy == "round_robin"


def test_split_worker_keeps_credentials_in_urls() -> None:
    assert split_worker("http://a:1@m") == ("http://a:1", "m")
    assert split_worker("http://user:pw@host:1") == ("http://user:pw@host:1", None)
    assert split_worker("http://user:pw@host:1@m") == ("http://user:pw@host:1", "m")


def test_replicas_flags_make_a_launched_pool() -> None:
    fleet = config(
        ["--replicas", "3", "switchyard-chat", "--served-model-name", "chat", "--threads", "1"],
        ("--dtype", "float32"),
    )
    (pool,) = fleet.pools
    assert pool.model == "chat" and pool.launch is not None and pool.launch.launcher == "local"
    spec = pool.launch.spec
    assert (spec.model, spec.served_name, spec.count, spec.serve_args, spec.threads) == (
        "switchyard-chat",
        "chat",
        3,
        ("--dtype", "float32"),
        1,
    )
    on_ray = config(["--replicas", "2", "m", "--ray", "--gpus-per-replica", "1"]).pools[0].launch
    assert on_ray is not None and (on_ray.launcher, on_ray.ray_address, on_ray.gpus_per_replica) == (
        "ray",
        None,
        1.0,
    )
    remote = config(["--replicas", "2", "m", "--ray", "ray://head:10001"]).pools[0].launch
    assert remote is not None and remote.ray_address == "ray://head:10001"


def test_flags_win_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text('port = 9000\nmax_queue = 8\n[pools.chat]\nworkers = ["http://a:1"]\n')
    fleet = config(
        ["--config", str(path), "--max-queue", "2", "--host", "0.0.0.0", "--worker", "http://b:1@code"]
    )
    assert (fleet.port, fleet.host) == (9000, "0.0.0.0")
    assert [(pool.model, pool.max_queue) for pool in fleet.pools] == [("chat", 2), ("code", 2)]


def test_api_keys_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHYARD_FLEET_API_KEY", "outer")
    monkeypatch.setenv("SWITCHYARD_WORKER_API_KEY", "inner")
    fleet = config(["--worker", "http://a:1@m"])
    assert (fleet.api_key, fleet.worker_api_key) == ("outer", "inner")
    assert config(["--worker", "http://a:1@m", "--api-key", "flag"]).api_key == "flag"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "nothing to serve"),
        (["--ray"], "--ray places the --replicas"),
        (["some-model"], "MODEL and flags after `--` are for --replicas"),
        (["--worker", "http://127.0.0.1:9"], "name its pool with --worker-model"),
        (["--worker", "http://a:1@m", "--max-attempts", "0"], "max_attempts"),
    ],
)
def test_mistakes_exit_2_saying_what_to_fix(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", *argv]) == 2
    assert message in capsys.readouterr().err


def test_the_front_door_delegates_fleet(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        switchyard_main(["fleet", "serve", "--help"])
    assert raised.value.code == 0
    out = capsys.readouterr().out
    assert "--worker" in out and "--replicas" in out and "--policy" in out


def test_a_worker_that_requires_a_key_is_asked_for_its_model_with_the_workers_key() -> None:
    import http.server
    import json as json_module
    import threading

    class Worker(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            allowed = self.headers.get("authorization") == "Bearer inner"
            body = json_module.dumps({"data": [{"id": "served-name"}]} if allowed else {"error": {}}).encode()
            self.send_response(200 if allowed else 401)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Worker)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert discover_model(url, "inner") == "served-name"
        with pytest.raises(FleetConfigError, match="cannot ask worker"):
            discover_model(url)
    finally:
        server.shutdown()
