"""The pool: who is routable, who gets a retry, and how failures, checks and restarts move a replica."""

from __future__ import annotations

import asyncio

import pytest

from switchyard.fleet.config import BreakerConfig, PoolConfig
from switchyard.fleet.errors import NoHealthyReplicaError
from switchyard.fleet.policies import RouteDecision, RouteRequest, RoutingPolicy
from switchyard.fleet.pool import Pool
from switchyard.fleet.replica import Replica, ReplicaHealth


def make_pool(count: int = 2, limit: int = 2, now: list[float] | None = None) -> tuple[Pool, list[Replica]]:
    clock = now or [0.0]
    pool = Pool(
        PoolConfig(model="m", workers=("http://h:1",), max_in_flight_per_replica=limit, max_queue=4),
        BreakerConfig(failure_threshold=2, base_backoff=1.0, max_backoff=4.0),
        health_interval=0.5,
        clock=lambda: clock[0],
    )
    replicas = [Replica(name=f"r{i}", url=f"http://h:{i}", model="m") for i in range(count)]
    for replica in replicas:
        pool.add(replica)
        pool.restore(replica)
    return pool, replicas


def test_candidates_skip_tried_and_full_replicas_but_a_retry_may_go_over_the_limit() -> None:
    pool, (r0, r1) = make_pool(limit=1)
    assert pool.candidates([]) == [r0, r1]
    pool.begin(r0)
    assert pool.candidates([]) == [r1] and pool.free_slots() == 1
    pool.begin(r1)
    assert pool.candidates([r0]) == [r1]  # full, but untried: better than failing an admitted request
    assert pool.candidates([r0, r1]) == []
    pool.end(r0)
    assert pool.free_slots() == 1


def test_consecutive_failures_eject_and_a_good_check_restores() -> None:
    now = [0.0]
    pool, (r0, r1) = make_pool(now=now)
    pool.record_failure(r0)
    assert r0.routable
    pool.record_failure(r0)
    assert r0.health is ReplicaHealth.EJECTED and pool.ejections["r0"] == 1
    assert pool.routable() == [r1]
    assert pool.retry_after_unavailable() == 1.5  # its probe in 1 s, seen within a check interval
    pool.restore(r0)
    assert r0.routable and not pool.breaker(r0).is_open


def test_a_failed_check_ejects_at_once_and_backs_off_further_each_time() -> None:
    now = [10.0]
    pool, (r0, _) = make_pool(now=now)
    pool.fail_check(r0)
    assert r0.health is ReplicaHealth.EJECTED
    assert pool.breaker(r0).seconds_to_probe(10.0) == 1.0
    pool.fail_check(r0)  # the probe failed too
    assert pool.breaker(r0).seconds_to_probe(10.0) == 2.0
    assert pool.ejections["r0"] == 1  # taken out once


def test_no_routable_replica_is_a_503_with_the_nearest_probe_as_retry_after() -> None:
    now = [0.0]
    pool, replicas = make_pool(now=now)
    for replica in replicas:
        pool.fail_check(replica)
    pool.fail_check(replicas[0])  # backs off to 2 s; replicas[1] is probed after 1 s

    async def admit() -> None:
        await pool.admit()

    with pytest.raises(NoHealthyReplicaError) as raised:
        asyncio.run(admit())
    assert raised.value.retry_after == 1.5  # the probe in 1 s, then a health interval to be seen


def test_waiters_are_answered_503_when_the_last_replica_goes() -> None:
    async def scenario() -> None:
        pool, (r0,) = make_pool(count=1, limit=1)
        pool.begin(r0)
        waiter = asyncio.create_task(pool.admit())
        await asyncio.sleep(0)
        assert pool.admission.depth == 1
        pool.fail_check(r0)
        with pytest.raises(NoHealthyReplicaError):
            await waiter

    asyncio.run(scenario())


class Remembering(RoutingPolicy):
    name = "remembering"

    def __init__(self) -> None:
        self.forgotten: list[Replica] = []

    def choose(self, request: RouteRequest, candidates: list[Replica]) -> RouteDecision:  # type: ignore[override]
        return RouteDecision(candidates[0], "first")

    def on_replica_removed(self, replica: Replica) -> None:
        self.forgotten.append(replica)


def test_a_restarted_replica_is_forgotten_by_the_policy_and_its_breaker_reset() -> None:
    pool, (r0, _) = make_pool()
    policy = Remembering()
    pool.policy = policy
    pool.fail_check(r0)
    r0.health = ReplicaHealth.STARTING  # what the launcher does when it restarts it
    pool.replica_restarted(r0)
    assert policy.forgotten == [r0]
    assert not pool.breaker(r0).is_open and pool.breaker(r0).openings == 0
    pool.restore(r0)
    assert r0.routable


def test_a_dead_replica_is_not_ejected_over_the_launchers_word() -> None:
    pool, (r0, _) = make_pool()
    r0.health = ReplicaHealth.DEAD
    pool.record_failure(r0)
    pool.record_failure(r0)
    assert r0.health is ReplicaHealth.DEAD and pool.ejections["r0"] == 0
    pool.restore(r0)  # a stray good check does not revive it either: the launcher restarts it
    assert r0.health is ReplicaHealth.DEAD


def test_a_lost_replica_signals_its_streams_once_and_new_streams_get_a_fresh_signal() -> None:
    async def scenario() -> None:
        pool, (r0, r1) = make_pool()
        signal = pool.lost_signal(r0)
        assert pool.lost_signal(r0) is signal and not signal.done()
        pool.mark_lost(r1)  # no stream on it: nothing to signal
        pool.mark_lost(r0)
        assert signal.done() and not pool.lost_signal(r0).done()

    asyncio.run(scenario())
