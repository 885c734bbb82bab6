"""The simulator's measures: percentiles, Jain's index, and what the recorder integrates."""

from __future__ import annotations

import math

import pytest

from switchyard.platform.jobs import PriorityClass
from switchyard.platform.simulator.metrics import MetricsRecorder, jain_index, percentile


def test_percentile_interpolates_and_is_nan_for_nothing() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 99) == 5.0
    assert math.isnan(percentile([], 50))


def test_jain_index_is_one_for_equal_and_one_over_n_for_one_taking_all() -> None:
    assert jain_index([2.0, 2.0, 2.0]) == pytest.approx(1.0)
    assert jain_index([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)


def test_recorder_integrates_only_inside_the_window() -> None:
    recorder = MetricsRecorder(gpus=8, start_s=10.0, end_s=20.0, weights={"a": 1.0, "b": 1.0})
    # 0-15: 4 GPUs busy, a gang waits with 4 free; a asks for 8 and gets 4, b asks for nothing.
    recorder.span(0.0, 15.0, busy=4, free=4, gang_waiting=True, running={"a": 4}, demand={"a": 8})
    # 15-30: all 8 busy, split evenly between a and b who each ask for 8.
    recorder.span(
        15.0, 30.0, busy=8, free=0, gang_waiting=False, running={"a": 4, "b": 4}, demand={"a": 8, "b": 8}
    )
    recorder.wait(PriorityClass.SERVING, 30.0)
    recorder.preempted(12.0, lost_gpu_s=3600.0)
    recorder.preempted(25.0, lost_gpu_s=3600.0)  # outside the window: not counted
    result = recorder.result("p", "t", jobs_finished=0, decisions=0)
    assert result.utilisation == pytest.approx((4 * 5 + 8 * 5) / 80)
    assert result.gang_idle_gpu_fraction == pytest.approx(4 * 5 / 80)
    assert result.gpu_hours_lost == pytest.approx(1.0)
    assert result.wait_p99_s == {"serving": 30.0}
    # a: got 4x10 = 40 of an entitlement of 8x5 + 4x5 = 60; b: 20 of 20.
    assert result.team_share == pytest.approx({"a": 40 / 60, "b": 1.0})
    assert result.jain == pytest.approx(jain_index([40 / 60, 1.0]))
