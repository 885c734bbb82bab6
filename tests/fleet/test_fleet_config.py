"""FleetConfig: validated once where it is made, from flags or a TOML file."""

from __future__ import annotations

from pathlib import Path

import pytest

from switchyard.fleet.config import FleetConfig, PoolConfig, fleet_config_from_mapping, load_fleet_config
from switchyard.fleet.errors import FleetConfigError
from switchyard.fleet.online_eval.config import OnlineEvalConfig

EXAMPLE = """
port = 9000
policy = "round_robin"
max_queue = 32
health_interval = 0.5
breaker_failure_threshold = 5

[pools.chat]
workers = ["http://10.0.0.5:8000", "http://10.0.0.6:8000/"]
max_in_flight_per_replica = 4

[pools.small]
replicas = 2
source = "switchyard-chat"
serve_args = ["--dtype", "float32"]
threads = 1

[pools.big]
replicas = 4
launcher = "ray"
ray_address = "ray://head:10001"
gpus_per_replica = 1
"""


def test_a_toml_file_describes_pools_and_settings(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(EXAMPLE)
    config = load_fleet_config(path)
    assert config.port == 9000 and config.health_interval == 0.5
    assert config.breaker.failure_threshold == 5
    chat, small, big = config.pools
    assert chat.workers == ("http://10.0.0.5:8000", "http://10.0.0.6:8000/")
    assert (chat.max_in_flight_per_replica, chat.max_queue, chat.policy) == (4, 32, "round_robin")
    assert small.launch is not None and small.launch.launcher == "local"
    assert small.launch.spec.model == "switchyard-chat" and small.launch.spec.served_name == "small"
    assert small.launch.spec.serve_args == ("--dtype", "float32") and small.launch.spec.threads == 1
    assert big.launch is not None and big.launch.launcher == "ray"
    assert big.launch.ray_address == "ray://head:10001" and big.launch.gpus_per_replica == 1.0
    assert big.launch.spec.model == "big"  # the pool's name when no source is given


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("prot = 1\n[pools.a]\nworkers = ['http://h:1']", "unknown setting(s) prot"),
        ("[pools.a]\nworkers = ['http://h:1']\npolicy = 'fastest'", "unknown routing policy 'fastest'"),
        ("[pools.a]\nworkers = ['h:1']", "not an http(s)://host:port URL"),
        ("[pools.a]\nworkers = ['http://h:1/v1']", "without its /v1"),
        ("[pools.a]\nworkers = 'http://h:1'", "a list of URLs"),
        ("[pools.a]\nsource = 'x'", "no `replicas` count"),
        ("[pools.a]\nreplicas = 0", "at least 1"),
        ("[pools.a]\nreplicas = 1\nlauncher = 'k8s'", "`local` or `ray`"),
        ("[pools.a]\nworkers = ['http://h:1']\nmax_queue = 'many'", "wrong type"),
        ("port = 1", "nothing to serve"),
        ("[pools.a]", "neither workers nor replicas"),
        ("[pools.a", "fleet.toml"),
    ],
)
def test_a_bad_file_is_named_with_its_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(text)
    with pytest.raises(FleetConfigError, match=r"fleet\.toml") as raised:
        load_fleet_config(path)
    assert message in str(raised.value)


def test_pool_names_are_unique() -> None:
    pool = PoolConfig(model="a", workers=("http://h:1",))
    with pytest.raises(FleetConfigError, match="more than one pool is named a"):
        FleetConfig(pools=(pool, pool))


def test_settings_are_checked() -> None:
    pool = PoolConfig(model="a", workers=("http://h:1",))
    with pytest.raises(FleetConfigError, match="max_attempts"):
        FleetConfig(pools=(pool,), max_attempts=0)
    with pytest.raises(FleetConfigError, match="health_interval"):
        FleetConfig(pools=(pool,), health_interval=0)
    with pytest.raises(FleetConfigError, match="lists a worker twice"):
        PoolConfig(model="a", workers=("http://h:1", "http://h:1"))


def test_pools_on_ray_share_one_cluster() -> None:
    from switchyard.fleet.config import LaunchConfig
    from switchyard.fleet.replicas.base import ReplicaSpec

    def on_ray(name: str, address: str | None) -> PoolConfig:
        spec = ReplicaSpec(model="m", served_name=name, count=1)
        return PoolConfig(model=name, launch=LaunchConfig(spec=spec, launcher="ray", ray_address=address))

    FleetConfig(pools=(on_ray("a", "auto"), on_ray("b", "auto")))
    with pytest.raises(FleetConfigError, match="same ray_address"):
        FleetConfig(pools=(on_ray("a", "auto"), on_ray("b", None)))


def test_shadow_and_online_eval_come_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(
        '[pools.chat]\nworkers = ["http://a:1"]\nshadow = { pool = "next", share = 0.1 }\n'
        '[pools.next]\nworkers = ["http://b:1"]\n'
        '[online_eval]\nsample = 0.05\ntenants = { acme = 0.5 }\nlog = "x.db"\n'
    )
    config = load_fleet_config(path)
    shadow = config.pool("chat").shadow
    assert shadow is not None and (shadow.pool, shadow.share) == ("next", 0.1)
    assert config.online_eval is not None
    assert config.online_eval.rate("acme") == 0.5 and config.online_eval.rate("other") == 0.05


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('shadow = { pool = "nowhere", share = 0.1 }', "does not exist"),
        ('shadow = { pool = "chat", share = 0.1 }', "cannot shadow itself"),
        ('shadow = { pool = "next", share = 0 }', "share must be in"),
    ],
)
def test_a_shadow_must_name_another_pool_and_a_share(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(
        f'[pools.chat]\nworkers = ["http://a:1"]\n{text}\n[pools.next]\nworkers = ["http://b:1"]\n'
    )
    with pytest.raises(FleetConfigError, match=message):
        load_fleet_config(path)


def test_an_online_eval_rate_is_a_share() -> None:
    with pytest.raises(FleetConfigError, match=r"in \[0, 1\]"):
        FleetConfig(
            pools=(PoolConfig("chat", workers=("http://a:1",)),), online_eval=OnlineEvalConfig(sample=2)
        )


def test_a_pool_of_workers_takes_policy_options_and_a_tokenizer() -> None:
    """The module docstring's example: settings of the pool's routing, not of launching, on a worker pool."""
    config = fleet_config_from_mapping(
        {
            "pools": {
                "chat": {
                    "workers": ["http://127.0.0.1:9"],
                    "policy": "kv_aware",
                    "tokenizer": "/models/chat",
                    "policy_options": {"request_cost_tokens": 256},
                }
            }
        }
    )
    pool = config.pool("chat")
    assert pool.tokenizer == "/models/chat" and pool.policy_options == {"request_cost_tokens": 256}
