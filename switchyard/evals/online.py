"""`switchyard eval online`: a judge model grades the answers the fleet gateway logged (online evaluation).

Each logged exchange not yet graded by this judge (the primary's answer and a shadow's alike) is scored by the
evals judge scorer against the rubric, and the verdict is written back into the log (its `verdicts` table),
so a rerun grades only what is new. `--every` repeats the run in-process; cron works as well.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from switchyard.evals.outcome import Outcome
from switchyard.evals.scorers.base import ScoringContext
from switchyard.evals.scorers.judge import judge
from switchyard.fleet.online_eval.log import OnlineEvalLog, StoredVerdict
from switchyard.fleet.online_eval.record import LoggedExchange

DEFAULT_RUBRIC = "The reply answers the question helpfully, correctly and without harmful content."


@dataclass(frozen=True)
class OnlineJudgeRun:
    graded: int
    passed: int


async def judge_log(
    log_path: Path, context: ScoringContext, judge_name: str, rubric: str, since: float | None = None
) -> OnlineJudgeRun:
    """Grade every exchange since `since` that `judge_name` has not graded yet; write the verdicts back."""
    log = OnlineEvalLog(log_path)
    try:
        done = {(v.request_id, v.shadow) for v in log.verdicts(judge_name)}
        graded = passed = 0
        for exchange in log.exchanges(since):
            if (exchange.request_id, exchange.shadow) in done or exchange.status >= 400:
                continue
            verdict = await judge.score_fn({"rubric": rubric}, _outcome(exchange), context)
            log.add_verdict(
                StoredVerdict(
                    exchange.request_id,
                    exchange.shadow,
                    judge_name,
                    verdict.passed,
                    float(verdict.value if verdict.value is not None else float(verdict.passed)),
                    verdict.detail or "",
                    time.time(),
                )
            )
            graded += 1
            passed += int(verdict.passed)
        return OnlineJudgeRun(graded, passed)
    finally:
        log.close()


async def judge_every(
    log_path: Path, context: ScoringContext, judge_name: str, rubric: str, every: float, since: float | None
) -> None:
    """Grade what is new every `every` seconds, until interrupted."""
    while True:
        run = await judge_log(log_path, context, judge_name, rubric, since)
        print(f"switchyard eval online: graded {run.graded}, passed {run.passed}", flush=True)
        await asyncio.sleep(every)


def _outcome(exchange: LoggedExchange) -> Outcome:
    return Outcome(content=_reply(exchange.response), prompt=_question(exchange.request))


def _question(request: str) -> str:
    """The last user message, the completion's prompt, or the Responses API's input."""
    try:
        body: Any = json.loads(request)
    except json.JSONDecodeError:
        return request
    if not isinstance(body, dict):
        return request
    messages = body.get("messages")
    if isinstance(messages, list):
        users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        if users:
            content = users[-1].get("content")
            return content if isinstance(content, str) else json.dumps(content)
    for key in ("prompt", "input"):
        value = body.get(key)
        if value is not None:
            return value if isinstance(value, str) else json.dumps(value)
    return request


def _reply(response: str) -> str:
    """A logged body's text (chat's message, completions' text, the Responses API's output text); a stream
    was logged as its text already."""
    try:
        body: Any = json.loads(response)
    except json.JSONDecodeError:
        return response
    if not isinstance(body, dict):
        return response
    choices = body.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message")
        text = message.get("content") if isinstance(message, dict) else choices[0].get("text")
        return text if isinstance(text, str) else ""
    output_text = body.get("output_text")
    if isinstance(output_text, str):
        return output_text
    return response
