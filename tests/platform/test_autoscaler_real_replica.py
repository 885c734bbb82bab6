"""A fleet replica as a serving-class job: the autoscaler keeps a pool's minimum of one real `switchyard serve`
replica (the tiny test model on CPU) running on a logical GPU, reads its real /metrics, and the official
client gets an answer from it at the endpoint its worker reported. Slow: the replica loads torch and a model."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import ray
from ray_platform import NODE_CPUS, control_plane, reconcile_until

from switchyard.platform.autoscaler import (
    AutoscalerSettings,
    ScaleAction,
    ServingAutoscaler,
    ServingPoolSpec,
    serve_command,
)
from switchyard.platform.jobs import JobState

pytestmark = pytest.mark.slow

TINY_SERVE_ARGS = (
    *("--device", "cpu", "--dtype", "float32", "--max-model-len", "256"),
    *("--kv-cache-memory", str(8 << 20), "--shutdown-grace", "5"),
)


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=NODE_CPUS, num_gpus=1, include_dashboard=False, logging_level=logging.ERROR)
    try:
        yield
    finally:
        ray.shutdown()


def answers(endpoint: str) -> bool:
    try:
        return httpx.get(f"{endpoint}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_pool_keeps_a_real_replica_that_answers_the_official_client(
    local_ray: None, tiny_model_dir: Path, tmp_path: Path
) -> None:
    plane = control_plane(tmp_path)
    pool = ServingPoolSpec("tiny", "serving", serve_command(str(tiny_model_dir), "tiny", TINY_SERVE_ARGS))
    autoscaler = ServingAutoscaler(plane, [pool], AutoscalerSettings(up_after=1, down_after=100))
    try:
        assert autoscaler.tick() == {"tiny": ScaleAction.UP}  # the pool's minimum
        [replica] = plane.jobs()
        assert replica.job.spec.priority_class.name == "SERVING" and not replica.job.spec.preemptible
        reconcile_until(
            plane,
            lambda: any(answers(url) for record in plane.jobs() for url in record.endpoints),
            "the replica serves",
            timeout=180,
        )
        endpoint = plane.job(replica.job.id).endpoints[0]
        client = openai.OpenAI(base_url=f"{endpoint}/v1", api_key="unused", max_retries=0, timeout=60)
        answer = client.completions.create(model="tiny", prompt="Hello", max_tokens=3)
        assert answer.usage is not None and answer.usage.completion_tokens > 0
        assert autoscaler.tick() == {"tiny": ScaleAction.HOLD}  # one ready replica, read from its /metrics
        plane.cancel(replica.job.id)
        reconcile_until(plane, lambda: plane.job(replica.job.id).job.placement is None, "the replica stops")
        assert plane.job(replica.job.id).job.state is JobState.CANCELLED
        assert not answers(endpoint)
    finally:
        plane.shutdown()
