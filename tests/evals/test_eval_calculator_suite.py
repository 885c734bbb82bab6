"""The `agent-calculator` suite: its questions are held out from the corpus's calculator phrasings, each has one
right result that its check finds in a reply, and an agent that uses the user's calculator passes it.

The agent runs through the real runtime with the suite's own config (the live "arithmetic" calculator); a
scripted model stands in for one that calls the tool well or badly.
"""

from __future__ import annotations

import ast
import asyncio
import json
import random
import re
from pathlib import Path

import pytest
from eval_helpers import import_scripted_model, read_jsonl, run_cli
from server.harness import RunningServer

from switchyard.agents.demo_world import ToolWorld, evaluate_expression, format_number
from switchyard.agents.model import ModelRequest, ModelResponse
from switchyard.evals.agent_case import run_agent_case
from switchyard.evals.agent_config import load_agent_config
from switchyard.evals.endpoint import Prices
from switchyard.evals.scorers import get_scorer
from switchyard.evals.suite import SUITES_DIR, load_suite

switchyard_training = pytest.importorskip("switchyard_training")

from switchyard_training.entities import HELDOUT_ENTITIES  # noqa: E402
from switchyard_training.eval_arithmetic import (  # noqa: E402
    answer_pattern,
    arithmetic_questions,
    heldout_templates,
)
from switchyard_training.tasks.context import TaskContext  # noqa: E402
from switchyard_training.tasks.open_tools import math_request, math_tool  # noqa: E402
from switchyard_training.tasks.tool_requests import calculator_request  # noqa: E402

ScriptedModel, call, say = import_scripted_model()
TASKS = Path(switchyard_training.__file__).parent / "tasks"
OPERATORS = r"multiplied by|divided by|take away|plus|minus|times|over|add|[-+*/x×÷=]"


def template_strings(source: str) -> set[str]:
    """Every string literal of a module, f-strings with each `{...}` as "{}"."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.JoinedStr):
            found.add("".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)
    return found


def template_form(template: str) -> str:
    """Case, punctuation and spacing ignored; named placeholders as "{}"."""
    text = re.sub(r"\{\w*\}", "{}", template.casefold().replace("'", ""))
    return " ".join(re.sub(r"[^\w{} ]", " ", text).split())


def shape(text: str) -> str:
    """A question's wording with its numbers and operators taken out: what a phrasing is."""
    text = re.sub(r"\d+(\.\d+)?", " N ", text.casefold().replace("'", ""))
    text = re.sub(rf"(?<![a-z])({OPERATORS})(?![a-z])", " O ", text)
    return " ".join(re.sub(r"[^\w ]", " ", text).split())


def test_no_held_out_template_is_a_training_one() -> None:
    """Against every string of the corpus's task generators (the lead's new ones included as they land)."""
    training = set()
    for module in sorted(TASKS.glob("*.py")):
        training |= {template_form(t) for t in template_strings(module.read_text(encoding="utf-8"))}
    clashes = [t for t in heldout_templates() if template_form(t) in training]
    assert not clashes


def test_no_question_has_the_shape_of_a_training_request() -> None:
    """Against the demo calculator's requests and the user-written calculators' (`open_tools`)."""
    ctx = TaskContext(random.Random(0), HELDOUT_ENTITIES, ToolWorld.build(HELDOUT_ENTITIES, 0))
    trained = {shape(calculator_request(ctx)[0]) for _ in range(3000)}
    trained |= {shape(math_request(ctx, math_tool(ctx))[0]) for _ in range(3000)}
    asked = {shape(q.text): q.text for q in arithmetic_questions(400, seed=0)}
    assert len(trained) > 40 and len(asked) > 100
    assert not [text for form, text in asked.items() if form in trained]


def test_every_question_has_one_right_result_that_its_check_finds() -> None:
    questions = arithmetic_questions(100, seed=0)
    assert len({q.text for q in questions}) == 100 and {q.form.split("_")[0] for q in questions} == {
        "inline",
        "worded",
        "chain",
    }
    for q in questions:
        assert q.result == format_number(evaluate_expression(q.expression)) and float(q.result) >= 10
        assert not re.search(answer_pattern(q.result), q.text), q
    pattern = answer_pattern("12024")
    assert re.search(pattern, "That's 12,024.") and re.search(pattern, "12024")
    assert not re.search(pattern, "112024") and not re.search(pattern, "12024.5")


def test_the_shipped_suite_is_these_questions() -> None:
    suite = load_suite("agent-calculator")
    questions = arithmetic_questions(100, seed=0)
    assert [c.input for c in suite.cases] == [q.text for q in questions]  # type: ignore[union-attr]
    assert suite.thresholds == {"answers": 0.90}
    config = load_agent_config(SUITES_DIR / "agents" / "calculator-agent.json")
    calculator, send_message = config.tools
    assert (
        calculator.implementation == "arithmetic" and "Evaluate an arithmetic" not in calculator.description
    )
    assert send_message.acting and send_message.needs_approval and send_message.max_tokens == 256


def a_user(expression_of: dict[str, str], answer: str) -> ScriptedModel:
    """A model that calls the calculator with the question's expression and words the tool's result."""

    def calculate(request: ModelRequest) -> ModelResponse:
        question = next(m["content"] for m in request.messages if m["role"] == "user")
        return call("calculator", {"expression": expression_of[question]})

    def reply(request: ModelRequest) -> ModelResponse:
        result = request.messages[-1]["content"]
        return say(answer.format(result=f"{int(result):,}" if result.isdigit() else result))

    return ScriptedModel([calculate, reply])


@pytest.mark.parametrize("answer", ["That comes to {result}.", "{result}"])
def test_an_agent_that_uses_the_calculator_passes_every_case(answer: str) -> None:
    suite = load_suite("agent-calculator")
    config = load_agent_config(SUITES_DIR / "agents" / "calculator-agent.json")
    expression_of = {q.text: q.expression for q in arithmetic_questions(100, seed=0)}
    for case in suite.cases[:25]:
        model = a_user(expression_of, answer)
        outcome = asyncio.run(run_agent_case(case, config, "scripted", model, Prices(0.0, 0.0)))  # type: ignore[arg-type]
        for check in case.checks:
            verdict = get_scorer(check.scorer).score_now(check.params, outcome)
            assert verdict.passed, (case.id, check.scorer, outcome.content, verdict.detail)


def test_a_wrong_expression_or_no_tool_fails() -> None:
    suite = load_suite("agent-calculator")
    config = load_agent_config(SUITES_DIR / "agents" / "calculator-agent.json")
    case = next(c for c in suite.cases if len(c.checks) == 2)  # type: ignore[union-attr]
    wrong = {case.input: "2 + 2"}  # type: ignore[union-attr]
    for model in (a_user(wrong, "{result}"), ScriptedModel([say("I don't have a calculator")])):
        outcome = asyncio.run(run_agent_case(case, config, "scripted", model, Prices(0.0, 0.0)))  # type: ignore[arg-type]
        verdicts = [get_scorer(c.scorer).score_now(c.params, outcome) for c in case.checks]  # type: ignore[union-attr]
        assert not verdicts[0].passed


def test_the_live_calculator_reports_a_bad_expression_to_the_model() -> None:
    suite = load_suite("agent-calculator")
    config = load_agent_config(SUITES_DIR / "agents" / "calculator-agent.json")
    case = suite.cases[0]
    model = ScriptedModel([call("calculator", {"expression": "__import__('os')"}), say("sorry")])
    asyncio.run(run_agent_case(case, config, "scripted", model, Prices(0.0, 0.0)))  # type: ignore[arg-type]
    tool_reply = model.requests[1].messages[-1]["content"]
    assert tool_reply.startswith("Error: calculator failed") and "unsupported expression" in tool_reply
    assert json.loads(json.dumps(tool_reply))  # plain text, as the runtime sends a failed call's reason


def test_switchyard_eval_runs_the_suite_against_a_server(eval_server: RunningServer, tmp_path: Path) -> None:
    """A random model through the CLI: every case is run and scored (none is an endpoint error, even when a
    cut call's retry does not fit the tiny model's context), and the missed threshold fails the run."""
    out = tmp_path / "run"
    done = run_cli("run", "agent-calculator", "--base-url", f"{eval_server.base_url}/v1", "--model", "tiny",
                   "--limit", "4", "--output-dir", str(out), "--no-progress")  # fmt: skip
    assert done.returncode == 1 and "suite agent-calculator: 4 of 4 cases scored" in done.stdout, done.stderr
    records = read_jsonl(out / "cases.jsonl")
    assert len(records) == 4 and all(r["error"] is None and "answers" in r["checks"] for r in records)
