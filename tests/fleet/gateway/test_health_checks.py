"""The health checker against real replicas: a refused connection ejects at once, a slow answer counts towards
the breaker, a good answer brings a replica back and reads its load."""

from __future__ import annotations

import asyncio

import httpx
from fleet_harness import Replicas, free_port

from switchyard.fleet.config import BreakerConfig, PoolConfig
from switchyard.fleet.health import HealthChecker
from switchyard.fleet.pool import Pool
from switchyard.fleet.replica import Replica, ReplicaHealth


def pool_of(*urls: str, now: list[float]) -> Pool:
    pool = Pool(
        PoolConfig(model="tiny", workers=urls),
        BreakerConfig(failure_threshold=2, base_backoff=1.0, max_backoff=4.0),
        health_interval=0.2,
        clock=lambda: now[0],
    )
    for index, url in enumerate(urls):
        pool.add(Replica(name=f"r{index}", url=url, model="tiny"))
    return pool


def test_checks_bring_replicas_in_read_their_load_and_eject_refusals(replicas: Replicas) -> None:
    async def scenario() -> None:
        now = [0.0]
        pool = pool_of(replicas.a.url, f"http://127.0.0.1:{free_port()}", now=now)
        up, down = pool.replicas
        async with httpx.AsyncClient() as client:
            checker = HealthChecker([pool], client, interval=0.2, timeout=5.0, clock=lambda: now[0])
            await checker.check(pool, up)
            await checker.check(pool, down)
            assert up.health is ReplicaHealth.HEALTHY and up.load.scraped_at == 0.0
            assert down.health is ReplicaHealth.STARTING  # not up yet: waited for, not ejected
            down.health = ReplicaHealth.HEALTHY  # as if it had been up, then went away
            await checker.check(pool, down)
            assert down.health is ReplicaHealth.EJECTED and pool.ejections[down.name] == 1
            await checker.check(pool, down)  # not probed before its backoff
            assert pool.breaker(down).openings == 1
            now[0] = 1.0
            await checker.check(pool, down)  # probed, still refused: waits longer
            assert pool.breaker(down).openings == 2 and pool.breaker(down).seconds_to_probe(1.0) == 2.0

    asyncio.run(scenario())


def test_a_slow_answer_counts_towards_the_breaker_and_an_answer_brings_it_back(replicas: Replicas) -> None:
    async def scenario() -> None:
        now = [0.0]
        pool = pool_of(replicas.a.url, now=now)
        (replica,) = pool.replicas
        async with httpx.AsyncClient() as client:
            checker = HealthChecker([pool], client, interval=0.2, timeout=0.3, clock=lambda: now[0])
            await checker.check(pool, replica)
            assert replica.health is ReplicaHealth.HEALTHY
            replicas.a.pause()
            try:
                await checker.check(pool, replica)
                assert replica.health is ReplicaHealth.HEALTHY  # one slow answer is not enough
                await checker.check(pool, replica)
                assert replica.health is ReplicaHealth.EJECTED  # two in a row are
            finally:
                replicas.a.resume()
            now[0] = 1.0
            patient = HealthChecker([pool], client, interval=0.2, timeout=30.0, clock=lambda: now[0])
            await patient.check(pool, replica)  # the resumed process may take a moment to catch up
            assert replica.health is ReplicaHealth.HEALTHY and not pool.breaker(replica).is_open

    asyncio.run(scenario())


def test_an_ejected_replica_whose_breaker_a_late_success_closed_is_probed_back(replicas: Replicas) -> None:
    """Ejected by a failed check while a request was in flight, which then succeeded: the breaker closed
    with the replica still out, and no probe would ever be due."""

    async def scenario() -> None:
        now = [0.0]
        pool = pool_of(replicas.a.url, now=now)
        (replica,) = pool.replicas
        replica.health = ReplicaHealth.HEALTHY
        pool.fail_check(replica)
        pool.record_success(replica)  # the request that was in flight answers
        assert replica.health is ReplicaHealth.EJECTED and not pool.breaker(replica).is_open
        async with httpx.AsyncClient() as client:
            checker = HealthChecker([pool], client, interval=0.2, timeout=5.0, clock=lambda: now[0])
            await checker.check(pool, replica)
        assert replica.health is ReplicaHealth.HEALTHY

    asyncio.run(scenario())
