"""Fixtures of the gateway tests: four `switchyard serve` replicas shared by the whole package.

`a` and `b` serve the tiny Llama as `tiny`; `narrow` serves it as `tiny` and `tiny-solo` with room for one
running and one waiting request (so it answers 429 under a little load); `qwen` serves the tiny Qwen3 as
`tiny-qwen`. A test that kills or pauses a replica brings it back before it ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet_harness import ReplicaProcess, Replicas, start_replicas


@pytest.fixture(scope="package")
def replicas(
    tiny_model_dir: Path, tiny_qwen3_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replicas]:
    logs = tmp_path_factory.mktemp("replica-logs")
    started = Replicas(
        a=ReplicaProcess(tiny_model_dir, ("tiny",), logs / "a.log"),
        b=ReplicaProcess(tiny_model_dir, ("tiny",), logs / "b.log"),
        narrow=ReplicaProcess(
            tiny_model_dir,
            ("tiny", "tiny-solo"),
            logs / "narrow.log",
            extra_args=("--max-num-seqs", "1", "--max-waiting", "1"),
        ),
        qwen=ReplicaProcess(tiny_qwen3_dir, ("tiny-qwen",), logs / "qwen.log"),
    )
    try:
        start_replicas(started.all())
        yield started
    finally:
        for replica in started.all():
            replica.stop()
