"""`switchyard fleet serve`: flags (and an optional TOML file) to a FleetConfig, then the gateway runs.

    switchyard fleet serve --worker http://10.0.0.5:8000 --worker http://10.0.0.6:8000
    switchyard fleet serve --worker http://a:8000@chat --worker http://b:8000@code --policy least_load
    switchyard fleet serve --replicas 2 switchyard-chat -- --dtype float32 --max-model-len 2048
    switchyard fleet serve --replicas 4 switchyard-chat --ray --gpus-per-replica 1
    switchyard fleet serve --config fleet.toml
    switchyard fleet serve --worker http://a:8000@chat --tenants-db ~/.switchyard/tenants.db --response-cache

Flags given on the command line win over the file's settings, pool settings (--policy, --max-queue,
--max-in-flight-per-replica) for every pool.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from switchyard.extras import MissingExtraError, require_extra
from switchyard.fleet.config import FleetConfig, LaunchConfig, PoolConfig, load_fleet_config
from switchyard.fleet.errors import FleetConfigError
from switchyard.fleet.ledger.config import default_ledger_path
from switchyard.fleet.online_eval.config import OnlineEvalConfig
from switchyard.fleet.policies import POLICIES
from switchyard.fleet.replicas.base import ReplicaSpec
from switchyard.fleet.response_cache import ResponseCacheConfig
from switchyard.fleet.tenancy.database import TenantsDatabaseError, default_tenants_db

API_KEY_ENV = "SWITCHYARD_FLEET_API_KEY"
"""Where the gateway reads its own API key when --api-key is not given."""
WORKER_API_KEY_ENV = "SWITCHYARD_WORKER_API_KEY"
"""Where the gateway reads the key it sends to workers when --worker-api-key is not given."""
DEFAULT_MODEL = "switchyard-chat"
_DISCOVERY_TIMEOUT = 5.0

_POOL_FLAGS = {"policy": "policy", "max_queue": "max_queue", "max_in_flight": "max_in_flight_per_replica"}
_FLEET_FLAGS = {
    "host": "host",
    "port": "port",
    "health_interval": "health_interval",
    "max_attempts": "max_attempts",
    "shutdown_grace": "shutdown_grace",
    "read_timeout": "read_timeout",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="switchyard fleet", description="Serve many replicas behind one OpenAI-compatible gateway."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="run the gateway in front of replicas",
        description="Route /v1/chat/completions, /v1/completions and /v1/responses to pools of replicas, one pool "
        "per model name: servers already running (--worker), or replicas started here (--replicas N MODEL, as "
        "processes or, with --ray, Ray actors). Also /v1/models, /v1/fleet/replicas, /health and /metrics. "
        "Flags after `--` go to each replica's `switchyard serve`.",
        epilog="Flags win over --config's settings. SIGTERM drains: new requests get 503, running ones get "
        "--shutdown-grace seconds.",
    )
    serve.add_argument(
        "model",
        nargs="?",
        default=None,
        help=f"with --replicas: the model each replica serves (bundled name or folder; default {DEFAULT_MODEL})",
    )
    source = serve.add_argument_group("replicas")
    source.add_argument(
        "--worker",
        action="append",
        default=[],
        metavar="URL[@MODEL]",
        help="a server already running, without /v1 (repeatable); @MODEL names its pool, else --worker-model, "
        "else the model the worker lists first at /v1/models",
    )
    source.add_argument(
        "--worker-model", default=None, help="the pool (model name) of --worker URLs given without @MODEL"
    )
    source.add_argument(
        "--served-model-name",
        default=None,
        help="the name clients use for the --replicas pool (default: MODEL as given); names workers' pool too",
    )
    source.add_argument(
        "--replicas", type=int, default=None, metavar="N", help="start N replicas of MODEL here"
    )
    source.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="place the --replicas as Ray actors, on the cluster at ADDRESS (default: a local one)",
    )
    source.add_argument(
        "--gpus-per-replica", type=float, default=0.0, help="with --ray: GPUs per replica (default 0: CPU)"
    )
    source.add_argument(
        "--cpus-per-replica", type=float, default=1.0, help="with --ray: CPUs per replica (1)"
    )
    source.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads per replica (default: this machine's cores split between the replicas)",
    )
    source.add_argument("--config", type=Path, default=None, help="TOML file of pools and settings")
    routing = serve.add_argument_group("routing and admission")
    routing.add_argument(
        "--policy", choices=sorted(POLICIES), default=None, help="routing policy of every pool (round_robin)"
    )
    routing.add_argument(
        "--max-in-flight-per-replica",
        dest="max_in_flight",
        type=int,
        default=None,
        help="requests a replica gets at once; more wait in the gateway (64)",
    )
    routing.add_argument(
        "--max-queue",
        type=int,
        default=None,
        help="requests waiting per pool; beyond it 429 + Retry-After (256)",
    )
    routing.add_argument(
        "--max-attempts",
        type=int,
        default=None,
        help="replicas tried for a request that fails before its first byte (3)",
    )
    routing.add_argument(
        "--health-interval", type=float, default=None, help="seconds between health checks of a replica (2)"
    )
    routing.add_argument(
        "--read-timeout",
        type=float,
        default=None,
        help="seconds a replica may go silent mid-answer before the attempt fails (600)",
    )
    gateway = serve.add_argument_group("gateway")
    gateway.add_argument("--host", default=None, help="address to listen on (127.0.0.1; 0.0.0.0 for all)")
    gateway.add_argument("--port", type=int, default=None, help="port to listen on (8080)")
    gateway.add_argument(
        "--api-key",
        default=None,
        help=f"require `Authorization: Bearer KEY` on /v1 routes (default: ${API_KEY_ENV})",
    )
    gateway.add_argument(
        "--worker-api-key",
        default=None,
        help=f"bearer key sent to the replicas (default: ${WORKER_API_KEY_ENV}); unset, the client's "
        "Authorization passes on, unless it carried the gateway's own --api-key",
    )
    gateway.add_argument(
        "--shutdown-grace",
        type=float,
        default=None,
        help="seconds requests in flight get to finish after SIGTERM (30)",
    )
    tenancy = serve.add_argument_group("tenants and the response cache")
    tenancy.add_argument(
        "--tenants-db",
        nargs="?",
        const=str(default_tenants_db()),
        default=None,
        metavar="PATH_OR_URL",
        help="turn tenancy on: every /v1 request needs a tenant's key (see `switchyard tenants`), keys' limits "
        "apply (429 + Retry-After), usage is recorded (GET /v1/usage); a SQLite file (default "
        "$SWITCHYARD_HOME/tenants.db) or a postgresql:// URL. --api-key is then the operators' key",
    )
    tenancy.add_argument(
        "--credits-db",
        nargs="?",
        const=str(default_ledger_path()),
        default=None,
        metavar="PATH",
        help="turn the credit check on (per tenant with --tenants-db, else for tenant `default`; every pool needs a "
        "[prices.MODEL] in --config): a "
        "request is admitted only if its tenant's credit covers prompt + max_tokens at the model's price "
        "(429 insufficient_quota), and is charged what it used; the ledger file (default "
        "$SWITCHYARD_HOME/ledger.db; see `switchyard credits`)",
    )
    tenancy.add_argument(
        "--response-cache",
        action="store_true",
        help="answer repeated deterministic requests (temperature 0 or a seed) of the same tenant from the "
        "gateway; `Cache-Control: no-cache` bypasses it",
    )
    tenancy.add_argument(
        "--response-cache-ttl", type=float, default=None, help="seconds a cached answer lives (300)"
    )
    tenancy.add_argument(
        "--response-cache-entries", type=int, default=None, help="answers the cache holds at most (4096)"
    )
    evals = serve.add_argument_group("online evaluation")
    evals.add_argument(
        "--eval-sample",
        type=float,
        default=None,
        metavar="RATE",
        help="log this share (0..1) of requests with their answers for feedback (POST /v1/feedback) and "
        "judges (`switchyard eval online`); per-tenant rates go in the --config file's [online_eval.tenants]",
    )
    evals.add_argument(
        "--eval-log",
        default=None,
        metavar="PATH",
        help="the online-eval log, a SQLite file (default $SWITCHYARD_HOME/online-eval.db)",
    )
    gateway.add_argument("-v", "--verbose", action="store_true", help="log routing and health changes")
    return parser


def config_from_args(args: argparse.Namespace, serve_args: Sequence[str]) -> FleetConfig:
    """The FleetConfig the flags (and --config file) describe; FleetConfigError saying what to fix."""
    base = load_fleet_config(args.config) if args.config is not None else None
    pools = list(base.pools) if base is not None else []
    pools += _pools_from_flags(args, serve_args)
    pool_overrides = {
        field: getattr(args, flag) for flag, field in _POOL_FLAGS.items() if getattr(args, flag) is not None
    }
    pools = [dataclasses.replace(pool, **pool_overrides) for pool in pools]
    settings: dict[str, Any] = {
        field: getattr(args, flag) for flag, field in _FLEET_FLAGS.items() if getattr(args, flag) is not None
    }
    api_key = args.api_key if args.api_key is not None else os.environ.get(API_KEY_ENV)
    worker_key = (
        args.worker_api_key if args.worker_api_key is not None else os.environ.get(WORKER_API_KEY_ENV)
    )
    if api_key:
        settings["api_key"] = api_key
    if worker_key:
        settings["worker_api_key"] = worker_key
    if args.tenants_db is not None:
        settings["tenants_db"] = args.tenants_db
    if args.credits_db is not None:
        settings["credits_db"] = args.credits_db
    online_eval = _online_eval_from_args(args, base.online_eval if base is not None else None)
    if online_eval is not None:
        settings["online_eval"] = online_eval
    cache = _cache_from_args(args, base.response_cache if base is not None else None)
    if cache is not None:
        settings["response_cache"] = cache
    if base is not None:
        return dataclasses.replace(base, pools=tuple(pools), **settings)
    return FleetConfig(pools=tuple(pools), **settings)


def _online_eval_from_args(
    args: argparse.Namespace, configured: OnlineEvalConfig | None
) -> OnlineEvalConfig | None:
    """The file's [online_eval] with the flags' changes; --eval-sample alone turns it on."""
    changes: dict[str, Any] = {}
    if args.eval_sample is not None:
        changes["sample"] = args.eval_sample
    if args.eval_log is not None:
        changes["log"] = args.eval_log
    if not changes:
        return configured
    return dataclasses.replace(configured or OnlineEvalConfig(), **changes)


def _cache_from_args(
    args: argparse.Namespace, configured: ResponseCacheConfig | None
) -> ResponseCacheConfig | None:
    """The file's [response_cache] with the flags' changes; the flags alone turn it on too."""
    changes = {
        field: value
        for field, value in (("ttl", args.response_cache_ttl), ("max_entries", args.response_cache_entries))
        if value is not None
    }
    if configured is None and not (args.response_cache or changes):
        return None
    return dataclasses.replace(configured or ResponseCacheConfig(), **changes)


def _pools_from_flags(args: argparse.Namespace, serve_args: Sequence[str]) -> list[PoolConfig]:
    if args.replicas is None:
        if args.ray is not None:
            raise FleetConfigError("--ray places the --replicas: give --replicas N MODEL")
        if args.model is not None or serve_args:
            raise FleetConfigError("MODEL and flags after `--` are for --replicas N MODEL")
    default_name = args.served_model_name or args.worker_model
    worker_key = (
        args.worker_api_key if args.worker_api_key is not None else os.environ.get(WORKER_API_KEY_ENV)
    )
    workers: dict[str, list[str]] = {}
    for given in args.worker:
        url, name = split_worker(given)
        name = (
            name or default_name or (args.model if args.replicas else None) or discover_model(url, worker_key)
        )
        workers.setdefault(name, []).append(url)
    launched: dict[str, LaunchConfig] = {}
    if args.replicas is not None:
        model = args.model or DEFAULT_MODEL
        name = args.served_model_name or model
        spec = ReplicaSpec(
            model=model,
            served_name=name,
            count=args.replicas,
            serve_args=tuple(serve_args),
            threads=args.threads,
        )
        launched[name] = LaunchConfig(
            spec=spec,
            launcher="ray" if args.ray is not None else "local",
            ray_address=args.ray or None,
            gpus_per_replica=args.gpus_per_replica,
            cpus_per_replica=args.cpus_per_replica,
        )
    return [
        PoolConfig(model=name, workers=tuple(workers.get(name, ())), launch=launched.get(name))
        for name in dict.fromkeys([*workers, *launched])
    ]


def split_worker(given: str) -> tuple[str, str | None]:
    """`URL@MODEL` -> (URL, MODEL); a plain URL (even one with user@host in it) -> (URL, None)."""
    url, at, model = given.rpartition("@")
    if at and model and "/" not in model and ":" not in model and urlsplit(url).hostname:
        return url.rstrip("/"), model
    return given.rstrip("/"), None


def discover_model(url: str, api_key: str | None = None) -> str:
    """The first model a running worker lists at /v1/models (for a --worker given without a pool name), asked
    with the workers' key (`--worker-api-key`) when they require one."""
    with require_extra("fleet"):
        import httpx

    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = httpx.get(f"{url.rstrip('/')}/v1/models", timeout=_DISCOVERY_TIMEOUT, headers=headers)
        response.raise_for_status()
        return str(response.json()["data"][0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise FleetConfigError(
            f"cannot ask worker {url} which model it serves ({exc}); name its pool with --worker-model NAME "
            f"or --worker {url}@NAME"
        ) from exc


def cmd_serve(args: argparse.Namespace, serve_args: Sequence[str]) -> int:
    with require_extra("fleet"):
        from switchyard.fleet.launch import build_gateway_server
    config = config_from_args(args, serve_args)
    server = build_gateway_server(config, log_level="info" if args.verbose else "warning")
    pools = ", ".join(
        [_pool_summary(pool) for pool in config.pools]
        + [f"'{cascade.name}' (cascade: {' -> '.join(cascade.tiers)})" for cascade in config.cascades]
    )
    print(f"switchyard fleet: serving {pools} on http://{config.host}:{config.port}/v1", flush=True)
    server.run()
    return 0


def _pool_summary(pool: PoolConfig) -> str:
    parts = [f"{len(pool.workers)} worker(s)"] if pool.workers else []
    if pool.launch is not None:
        parts.append(f"{pool.launch.spec.count} {pool.launch.launcher} replica(s)")
    return f"{pool.model!r} ({', '.join(parts)}, {pool.policy})"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    serve_args: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, serve_args = argv[:split], argv[split + 1 :]
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per health check and proxied request
    try:
        return cmd_serve(args, serve_args)
    except (FleetConfigError, MissingExtraError, TenantsDatabaseError) as exc:
        print(f"switchyard fleet: error: {exc}", file=sys.stderr)
        return 2
