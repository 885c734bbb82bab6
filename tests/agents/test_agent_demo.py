"""`switchyard agent demo`: its CLI wiring on a tiny random model, and its tasks on the bundled model.

The bundled-model tests check what the model was trained for (calculator, unit conversion, weather, a message
sent or declined with approval) and skip while `switchyard train-default` has not built the model.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from model_factory import build_hf_model
from server.harness import MODEL, RunningServer, start_server
from tokenizer_factory import build_tokenizer

from switchyard.agents import InjectionPolicy, OpenAIModelClient, RunLimits, Runner, RunStatus
from switchyard.agents.cli import main
from switchyard.agents.demo import DEMO_CALLER, DemoWorld, demo_agent
from switchyard.agents.demo_world import format_number
from switchyard.cli import main as switchyard_main
from switchyard.models.registry import BUNDLED_MODELS, MAIN_MODEL, is_built


def test_agent_command_is_registered(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        switchyard_main(["agent", "demo", "--help"])
    assert exit_info.value.code == 0 and "--approve" in capsys.readouterr().out


def test_the_demo_world_loads_neither_torch_nor_faker_nor_training() -> None:
    """The demo's tools and world are the agents side's own: importing them pulls in no heavy or training
    package."""
    code = (
        "import sys; from switchyard.agents.demo import DemoWorld; DemoWorld(); "
        "print(sorted({m.partition('.')[0] for m in sys.modules} & {'torch', 'faker', 'switchyard_training'}))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_demo_runs_against_a_server_given_by_url(
    tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path_factory.mktemp("tiny-llama-demo")
    build_hf_model("llama", folder, seed=0, max_position_embeddings=2048)
    build_tokenizer(folder, vocab_size=320)
    server = start_server(folder, engine_overrides={"max_model_len": 2048, "kv_cache_memory": 32 << 20})
    try:
        trace = tmp_path_factory.mktemp("trace") / "spans.jsonl"
        code = main(["demo", "--base-url", f"{server.base_url}/v1", "--served-model", MODEL, "--task", "What is 2 + 2?",
                     "--max-turns", "1", "--approve", "no", "--trace-file", str(trace)])  # fmt: skip
    finally:
        server.stop()
    out = capsys.readouterr().out
    assert code in (0, 1) and "> What is 2 + 2?" in out and "turns=1" in out
    assert '"name": "agent.run"' in trace.read_text()


BUNDLED = BUNDLED_MODELS[MAIN_MODEL]
needs_bundled = pytest.mark.skipif(
    not is_built(BUNDLED), reason="bundled model not built (switchyard train-default)"
)


def demo_runner() -> Runner:
    """The runner as `switchyard agent demo` sets it up: no spotlighting, whose system notice and delimiters
    the bundled model never saw in training (it was trained on raw tool JSON)."""
    return Runner(limits=RunLimits(max_turns=4), policy=InjectionPolicy(spotlight=False))


@pytest.fixture(scope="module")
def bundled_server() -> Iterator[RunningServer]:
    running = start_server(BUNDLED, engine_overrides={"max_model_len": None, "kv_cache_memory": 64 << 20})
    yield running
    running.stop()


def _expected(world: DemoWorld, task: str) -> tuple[str, str]:
    if task.startswith("What is 12"):
        return "calculator", "84"
    if task.startswith("Convert"):
        return "convert_units", format_number(5 * 1000 / 1609.344)
    return "get_weather", str(world.world.weather[world.a_city()].temperature_c)


@needs_bundled
@pytest.mark.parametrize("which", [0, 1, 2])
def test_bundled_model_solves_the_demo_tasks(bundled_server: RunningServer, which: int) -> None:
    world = DemoWorld()
    task = ["What is 12 * 7?", "Convert 5 km to mi.", f"What's the weather in {world.a_city()}?"][which]
    tool_name, answer = _expected(world, task)
    agent = demo_agent(OpenAIModelClient(client=bundled_server.async_client()), MODEL, world)
    result = demo_runner().run_sync(agent, task)
    assert result.status is RunStatus.COMPLETED, result.messages
    called = [c["function"]["name"] for m in result.messages for c in m.get("tool_calls") or []]
    assert called[:1] == [tool_name]
    assert answer in str(result.final_output)


@needs_bundled
@pytest.mark.parametrize("approve", [True, False])
def test_bundled_model_asks_to_send_a_message_and_reports_the_decision(
    bundled_server: RunningServer, approve: bool
) -> None:
    world = DemoWorld()
    agent = demo_agent(OpenAIModelClient(client=bundled_server.async_client()), MODEL, world)
    runner = demo_runner()
    paused = runner.run_sync(agent, "Send a message to Maria saying the report is ready.", caller=DEMO_CALLER)
    assert paused.status is RunStatus.NEEDS_APPROVAL, paused.messages
    (item,) = paused.pending_approvals
    assert item.tool == "send_message" and item.arguments == {"to": "Maria", "text": "the report is ready"}
    if approve:
        paused.state.approve(item.call_id)
    else:
        paused.state.reject(item.call_id, "not now")
    done = runner.resume_sync(paused.state)
    assert done.status is RunStatus.COMPLETED, (done.status_detail, done.messages)
    assert world.outbox == (["to Maria: the report is ready"] if approve else [])
    assert "Maria" in str(done.final_output)


@needs_bundled
def test_bundled_model_says_it_cannot_send_without_the_scope(bundled_server: RunningServer) -> None:
    """A caller without `messages:send` is not offered the tool, and the model says it has none for that (the
    corpus trains this reply where no message tool is offered)."""
    world = DemoWorld()
    agent = demo_agent(OpenAIModelClient(client=bundled_server.async_client()), MODEL, world)
    result = demo_runner().run_sync(agent, "Send a message to Maria saying the report is ready.")
    assert result.status is RunStatus.COMPLETED and not result.pending_approvals
    assert world.outbox == [] and "can't send messages" in str(result.final_output)
