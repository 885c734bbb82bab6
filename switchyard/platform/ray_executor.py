"""Runs the policy's decisions on Ray: a placement group per job run, one worker actor per bundle.

A job's placement becomes a placement group of one bundle per worker, `{"GPU": gpus_per_worker, "CPU": ...}`,
STRICT_PACK when the job asked for one node. Each bundle is bound to the node the policy chose with Ray's
node-label selector (`bundle_label_selector=[{"ray.io/node-id": NODE}]`; every Ray 2.60 node carries its id
as that label): Ray still does the all-or-nothing reservation, but cannot move the gang to a node the policy
did not pick (a soft target node or NodeAffinity on the actors would let it, or would not reserve the gang
as one). A group Ray cannot place within `placement_timeout_s` (its node died, Ray's view lags the policy's)
is removed and reported, and the job goes back to the queue.

Preemption is `stop`: every worker gets the job's checkpoint signal, then SIGKILL after the grace period; the
run ends as STOPPED whatever the workers' exit codes. A run whose actor dies (its node vanished, or someone
killed it) ends as LOST. Both are requeued by the control plane; only a nonzero exit the platform did not
cause is a failure.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import ray
from ray.exceptions import RayActorError, RayError
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from switchyard.platform.job_worker import JobWorkerActor, WorkerInfo, WorkerStart
from switchyard.platform.jobs import JobSpec, Placement

logger = logging.getLogger(__name__)

NODE_ID_LABEL = "ray.io/node-id"
"""The label every Ray node carries with its own id: what binds a bundle to the node the policy chose."""
WORKER_CONCURRENCY = 3
"""Calls a worker actor serves at once: the long `wait` beside `info` and `stop`."""
STOP_SLACK_S = 10.0
"""Beyond a stop's grace period, how long to wait for the actor to answer before killing it outright."""


class RunEnd(StrEnum):
    SUCCEEDED = "succeeded"
    """Every worker exited 0."""
    FAILED = "failed"
    """A worker exited nonzero on its own; the others were stopped."""
    STOPPED = "stopped"
    """Stopped by the platform (preemption, drain, cancel)."""
    LOST = "lost"
    """A worker's actor or its node died, or its placement group could not be placed."""


@dataclass(frozen=True)
class RunOutcome:
    job_id: str
    attempt: int
    end: RunEnd
    exit_codes: tuple[int | None, ...]
    """Per worker; None where the worker never reported one (lost)."""
    message: str


@dataclass
class _Run:
    job_id: str
    attempt: int
    group: PlacementGroup
    ready: Any
    """The group's `ready()` ObjectRef, asked once."""
    actors: list[Any]
    waits: list[Any]
    """One `wait` ObjectRef per worker, in worker order."""
    started_at: float
    exit_codes: list[int | None] = field(default_factory=list)
    infos: list[WorkerInfo | None] = field(default_factory=list)
    info_refs: list[Any] = field(default_factory=list)
    stop_deadline: float | None = None
    """Set once the platform stopped the run: past it, remaining workers are killed outright."""
    lost: str | None = None
    placed: bool = False
    checkpoint_ref: Any = None
    checkpoint_asked_at: float = float("-inf")
    checkpointed_at: float | None = None


class RayExecutor:
    """Starts and stops job runs on the Ray cluster this process is connected to."""

    def __init__(
        self,
        cpus_per_worker: float = 1.0,
        placement_timeout_s: float = 60.0,
        checkpoint_poll_s: float = 5.0,
        environment: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if cpus_per_worker <= 0:
            raise ValueError("a worker needs some CPU (cpus_per_worker > 0)")
        self.cpus_per_worker = cpus_per_worker
        self.placement_timeout_s = placement_timeout_s
        self.checkpoint_poll_s = checkpoint_poll_s
        """How often worker 0 is asked when the job last checkpointed."""
        self.environment = dict(environment or {})
        """Added to every worker's environment (e.g. PYTHONPATH)."""
        self._clock = clock
        self._runs: dict[str, _Run] = {}

    def bundles(self, spec: JobSpec) -> list[dict[str, float]]:
        """One bundle per worker: its GPUs and CPUs, which Ray keeps together on one node."""
        return [{"GPU": float(spec.gpus_per_worker), "CPU": self.cpus_per_worker}] * spec.workers

    def running(self) -> set[str]:
        return set(self._runs)

    def launch(self, job_id: str, attempt: int, spec: JobSpec, placement: Placement) -> None:
        """Reserve the placement's bundles on its nodes and start a worker in each; returns at once."""
        if job_id in self._runs:
            raise RuntimeError(f"job {job_id} already has a run")
        group = placement_group(
            self.bundles(spec),
            strategy="STRICT_PACK" if spec.same_node else "PACK",
            name=f"switchyard-job-{job_id}-{attempt}",
            bundle_label_selector=[{NODE_ID_LABEL: slot.node_id} for slot in placement.workers],
        )
        actors = []
        for index, slot in enumerate(placement.workers):
            start = WorkerStart(
                job_id=job_id,
                attempt=attempt,
                index=index,
                workers=spec.workers,
                command=spec.command,
                gpus=slot.gpus,
                environment=self.environment,
            )
            actors.append(
                JobWorkerActor.options(  # type: ignore[attr-defined]
                    num_cpus=self.cpus_per_worker,
                    num_gpus=spec.gpus_per_worker,
                    max_concurrency=WORKER_CONCURRENCY,
                    max_restarts=0,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        group, placement_group_bundle_index=index
                    ),
                ).remote(start)
            )
        self._runs[job_id] = _Run(
            job_id=job_id,
            attempt=attempt,
            group=group,
            ready=group.ready(),
            actors=actors,
            waits=[actor.wait.remote() for actor in actors],
            started_at=self._clock(),
            exit_codes=[None] * len(actors),
            infos=[None] * len(actors),
            info_refs=[actor.info.remote() for actor in actors],
        )
        logger.info(
            "job %s attempt %d: launching %d worker(s) on %s", job_id, attempt, len(actors), placement
        )

    def stop(self, job_id: str, signal_name: str, grace_s: float) -> None:
        """Signal every worker of the run, kill it after `grace_s`; the run then ends as STOPPED."""
        run = self._runs.get(job_id)
        if run is None or run.stop_deadline is not None:
            return
        run.stop_deadline = self._clock() + grace_s + STOP_SLACK_S
        for actor in run.actors:
            actor.stop.remote(signal_name, grace_s)

    def forget(self, job_id: str) -> None:
        """Tear the run down now, without an outcome (the control plane has already requeued its job)."""
        run = self._runs.pop(job_id, None)
        if run is not None:
            _teardown(run)

    def endpoints(self, job_id: str) -> tuple[str, ...]:
        """The URLs the run's workers serve on, for those that have reported one."""
        run = self._runs.get(job_id)
        if run is None:
            return ()
        self._collect_infos(run)
        return tuple(info.endpoint for info in run.infos if info is not None and info.endpoint)

    def checkpoints(self) -> dict[str, float]:
        """Runs whose worker 0 reported a newer checkpoint since the last call: job id -> when (wall clock)."""
        now = self._clock()
        newer = {}
        for run in self._runs.values():
            if run.stop_deadline is not None or not run.placed:
                continue
            if run.checkpoint_ref is not None and ray.wait([run.checkpoint_ref], timeout=0)[0]:
                try:
                    at = ray.get(run.checkpoint_ref)
                except RayError:
                    at = None
                run.checkpoint_ref = None
                if at is not None and (run.checkpointed_at is None or at > run.checkpointed_at):
                    run.checkpointed_at = newer[run.job_id] = at
            if run.checkpoint_ref is None and now - run.checkpoint_asked_at >= self.checkpoint_poll_s:
                run.checkpoint_ref = run.actors[0].checkpointed_at.remote()
                run.checkpoint_asked_at = now
        return newer

    def poll(self) -> list[RunOutcome]:
        """Runs that ended since the last poll; never blocks."""
        outcomes = []
        for run in list(self._runs.values()):
            outcome = self._check(run)
            if outcome is not None:
                del self._runs[run.job_id]
                _teardown(run)
                outcomes.append(outcome)
        return outcomes

    def shutdown(self) -> None:
        for job_id in list(self._runs):
            self.forget(job_id)

    def _check(self, run: _Run) -> RunOutcome | None:
        now = self._clock()
        if not run.placed:
            run.placed = bool(ray.wait([run.ready], timeout=0)[0])
            if (
                not run.placed
                and run.stop_deadline is None
                and now - run.started_at > self.placement_timeout_s
            ):
                return self._outcome(
                    run, RunEnd.LOST, f"Ray placed no bundles in {self.placement_timeout_s:.0f} s"
                )
        pending = [
            ref for index, ref in enumerate(run.waits) if ref is not None and run.exit_codes[index] is None
        ]
        if pending:
            done, _ = ray.wait(pending, num_returns=len(pending), timeout=0)
            for ref in done:
                index = run.waits.index(ref)
                try:
                    run.exit_codes[index] = int(ray.get(ref))
                except RayActorError as error:
                    run.lost = run.lost or f"worker {index} lost its actor ({type(error).__name__})"
                    run.exit_codes[index] = None
                    run.waits[index] = None
                except RayError as error:
                    run.lost = run.lost or f"worker {index}: {error}"
                    run.waits[index] = None
        if run.stop_deadline is not None:
            if all(
                code is not None or ref is None for code, ref in zip(run.exit_codes, run.waits, strict=True)
            ):
                return self._outcome(run, RunEnd.STOPPED, "stopped by the platform")
            if now > run.stop_deadline:
                return self._outcome(run, RunEnd.STOPPED, "stopped by the platform (workers killed)")
            return None
        if run.lost is not None:
            return self._outcome(run, RunEnd.LOST, run.lost)
        failed = [(index, code) for index, code in enumerate(run.exit_codes) if code not in (None, 0)]
        if failed:
            index, code = failed[0]
            return self._outcome(run, RunEnd.FAILED, f"worker {index} exited with {code}")
        if all(code == 0 for code in run.exit_codes):
            return self._outcome(run, RunEnd.SUCCEEDED, "all workers exited 0")
        return None

    def _outcome(self, run: _Run, end: RunEnd, message: str) -> RunOutcome:
        return RunOutcome(run.job_id, run.attempt, end, tuple(run.exit_codes), message)

    def _collect_infos(self, run: _Run) -> None:
        for index, ref in enumerate(run.info_refs):
            if ref is None or run.infos[index] is not None:
                continue
            done, _ = ray.wait([ref], timeout=0)
            if done:
                try:
                    run.infos[index] = ray.get(ref)
                except RayError:
                    run.info_refs[index] = None


def _teardown(run: _Run) -> None:
    for actor in run.actors:
        with contextlib.suppress(RayError, ValueError):
            ray.kill(actor, no_restart=True)
    with contextlib.suppress(RayError, ValueError):
        remove_placement_group(run.group)
