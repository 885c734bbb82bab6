"""The serving autoscaler's decisions without a cluster: busy and idle streaks, hysteresis, bounds."""

from __future__ import annotations

import sys

import pytest

from switchyard.fleet.replica import ReplicaLoad
from switchyard.platform.autoscaler import (
    AutoscalerSettings,
    PoolTrend,
    ScaleAction,
    ServingPoolSpec,
    scale_action,
    serve_command,
)
from switchyard.platform.jobs import PriorityClass

SETTINGS = AutoscalerSettings(busy_waiting_per_replica=2.0, busy_kv_usage=0.8, up_after=2, down_after=3)
POOL = ServingPoolSpec(
    "chat", "serving", serve_command("switchyard-chat", "chat"), min_replicas=1, max_replicas=3
)


def busy() -> ReplicaLoad:
    return ReplicaLoad(num_waiting=5, num_running=4, kv_cache_usage=0.5)


def idle() -> ReplicaLoad:
    return ReplicaLoad()


def test_replicas_are_serving_jobs_that_listen_where_their_worker_says() -> None:
    spec = POOL.replica_spec()
    assert spec.priority_class is PriorityClass.SERVING and not spec.preemptible
    assert spec.command[:5] == (sys.executable, "-m", "switchyard.cli", "serve", "switchyard-chat")
    assert "{port}" in spec.command and "{host}" in spec.command
    with pytest.raises(ValueError, match="port"):
        ServingPoolSpec("chat", "serving", ("python", "server.py"))
    with pytest.raises(ValueError, match="min_replicas"):
        ServingPoolSpec("chat", "serving", POOL.command, min_replicas=3, max_replicas=2)


def test_a_pool_scales_up_only_after_staying_busy_and_down_only_after_staying_idle() -> None:
    trend = PoolTrend()
    trend.observe([busy()], SETTINGS)
    assert scale_action(POOL, trend, ready=1, on_the_way=0, settings=SETTINGS) is ScaleAction.HOLD
    trend.observe([busy()], SETTINGS)
    assert scale_action(POOL, trend, ready=1, on_the_way=0, settings=SETTINGS) is ScaleAction.UP
    assert (
        scale_action(POOL, trend, ready=1, on_the_way=1, settings=SETTINGS) is ScaleAction.HOLD
    )  # one coming
    assert scale_action(POOL, trend, ready=3, on_the_way=0, settings=SETTINGS) is ScaleAction.HOLD  # at max

    trend = PoolTrend()
    for _ in range(2):
        trend.observe([idle(), idle()], SETTINGS)
    assert scale_action(POOL, trend, ready=2, on_the_way=0, settings=SETTINGS) is ScaleAction.HOLD
    trend.observe([idle(), busy()], SETTINGS)  # a burst breaks the idle streak: no flapping
    trend.observe([idle(), idle()], SETTINGS)
    assert scale_action(POOL, trend, ready=2, on_the_way=0, settings=SETTINGS) is ScaleAction.HOLD
    for _ in range(2):
        trend.observe([idle(), idle()], SETTINGS)
    assert scale_action(POOL, trend, ready=2, on_the_way=0, settings=SETTINGS) is ScaleAction.DOWN
    assert scale_action(POOL, trend, ready=1, on_the_way=0, settings=SETTINGS) is ScaleAction.HOLD  # at min


def test_kv_usage_alone_makes_a_pool_busy_and_the_minimum_is_kept() -> None:
    trend = PoolTrend()
    for _ in range(2):
        trend.observe([ReplicaLoad(num_waiting=0, num_running=8, kv_cache_usage=0.95)], SETTINGS)
    assert trend.busy == 2
    assert scale_action(POOL, PoolTrend(), ready=0, on_the_way=0, settings=SETTINGS) is ScaleAction.UP
