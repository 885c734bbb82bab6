"""Summary statistics, SLO checks, arrival schedules, workloads and the rate search, without a server."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import httpx
import numpy as np
import pytest

from switchyard.bench.client import RequestResult, Target, _output_piece, request_body
from switchyard.bench.load import LoadShape, arrival_times
from switchyard.bench.runner import RunInterrupted, run_load
from switchyard.bench.search import Probe, find_max_rate
from switchyard.bench.slo import parse_slo, request_meets, run_meets, run_values
from switchyard.bench.summary import format_summary, summarize
from switchyard.bench.workloads import TOOLS, WorkloadError, WorkloadOptions, build_sessions


def recorded_run() -> list[RequestResult]:
    """Five requests as a client would have recorded them: four succeeded, one got a 429."""
    rows = [
        # ttft, itls, e2e, prompt tokens, output tokens
        (0.10, [0.02, 0.02, 0.02], 0.16, 10, 4),
        (0.20, [0.04, 0.04, 0.04], 0.32, 20, 4),
        (0.30, [0.01], 0.31, 30, 2),
        (0.40, [0.05, 0.05, 0.05, 0.05], 0.60, 40, 5),
    ]
    results = [
        RequestResult(index=i, session=i, turn=0, start=0.5 * i, ttft=t, itl=itl, e2e=e2e,
                      prompt_tokens=p, output_tokens=o, cached_tokens=8 if i == 1 else 0)
        for i, (t, itl, e2e, p, o) in enumerate(rows)
    ]  # fmt: skip
    results.append(
        RequestResult(index=4, session=4, turn=0, start=2.0, error="http_429", error_message="full")
    )
    return results


def test_summary_of_a_recorded_run_matches_hand_computation() -> None:
    summary = summarize(
        recorded_run(), duration=2.0, request_rate=2.5, slo=parse_slo("ttft_p99=0.35,tpot_p90=45ms")
    )
    assert (summary.num_requests, summary.completed, summary.failed) == (5, 4, 1)
    assert summary.errors == {"http_429": 1}
    assert summary.request_throughput == pytest.approx(4 / 2.0)
    assert summary.output_token_throughput == pytest.approx((4 + 4 + 2 + 5) / 2.0)
    assert summary.input_token_throughput == pytest.approx(100 / 2.0)
    assert summary.cached_tokens == 8
    # TTFT 0.1, 0.2, 0.3, 0.4: mean 0.25, median 0.25, p90 at rank 0.9 × 3 = 2.7 → 0.3 + 0.7 × 0.1 = 0.37,
    # p99 at rank 2.97 → 0.397.
    ttft = summary.ttft
    assert ttft is not None
    assert (ttft.count, ttft.mean, ttft.median, ttft.p90, ttft.p99, ttft.max) == pytest.approx(
        (4, 0.25, 0.25, 0.37, 0.397, 0.4)
    )
    # TPOT = (e2e − ttft) / (output − 1): 0.06/3 = 0.02, 0.12/3 = 0.04, 0.01/1 = 0.01, 0.2/4 = 0.05.
    tpot = summary.tpot
    assert tpot is not None
    assert tpot.mean == pytest.approx((0.02 + 0.04 + 0.01 + 0.05) / 4)
    assert tpot.median == pytest.approx(0.03)  # between 0.02 and 0.04
    # ITL: every gap of every successful request, 11 samples.
    itl = summary.itl
    assert itl is not None and itl.count == 11
    assert itl.mean == pytest.approx((0.06 + 0.12 + 0.01 + 0.2) / 11)
    assert itl.median == pytest.approx(0.04)
    assert summary.e2e is not None and summary.e2e.max == pytest.approx(0.60)
    # SLO, run level: the failed request counts as infinitely slow, so TTFT p99 over 5 values is infinite.
    assert summary.slo_values is not None and math.isinf(summary.slo_values["ttft_p99"])
    assert summary.slo_met is False
    # TPOT p90 over the four successes and the failure (as inf) is also infinite.
    assert math.isinf(summary.slo_values["tpot_p90"])
    # Goodput: requests that met both terms alone: #0 (0.1, 0.02), #1 (0.2, 0.04), #2 (0.3, 0.01); #3 misses.
    assert summary.goodput == pytest.approx(3 / 2.0)
    strict = json.loads(json.dumps(summary.to_json()), parse_constant=lambda name: pytest.fail(name))
    assert strict["slo_values"]["ttft_p99"] == "inf"


def test_slo_without_failures_and_parse_errors() -> None:
    ok = recorded_run()[:4]
    slo = parse_slo("ttft_p99=400ms, itl_max=0.05, e2e_mean=1")
    assert [t.limit for t in slo.terms] == pytest.approx([0.4, 0.05, 1.0])
    values = run_values(ok, slo)
    assert values["ttft_p99"] == pytest.approx(0.397)
    assert values["itl_max"] == pytest.approx(0.05)
    assert values["e2e_mean"] == pytest.approx((0.16 + 0.32 + 0.31 + 0.60) / 4)
    assert run_meets(ok, slo)
    assert not run_meets(ok, parse_slo("ttft_median=0.2"))  # median 0.25
    assert request_meets(ok[0], parse_slo("itl_p99=0.02")) and not request_meets(
        ok[1], parse_slo("itl_p99=0.02")
    )
    for bad in ("ttft=1", "ttft_p42=1", "latency_p99=1", "ttft_p99=fast", "ttft_p99=0", ""):
        with pytest.raises(ValueError):
            parse_slo(bad)


def test_results_round_trip_through_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in recorded_run()))
    loaded = [RequestResult.from_json(json.loads(line)) for line in path.read_text().splitlines()]
    assert summarize(loaded, 2.0, request_rate=2.5) == summarize(recorded_run(), 2.0, request_rate=2.5)


def test_arrivals_follow_rate_burstiness_and_ramp() -> None:
    poisson = arrival_times(LoadShape(request_rate=50.0, seed=1), 20000)
    gaps = np.diff(poisson)
    assert np.all(gaps >= 0)
    assert gaps.mean() == pytest.approx(1 / 50, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)  # exponential: CV 1
    regular = np.diff(arrival_times(LoadShape(request_rate=50.0, burstiness=25.0, seed=1), 20000))
    assert regular.std() / regular.mean() == pytest.approx(1 / 5, rel=0.05)  # gamma k: CV 1/√k
    assert np.all(arrival_times(LoadShape(), 5) == 0)
    # Ramp over 10 s to 20 req/s: Λ(10) = 20 × 10 / 2 = 100 arrivals in the ramp, then 20 per second.
    ramped = arrival_times(LoadShape(request_rate=20.0, ramp_up=10.0, seed=2), 2000)
    assert np.sum(ramped < 10.0) == pytest.approx(100, abs=30)
    assert np.sum(ramped < 5.0) == pytest.approx(25, abs=15)  # Λ(5) = 20 × 25 / 20
    assert np.sum((ramped >= 10.0) & (ramped < 60.0)) == pytest.approx(1000, rel=0.1)
    for bad in (dict(request_rate=-1.0), dict(burstiness=0.0), dict(max_concurrency=0), dict(ramp_up=-1.0)):
        with pytest.raises(ValueError):
            LoadShape(**bad)  # type: ignore[arg-type]


def test_search_converges_on_a_known_capacity() -> None:
    capacity = 7.3

    async def probe(rate: float) -> Probe:
        return Probe(rate, meets=rate <= capacity)

    result = asyncio.run(find_max_rate(probe, start_rate=1.0, tolerance=0.05, max_probes=20))
    assert result.converged and result.max_rate is not None and result.min_failing_rate is not None
    assert result.max_rate <= capacity < result.min_failing_rate
    assert result.min_failing_rate - result.max_rate <= 0.05 * result.min_failing_rate
    rates = [p.rate for p in result.probes]
    assert rates[:4] == [1.0, 2.0, 4.0, 8.0]  # doubling until the first miss, then bisection
    assert rates[4] == 6.0
    # Every probe after the first miss lies strictly inside the bracket known at that time.
    low, high = 4.0, 8.0
    for p in result.probes[4:]:
        assert low < p.rate < high
        low, high = (p.rate, high) if p.meets else (low, p.rate)

    down = asyncio.run(find_max_rate(probe, start_rate=100.0, tolerance=0.05, max_probes=20))
    assert down.converged and down.max_rate is not None and down.max_rate <= capacity
    none = asyncio.run(find_max_rate(probe, start_rate=1.0, min_rate=8.0, max_probes=5))
    assert none.max_rate is None and not none.converged and len(none.probes) == 1


def test_workloads(tmp_path: Path) -> None:
    random_sessions = build_sessions(
        WorkloadOptions("random", input_len=12, output_len=7, range_ratio=0.5), 50
    )
    lengths = [len(s.turns[0].prompt.split()) for s in random_sessions]  # type: ignore[union-attr]
    assert min(lengths) >= 6 and max(lengths) <= 18 and len(set(lengths)) > 3
    assert all(3 <= s.turns[0].max_tokens <= 11 for s in random_sessions)
    assert build_sessions(WorkloadOptions(seed=3), 4) == build_sessions(WorkloadOptions(seed=3), 4)

    prefix = build_sessions(WorkloadOptions("prefix", api="chat", prefix_len=20, num_prefixes=2), 6)
    systems = [s.turns[0].messages[0]["content"] for s in prefix]
    assert systems[0] == systems[2] == systems[4] != systems[1] and len(systems[0].split()) == 20

    chat = build_sessions(WorkloadOptions("chat", api="chat", turns=3), 2)
    assert [len(s.turns) for s in chat] == [3, 3]
    with pytest.raises(WorkloadError, match="chat API"):
        build_sessions(WorkloadOptions("chat", api="completions"), 1)

    tools = build_sessions(WorkloadOptions("tools", api="chat", input_len=4), 3)
    body = request_body(Target("http://x/v1", "m", api="chat", ignore_eos=True), tools[0].turns[0], [])
    assert body["tools"] == list(TOOLS) and body["tool_choice"] == "auto" and body["ignore_eos"] is True
    assert body["stream"] and body["stream_options"] == {"include_usage": True}

    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text(
        '{"prompt": "hello", "max_tokens": 3}\n\n{"messages": [{"role": "user", "content": "x"}]}\n'
    )
    rows = build_sessions(WorkloadOptions("jsonl", api="chat", dataset=dataset), 3)
    assert (
        rows[0].turns[0].messages == ({"role": "user", "content": "hello"},)
        and rows[0].turns[0].max_tokens == 3
    )
    assert rows[1].turns[0].messages[0]["content"] == "x" and rows[2] == rows[0]
    with pytest.raises(WorkloadError, match=":3 has messages"):
        build_sessions(WorkloadOptions("jsonl", dataset=dataset), 2)
    dataset.write_text("{not json\n")
    with pytest.raises(WorkloadError, match=":1 is not JSON"):
        build_sessions(WorkloadOptions("jsonl", dataset=dataset), 1)


def test_tenants_workload() -> None:
    options = WorkloadOptions("tenants", api="chat", prefix_len=30, num_prefixes=3, turns=4, input_len=5)
    sessions = build_sessions(options, 7)
    assert len(sessions) == 7 and all(len(s.turns) == 4 for s in sessions)
    systems = []
    for session in sessions:
        first, *later = session.turns
        assert [m["role"] for m in first.messages] == ["system", "user"]
        assert all([m["role"] for m in turn.messages] == ["user"] for turn in later)  # the history comes back
        assert all(len(m["content"].split()) == 5 for turn in session.turns for m in turn.messages[-1:])
        systems.append(first.messages[0]["content"])
    # Session i belongs to tenant i mod 3: its system prompt, and a `user` of its own for all its turns.
    assert systems[0] == systems[3] == systems[6] != systems[1] != systems[2] != systems[0]
    assert all(len(system.split()) == 30 for system in systems)
    users = [{turn.user for turn in session.turns} for session in sessions]
    assert users[0] == {"tenant-0-session-0"} and users[4] == {"tenant-1-session-4"}
    assert len(set().union(*users)) == 7
    assert build_sessions(options, 7) == sessions and build_sessions(replace(options, seed=1), 7) != sessions
    with pytest.raises(WorkloadError, match="chat API"):
        build_sessions(replace(options, api="completions"), 1)

    # What a later turn sends: the tenant's system prompt first, then the conversation so far.
    target = Target("http://x/v1", "m", api="chat")
    first, second = sessions[3].turns[:2]
    history = [*first.messages, {"role": "assistant", "content": "ok"}]
    body = request_body(target, second, history)
    assert body["messages"][0] == {"role": "system", "content": systems[0]}
    assert body["messages"][1:] == [first.messages[1], history[-1], second.messages[0]]
    assert body["user"] == "tenant-0-session-3"
    assert "user" not in request_body(target, build_sessions(WorkloadOptions(), 1)[0].turns[0], [])


def test_tenant_system_prompts_have_exact_lengths_with_a_tokenizer(tiny_model_dir: Path) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))
    options = WorkloadOptions("tenants", api="chat", prefix_len=60, num_prefixes=2, tokenizer=tiny_model_dir)
    for session in build_sessions(options, 2):
        system = session.turns[0].messages[0]["content"]
        assert 56 <= len(tokenizer.encode(system, add_special_tokens=False).ids) <= 60


def test_prompt_lengths_with_a_tokenizer(tiny_model_dir: Path) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))
    sessions = build_sessions(WorkloadOptions("random", input_len=40, tokenizer=tiny_model_dir), 5)
    for session in sessions:
        count = len(tokenizer.encode(session.turns[0].prompt or "", add_special_tokens=False).ids)
        assert 36 <= count <= 40  # exact unless the last merges do not settle


def test_output_pieces() -> None:
    assert _output_piece({"text": "hi"}) == "hi" and _output_piece({"text": ""}) is None
    assert _output_piece({"delta": {"role": "assistant", "content": ""}}) is None  # the chat role chunk
    assert _output_piece({"delta": {"content": "a"}}) == "a"
    assert _output_piece({"delta": {"tool_calls": [{"index": 0, "function": {"name": "f"}}]}}) == "f"
    assert _output_piece({"delta": {"reasoning_content": "hmm"}}) == "hmm"


def test_a_failed_request_counts_against_an_itl_slo() -> None:
    """A failed request is infinitely slow for every term, itl included: half the requests failing cannot
    meet `itl_p99`, however fast the others streamed."""
    ok = recorded_run()[:4]
    failed = [
        RequestResult(index=9 + i, session=9 + i, turn=0, start=0.0, error="http_500") for i in range(4)
    ]
    slo = parse_slo("itl_p99=1s")
    assert run_meets(ok, slo)
    assert math.isinf(run_values([*ok, *failed], slo)["itl_p99"])
    assert not run_meets([*ok, *failed], slo)


def test_an_slo_term_without_samples_stays_strict_json() -> None:
    """Single-token outputs have no inter-token gaps: the itl value is unknown, written as null, not NaN."""
    single = [
        RequestResult(index=i, session=i, turn=0, start=0.0, ttft=0.1, e2e=0.1, output_tokens=1)
        for i in range(3)
    ]
    summary = summarize(single, 1.0, request_rate=3.0, slo=parse_slo("itl_p99=50ms"))
    strict = json.loads(json.dumps(summary.to_json()), parse_constant=lambda name: pytest.fail(name))
    assert strict["slo_values"] == {"itl_p99": None} and strict["slo_met"] is False
    assert "itl_p99 = no samples" in format_summary(summary)


def test_the_summary_says_what_each_error_was() -> None:
    results = [*recorded_run(), RequestResult(index=5, session=5, turn=0, start=0.0, error="http_429")]
    summary = summarize(results, 2.0, request_rate=2.5)
    assert summary.error_examples == {"http_429": "full"}  # the first message of each type
    assert "  http_429: full" in format_summary(summary).splitlines()


def test_jsonl_rows_are_checked_before_any_traffic(tmp_path: Path) -> None:
    """The CLI validates a workload by building one session: every row must be checked then, not when the
    run reaches it, and a malformed field must name its line."""
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text('{"prompt": "a"}\n{"prompt": "b"}\n{"messages": [{"role": "user", "content": "c"}]}\n')
    with pytest.raises(WorkloadError, match=":3 has messages"):
        build_sessions(WorkloadOptions("jsonl", dataset=dataset), 1)
    for row, message in [
        ('{"prompt": "a", "max_tokens": "abc"}', ":1: 'max_tokens' must be a positive integer"),
        ('{"prompt": "a", "max_tokens": 0}', ":1: 'max_tokens' must be a positive integer"),
        ('{"messages": "oops"}', ":1: 'messages' must be a non-empty list"),
        ('{"prompt": ["a"]}', ":1: 'prompt' must be a string"),
        ('{"prompt": "a", "tools": "get_weather"}', ":1: 'tools' must be a list"),
    ]:
        dataset.write_text(row + "\n")
        with pytest.raises(WorkloadError, match=message):
            build_sessions(WorkloadOptions("jsonl", api="chat", dataset=dataset), 1)


def test_an_interrupted_run_keeps_what_it_recorded(tmp_path: Path) -> None:
    """Ctrl-C cancels the run: the finished requests and those in flight (as `cancelled`, with what had
    streamed in) are in the JSONL and in the RunInterrupted the caller summarises."""
    jsonl = tmp_path / "requests.jsonl"

    async def scenario() -> RunInterrupted:
        served = 0
        hanging = 0

        async def handler(request: httpx.Request) -> httpx.Response:
            nonlocal served
            served += 1
            finishes = served <= 2

            async def stream() -> AsyncIterator[bytes]:
                nonlocal hanging
                yield b'data: {"choices": [{"text": "a"}]}\n\n'
                if not finishes:
                    hanging += 1
                    await asyncio.Event().wait()  # until the run is cancelled
                yield b"data: [DONE]\n\n"

            return httpx.Response(200, content=stream())

        sessions = build_sessions(WorkloadOptions(input_len=2, output_len=2), 5)
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            run = asyncio.create_task(
                run_load(
                    client, Target("http://x/v1", "m"), sessions, LoadShape(), jsonl=jsonl, progress=False
                )
            )
            for _ in range(10_000):  # until two requests finished and three hang mid-stream
                if hanging == 3 and jsonl.is_file() and len(jsonl.read_text().splitlines()) == 2:
                    break
                await asyncio.sleep(0.001)
            run.cancel()
            with pytest.raises(RunInterrupted) as info:
                await run
        return info.value

    stop = asyncio.run(scenario())
    assert sorted(r.error or "ok" for r in stop.run.results) == ["cancelled"] * 3 + ["ok"] * 2
    assert all(r.ttft is not None for r in stop.run.results)  # the first chunk of each had arrived
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert sorted(r["error"] or "ok" for r in rows) == ["cancelled"] * 3 + ["ok"] * 2
    assert all(r["output_tokens"] == 1 and r["output_chunks"] == 1 for r in rows)  # cancelled ones too


def serve_without_usage(pieces: list[str]) -> httpx.MockTransport:
    """An endpoint that streams these completion pieces and never sends usage."""

    async def handler(request: httpx.Request) -> httpx.Response:
        async def stream() -> AsyncIterator[bytes]:
            for piece in pieces:
                yield f"data: {json.dumps({'choices': [{'text': piece}]})}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return httpx.Response(200, content=stream())

    return httpx.MockTransport(handler)


def test_output_tokens_without_usage_come_from_the_tokenizer_else_chunks(tiny_model_dir: Path) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))
    pieces = ["Hello there, ", "general ", "Kenobi"]  # several tokens a chunk, as a batching server sends
    tokens = len(tokenizer.encode("".join(pieces), add_special_tokens=False).ids)
    assert tokens > len(pieces)

    def run(count_tokens: object) -> list[RequestResult]:
        async def scenario() -> list[RequestResult]:
            sessions = build_sessions(WorkloadOptions(input_len=2, output_len=8), 2)
            async with httpx.AsyncClient(transport=serve_without_usage(pieces)) as client:
                shape = LoadShape()
                return (
                    await run_load(
                        client, Target("http://x/v1", "m"), sessions, shape, progress=False,
                        count_tokens=count_tokens,  # type: ignore[arg-type]
                    )
                ).results  # fmt: skip

        return asyncio.run(scenario())

    counted = run(lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids))
    assert [(r.output_tokens, r.output_token_source) for r in counted] == [(tokens, "tokenizer")] * 2
    by_chunk = run(None)
    assert [(r.output_tokens, r.output_token_source) for r in by_chunk] == [(3, "chunks")] * 2
    summary = summarize(by_chunk, 1.0, request_rate=math.inf)
    assert summary.output_tokens_by_chunk == 2 and "counted one per chunk" in format_summary(summary)
    assert summarize(counted, 1.0, request_rate=math.inf).output_tokens_by_chunk == 0
