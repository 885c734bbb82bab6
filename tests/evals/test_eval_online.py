"""`switchyard eval online` over a real log with a real (tiny, random) judge: its output is held to the judge
scorer's JSON schema, so every logged answer gets a verdict, written back, and a rerun grades nothing twice."""

from __future__ import annotations

from pathlib import Path

from server.harness import RunningServer

from switchyard.evals.cli import main
from switchyard.fleet.online_eval.log import OnlineEvalLog
from switchyard.fleet.online_eval.record import LoggedExchange
from switchyard.fleet.usage import TokenUsage


def _exchange(request_id: str, shadow: bool, created: float) -> LoggedExchange:
    return LoggedExchange(
        request_id=request_id,
        tenant="default",
        pool="candidate" if shadow else "tiny",
        endpoint="chat",
        request='{"model": "tiny", "messages": [{"role": "user", "content": "What is 2 + 2?"}]}',
        response='{"choices": [{"message": {"role": "assistant", "content": "4"}}]}',
        status=200,
        latency=0.1,
        usage=TokenUsage(5, 0, 1),
        cost=0.0,
        created=created,
        shadow=shadow,
    )


def test_every_logged_answer_gets_one_verdict(eval_server: RunningServer, tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    log = OnlineEvalLog(path)
    log.add([_exchange("r1", False, 100.0), _exchange("r1", True, 100.0), _exchange("old", False, 1.0)])
    log.close()
    command = [
        "online",
        "--log",
        str(path),
        "--judge-base-url",
        f"{eval_server.base_url}/v1",
        "--judge-model",
        "tiny",
    ]
    assert main([*command, "--since", "50"]) == 0
    reader = OnlineEvalLog(path)
    verdicts = reader.verdicts("tiny")
    assert sorted((v.request_id, v.shadow) for v in verdicts) == [("r1", False), ("r1", True)]
    assert all(0.0 <= v.score <= 1.0 and v.rationale for v in verdicts)
    assert main(command) == 0  # the old one now, and nothing twice
    assert len(reader.verdicts("tiny")) == 3
    reader.close()
