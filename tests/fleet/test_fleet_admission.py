"""The pool's admission queue: straight through while slots are free, FIFO after (fair between tenants), 429
beyond the bound (to the tenant holding most of the queue), and a waiter that is cancelled (its client left)
leaves the queue."""

from __future__ import annotations

import asyncio

import pytest

from switchyard.fleet.admission import AdmissionQueue
from switchyard.fleet.errors import NoHealthyReplicaError, QueueFullError


class Slots:
    """The replicas' free slots, as the pool would count them (taking one is what a routed request does)."""

    def __init__(self, free: int) -> None:
        self.free = free

    def __call__(self) -> int:
        return self.free


def test_waiters_enter_in_arrival_order_as_slots_free_up() -> None:
    async def scenario() -> None:
        slots = Slots(1)
        queue = AdmissionQueue("p", max_queue=3, free_slots=slots)
        await queue.enter()
        slots.free -= 1  # the first request took the slot
        order: list[int] = []

        async def wait(index: int) -> None:
            await queue.enter()
            slots.free -= 1
            order.append(index)

        waiters = [asyncio.create_task(wait(i)) for i in range(3)]
        await asyncio.sleep(0)
        assert queue.depth == 3
        with pytest.raises(QueueFullError) as raised:
            await queue.enter()
        assert 1 <= raised.value.retry_after <= 60
        for _ in range(3):
            slots.free += 1  # a request finished
            queue.record_finish()
            queue.wake()
            await asyncio.sleep(0)
        await asyncio.gather(*waiters)
        assert order == [0, 1, 2] and queue.depth == 0

    asyncio.run(scenario())


def test_a_newcomer_does_not_take_a_slot_promised_to_a_waiter() -> None:
    async def scenario() -> None:
        slots = Slots(0)
        queue = AdmissionQueue("p", max_queue=2, free_slots=slots)

        async def take() -> None:
            await queue.enter()
            slots.free -= 1  # what routing does right after, before any await

        first = asyncio.create_task(take())
        await asyncio.sleep(0)
        slots.free = 1
        queue.wake()  # promised to `first`, which has not resumed yet
        # A request arriving now sees the free slot before `first` takes it, and must wait all the same.
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await take()
        assert first.done() and slots.free == 0 and queue.depth == 0

    asyncio.run(scenario())


def test_a_cancelled_waiter_leaves_the_queue_and_passes_on_a_promised_slot() -> None:
    async def scenario() -> None:
        slots = Slots(0)
        queue = AdmissionQueue("p", max_queue=5, free_slots=slots)
        leaving = asyncio.create_task(queue.enter())
        staying = asyncio.create_task(queue.enter())
        await asyncio.sleep(0)
        leaving.cancel()
        await asyncio.sleep(0)
        assert queue.depth == 1
        # a slot promised to a waiter that is cancelled before it resumes goes to the next one
        third = asyncio.create_task(queue.enter())
        await asyncio.sleep(0)
        slots.free = 1
        queue.wake()
        staying.cancel()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert third.done() and queue.depth == 0

    asyncio.run(scenario())


def test_waiters_get_the_error_when_the_pool_loses_its_replicas() -> None:
    async def scenario() -> None:
        queue = AdmissionQueue("p", max_queue=5, free_slots=Slots(0))
        waiters = [asyncio.create_task(queue.enter()) for _ in range(2)]
        await asyncio.sleep(0)
        queue.fail_waiters(lambda: NoHealthyReplicaError("p", 3.0))
        results = await asyncio.gather(*waiters, return_exceptions=True)
        assert all(isinstance(result, NoHealthyReplicaError) for result in results)
        assert results[0] is not results[1]

    asyncio.run(scenario())


def test_retry_after_follows_the_drain_rate() -> None:
    async def scenario() -> None:
        now = [0.0]
        queue = AdmissionQueue("p", max_queue=0, free_slots=Slots(0), clock=lambda: now[0])
        with pytest.raises(QueueFullError) as unknown:
            await queue.enter()
        assert unknown.value.retry_after == 10.0  # no drain rate yet
        for second in range(1, 11):
            now[0] = float(second)
            queue.record_finish()
        with pytest.raises(QueueFullError) as estimated:
            await queue.enter()
        assert estimated.value.retry_after == 1.0  # nothing waiting, one per second: at the floor

    asyncio.run(scenario())


def test_a_freed_slot_goes_to_the_tenant_that_has_had_fewest_for_its_weight() -> None:
    """A flooding tenant queued first does not keep a quiet one waiting behind all of its requests."""

    async def scenario() -> None:
        slots = Slots(0)
        queue = AdmissionQueue("p", max_queue=20, free_slots=slots)
        order: list[str] = []

        async def wait(tenant: str, weight: float = 1.0) -> None:
            await queue.enter(tenant, weight)
            slots.free -= 1
            order.append(tenant)

        tasks = [asyncio.create_task(wait("flood")) for _ in range(6)]
        await asyncio.sleep(0)
        tasks += [asyncio.create_task(wait("quiet")) for _ in range(2)]
        tasks += [asyncio.create_task(wait("heavy", 2.0)) for _ in range(4)]
        await asyncio.sleep(0)
        assert queue.depth == 12 and queue.waiting("flood") == 6
        for _ in range(12):
            slots.free += 1
            queue.wake()
            await asyncio.sleep(0)
        await asyncio.gather(*tasks)
        # each round, weight 1 tenants get one slot and `heavy` (weight 2) two, until a tenant runs out
        assert order[:8] == ["flood", "quiet", "heavy", "heavy", "flood", "quiet", "heavy", "heavy"]
        assert order[8:] == ["flood"] * 4

    asyncio.run(scenario())


def test_a_full_queue_refuses_the_tenant_holding_most_of_it_not_a_newcomer() -> None:
    async def scenario() -> None:
        queue = AdmissionQueue("p", max_queue=3, free_slots=Slots(0))
        flood = [asyncio.create_task(queue.enter("flood")) for _ in range(3)]
        await asyncio.sleep(0)
        with pytest.raises(QueueFullError):  # the flood's own next request is refused
            await queue.enter("flood")
        quiet = asyncio.create_task(queue.enter("quiet"))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert queue.waiting("quiet") == 1 and queue.waiting("flood") == 2 and queue.depth == 3
        assert flood[2].done() and isinstance(flood[2].exception(), QueueFullError)  # its newest gave way
        assert not flood[0].done() and not quiet.done()
        with pytest.raises(QueueFullError):  # one each would leave the flood no more than the newcomer
            await queue.enter("other", 0.5)
        queue.fail_waiters(lambda: NoHealthyReplicaError("p", 1.0))
        results = await asyncio.gather(*flood[:2], quiet, return_exceptions=True)
        assert all(isinstance(result, NoHealthyReplicaError) for result in results)

    asyncio.run(scenario())
