"""schemathesis against the server's own /openapi.json: generated requests, valid and invalid, to every route.

No answer may be a 5xx, and each must conform to the document: a status it lists, a content type it lists, and
a body matching the schema of that status (the response models, and the OpenAI error body for errors). The
examples per route and mode are bounded so the run stays within CI's budget. (Hypothesis drives schemathesis'
strategies directly: its pytest plugin does not load under this pytest.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from harness import RunningServer, start_server
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

EXAMPLES = 25
"""Per route and generation mode."""
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def fuzzed_server(tiny_model_dir: Path) -> Iterator[RunningServer]:
    """A server of its own: the fuzzer resets its prefix cache and sends requests of every shape."""
    running = start_server(tiny_model_dir, engine_overrides={"max_num_seqs": 8})
    yield running
    running.stop()


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_every_route_answers_as_documented(fuzzed_server: RunningServer, mode: GenerationMode) -> None:
    schema = schemathesis.openapi.from_url(f"{fuzzed_server.base_url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck)
        )
        def answers_as_documented(case: schemathesis.Case) -> None:
            case.call_and_validate(checks=CHECKS, timeout=60)

        try:
            answers_as_documented()
        except Unsatisfiable:  # a route that takes no input has no invalid input to send
            assert mode is GenerationMode.NEGATIVE and not operation.body and not operation.query
    assert fuzzed_server.wait_for_free_blocks(timeout=30) == 0
