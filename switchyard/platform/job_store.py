"""The control plane's durable state in SQLite: jobs, team quotas, node cordons, GPU health and the teams'
GPU-time history (fair share's decayed usage, which a restart would otherwise reset to nothing).

The reconcile loop writes a decision here before it acts on it (a job is RUNNING on its placement before its
workers are launched, PREEMPTING before the signal goes out), so a control plane restarted mid-way finds
every job's last intent and reconciles from it rather than forgetting work it had started.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from switchyard.platform.errors import JobNotFoundError
from switchyard.platform.inventory import GpuHealth
from switchyard.platform.job_codec import placement_from_list, placement_to_list, spec_from_dict, spec_to_dict
from switchyard.platform.jobs import Job, JobSpec, JobState
from switchyard.platform.policy import TeamQuota
from switchyard.platform.usage import UsageSnapshot

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL,
    spec TEXT NOT NULL,
    state TEXT NOT NULL,
    submitted_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    placement TEXT,
    preempted_at TEXT NOT NULL DEFAULT '[]',
    gpu_seconds REAL NOT NULL DEFAULT 0,
    last_checkpoint_at REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    message TEXT NOT NULL DEFAULT '',
    endpoints TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS quotas (
    team TEXT PRIMARY KEY,
    guaranteed_gpus INTEGER NOT NULL,
    weight REAL NOT NULL,
    can_borrow INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS node_admin (
    node_id TEXT PRIMARY KEY,
    cordoned INTEGER NOT NULL,
    reason TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS gpu_health (
    node_id TEXT NOT NULL,
    gpu INTEGER NOT NULL,
    health TEXT NOT NULL,
    reason TEXT NOT NULL,
    since REAL NOT NULL,
    PRIMARY KEY (node_id, gpu)
);
CREATE TABLE IF NOT EXISTS team_usage (
    team TEXT PRIMARY KEY,
    decayed_gpu_s REAL NOT NULL,
    gpus INTEGER NOT NULL,
    at REAL NOT NULL
);
"""

ACTIVE_STATES = (JobState.QUEUED, JobState.RUNNING, JobState.PREEMPTING)
ENDED_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


@dataclass
class JobRecord:
    """A job as the scheduler sees it, plus what only the control plane and its users need."""

    job: Job
    attempts: int = 0
    """Runs started so far; the worker's SWITCHYARD_JOB_ATTEMPT (a resumed run sees > 1)."""
    message: str = ""
    """Why it is in its state: the preemption's reason, the failure's exit code..."""
    endpoints: tuple[str, ...] = ()
    """URLs its workers serve on (serving jobs), as the workers report them."""
    finished_at: float | None = None


@dataclass(frozen=True)
class GpuHealthRecord:
    node_id: str
    gpu: int
    health: GpuHealth
    reason: str
    since: float


@dataclass
class NodeAdmin:
    """What an operator set on a node: cordoned (no new work), and why (`drain` also moves its jobs away)."""

    node_id: str
    cordoned: bool = False
    reason: str = ""
    gpus: dict[int, GpuHealthRecord] = field(default_factory=dict)


class JobStore:
    """One SQLite file (or `:memory:`), shared by the API's threads and the reconcile loop behind a lock."""

    def __init__(self, path: Path | str) -> None:
        if isinstance(path, Path):
            path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._lock = threading.RLock()
        with self._lock:
            self._db.executescript(_SCHEMA)  # commits on its own: not inside a transaction

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # Jobs

    def add_job(self, spec: JobSpec, now: float) -> JobRecord:
        job = Job(id=uuid.uuid4().hex[:12], spec=spec, state=JobState.QUEUED, submitted_at=now)
        with self._transaction() as db:
            db.execute(
                "INSERT INTO jobs (id, spec, state, submitted_at) VALUES (?, ?, ?, ?)",
                (job.id, json.dumps(spec_to_dict(spec)), job.state.value, now),
            )
        return JobRecord(job)

    def save(self, record: JobRecord) -> None:
        """Write the whole record (the caller changed it); the write commits before the caller acts on it."""
        job = record.job
        with self._transaction() as db:
            updated = db.execute(
                "UPDATE jobs SET state = ?, started_at = ?, finished_at = ?, placement = ?, preempted_at = ?, "
                "gpu_seconds = ?, last_checkpoint_at = ?, attempts = ?, message = ?, endpoints = ? WHERE id = ?",
                (
                    job.state.value,
                    job.started_at,
                    record.finished_at,
                    None if job.placement is None else json.dumps(placement_to_list(job.placement)),
                    json.dumps(job.preempted_at),
                    job.gpu_seconds,
                    job.last_checkpoint_at,
                    record.attempts,
                    record.message,
                    json.dumps(list(record.endpoints)),
                    job.id,
                ),
            ).rowcount
        if not updated:
            raise JobNotFoundError(f"no job {job.id!r}")

    def get(self, job_id: str) -> JobRecord:
        with self._lock:
            row = self._db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise JobNotFoundError(f"no job {job_id!r}")
        return _record(row)

    def jobs(self, states: Iterable[JobState] | None = None) -> list[JobRecord]:
        """Jobs in submission order, only those in `states` when given."""
        with self._lock:
            if states is None:
                rows = self._db.execute("SELECT * FROM jobs ORDER BY seq").fetchall()
            else:
                wanted = [state.value for state in states]
                marks = ",".join("?" * len(wanted))
                rows = self._db.execute(
                    f"SELECT * FROM jobs WHERE state IN ({marks}) ORDER BY seq", wanted
                ).fetchall()
        return [_record(row) for row in rows]

    def holding_gpus(self) -> list[JobRecord]:
        """Jobs with a placement: running, being preempted, or cancelled and still stopping."""
        with self._lock:
            rows = self._db.execute("SELECT * FROM jobs WHERE placement IS NOT NULL ORDER BY seq").fetchall()
        return [_record(row) for row in rows]

    # Quotas

    def set_quota(self, quota: TeamQuota) -> None:
        with self._transaction() as db:
            db.execute(
                "INSERT INTO quotas (team, guaranteed_gpus, weight, can_borrow) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(team) DO UPDATE SET guaranteed_gpus = excluded.guaranteed_gpus, "
                "weight = excluded.weight, can_borrow = excluded.can_borrow",
                (quota.team, quota.guaranteed_gpus, quota.weight, int(quota.can_borrow)),
            )

    def quotas(self) -> dict[str, TeamQuota]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM quotas ORDER BY team").fetchall()
        return {
            row["team"]: TeamQuota(
                row["team"], row["guaranteed_gpus"], row["weight"], bool(row["can_borrow"])
            )
            for row in rows
        }

    # Fair share's history

    def save_usage(self, snapshot: UsageSnapshot) -> None:
        """Replace the stored history with `snapshot` in one transaction (all teams, or none, are written)."""
        teams = sorted(set(snapshot.decayed_gpu_s) | set(snapshot.gpus))
        with self._transaction() as db:
            db.execute("DELETE FROM team_usage")
            db.executemany(
                "INSERT INTO team_usage (team, decayed_gpu_s, gpus, at) VALUES (?, ?, ?, ?)",
                [
                    (team, snapshot.decayed_gpu_s.get(team, 0.0), snapshot.gpus.get(team, 0), snapshot.at)
                    for team in teams
                ],
            )

    def usage(self) -> UsageSnapshot | None:
        """The last saved history; None when none was saved (or no team had used a GPU)."""
        with self._lock:
            rows = self._db.execute("SELECT * FROM team_usage ORDER BY team").fetchall()
        if not rows:
            return None
        return UsageSnapshot(
            at=rows[0]["at"],
            decayed_gpu_s={row["team"]: row["decayed_gpu_s"] for row in rows},
            gpus={row["team"]: row["gpus"] for row in rows if row["gpus"]},
        )

    # Nodes and GPUs

    def set_node_cordon(self, node_id: str, cordoned: bool, reason: str) -> None:
        with self._transaction() as db:
            db.execute(
                "INSERT INTO node_admin (node_id, cordoned, reason) VALUES (?, ?, ?) "
                "ON CONFLICT(node_id) DO UPDATE SET cordoned = excluded.cordoned, reason = excluded.reason",
                (node_id, int(cordoned), reason),
            )

    def set_gpu_health(self, node_id: str, gpu: int, health: GpuHealth, reason: str, now: float) -> None:
        with self._transaction() as db:
            db.execute(
                "INSERT INTO gpu_health (node_id, gpu, health, reason, since) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT(node_id, gpu) DO UPDATE SET health = excluded.health, reason = excluded.reason, "
                "since = excluded.since",
                (node_id, gpu, health.value, reason, now),
            )

    def node_admin(self) -> dict[str, NodeAdmin]:
        """Every node an operator or the health system has touched, with its GPUs' recorded health."""
        with self._lock:
            nodes = self._db.execute("SELECT * FROM node_admin").fetchall()
            gpus = self._db.execute("SELECT * FROM gpu_health ORDER BY node_id, gpu").fetchall()
        admin = {
            row["node_id"]: NodeAdmin(row["node_id"], bool(row["cordoned"]), row["reason"]) for row in nodes
        }
        for row in gpus:
            node = admin.setdefault(row["node_id"], NodeAdmin(row["node_id"]))
            node.gpus[row["gpu"]] = GpuHealthRecord(
                row["node_id"], row["gpu"], GpuHealth(row["health"]), row["reason"], row["since"]
            )
        return admin


def _record(row: sqlite3.Row) -> JobRecord:
    placement = None if row["placement"] is None else placement_from_list(json.loads(row["placement"]))
    job = Job(
        id=row["id"],
        spec=spec_from_dict(json.loads(row["spec"])),
        state=JobState(row["state"]),
        submitted_at=row["submitted_at"],
        started_at=row["started_at"],
        placement=placement,
        preempted_at=list(json.loads(row["preempted_at"])),
        gpu_seconds=row["gpu_seconds"],
        last_checkpoint_at=row["last_checkpoint_at"],
    )
    return JobRecord(
        job=job,
        attempts=row["attempts"],
        message=row["message"],
        endpoints=tuple(json.loads(row["endpoints"])),
        finished_at=row["finished_at"],
    )
