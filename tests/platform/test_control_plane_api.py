"""The control plane's store, HTTP API and CLI without Ray: a real SQLite file, a real uvicorn server on
loopback and `switchyard cluster` itself; the Ray cluster is a fixed list of nodes (no job is launched here)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from switchyard.cli import main as switchyard_main
from switchyard.fleet.replicas.ports import free_port
from switchyard.platform.api import build_app
from switchyard.platform.cli import main as cluster_main
from switchyard.platform.cluster_server import fair_share_factory
from switchyard.platform.control_plane import ControlPlane
from switchyard.platform.errors import JobSpecError
from switchyard.platform.inventory import GpuHealth
from switchyard.platform.job_codec import spec_from_dict, spec_to_dict
from switchyard.platform.job_store import JobStore
from switchyard.platform.jobs import CheckpointPolicy, JobState, Placement, PriorityClass, WorkerSlot
from switchyard.platform.policy import PreemptionBudget, TeamQuota
from switchyard.platform.ray_executor import RayExecutor
from switchyard.platform.ray_nodes import RayNode

NODES = [RayNode("node-a", "10.0.0.1", 8, True), RayNode("node-b", "10.0.0.2", 4, True)]
SPEC = {
    "name": "pretrain",
    "team": "research",
    "priority_class": "batch",
    "gpus_per_worker": 4,
    "workers": 2,
    "checkpoint": {"signal": "USR1", "grace_period_s": 60},
    "command": ["python", "train.py"],
}


def plane_on(db: Path, fault_file: Path | None = None) -> ControlPlane:
    return ControlPlane(
        JobStore(db), RayExecutor(), fair_share_factory(PreemptionBudget()), lambda: list(NODES), health=None
    )


@pytest.fixture
def api(tmp_path: Path) -> Iterator[str]:
    plane = plane_on(tmp_path / "jobs.db")
    port = free_port("127.0.0.1")
    server = uvicorn.Server(
        uvicorn.Config(
            build_app(plane, tmp_path / "faults.json"), host="127.0.0.1", port=port, log_level="error"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        plane.store.close()


def test_specs_round_trip_and_mistakes_name_the_field() -> None:
    spec = spec_from_dict(SPEC)
    assert spec.priority_class is PriorityClass.BATCH and spec.gpus == 8
    assert spec.checkpoint == CheckpointPolicy(signal="SIGUSR1", grace_period_s=60.0)
    assert spec_from_dict(spec_to_dict(spec)) == spec
    for change, message in (
        ({"priority_class": "urgent"}, "priority_class must be one of"),
        ({"gpus_per_worker": 0}, "gpus_per_worker must be a whole number"),
        ({"checkpoint": {"signal": "SIGKILL"}}, "not a signal a job can catch"),
        ({"command": "python train.py"}, "command must be a list"),
        ({"colour": "blue"}, "unknown job spec field"),
        ({"team": ""}, "team must be"),
    ):
        with pytest.raises(JobSpecError, match=message):
            spec_from_dict({**SPEC, **change})


def test_a_restarted_control_plane_requeues_what_ran_and_remembers_the_preemption_budget(
    tmp_path: Path,
) -> None:
    plane = plane_on(tmp_path / "jobs.db")
    plane.set_quota(TeamQuota("research", 8))
    record = plane.submit(spec_from_dict(SPEC))
    record.job.state = JobState.RUNNING  # as the reconcile loop writes it before launching
    record.job.placement = Placement((WorkerSlot("node-a", (0, 1, 2, 3)), WorkerSlot("node-a", (4, 5, 6, 7))))
    record.job.started_at = time.time() - 100
    record.attempts = 1
    record.job.preempted_at = [time.time() - 7200, time.time() - 600]  # one outside the budget's hour
    plane.store.save(record)
    plane.store.close()

    restarted = plane_on(tmp_path / "jobs.db")  # its executor runs nothing: the old driver's runs are gone
    again = restarted.job(record.job.id)
    assert again.job.state is JobState.QUEUED and again.job.placement is None
    assert "restarted" in again.message and again.attempts == 1
    assert again.job.gpu_seconds == pytest.approx(800, rel=0.05)  # 8 GPUs for the ~100 s it ran
    assert restarted.usage.preempted_gpus_since("research", time.time() - 3600) == 8  # the budget remembers
    restarted.store.close()


def test_the_api_takes_jobs_quotas_and_node_commands_and_answers_mistakes_clearly(api: str) -> None:
    unknown_team = httpx.post(f"{api}/v1/cluster/jobs", json=SPEC)
    assert unknown_team.status_code == 400
    assert "team 'research' has no quota" in unknown_team.json()["error"]["message"]
    assert (
        httpx.put(f"{api}/v1/cluster/quotas/research", json={"guaranteed_gpus": 8, "weight": 2}).status_code
        == 200
    )
    bad = httpx.put(f"{api}/v1/cluster/quotas/research", json={"guaranteed_gpus": -1})
    assert bad.status_code == 400 and "guaranteed_gpus" in bad.json()["error"]["message"]

    too_big = httpx.post(f"{api}/v1/cluster/jobs", json={**SPEC, "gpus_per_worker": 8, "workers": 2})
    assert too_big.status_code == 400 and "fits no node" in too_big.json()["error"]["message"]
    bad_spec = httpx.post(f"{api}/v1/cluster/jobs", json={**SPEC, "workers": "two"})
    assert bad_spec.status_code == 400 and bad_spec.json()["error"]["code"] == "invalid_job_spec"

    created = httpx.post(f"{api}/v1/cluster/jobs", json=SPEC)
    assert created.status_code == 201
    job = created.json()
    assert job["state"] == "queued" and job["spec"]["checkpoint"]["signal"] == "SIGUSR1"
    assert httpx.get(f"{api}/v1/cluster/jobs/{job['id']}").json()["id"] == job["id"]
    assert httpx.get(f"{api}/v1/cluster/jobs/nope").status_code == 404
    assert httpx.delete(f"{api}/v1/cluster/jobs/{job['id']}").json()["state"] == "cancelled"
    again = httpx.delete(f"{api}/v1/cluster/jobs/{job['id']}")
    assert again.status_code == 409 and "already ended" in again.json()["error"]["message"]

    nodes = httpx.get(f"{api}/v1/cluster/nodes").json()["nodes"]
    assert [(node["id"], len(node["gpus"])) for node in nodes] == [("node-a", 8), ("node-b", 4)]
    assert httpx.post(f"{api}/v1/cluster/nodes/node-b/cordon").status_code == 200
    node_b = httpx.get(f"{api}/v1/cluster/nodes").json()["nodes"][1]
    assert node_b["cordoned"] is True
    assert httpx.post(f"{api}/v1/cluster/nodes/node-z/drain").status_code == 404
    missing_gpu = httpx.post(f"{api}/v1/cluster/nodes/node-b/faults", json={"gpu": 9})
    assert missing_gpu.status_code == 404 and "no GPU 9" in missing_gpu.json()["error"]["message"]


def test_the_cli_drives_the_api(api: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def cluster(*argv: str) -> tuple[int, str, str]:
        code = switchyard_main(["cluster", "--url", api, *argv])
        out, err = capsys.readouterr()
        return code, out, err

    code, _, err = cluster("submit", "--team", "vision", "--", "python", "train.py")
    assert code == 2 and "team 'vision' has no quota" in err and "Traceback" not in err
    assert cluster("quota", "set", "vision", "--gpus", "4", "--weight", "2")[0] == 0
    code, out, _ = cluster(
        "submit",
        "--team",
        "vision",
        "--class",
        "interactive",
        "--gpus-per-worker",
        "2",
        "--checkpoint-signal",
        "SIGUSR1",
        "--grace-period",
        "30",
        "--",
        "python",
        "train.py",
        "--resume",
    )
    assert code == 0 and "submitted job" in out
    job_id = out.split()[2]
    code, out, _ = cluster("status")
    assert job_id in out and "interactive" in out and "queued" in out
    code, out, _ = cluster("status", job_id)
    assert json.loads(out)["spec"]["command"] == ["python", "train.py", "--resume"]
    code, out, _ = cluster("nodes")
    assert "node-a" in out and "0:healthy" in out
    assert cluster("drain", "node-a")[0] == 0
    assert "yes (drained" in cluster("nodes")[1]
    assert cluster("uncordon", "node-a")[0] == 0
    assert cluster("fault", "inject", "node-a", "3", "--reason", "ECC")[0] == 0
    assert json.loads((tmp_path / "faults.json").read_text()) == {"node-a": {"3": "ECC"}}
    assert cluster("fault", "clear", "node-a", "3")[0] == 0
    assert json.loads((tmp_path / "faults.json").read_text()) == {}
    assert "no GPU is out of service" in cluster("repairs")[1]
    plane = plane_on(tmp_path / "jobs.db")  # the store the API serves (SQLite: a second connection)
    plane.store.set_gpu_health("node-b", 1, GpuHealth.REPAIR, "uncorrected ECC error", time.time() - 60)
    plane.store.set_gpu_health("node-a", 2, GpuHealth.BURN_IN, "repaired; burning in", time.time())
    plane.store.set_gpu_health("node-a", 3, GpuHealth.HEALTHY, "", time.time())
    code, out, _ = cluster("repairs")
    assert [line.split()[:3] for line in out.splitlines()[1:]] == [
        ["node-b", "1", "repair"],
        ["node-a", "2", "burn_in"],
    ]
    plane.store.close()
    code, _, err = cluster("cancel", "nope")
    assert code == 2 and "no job 'nope'" in err
    code, _, err = cluster_main_unreachable()
    assert code == 2 and "no control plane answers" in err


def cluster_main_unreachable() -> tuple[int, str, str]:
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cluster_main(["--url", f"http://127.0.0.1:{free_port('127.0.0.1')}", "nodes"])
    return code, "", err.getvalue()
