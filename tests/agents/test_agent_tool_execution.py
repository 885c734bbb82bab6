"""Tool calls of one turn: by default all of them overlap (acting ones too); `ToolConcurrency` can run acting
calls alone in order, or every call alone; results keep call order either way; a failure or a timeout costs the
other calls nothing; a timed-out call's late result is discarded, and the timeout is traced.

Overlap is proven by ordering (each tool waits for the other to start), never by wall-clock thresholds.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from scripted_model import ScriptedModel, call, calls, say

from switchyard.agents import (
    Agent,
    CheckpointStore,
    FunctionTool,
    RunEvent,
    RunLimits,
    Runner,
    RunStatus,
    ToolConcurrency,
    ToolResult,
    tool,
)
from switchyard.agents.model import ModelRequest, ModelResponse
from switchyard.agents.tracing import AgentTracer

WAIT = 5.0
"""Seconds a tool waits for its partner before giving up (only reached when the calls do not overlap)."""


def tool_messages(messages: list[dict[str, object]]) -> list[dict[str, object]]:
    return [m for m in messages if m["role"] == "tool"]


def late_lookup(release: threading.Event, finished: threading.Event) -> FunctionTool:
    """A sync `lookup` tool with a 0.05 s timeout that blocks until `release`, then returns LATE-RESULT."""

    @tool(timeout=0.05)
    def lookup() -> str:
        """Blocks until released."""
        release.wait(WAIT)
        finished.set()
        return "LATE-RESULT"

    return lookup


def test_read_only_calls_of_a_turn_overlap_and_results_keep_call_order(tmp_path: Path) -> None:
    log: list[str] = []
    first_started = asyncio.Event()
    second_done = asyncio.Event()

    @tool
    async def first() -> str:
        """Finishes only after `second` has finished: impossible if the calls ran one after the other."""
        log.append("start first")
        first_started.set()
        await asyncio.wait_for(second_done.wait(), WAIT)
        log.append("end first")
        return "one"

    @tool
    async def second() -> str:
        """Finishes only after `first` has started."""
        log.append("start second")
        await asyncio.wait_for(first_started.wait(), WAIT)
        log.append("end second")
        second_done.set()
        return "two"

    events: list[RunEvent] = []
    store = CheckpointStore(tmp_path / "runs.db")
    model = ScriptedModel([calls(("first", {}, "c1"), ("second", {}, "c2")), say("one and two")])
    result = Runner(store=store).run_sync(
        Agent(name="r", tools=[first, second], client=model), "go", emit=events.append
    )
    assert result.completed
    # Both started before either ended.
    assert log == ["start first", "start second", "end second", "end first"]
    finished = [e.call_id for e in events if isinstance(e, ToolResult)]
    assert finished == ["c2", "c1"]  # completion order ...
    tools = tool_messages(result.messages)
    assert [m["tool_call_id"] for m in tools] == ["c1", "c2"]  # ... but the transcript keeps call order
    assert "one" in str(tools[0]["content"]) and "two" in str(tools[1]["content"])
    kinds = [s.kind for s in store.steps(result.run_id)][:5]
    assert kinds == ["input", "model_output", "tool_result", "tool_result", "context"]  # each call a step


def test_sync_read_only_calls_overlap_on_their_threads() -> None:
    barrier = threading.Barrier(2, timeout=WAIT)  # breaks (an error result) unless both calls wait at once

    @tool
    def probe(name: str) -> str:
        """Wait at the barrier."""
        barrier.wait()
        return f"{name} passed"

    model = ScriptedModel([calls(("probe", {"name": "a"}, "a"), ("probe", {"name": "b"}, "b")), say("ok")])
    result = Runner().run_sync(Agent(name="s", tools=[probe], client=model), "go")
    contents = [str(m["content"]) for m in tool_messages(result.messages)]
    assert "a passed" in contents[0] and "b passed" in contents[1]


def test_acting_calls_of_a_turn_overlap_by_default(tmp_path: Path) -> None:
    started = {name: asyncio.Event() for name in ("ana", "bo")}
    sent: list[str] = []

    @tool(side_effects="acting")
    async def send(to: str, partner: str) -> str:
        """Send (returns only once the partner call has started: impossible one after the other)."""
        started[to].set()
        await asyncio.wait_for(started[partner].wait(), WAIT)
        sent.append(to)
        return f"sent to {to}"

    store = CheckpointStore(tmp_path / "runs.db")
    turn = calls(("send", {"to": "ana", "partner": "bo"}, "a"), ("send", {"to": "bo", "partner": "ana"}, "b"))
    result = Runner(store=store).run_sync(
        Agent(name="c", tools=[send], client=ScriptedModel([turn, say("both sent")])), "go"
    )
    assert result.completed and sorted(sent) == ["ana", "bo"]
    contents = [str(m["content"]) for m in tool_messages(result.messages)]
    assert "sent to ana" in contents[0] and "sent to bo" in contents[1]
    for call_id in ("a", "b"):  # each bracketed under its own idempotency key
        effect = store.effect(f"{result.run_id}:1:{call_id}")
        assert effect is not None and effect.status == "done"


def test_a_sync_acting_call_overlaps_a_sync_read_by_default_but_not_when_acting_calls_run_in_order() -> None:
    def run(concurrency: ToolConcurrency, wait: float) -> list[str]:
        barrier = threading.Barrier(2, timeout=wait)  # breaks unless both calls wait at it at once

        @tool(side_effects="acting")
        def write() -> str:
            """Write something."""
            barrier.wait()
            return "written"

        @tool
        def read() -> str:
            """Read something."""
            barrier.wait()
            return "read"

        model = ScriptedModel([calls(("write", {}, "w"), ("read", {}, "r")), say("ok")])
        agent = Agent(name="s", tools=[write, read], client=model, tool_concurrency=concurrency)
        return [str(m["content"]) for m in tool_messages(Runner().run_sync(agent, "go").messages)]

    overlapped = run(ToolConcurrency.CONCURRENT, WAIT)
    assert "written" in overlapped[0] and "read" in overlapped[1]
    alone = run(ToolConcurrency.ACTING_IN_ORDER, 0.1)  # the write waits alone until its barrier breaks
    assert all("BrokenBarrierError" in content for content in alone)


def test_sequential_runs_every_call_alone_in_the_models_order() -> None:
    log: list[str] = []

    @tool
    async def step(name: str) -> str:
        """Yields while running, so a call running alongside would start meanwhile."""
        log.append(f"start {name}")
        for _ in range(3):
            await asyncio.sleep(0)
        log.append(f"end {name}")
        return name

    model = ScriptedModel([calls(*[("step", {"name": n}, n) for n in ("a", "b", "c")]), say("done")])
    agent = Agent(name="q", tools=[step], client=model, tool_concurrency=ToolConcurrency.SEQUENTIAL)
    assert Runner().run_sync(agent, "go").completed
    assert log == ["start a", "end a", "start b", "end b", "start c", "end c"]


def test_acting_calls_run_alone_and_in_the_models_order() -> None:
    log: list[str] = []
    started = {name: asyncio.Event() for name in ("r1", "r2")}

    def reader(name: str, partner: str):  # type: ignore[no-untyped-def]
        @tool(name=name)
        async def read() -> str:
            """Read something (waits for its partner to start: the two overlap)."""
            log.append(f"start {name}")
            started[name].set()
            await asyncio.wait_for(started[partner].wait(), WAIT)
            log.append(f"end {name}")
            return name

        return read

    def writer(name: str):  # type: ignore[no-untyped-def]
        @tool(name=name, side_effects="acting")
        async def write() -> str:
            """Write something (yields, so an overlapping call would start meanwhile)."""
            log.append(f"start {name}")
            for _ in range(3):
                await asyncio.sleep(0)
            log.append(f"end {name}")
            return name

        return write

    @tool
    def r3() -> str:
        """Read after the writes."""
        log.append("start r3")
        log.append("end r3")
        return "r3"

    order = ["r1", "r2", "w1", "w2", "r3"]
    tools = [reader("r1", "r2"), reader("r2", "r1"), writer("w1"), writer("w2"), r3]
    model = ScriptedModel([calls(*[(name, {}, name) for name in order]), say("done")])
    agent = Agent(name="w", tools=tools, client=model, tool_concurrency=ToolConcurrency.ACTING_IN_ORDER)
    result = Runner().run_sync(agent, "go")
    assert result.completed
    assert set(log[:2]) == {"start r1", "start r2"}  # the reads overlap
    assert log[4:] == ["start w1", "end w1", "start w2", "end w2", "start r3", "end r3"]
    assert [m["tool_call_id"] for m in tool_messages(result.messages)] == order


def test_a_failing_call_costs_the_others_nothing() -> None:
    @tool
    async def ok(n: int) -> int:
        """Fine."""
        await asyncio.sleep(0)
        return n

    @tool
    async def boom() -> str:
        """Fails."""
        raise RuntimeError("disk on fire")

    model = ScriptedModel([calls(("ok", {"n": 1}, "a"), ("boom", {}, "b"), ("ok", {"n": 2}, "c")), say("x")])
    result = Runner().run_sync(Agent(name="f", tools=[ok, boom], client=model), "go")
    contents = [str(m["content"]) for m in tool_messages(result.messages)]
    assert "\n1\n" in contents[0] and "\n2\n" in contents[2]
    assert "boom failed: RuntimeError: disk on fire" in contents[1]


def test_a_run_timeout_keeps_finished_results_and_resume_runs_only_the_rest(tmp_path: Path) -> None:
    runs = {"fast": 0, "stuck": 0}
    fast_done = asyncio.Event()

    @tool
    async def fast() -> str:
        """Quick."""
        runs["fast"] += 1
        fast_done.set()
        return "fast result"

    @tool
    async def stuck() -> str:
        """Hangs on its first attempt (after `fast` has finished), answers on the next."""
        runs["stuck"] += 1
        if runs["stuck"] == 1:
            await fast_done.wait()
            await asyncio.sleep(60)
        return "stuck result"

    agent = Agent(
        name="t",
        tools=[fast, stuck],
        client=ScriptedModel([calls(("fast", {}, "f"), ("stuck", {}, "s")), say("both")]),
    )
    store = CheckpointStore(tmp_path / "runs.db")
    stopped = Runner(store=store, limits=RunLimits(timeout=0.5)).run_sync(agent, "go")
    assert stopped.status is RunStatus.TIMEOUT
    saved = store.load(stopped.run_id)
    assert [(c.call_id, c.status.value, c.result) for c in saved.pending] == [
        ("f", "done", "fast result"),
        ("s", "pending", None),
    ]
    done = Runner(store=store, agents=[agent]).resume_sync(stopped.run_id, limits=RunLimits())
    assert done.completed and runs == {"fast": 1, "stuck": 2}
    contents = [str(m["content"]) for m in tool_messages(done.messages)]
    assert "fast result" in contents[0] and "stuck result" in contents[1]


def test_approval_pauses_only_its_call_and_a_handoff_survives_the_pause() -> None:
    ran: list[str] = []

    @tool
    async def look(n: int) -> int:
        """Read."""
        ran.append(f"look {n}")
        return n

    @tool(side_effects="acting", needs_approval=True)
    def wipe(disk: str) -> str:
        """Wipe a disk."""
        ran.append(f"wipe {disk}")
        return "wiped"

    billing = Agent(name="Billing", client=ScriptedModel([say("billing here")], repeat_last=True))
    turn = calls(("look", {"n": 1}, "l1"), ("wipe", {"disk": "c"}, "w"), ("look", {"n": 2}, "l2"),
                 ("transfer_to_billing", {}, "h"))  # fmt: skip
    triage = Agent(name="Triage", tools=[look, wipe], handoffs=[billing], client=ScriptedModel([turn]))
    runner = Runner()
    paused = runner.run_sync(triage, "go")
    assert paused.status is RunStatus.NEEDS_APPROVAL and sorted(ran) == ["look 1", "look 2"]
    paused.state.approve("w")
    done = runner.resume_sync(paused.state)
    assert done.completed and ran[-1] == "wipe c"
    assert done.last_agent == "Billing" and done.final_output == "billing here"
    assert [m["tool_call_id"] for m in tool_messages(done.messages)] == ["l1", "w", "l2", "h"]


def test_a_timed_out_sync_call_is_abandoned_and_its_late_result_discarded(tmp_path: Path) -> None:
    release, finished = threading.Event(), threading.Event()
    lookup = late_lookup(release, finished)

    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    def release_it(request: ModelRequest) -> ModelResponse:
        release.set()
        assert finished.wait(WAIT)  # the abandoned thread has returned its result by now
        return call("ping", {})

    store = CheckpointStore(tmp_path / "runs.db")
    model = ScriptedModel([call("lookup", {}), release_it, say("gave up on lookup")])
    result = Runner(store=store).run_sync(Agent(name="l", tools=[lookup, ping], client=model), "go")
    assert result.completed
    timeout_message = str(tool_messages(result.messages)[0]["content"])
    assert "Error: lookup timed out after 0.05 s" in timeout_message and "discarded" in timeout_message
    assert "LATE-RESULT" not in str(result.messages)
    assert not any("LATE-RESULT" in s.payload for s in store.steps(result.run_id))
    assert "LATE-RESULT" not in store.load(result.run_id).to_json()


def test_a_timed_out_acting_call_is_recorded_and_never_rerun(tmp_path: Path) -> None:
    sent: list[str] = []
    release = threading.Event()

    @tool(side_effects="acting", timeout=0.05)
    def send(to: str) -> str:
        """Send (blocks until released, after the effect)."""
        sent.append(to)
        release.wait(WAIT)
        return "LATE-RESULT"

    store = CheckpointStore(tmp_path / "runs.db")
    agent = Agent(name="a", tools=[send], client=ScriptedModel([call("send", {"to": "ana"}), say("unsure")]))
    result = Runner(store=store).run_sync(agent, "send")
    release.set()
    message = str(tool_messages(result.messages)[0]["content"])
    assert "send timed out after 0.05 s" in message and "may still have taken effect" in message
    key = f"{result.run_id}:1:call_send_0"
    effect = store.effect(key)
    assert effect is not None and (effect.status, effect.result) == ("timed_out", None)


def test_an_acting_call_cut_off_by_the_run_timeout_is_not_rerun_on_resume(tmp_path: Path) -> None:
    sent: list[str] = []
    release = threading.Event()

    @tool(side_effects="acting", idempotent=True)
    def send(to: str) -> str:
        """Send (the first attempt blocks until released, after the effect)."""
        sent.append(to)
        if len(sent) == 1:
            release.wait(WAIT)
        return "sent"

    agent = Agent(name="a", tools=[send], client=ScriptedModel([call("send", {"to": "ana"}), say("checked")]))
    store = CheckpointStore(tmp_path / "runs.db")
    stopped = Runner(store=store, limits=RunLimits(timeout=0.3)).run_sync(agent, "send")
    release.set()
    assert stopped.status is RunStatus.TIMEOUT
    (pending,) = store.load(stopped.run_id).pending
    assert pending.status.value == "done" and "was not run again" in (pending.result or "")
    effect = store.effect(f"{stopped.run_id}:1:call_send_0")
    assert effect is not None and effect.status == "timed_out"
    done = Runner(store=store, agents=[agent]).resume_sync(stopped.run_id, limits=RunLimits())
    assert done.completed and sent == ["ana"]
    message = str(tool_messages(done.messages)[0]["content"])
    assert "still running when the run reached its time limit" in message


def test_a_timed_out_call_running_alongside_another_is_reported_traced_and_not_waited_for() -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    release, finished = threading.Event(), threading.Event()
    lookup = late_lookup(release, finished)
    other_started = asyncio.Event()

    @tool
    async def other() -> str:
        """Runs alongside the lookup."""
        other_started.set()
        return "other result"

    seen: list[str] = []

    def next_turn(request: ModelRequest) -> ModelResponse:
        # The run asks the model again while the abandoned call is still blocked: it did not wait for it.
        seen.append("still running" if not finished.is_set() else "finished")
        seen.extend(str(m["content"]) for m in request.messages if m["role"] == "tool")
        release.set()
        assert finished.wait(WAIT)  # the abandoned thread has returned its result by now
        return say("lookup timed out; other worked")

    exporter = InMemorySpanExporter()
    tracer = AgentTracer.from_config(None, extra=[exporter])
    events: list[RunEvent] = []
    model = ScriptedModel([calls(("lookup", {}, "l"), ("other", {}, "o")), next_turn])
    result = Runner(tracer=tracer).run_sync(
        Agent(name="t", tools=[lookup, other], client=model), "go", emit=events.append
    )
    assert result.completed and other_started.is_set()
    assert seen[0] == "still running"
    assert "Error: lookup timed out after 0.05 s" in seen[1] and "other result" in seen[2]
    assert [(e.call_id, e.is_error) for e in events if isinstance(e, ToolResult)] == [
        ("o", False),
        ("l", True),
    ]
    assert "LATE-RESULT" not in str(result.messages) and "LATE-RESULT" not in result.state.to_json()
    spans = {
        span.attributes["switchyard.call_id"]: span.attributes
        for span in exporter.get_finished_spans()
        if span.name == "agent.tool_call" and span.attributes is not None
    }
    assert spans["l"].get("switchyard.timed_out") is True and spans["l"]["switchyard.is_error"] is True
    assert "switchyard.timed_out" not in spans["o"] and spans["o"]["switchyard.is_error"] is False
