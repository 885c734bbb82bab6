"""Gang placement: whole gangs or nothing, one node when asked, best-fit keeps whole nodes free."""

from __future__ import annotations

from policy_fixtures import cluster, job, run_on

from switchyard.platform.inventory import GpuHealth, PlacementConflict
from switchyard.platform.jobs import Placement, WorkerSlot
from switchyard.platform.policy.placement import Fit, place_gang


def test_gang_lands_on_one_node_and_is_never_split() -> None:
    view = cluster(2)
    run_on(view, job("x"), "node-0000", (0, 1, 2, 3))
    run_on(view, job("y"), "node-0001", (0, 1, 2, 3))
    gang = job("g", gpus=2, workers=3)  # 6 GPUs: 8 are free in total, but no node has 6
    assert view.total_free == 8
    assert place_gang(gang.spec, view) is None
    spread = job("s", gpus=2, workers=3, same_node=False)
    placement = place_gang(spread.spec, view)
    assert placement is not None and placement.gpu_count == 6 and len(placement.node_ids) == 2


def test_same_node_gang_gets_one_slot_per_worker() -> None:
    view = cluster(1)
    placement = place_gang(job("g", gpus=2, workers=4).spec, view)
    assert placement is not None
    assert [slot.gpus for slot in placement.workers] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert placement.node_ids == {"node-0000"}


def test_best_fit_prefers_the_fullest_node_first_fit_the_first() -> None:
    view = cluster(3)
    run_on(view, job("x"), "node-0001", (0, 1, 2, 3, 4, 5))
    one = job("one").spec
    best = place_gang(one, view, fit=Fit.BEST)
    first = place_gang(one, view, fit=Fit.FIRST)
    assert best is not None and best.node_ids == {"node-0001"}
    assert first is not None and first.node_ids == {"node-0000"}


def test_unhealthy_cordoned_and_dead_gpus_are_not_free() -> None:
    view = cluster(3)
    view.set_gpu_health("node-0000", 3, GpuHealth.CORDONED)
    view.set_cordoned("node-0001", True)
    view.set_alive("node-0002", False)
    assert view.free_gpus("node-0000") == [0, 1, 2, 4, 5, 6, 7]
    assert view.total_free == 7
    assert place_gang(job("g", gpus=8).spec, view) is None
    view.set_cordoned("node-0001", False)
    placement = place_gang(job("g", gpus=8).spec, view)
    assert placement is not None and placement.node_ids == {"node-0001"}


def test_allocating_a_held_gpu_is_refused_and_changes_nothing() -> None:
    view = cluster(1)
    run_on(view, job("x"), "node-0000", (0, 1))
    clash = Placement(workers=(WorkerSlot("node-0000", (2,)), WorkerSlot("node-0000", (1,))))
    try:
        view.allocate("y", clash)
    except PlacementConflict:
        pass
    else:
        raise AssertionError("a held GPU was allocated twice")
    assert view.free_gpus("node-0000") == [2, 3, 4, 5, 6, 7]
    view.release("x")
    assert view.total_free == 8 and view.largest_free_block == 8
