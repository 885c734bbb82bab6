"""Heartbeats: one agent per Ray node, probed every `heartbeat_interval_s`, and which nodes still answer.

A node is lost when Ray reports it dead or when it has not answered a heartbeat for `heartbeat_timeout_s`
(a raylet that hangs, a partitioned host: Ray may take longer to notice). A new agent gets
`startup_grace_s` to answer its first heartbeat, since starting a Ray worker on a busy node takes seconds.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from switchyard.platform.node_agent import BurnInResult, Heartbeat, NodeAgentActor

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HealthSettings:
    heartbeat_interval_s: float = 2.0
    heartbeat_timeout_s: float = 15.0
    startup_grace_s: float = 60.0
    burn_in_command: tuple[str, ...] = ()
    """Run on each GPU under burn-in with CUDA_VISIBLE_DEVICES set; exit 0 passes (empty: a clean probe)."""
    burn_in_timeout_s: float = 600.0
    fault_file: Path | None = None
    """Injected faults (see gpu_probes); None: only `nvidia-smi`."""


@dataclass
class _Agent:
    actor: Any
    gpu_count: int
    created_at: float
    last_heartbeat: float | None = None
    faults: dict[int, str] = field(default_factory=dict)
    heartbeat_ref: Any = None
    sent_at: float = 0.0
    burn_in_ref: Any = None
    suspect_since: float | None = None
    """When a heartbeat failed or a worker there lost its actor; cleared by a heartbeat sent after it."""


class HealthMonitor:
    def __init__(self, settings: HealthSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._clock = clock
        self._agents: dict[str, _Agent] = {}

    def tick(self, live_nodes: Mapping[str, int]) -> list[BurnInResult]:
        """Start agents on new nodes, drop those of gone ones, collect answers, send due heartbeats.

        `live_nodes`: the nodes Ray reports alive, with their GPU counts. Returns burn-ins that finished."""
        now = self._clock()
        for node_id in set(self._agents) - set(live_nodes):
            _kill(self._agents.pop(node_id).actor)
        finished: list[BurnInResult] = []
        for node_id, gpu_count in live_nodes.items():
            agent = self._agents.get(node_id)
            if agent is None:
                agent = self._agents[node_id] = _Agent(self._start_agent(node_id, gpu_count), gpu_count, now)
            self._collect(node_id, agent, now, finished)
            if agent.heartbeat_ref is None and now - agent.sent_at >= self.settings.heartbeat_interval_s:
                agent.heartbeat_ref = agent.actor.heartbeat.remote()
                agent.sent_at = now
        return finished

    def responsive(self, node_id: str) -> bool:
        """Whether the node answered a heartbeat recently (or its agent is still within its startup grace)."""
        agent = self._agents.get(node_id)
        if agent is None:
            return False
        now = self._clock()
        if agent.last_heartbeat is None:
            return now - agent.created_at < self.settings.startup_grace_s
        return now - agent.last_heartbeat < self.settings.heartbeat_timeout_s

    def suspect(self, node_id: str) -> bool:
        """Its last heartbeat failed: give it no new work until it answers again (its jobs stay put until the
        heartbeat timeout says it is lost; an agent that merely crashed answers again within seconds)."""
        agent = self._agents.get(node_id)
        return agent is not None and agent.suspect_since is not None

    def mark_suspect(self, node_id: str) -> None:
        """Something else failed there (a worker's actor died): suspect the node until its next heartbeat,
        must have been sent after this."""
        agent = self._agents.get(node_id)
        if agent is not None:
            agent.suspect_since = self._clock()

    def faults(self, node_id: str) -> dict[int, str]:
        """The GPU faults of the node's last heartbeat."""
        agent = self._agents.get(node_id)
        return {} if agent is None else dict(agent.faults)

    def heard_from(self, node_id: str) -> bool:
        agent = self._agents.get(node_id)
        return agent is not None and agent.last_heartbeat is not None

    def last_heartbeat_age(self, node_id: str) -> float | None:
        agent = self._agents.get(node_id)
        if agent is None or agent.last_heartbeat is None:
            return None
        return self._clock() - agent.last_heartbeat

    def start_burn_in(self, node_id: str, gpus: list[int]) -> bool:
        """Start a burn-in of the node's `gpus` unless one is already running there; whether it started."""
        agent = self._agents.get(node_id)
        if agent is None or agent.burn_in_ref is not None:
            return False
        agent.burn_in_ref = agent.actor.burn_in.remote(gpus, self.settings.burn_in_timeout_s)
        return True

    def burn_in_running(self, node_id: str) -> bool:
        agent = self._agents.get(node_id)
        return agent is not None and agent.burn_in_ref is not None

    def shutdown(self) -> None:
        for agent in self._agents.values():
            _kill(agent.actor)
        self._agents.clear()

    def _start_agent(self, node_id: str, gpu_count: int) -> Any:
        fault_file = None if self.settings.fault_file is None else str(self.settings.fault_file)
        return NodeAgentActor.options(  # type: ignore[attr-defined]
            num_cpus=0,
            max_concurrency=2,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        ).remote(node_id, gpu_count, fault_file, self.settings.burn_in_command)

    def _collect(self, node_id: str, agent: _Agent, now: float, finished: list[BurnInResult]) -> None:
        if agent.heartbeat_ref is not None and ray.wait([agent.heartbeat_ref], timeout=0)[0]:
            try:
                beat: Heartbeat = ray.get(agent.heartbeat_ref)
            except RayError as error:
                logger.warning("node %s: heartbeat failed (%s); restarting its agent", node_id, error)
                _kill(agent.actor)
                agent.actor = self._start_agent(node_id, agent.gpu_count)
                agent.suspect_since = now
            else:
                agent.last_heartbeat = now
                agent.faults = dict(beat.faults)
                if agent.suspect_since is not None and agent.sent_at >= agent.suspect_since:
                    agent.suspect_since = None
            agent.heartbeat_ref = None
        if agent.burn_in_ref is not None and ray.wait([agent.burn_in_ref], timeout=0)[0]:
            try:
                finished.append(ray.get(agent.burn_in_ref))
            except RayError as error:
                logger.warning("node %s: burn-in did not report (%s)", node_id, error)
            agent.burn_in_ref = None


def _kill(actor: Any) -> None:
    with contextlib.suppress(RayError, ValueError):
        ray.kill(actor, no_restart=True)
