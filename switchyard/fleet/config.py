"""The fleet's configuration: pools of replicas and the gateway's settings, validated once where they are made.

A config comes from flags (`switchyard fleet serve --worker ...`) or a TOML file (`--config fleet.toml`):

    port = 8080
    policy = "round_robin"              # the default of pools that name none
    tenants_db = "/var/lib/switchyard/tenants.db"   # tenants, keys, limits, usage (or a postgresql:// URL)

    [pools.chat]                        # clients send model="chat"
    workers = ["http://10.0.0.5:8000", "http://10.0.0.6:8000"]
    policy = "kv_aware"
    tokenizer = "/models/chat"          # the model's tokenizer.json, for token-keyed routing
    policy_options = { request_cost_tokens = 256 }
    shadow = { pool = "small", share = 0.1 }   # copy 10% of requests to `small`, answers only logged

    [pools.small]                       # started here: 2 x `switchyard serve switchyard-chat --dtype float32`
    replicas = 2
    source = "switchyard-chat"          # serve's MODEL argument (default: the pool's name)
    serve_args = ["--dtype", "float32"]
    launcher = "local"                  # or "ray" (with ray_address, gpus_per_replica, cpus_per_replica)

    [response_cache]                    # answers to deterministic requests, per tenant
    ttl = 300
    max_entries = 4096

    [online_eval]                       # log 5% of requests (acme: 50%) for feedback and judges
    sample = 0.05
    tenants = { acme = 0.5 }

    [prices.chat]                       # per 1M tokens: usage costs, and the credits ledger's charges
    input = 0.5
    cached_input = 0.125
    output = 1.5

    [cascades.auto]                     # model="auto": `small` answers, `chat` when small is unsure
    tiers = ["small", "chat"]
    min_mean_logprob = -0.3
    min_token_logprob = -3.0
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from switchyard.fleet.cascade.config import CascadeConfig, cascades_from_mapping
from switchyard.fleet.errors import FleetConfigError
from switchyard.fleet.ledger.config import ledger_db_from_mapping
from switchyard.fleet.online_eval.config import OnlineEvalConfig, online_eval_from_mapping
from switchyard.fleet.policies import POLICIES, make_policy
from switchyard.fleet.prices import PriceTable, price_table_from_mapping
from switchyard.fleet.replicas.base import ReplicaSpec
from switchyard.fleet.response_cache import ResponseCacheConfig
from switchyard.fleet.semantic_cache import SemanticCacheConfig, semantic_config_from_mapping

LauncherKind = Literal["local", "ray"]


@dataclass(frozen=True)
class BreakerConfig:
    """Passive ejection: when a replica is taken out after failures, and how soon it is probed again."""

    failure_threshold: int = 3
    """Consecutive failed or timed-out requests (connect errors, 5xx) that eject a replica."""
    base_backoff: float = 1.0
    """Seconds before the first probe of an ejected replica; doubled after each failed probe."""
    max_backoff: float = 30.0
    """The longest wait between probes."""

    def __post_init__(self) -> None:
        if self.failure_threshold < 1:
            raise FleetConfigError("the breaker's failure threshold must be at least 1")
        if not 0 < self.base_backoff <= self.max_backoff:
            raise FleetConfigError("breaker backoffs must satisfy 0 < base_backoff <= max_backoff")


@dataclass(frozen=True)
class LaunchConfig:
    """Replicas the fleet starts itself: `spec.count` copies of `switchyard serve`, as processes or Ray actors."""

    spec: ReplicaSpec
    launcher: LauncherKind = "local"
    ray_address: str | None = None
    """With the ray launcher: the cluster to join (None starts or finds a local one)."""
    gpus_per_replica: float = 0.0
    """With the ray launcher: GPUs each replica's placement group reserves (a tensor-parallel group: more)."""
    cpus_per_replica: float = 1.0

    def __post_init__(self) -> None:
        if self.spec.count < 1:
            raise FleetConfigError(f"pool `{self.spec.served_name}`: replicas must be at least 1")
        if self.launcher not in ("local", "ray"):
            raise FleetConfigError(f"pool `{self.spec.served_name}`: launcher must be `local` or `ray`")
        if self.gpus_per_replica < 0 or self.cpus_per_replica <= 0:
            raise FleetConfigError(
                f"pool `{self.spec.served_name}`: gpus_per_replica must be >= 0, cpus_per_replica > 0"
            )
        if self.launcher == "local" and self.ray_address is not None:
            raise FleetConfigError(f"pool `{self.spec.served_name}`: ray_address needs launcher = `ray`")


@dataclass(frozen=True)
class ShadowConfig:
    """`[pools.NAME] shadow = { pool = "candidate", share = 0.1 }`: copy that share of the pool's requests to
    the candidate pool in the background (shadow.py); the caller never waits for or sees the copy."""

    pool: str
    share: float

    def __post_init__(self) -> None:
        if isinstance(self.share, bool) or not isinstance(self.share, int | float) or not 0 < self.share <= 1:
            raise FleetConfigError(f"a shadow's share must be in (0, 1], got {self.share!r}")


@dataclass(frozen=True)
class PoolConfig:
    """One model name and the replicas that serve it."""

    model: str
    """The pool's name: the `model` clients send, and the name the replicas serve it under."""
    workers: tuple[str, ...] = ()
    """Base URLs of servers already running (Switchyard, vLLM, SGLang, ...), without /v1."""
    launch: LaunchConfig | None = None
    """Replicas the fleet starts and supervises, beside or instead of `workers`."""
    policy: str = "round_robin"
    """The routing policy's --policy name."""
    policy_options: Mapping[str, Any] = field(default_factory=dict)
    """The policy's settings (fields of its `config_type`, e.g. cache_aware's cache_threshold)."""
    tokenizer: str | None = None
    """A folder with the model's tokenizer.json, for policies keyed on token ids (kv_aware): the gateway then
    tokenizes prompts itself. Unset, it uses the folder a Switchyard replica on this machine reports, else
    asks a replica's POST /tokenize (a round trip per request)."""
    max_in_flight_per_replica: int = 64
    """Requests the gateway lets a replica have at once; more wait in the gateway's queue, where routing can
    still pick the best replica when one frees up."""
    max_queue: int = 256
    """Requests waiting in the gateway for a free replica; beyond it, 429 with Retry-After."""
    shadow: ShadowConfig | None = None
    """A candidate pool that gets a copy of a share of this pool's requests (None: none)."""

    def __post_init__(self) -> None:
        if not self.model:
            raise FleetConfigError("a pool needs a model name")
        if not self.workers and self.launch is None:
            raise FleetConfigError(f"pool `{self.model}` has neither workers nor replicas to launch")
        for url in self.workers:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise FleetConfigError(
                    f"pool `{self.model}`: worker {url!r} is not an http(s)://host:port URL"
                )
            if parts.path.rstrip("/").endswith("/v1"):
                raise FleetConfigError(f"pool `{self.model}`: give worker {url!r} without its /v1 suffix")
        if len(set(self.workers)) != len(self.workers):
            raise FleetConfigError(f"pool `{self.model}` lists a worker twice")
        if self.max_in_flight_per_replica < 1:
            raise FleetConfigError(f"pool `{self.model}`: max_in_flight_per_replica must be at least 1")
        if self.max_queue < 0:
            raise FleetConfigError(f"pool `{self.model}`: max_queue must be >= 0")
        if self.policy not in POLICIES:
            raise FleetConfigError(
                f"pool `{self.model}`: unknown routing policy {self.policy!r}; "
                f"choose one of {', '.join(sorted(POLICIES))}"
            )
        try:
            make_policy(self.policy, self.policy_options)
        except (TypeError, ValueError) as exc:
            raise FleetConfigError(f"pool `{self.model}`: {exc}") from exc


@dataclass(frozen=True)
class FleetConfig:
    """Everything `switchyard fleet serve` needs; the runtime takes this and nothing else."""

    pools: tuple[PoolConfig, ...]
    host: str = "127.0.0.1"
    port: int = 8080
    api_key: str | None = None
    """Clients must send `Authorization: Bearer <api_key>` on /v1 routes (None: no check)."""
    worker_api_key: str | None = None
    """Sent to the replicas as their bearer key. Unset, the client's Authorization header passes on, unless
    it carried the gateway's own `api_key`."""
    health_interval: float = 2.0
    """Seconds between active checks (GET /health, and /metrics for the load) of each replica."""
    health_timeout: float = 5.0
    connect_timeout: float = 5.0
    read_timeout: float | None = 600.0
    """Seconds a replica may go silent mid-response before the attempt counts as timed out (None: forever)."""
    max_attempts: int = 3
    """Replicas tried for one request that fails before its first byte (connect error, 5xx, 429)."""
    breaker: BreakerConfig = field(default_factory=BreakerConfig)
    shutdown_grace: float = 30.0
    """Seconds in-flight requests get to finish after SIGTERM before the gateway stops."""
    tenants_db: str | None = None
    """The tenants database (a SQLite file, or a postgresql:// URL): set, every /v1 request needs a tenant's
    key, and keys' limits, usage and costs apply. `api_key` is then the operators' key (usage of any tenant)."""
    response_cache: ResponseCacheConfig | None = None
    semantic_cache: SemanticCacheConfig | None = None
    """The response cache's semantic mode (`[response_cache.semantic]`): off unless configured."""
    """Answer repeated deterministic requests from the gateway (None: off)."""
    prices: PriceTable = field(default_factory=PriceTable)
    """What tokens cost per model, for usage costs and the credits ledger's charges."""
    credits_db: str | None = None
    """The credits ledger (a SQLite file): set, a request is admitted only if its tenant's credit covers its
    reservation (prompt + max_tokens at the model's price), settled to what it used when it ends."""
    online_eval: OnlineEvalConfig | None = None
    """Log a sampled share of requests with their answers, for feedback and judges (None: off)."""
    cascades: tuple[CascadeConfig, ...] = ()
    """Model names whose requests try a cheap pool first and a larger one when its answer is unsure."""

    def __post_init__(self) -> None:
        if not self.pools:
            raise FleetConfigError(
                "nothing to serve: give --worker URL, --replicas N MODEL, or a --config file with pools"
            )
        names = [pool.model for pool in self.pools]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise FleetConfigError(f"more than one pool is named {', '.join(duplicates)}")
        if self.health_interval <= 0 or self.health_timeout <= 0 or self.connect_timeout <= 0:
            raise FleetConfigError("health_interval, health_timeout and connect_timeout must be positive")
        if self.read_timeout is not None and self.read_timeout <= 0:
            raise FleetConfigError("read_timeout must be positive")
        if self.max_attempts < 1:
            raise FleetConfigError("max_attempts must be at least 1")
        if self.semantic_cache is not None and self.response_cache is None:
            raise FleetConfigError(
                "the semantic cache is a mode of the response cache: turn [response_cache] on"
            )
        if self.shutdown_grace < 0:
            raise FleetConfigError("shutdown_grace must be >= 0")
        for pool in self.pools:
            if pool.shadow is not None and pool.shadow.pool not in names:
                raise FleetConfigError(
                    f"pool `{pool.model}`: its shadow pool `{pool.shadow.pool}` does not exist"
                )
            if pool.shadow is not None and pool.shadow.pool == pool.model:
                raise FleetConfigError(f"pool `{pool.model}` cannot shadow itself")
        for cascade in self.cascades:
            if cascade.name in names:
                raise FleetConfigError(f"cascade `{cascade.name}` has the name of a pool; give it its own")
            missing = [tier for tier in cascade.tiers if tier not in names]
            if missing:
                raise FleetConfigError(
                    f"cascade `{cascade.name}`: no pool named {', '.join(f'`{tier}`' for tier in missing)}"
                )
        cascade_names = [cascade.name for cascade in self.cascades]
        if len(set(cascade_names)) != len(cascade_names):
            raise FleetConfigError("two cascades have the same name")
        if self.credits_db is not None:
            self.prices.require(pool.model for pool in self.pools)
        ray_addresses = {p.launch.ray_address for p in self.pools if p.launch and p.launch.launcher == "ray"}
        if len(ray_addresses) > 1:
            raise FleetConfigError(
                "pools placed on Ray must name the same ray_address (one cluster per gateway)"
            )

    def pool(self, model: str) -> PoolConfig:
        return next(pool for pool in self.pools if pool.model == model)


_POOL_KEYS = {
    "workers",
    "policy",
    "policy_options",
    "tokenizer",
    "max_in_flight_per_replica",
    "max_queue",
    "replicas",
    "source",
    "serve_args",
    "threads",
    "launcher",
    "ray_address",
    "gpus_per_replica",
    "cpus_per_replica",
    "shadow",
}
_POOL_DEFAULT_KEYS = {"policy", "max_in_flight_per_replica", "max_queue"}
"""Pool settings a file may also give at its top level, as the default of every pool."""
_BREAKER_KEYS = {f"breaker_{f.name}": f.name for f in fields(BreakerConfig)}
_FLEET_KEYS = {f.name for f in fields(FleetConfig)} - {
    "pools",
    "breaker",
    "response_cache",
    "prices",
    "credits_db",
    "online_eval",
    "cascades",
}
_CACHE_KEYS = {f.name for f in fields(ResponseCacheConfig)}


def load_fleet_config(path: Path) -> FleetConfig:
    """A FleetConfig from a TOML file; FleetConfigError naming the file and the problem."""
    try:
        document = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise FleetConfigError(f"{path}: {exc}") from exc
    try:
        return fleet_config_from_mapping(document)
    except FleetConfigError as exc:
        raise FleetConfigError(f"{path}: {exc}") from exc


def fleet_config_from_mapping(document: Mapping[str, Any]) -> FleetConfig:
    """A FleetConfig from a parsed TOML document (the shape in this module's docstring)."""
    try:
        return _fleet_config(document)
    except FleetConfigError:
        raise
    except (TypeError, ValueError) as exc:  # a value of the wrong type, met by a constructor's checks
        raise FleetConfigError(f"a setting has the wrong type: {exc}") from exc


def _fleet_config(document: Mapping[str, Any]) -> FleetConfig:
    allowed = (
        _FLEET_KEYS
        | _POOL_DEFAULT_KEYS
        | set(_BREAKER_KEYS)
        | {"pools", "response_cache", "prices", "credits", "online_eval", "cascades"}
    )
    _reject_unknown(document, allowed, "at the top level")
    pools_table = document.get("pools", {})
    if not isinstance(pools_table, Mapping):
        raise FleetConfigError("`pools` must be a table of [pools.NAME] tables")
    defaults = {key: document[key] for key in _POOL_DEFAULT_KEYS if key in document}
    pools = tuple(_pool_from_mapping(name, {**defaults, **table}) for name, table in pools_table.items())
    breaker = BreakerConfig(**{_BREAKER_KEYS[k]: v for k, v in document.items() if k in _BREAKER_KEYS})
    settings: dict[str, Any] = {key: document[key] for key in _FLEET_KEYS if key in document}
    if "response_cache" in document:
        table = document["response_cache"]
        if isinstance(table, dict) and "semantic" in table:
            table = dict(table)
            settings["semantic_cache"] = semantic_config_from_mapping(table.pop("semantic"))
        settings["response_cache"] = _cache_from_mapping(table)
    if "online_eval" in document:
        settings["online_eval"] = online_eval_from_mapping(document["online_eval"])
    if "cascades" in document:
        settings["cascades"] = cascades_from_mapping(document["cascades"])
    prices = document.get("prices", {})
    if not isinstance(prices, Mapping):
        raise FleetConfigError("`prices` must be a table of [prices.MODEL] tables")
    credits_db = ledger_db_from_mapping(document)
    if credits_db is not None:
        settings["credits_db"] = credits_db
    return FleetConfig(pools=pools, breaker=breaker, prices=price_table_from_mapping(prices), **settings)


def _cache_from_mapping(table: Any) -> ResponseCacheConfig:
    if not isinstance(table, Mapping):
        raise FleetConfigError("response_cache must be a table")
    _reject_unknown(table, _CACHE_KEYS, "in [response_cache]")
    return ResponseCacheConfig(**table)


def _pool_from_mapping(name: str, table: Any) -> PoolConfig:
    if not isinstance(table, Mapping):
        raise FleetConfigError(f"pools.{name} must be a table")
    _reject_unknown(table, _POOL_KEYS, f"in [pools.{name}]")
    launch = None
    if "replicas" in table:
        spec = ReplicaSpec(
            model=str(table.get("source", name)),
            served_name=name,
            count=int(table["replicas"]),
            serve_args=tuple(str(arg) for arg in table.get("serve_args", ())),
            threads=table.get("threads"),
        )
        launch = LaunchConfig(
            spec=spec,
            launcher=table.get("launcher", "local"),
            ray_address=table.get("ray_address"),
            gpus_per_replica=float(table.get("gpus_per_replica", 0.0)),
            cpus_per_replica=float(table.get("cpus_per_replica", 1.0)),
        )
    else:
        routing = {"workers", "shadow", "policy_options", "tokenizer"}
        launch_only = sorted(set(table) & (_POOL_KEYS - _POOL_DEFAULT_KEYS - routing))
        if launch_only:
            raise FleetConfigError(f"[pools.{name}] gives {', '.join(launch_only)} but no `replicas` count")
    workers = table.get("workers", [])
    if not isinstance(workers, list):
        raise FleetConfigError(f"[pools.{name}] workers must be a list of URLs")
    settings = {key: table[key] for key in _POOL_DEFAULT_KEYS if key in table}
    options = table.get("policy_options", {})
    if not isinstance(options, Mapping):
        raise FleetConfigError(f"[pools.{name}] policy_options must be a table")
    return PoolConfig(
        model=name,
        workers=tuple(workers),
        launch=launch,
        policy_options=dict(options),
        tokenizer=table.get("tokenizer"),
        shadow=_shadow_from_mapping(name, table.get("shadow")),
        **settings,
    )


def _shadow_from_mapping(name: str, table: Any) -> ShadowConfig | None:
    if table is None:
        return None
    if not isinstance(table, Mapping) or set(table) != {"pool", "share"}:
        raise FleetConfigError(f'[pools.{name}] shadow must be {{ pool = "NAME", share = RATE }}')
    return ShadowConfig(pool=str(table["pool"]), share=table["share"])


def _reject_unknown(table: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise FleetConfigError(
            f"unknown setting(s) {', '.join(unknown)} {where}; known: {', '.join(sorted(allowed))}"
        )
