"""`switchyard cluster`: start the control plane, and talk to it over its HTTP API.

    switchyard cluster start --num-gpus 8                     # a local Ray instance with 8 logical GPUs
    switchyard cluster start --address auto --fault-file faults.json
    switchyard cluster quota set research --gpus 4 --weight 2
    switchyard cluster submit --team research --class batch --gpus-per-worker 2 --workers 2 \\
        --checkpoint-signal SIGUSR1 --grace-period 60 -- switchyard train-default --resume
    switchyard cluster status [JOB]      switchyard cluster cancel JOB
    switchyard cluster nodes             switchyard cluster cordon|uncordon|drain NODE
    switchyard cluster repairs           (GPUs out of service: cordoned, in repair, burning in)
    switchyard cluster fault inject NODE GPU --reason "ECC"   switchyard cluster fault clear NODE GPU
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from switchyard.extras import MissingExtraError, require_extra
from switchyard.platform.errors import JobSpecError
from switchyard.platform.job_codec import priority_class_named, signal_named

URL_ENV = "SWITCHYARD_CLUSTER_URL"
DEFAULT_URL = "http://127.0.0.1:8790"


class ClusterClientError(Exception):
    """The control plane refused a request or could not be reached; the message says which and why."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="switchyard cluster",
        description="Share a Ray cluster's GPUs between teams: a job queue with quotas, fair share, priorities, "
        "gang placement, preemption with checkpoints, and GPU health and repair.",
    )
    parser.add_argument(
        "--url",
        default=os.environ.get(URL_ENV, DEFAULT_URL),
        help=f"the control plane (default ${URL_ENV} or {DEFAULT_URL})",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    start = commands.add_parser(
        "start", help="run the control plane (API and reconcile loop) until interrupted"
    )
    start.add_argument("--host", default="127.0.0.1", help="address the API listens on (loopback by default)")
    start.add_argument("--port", type=int, default=8790)
    start.add_argument(
        "--db", type=Path, default=None, help="the SQLite job store (default ~/.switchyard/cluster/jobs.db)"
    )
    start.add_argument(
        "--address", default=None, help="a running Ray cluster (`auto`, HOST:PORT); default: start one"
    )
    start.add_argument("--num-gpus", type=int, default=0, help="logical GPUs of the local Ray instance")
    start.add_argument(
        "--cpus-per-worker", type=float, default=1.0, help="CPUs reserved beside each worker's GPUs"
    )
    start.add_argument(
        "--reconcile-interval", type=float, default=1.0, help="seconds between reconcile passes"
    )
    start.add_argument(
        "--fault-file", type=Path, default=None, help="JSON file of injected GPU faults (CPU clusters)"
    )
    start.add_argument("--heartbeat-interval", type=float, default=2.0)
    start.add_argument(
        "--heartbeat-timeout", type=float, default=15.0, help="silence after which a node is lost"
    )
    start.add_argument(
        "--burn-in-command",
        default=None,
        help="run on a repaired GPU (CUDA_VISIBLE_DEVICES set); exit 0 returns it",
    )
    start.add_argument(
        "--preemption-min-interval", type=float, default=1800.0, help="seconds between preemptions of one job"
    )
    start.add_argument(
        "--max-team-loss-per-hour",
        type=float,
        default=0.25,
        help="share of a team's running GPUs preemptible per hour",
    )
    start.add_argument(
        "--serving-pool", default=None, metavar="NAME", help="autoscale a pool of `switchyard serve` replicas"
    )
    start.add_argument("--serving-model", default="switchyard-chat", help="the pool's model")
    start.add_argument("--serving-team", default="serving", help="the team the pool's replicas run as")
    start.add_argument("--serving-gpus", type=int, default=1, help="GPUs per replica")
    start.add_argument("--serving-min", type=int, default=1, help="fewest replicas")
    start.add_argument("--serving-max", type=int, default=4, help="most replicas")
    start.add_argument(
        "--gateway",
        default=None,
        metavar="URL",
        help="a fleet gateway (`switchyard fleet serve --api-key`) whose pool of the same name the serving "
        "replicas join as they come up and leave before they stop",
    )
    start.add_argument(
        "--gateway-api-key", default=None, help="that gateway's operators' key (default: $SWITCHYARD_API_KEY)"
    )
    start.add_argument("-v", "--verbose", action="store_true", help="log every decision")

    submit = commands.add_parser(
        "submit", help="queue a job (the command after `--`, or a JSON spec with --file)"
    )
    submit.add_argument(
        "--file", type=Path, default=None, help="a JSON job spec (fields as in docs/platform.md)"
    )
    submit.add_argument("--name", default=None, help="the job's name (default: the command's program)")
    submit.add_argument("--team", default=None)
    submit.add_argument(
        "--class", dest="priority_class", default="batch", help="serving, interactive or batch"
    )
    submit.add_argument("--gpus-per-worker", type=int, default=1)
    submit.add_argument("--workers", type=int, default=1)
    submit.add_argument(
        "--spread", action="store_true", help="let the gang's workers land on different nodes"
    )
    submit.add_argument("--not-preemptible", action="store_true")
    submit.add_argument(
        "--checkpoint-signal", default=None, help="sent on preemption (e.g. SIGUSR1); default SIGTERM"
    )
    submit.add_argument("--grace-period", type=float, default=None, help="seconds from the signal to a kill")
    submit.add_argument(
        "--checkpoint-interval", type=float, default=None, help="how often the job checkpoints"
    )
    submit.add_argument("--expected-runtime", type=float, default=None, help="seconds (lets it backfill)")
    submit.add_argument("job_command", nargs=argparse.REMAINDER, help="-- PROGRAM ARGS...")

    status = commands.add_parser("status", help="the jobs, or one job in full")
    status.add_argument("job", nargs="?", default=None)
    cancel = commands.add_parser(
        "cancel", help="cancel a job (a running one gets its checkpoint signal first)"
    )
    cancel.add_argument("job")

    quota = commands.add_parser("quota", help="team quotas: `quota set TEAM --gpus N`, `quota list`")
    quota_commands = quota.add_subparsers(dest="quota_command", required=True)
    quota_set = quota_commands.add_parser("set", help="set a team's guaranteed GPUs and fair-share weight")
    quota_set.add_argument("team")
    quota_set.add_argument("--gpus", type=int, required=True, help="guaranteed GPUs")
    quota_set.add_argument("--weight", type=float, default=1.0, help="share of what is beyond guarantees")
    quota_set.add_argument("--no-borrow", action="store_true", help="never run beyond the guarantee")
    quota_commands.add_parser("list", help="every team's quota")

    commands.add_parser("nodes", help="the nodes, their GPUs' health and the jobs on them")
    commands.add_parser("repairs", help="the repair queue: GPUs out of service, longest out first")
    for name, summary in (
        ("cordon", "no new jobs on the node"),
        ("uncordon", "let the node take jobs again"),
        ("drain", "cordon the node and move its jobs away (they checkpoint and resume elsewhere)"),
    ):
        command = commands.add_parser(name, help=summary)
        command.add_argument("node")

    fault = commands.add_parser("fault", help="inject or clear a GPU fault (needs `start --fault-file`)")
    fault_commands = fault.add_subparsers(dest="fault_command", required=True)
    inject = fault_commands.add_parser("inject", help="make the node's agent report the GPU faulty")
    inject.add_argument("node")
    inject.add_argument("gpu", type=int)
    inject.add_argument("--reason", default="injected fault")
    clear = fault_commands.add_parser(
        "clear", help="clear it (the repair); the GPU then burns in and returns"
    )
    clear.add_argument("node")
    clear.add_argument("gpu", type=int)
    return parser


def submit_body(args: argparse.Namespace) -> dict[str, Any]:
    """The JSON spec `submit` sends: the file's, or one built from the flags (checked here first)."""
    if args.file is not None:
        return dict(json.loads(args.file.read_text()))
    command = list(args.job_command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise JobSpecError("give the job's command after `--` (or a JSON spec with --file)")
    if args.team is None:
        raise JobSpecError("--team is required")
    body: dict[str, Any] = {
        "name": args.name or Path(command[0]).name,
        "team": args.team,
        "priority_class": priority_class_named(args.priority_class).name.lower(),
        "gpus_per_worker": args.gpus_per_worker,
        "workers": args.workers,
        "same_node": not args.spread,
        "preemptible": not args.not_preemptible,
        "command": command,
    }
    if args.checkpoint_signal or args.grace_period is not None or args.checkpoint_interval is not None:
        checkpoint: dict[str, Any] = {"signal": signal_named(args.checkpoint_signal or "SIGTERM")}
        if args.grace_period is not None:
            checkpoint["grace_period_s"] = args.grace_period
        if args.checkpoint_interval is not None:
            checkpoint["interval_s"] = args.checkpoint_interval
        body["checkpoint"] = checkpoint
    if args.expected_runtime is not None:
        body["expected_runtime_s"] = args.expected_runtime
    return body


def request(url: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    with require_extra("platform"):
        import httpx

    try:
        response = httpx.request(method, f"{url.rstrip('/')}{path}", json=body, timeout=30.0)
    except httpx.ConnectError:
        raise ClusterClientError(
            f"no control plane answers at {url}; start one with `switchyard cluster start`"
        ) from None
    except httpx.HTTPError as error:
        raise ClusterClientError(f"{url}: {error}") from None
    try:
        data = response.json()
    except ValueError:
        data = None
    if response.status_code >= 400:
        message = data["error"]["message"] if isinstance(data, dict) and "error" in data else response.text
        raise ClusterClientError(message)
    return data


def format_jobs(jobs: list[dict[str, Any]]) -> str:
    rows = [("ID", "NAME", "TEAM", "CLASS", "GPUS", "STATE", "RUNS", "MESSAGE")]
    for job in jobs:
        spec = job["spec"]
        gpus = spec["gpus_per_worker"] * spec["workers"]
        rows.append(
            (
                job["id"],
                spec["name"],
                spec["team"],
                spec["priority_class"],
                str(gpus),
                job["state"],
                str(job["attempts"]),
                job["message"][:60],
            )
        )
    return _table(rows)


def format_nodes(nodes: list[dict[str, Any]]) -> str:
    rows = [("NODE", "ADDRESS", "ALIVE", "CORDONED", "GPUS (index:health[:job])")]
    for node in nodes:
        gpus = " ".join(
            f"{gpu['index']}:{gpu['health']}" + (f":{gpu['job_id']}" if gpu["job_id"] else "")
            for gpu in node["gpus"]
        )
        cordoned = f"yes ({node['cordon_reason']})" if node["cordoned"] else "no"
        rows.append((node["id"], node["address"], "yes" if node["alive"] else "NO", cordoned, gpus))
    return _table(rows)


def _table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def cmd_start(args: argparse.Namespace) -> int:
    import logging
    import shlex

    with require_extra("platform"):
        from switchyard.platform.autoscaler import ServingPoolSpec, serve_command
        from switchyard.platform.cluster_server import ClusterSettings, default_db_path, run_cluster
        from switchyard.platform.health_monitor import HealthSettings
        from switchyard.platform.policy import PreemptionBudget

    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    pools = ()
    if args.serving_pool:
        pools = (
            ServingPoolSpec(
                name=args.serving_pool,
                team=args.serving_team,
                command=serve_command(args.serving_model, args.serving_pool),
                gpus_per_replica=args.serving_gpus,
                min_replicas=args.serving_min,
                max_replicas=args.serving_max,
                gateway_pool=args.serving_pool if args.gateway else None,
            ),
        )
    gateway = None
    if args.gateway:
        from switchyard.platform.gateway_registrar import GatewayTarget

        key = args.gateway_api_key or os.environ.get("SWITCHYARD_API_KEY")
        if not key:
            print(
                "switchyard cluster: error: --gateway needs the gateway's --gateway-api-key", file=sys.stderr
            )
            return 2
        gateway = GatewayTarget(url=args.gateway, api_key=key)
    settings = ClusterSettings(
        host=args.host,
        port=args.port,
        db_path=args.db or default_db_path(),
        ray_address=args.address,
        local_gpus=args.num_gpus,
        reconcile_interval_s=args.reconcile_interval,
        cpus_per_worker=args.cpus_per_worker,
        health=HealthSettings(
            heartbeat_interval_s=args.heartbeat_interval,
            heartbeat_timeout_s=args.heartbeat_timeout,
            burn_in_command=tuple(shlex.split(args.burn_in_command or "")),
            fault_file=args.fault_file,
        ),
        budget=PreemptionBudget(
            min_interval_per_job_s=args.preemption_min_interval,
            max_team_loss_per_hour=args.max_team_loss_per_hour,
        ),
        serving_pools=pools,
        gateway=gateway,
    )
    run_cluster(settings, log_level="info" if args.verbose else "warning")
    return 0


def run(args: argparse.Namespace) -> int:
    url = args.url
    if args.command == "start":
        return cmd_start(args)
    if args.command == "submit":
        job = request(url, "POST", "/v1/cluster/jobs", submit_body(args))
        print(
            f"submitted job {job['id']} ({job['spec']['name']}, team {job['spec']['team']}): {job['state']}"
        )
    elif args.command == "status":
        if args.job:
            print(json.dumps(request(url, "GET", f"/v1/cluster/jobs/{args.job}"), indent=1))
        else:
            print(format_jobs(request(url, "GET", "/v1/cluster/jobs")["jobs"]))
    elif args.command == "cancel":
        job = request(url, "DELETE", f"/v1/cluster/jobs/{args.job}")
        print(f"job {job['id']}: {job['state']}")
    elif args.command == "quota" and args.quota_command == "set":
        body = {"guaranteed_gpus": args.gpus, "weight": args.weight, "can_borrow": not args.no_borrow}
        quota = request(url, "PUT", f"/v1/cluster/quotas/{args.team}", body)
        print(f"team {quota['team']}: {quota['guaranteed_gpus']} GPUs guaranteed, weight {quota['weight']}")
    elif args.command == "quota":
        for quota in request(url, "GET", "/v1/cluster/quotas")["quotas"]:
            print(
                f"{quota['team']}: {quota['guaranteed_gpus']} GPUs, weight {quota['weight']}, borrow {quota['can_borrow']}"
            )
    elif args.command == "nodes":
        print(format_nodes(request(url, "GET", "/v1/cluster/nodes")["nodes"]))
    elif args.command == "repairs":
        gpus = request(url, "GET", "/v1/cluster/repairs")["gpus"]
        rows = [("NODE", "GPU", "HEALTH", "SINCE", "REASON")]
        rows += [
            (
                gpu["node_id"],
                str(gpu["gpu"]),
                gpu["health"],
                time.strftime("%H:%M:%S", time.localtime(gpu["since"])),
                gpu["reason"],
            )
            for gpu in gpus
        ]
        print(_table(rows) if gpus else "no GPU is out of service")
    elif args.command in ("cordon", "uncordon", "drain"):
        answer = request(url, "POST", f"/v1/cluster/nodes/{args.node}/{args.command}")
        moved = answer.get("moved_jobs")
        print(f"node {args.node}: {args.command}ed" + (f"; moving jobs {', '.join(moved)}" if moved else ""))
    elif args.command == "fault" and args.fault_command == "inject":
        request(
            url, "POST", f"/v1/cluster/nodes/{args.node}/faults", {"gpu": args.gpu, "reason": args.reason}
        )
        print(f"node {args.node} GPU {args.gpu}: fault injected ({args.reason})")
    elif args.command == "fault":
        request(url, "DELETE", f"/v1/cluster/nodes/{args.node}/faults/{args.gpu}")
        print(f"node {args.node} GPU {args.gpu}: fault cleared; it burns in before it returns")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except (ClusterClientError, JobSpecError, MissingExtraError, ValueError) as error:
        print(f"switchyard cluster: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
