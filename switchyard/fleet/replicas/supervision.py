"""When a launcher restarts a replica that died, and when it gives up: shared by the local and Ray launchers.

A crashed replica comes back after a backoff that doubles with each crash in a row (1 s, 2 s, 4 s ... up to
a cap) and resets once a run has stayed up a while, so a rare crash costs a second while a crash loop does not
spin. A replica that dies before it ever became healthy `max_failed_starts` times in a row (a bad model path, a
port it cannot bind, an engine flag it rejects) will not start by retrying: it stays DEAD and the launcher says
why, rather than relaunching it forever.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable
from dataclasses import dataclass

from switchyard.fleet.replica import Replica, ReplicaHealth
from switchyard.fleet.replicas.base import RestartListener

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RestartPolicy:
    initial_backoff: float = 1.0
    """Seconds before the first restart after a crash."""
    max_backoff: float = 30.0
    """The cap on the doubling backoff."""
    stable_after: float = 60.0
    """A run this long (seconds) counts as having stayed up: the next crash starts the backoff afresh."""
    max_failed_starts: int = 5
    """Runs in a row that ended before the replica was ever healthy, after which it is left DEAD."""
    watch_interval: float = 0.5
    """How often (seconds) a running replica's health is sampled, to learn whether it came up."""

    def __post_init__(self) -> None:
        if self.initial_backoff < 0 or self.max_backoff < self.initial_backoff:
            raise ValueError("restart backoff needs 0 <= initial_backoff <= max_backoff")
        if self.max_failed_starts < 1:
            raise ValueError(f"max_failed_starts must be at least 1, not {self.max_failed_starts}")


@dataclass(frozen=True)
class RunOutcome:
    """How one run of a replica ended."""

    cause: str
    """Why it ended, for the log: `exited with code 1`, `was killed by SIGKILL`, `its actor died`."""
    uptime: float
    """Seconds from launch to exit."""
    became_healthy: bool
    """Whether the health checker saw it healthy at some point (else it never started properly)."""


class RestartBackoff:
    """One replica's crash history: how long to wait before its next restart, or None to give up."""

    def __init__(self, policy: RestartPolicy) -> None:
        self.policy = policy
        self.crashes_in_a_row = 0
        self.failed_starts_in_a_row = 0

    def delay_after(self, outcome: RunOutcome) -> float | None:
        if outcome.uptime >= self.policy.stable_after:
            self.crashes_in_a_row = 0
        self.crashes_in_a_row += 1
        self.failed_starts_in_a_row = 0 if outcome.became_healthy else self.failed_starts_in_a_row + 1
        if self.failed_starts_in_a_row >= self.policy.max_failed_starts:
            return None
        doubled = self.policy.initial_backoff * 2.0 ** (self.crashes_in_a_row - 1)
        return min(doubled, self.policy.max_backoff)


async def watch_run(replica: Replica, ended: Awaitable[str], policy: RestartPolicy) -> RunOutcome:
    """Wait for a run to end (`ended` resolves to its cause), noting whether the replica was healthy meanwhile.

    The health checker, not the launcher, marks replicas HEALTHY, so the launcher samples what it set.
    """
    started = time.monotonic()
    became_healthy = False
    waiter = asyncio.ensure_future(ended)
    try:
        while True:
            done, _ = await asyncio.wait({waiter}, timeout=policy.watch_interval)
            became_healthy = became_healthy or replica.health is ReplicaHealth.HEALTHY
            if done:
                return RunOutcome(waiter.result(), time.monotonic() - started, became_healthy)
    finally:
        waiter.cancel()


def exit_cause(returncode: int) -> str:
    """A server's exit status in words: `exited with code 2`, `was killed by SIGKILL`."""
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


def notify_restart(listener: RestartListener | None, replica: Replica) -> None:
    """Tell the pool a replica is back (with an empty cache); a listener's bug is logged, not raised, so it
    cannot end the supervision of every later crash."""
    if listener is None:
        return
    try:
        listener(replica)
    except Exception:
        logger.exception("the restart listener failed for replica %s", replica.name)
