"""A pool: the replicas serving one model name, its routing policy, their circuit breakers and its admission.

The pool is the one place a replica's health changes hands between the proxy (passive: failed requests open
its breaker and eject it), the health checker (active: probes bring it back) and the launchers (a restarted
replica forgets its cache). Everything here runs on the event loop, without awaits between a decision and
its bookkeeping, so no locks are needed.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Collection

from switchyard.drain_rate import RETRY_AFTER_MAX, RETRY_AFTER_UNKNOWN
from switchyard.fleet.admission import DEFAULT_TENANT, AdmissionQueue
from switchyard.fleet.breaker import CircuitBreaker
from switchyard.fleet.config import BreakerConfig, PoolConfig
from switchyard.fleet.errors import NoHealthyReplicaError
from switchyard.fleet.policies import RoutingPolicy, make_policy
from switchyard.fleet.replica import Replica, ReplicaHealth
from switchyard.fleet.token_source import PromptTokenSource


class Pool:
    def __init__(
        self,
        config: PoolConfig,
        breaker: BreakerConfig,
        health_interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.name = config.model
        self.policy: RoutingPolicy = make_policy(config.policy, config.policy_options)
        self.replicas: list[Replica] = []
        self.ejections: Counter[str] = Counter()
        """Times each replica (by name) was ejected, for the metrics."""
        self._breaker_config = breaker
        self._breakers: dict[Replica, CircuitBreaker] = {}
        self._lost: dict[Replica, asyncio.Future[None]] = {}
        self._health_interval = health_interval
        self._clock = clock
        self.admission = AdmissionQueue(self.name, config.max_queue, self.free_slots, clock)
        self.token_source = PromptTokenSource(self.name, config.tokenizer)
        """Prompt token ids for a policy that keys on them."""

    def add(self, replica: Replica) -> None:
        self.replicas.append(replica)
        self._breakers[replica] = CircuitBreaker(self._breaker_config)

    def replicas_now(self) -> list[Replica]:
        """The pool's replicas at this moment (a policy's background task calls it on every round)."""
        return list(self.replicas)

    def close(self) -> None:
        self.token_source.close()

    def breaker(self, replica: Replica) -> CircuitBreaker:
        return self._breakers[replica]

    # --- routing --------------------------------------------------------------------------------------------

    def routable(self) -> list[Replica]:
        return [replica for replica in self.replicas if replica.routable]

    def free_slots(self) -> int:
        limit = self.config.max_in_flight_per_replica
        return sum(max(0, limit - replica.in_flight) for replica in self.routable())

    def candidates(self, tried: Collection[Replica]) -> list[Replica]:
        """Routable replicas not yet tried for a request, those under their in-flight limit if any are.

        A retry may go over a replica's limit rather than fail: the request was admitted already.
        """
        untried = [replica for replica in self.routable() if replica not in tried]
        limit = self.config.max_in_flight_per_replica
        with_room = [replica for replica in untried if replica.in_flight < limit]
        return with_room or untried

    async def admit(self, tenant: str = DEFAULT_TENANT, weight: float = 1.0) -> None:
        """Wait for a slot (see AdmissionQueue.enter); NoHealthyReplicaError at once when none is routable."""
        if not self.routable():
            raise self.unavailable()
        await self.admission.enter(tenant, weight)

    def unavailable(self, detail: str = "no healthy replica") -> NoHealthyReplicaError:
        return NoHealthyReplicaError(self.name, self.retry_after_unavailable(), detail)

    def retry_after_unavailable(self) -> float:
        """Seconds until a replica may be routable again: the next health check of a starting one, or the
        nearest probe of an ejected one (then a check interval to be seen); within [1, 60]."""
        now = self._clock()
        waits = []
        for replica in self.replicas:
            if replica.health is ReplicaHealth.STARTING:
                waits.append(self._health_interval)
            elif replica.health is ReplicaHealth.EJECTED:
                waits.append(self._breakers[replica].seconds_to_probe(now) + self._health_interval)
        if not waits:  # dead or draining: the launcher's restart takes as long as a replica takes to load
            return RETRY_AFTER_UNKNOWN
        return min(RETRY_AFTER_MAX, max(1.0, min(waits)))

    def begin(self, replica: Replica) -> None:
        replica.in_flight += 1

    def end(self, replica: Replica) -> None:
        """An attempt on `replica` finished (any outcome): its slot goes to the next waiter."""
        replica.in_flight -= 1
        self.admission.wake()

    # --- health ---------------------------------------------------------------------------------------------

    def record_success(self, replica: Replica) -> None:
        self._breakers[replica].record_success()

    def record_failure(self, replica: Replica) -> None:
        """A request to `replica` failed or timed out before its answer; enough in a row eject it."""
        if self._breakers[replica].record_failure(self._clock()):
            self._eject(replica)

    def fail_check(self, replica: Replica) -> None:
        """An active check failed: the replica said it cannot serve, or did not answer. Eject it now (or back
        off further if it was already out)."""
        breaker = self._breakers[replica]
        breaker.consecutive_failures += 1
        breaker.open(self._clock())
        self._eject(replica)

    def restore(self, replica: Replica) -> None:
        """/health answered: a starting or ejected replica becomes routable."""
        self._breakers[replica].record_success()
        if replica.health in (ReplicaHealth.STARTING, ReplicaHealth.EJECTED):
            replica.health = ReplicaHealth.HEALTHY
        self.health_changed()

    def lost_signal(self, replica: Replica) -> asyncio.Future[None]:
        """Resolves when `replica` is declared lost: streams still relayed from it end then (relay.py)."""
        signal = self._lost.get(replica)
        if signal is None or signal.done():
            signal = asyncio.get_running_loop().create_future()
            self._lost[replica] = signal
        return signal

    def mark_lost(self, replica: Replica) -> None:
        """`replica` stopped answering without closing its connections (hung, its node gone) or its launcher
        found it dead: what it still streams will not come, so those streams end now."""
        signal = self._lost.pop(replica, None)
        if signal is not None and not signal.done():
            signal.set_result(None)

    def replica_restarted(self, replica: Replica) -> None:
        """A launcher restarted `replica` (STARTING, its KV cache empty): policies forget what they learnt."""
        self._breakers[replica] = CircuitBreaker(self._breaker_config)
        self.policy.on_replica_removed(replica)
        self.health_changed()

    def health_changed(self) -> None:
        """Routability changed: let waiters in, or answer them 503 when no replica is left to wait for."""
        if self.routable():
            self.admission.wake()
        else:
            self.admission.fail_waiters(self.unavailable)

    def _eject(self, replica: Replica) -> None:
        if replica.health is ReplicaHealth.HEALTHY:  # one that is starting, dead or draining is out already
            replica.health = ReplicaHealth.EJECTED
            self.ejections[replica.name] += 1
            self.health_changed()
