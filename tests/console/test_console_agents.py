"""The console's agent runs, in a real browser: a run paused for approval shows its call and arguments, and
Approve in the page resumes it to completion (the model is scripted: the page and the resume are under test)."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from console_harness import API_KEY, ServedApp

from switchyard.agents import Agent, Runner, RunStatus, tool
from switchyard.agents.checkpoint import CheckpointStore
from switchyard.agents.console_app import build_agent_console_app
from tests.agents.scripted_model import ScriptedModel, call, say


class AgentHost:
    def __init__(self, folder: Path) -> None:
        self.outbox: list[str] = []

        @tool(side_effects="acting", needs_approval=True)
        def send_message(to: str, text: str) -> str:
            """Send a message to a person."""
            self.outbox.append(f"{to}: {text}")
            return "sent"

        script = [
            call("send_message", {"to": "ana", "text": "lunch at noon?"}, "c1"),
            say("Message sent to ana."),
        ]
        self.agent = Agent(name="mailer", tools=[send_message], client=ScriptedModel(script))
        self.store = CheckpointStore(folder / "runs.db")
        self.runner = Runner(store=self.store, agents=[self.agent])
        self.app = ServedApp(build_agent_console_app(self.runner, api_key=API_KEY))

    def start_run(self, text: str) -> str:
        """Runs the agent until it pauses, in a thread of its own: Playwright's sync API holds this one's loop."""
        with ThreadPoolExecutor(1) as pool:
            paused = pool.submit(asyncio.run, self.runner.run(self.agent, text)).result()
        assert paused.status is RunStatus.NEEDS_APPROVAL
        return paused.run_id


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentHost]:
    started = AgentHost(tmp_path_factory.mktemp("agent-host"))
    yield started
    started.app.stop()
    started.runner.close()
    started.store.close()


def test_approving_a_pending_call_in_the_page_completes_the_run(new_page: Any, host: AgentHost) -> None:
    run_id = host.start_run("ask ana about lunch")
    console = new_page()
    page = console.page
    page.goto(f"{host.app.base_url}/ui/#agents")
    console.sign_in(API_KEY)
    row = page.wait_for_selector(f"#ag-runs tr[data-run-id='{run_id}']")
    assert "needs_approval" in row.inner_text()
    row.focus()
    page.keyboard.press("Enter")  # rows open from the keyboard too
    card = page.wait_for_selector(".approval")
    assert "send_message" in card.inner_text() and "lunch at noon?" in card.inner_text()
    assert host.outbox == []
    page.click(".approval button:has-text('Approve')")
    page.wait_for_selector("#ag-status:has-text('completed')", timeout=30_000)
    assert host.outbox == ["ana: lunch at noon?"]
    timeline = page.inner_text("#ag-timeline")
    assert "approved" in timeline and "send_message" in timeline and "finished: completed" in timeline
    assert "Message sent to ana." in timeline
    assert page.query_selector(".approval") is None
    assert console.errors == []


def test_a_rejection_is_recorded_and_a_wrong_key_is_refused(host: AgentHost) -> None:
    run_id = host.start_run("ask ana again")
    with httpx.Client(base_url=host.app.base_url, timeout=30) as http:
        refused = http.get("/v1/agent/runs", headers={"Authorization": "Bearer wrong"})
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
        auth = {"Authorization": f"Bearer {API_KEY}"}
        unknown = http.post(
            f"/v1/agent/runs/{run_id}/decisions", json={"call_id": "nope", "approve": True}, headers=auth
        )
        assert unknown.status_code == 409
        answer = http.post(
            f"/v1/agent/runs/{run_id}/decisions",
            json={"call_id": "c1", "approve": False, "reason": "not now"},
            headers=auth,
        )
        assert answer.status_code == 202 and answer.json()["resuming"] is True
        detail = http.get(f"/v1/agent/runs/{run_id}", headers=auth).json()
        kinds = [step["kind"] for step in detail["steps"]]
        assert "approval" in kinds
        assert http.get("/v1/agent/runs/missing", headers=auth).status_code == 404


def test_the_console_host_returns_the_run_a_decision_resumed(tmp_path: Path) -> None:
    """`switchyard agent demo --approve console`'s wait: the demo loop gets the run the console resumed."""
    from switchyard.agents.console_host import ConsoleHost

    outbox: list[str] = []

    @tool(side_effects="acting", needs_approval=True)
    def send_message(to: str, text: str) -> str:
        """Send a message to a person."""
        outbox.append(f"{to}: {text}")
        return "sent"

    script = [call("send_message", {"to": "bo", "text": "hi"}, "c1"), say("Sent.")]
    agent = Agent(name="mailer", tools=[send_message], client=ScriptedModel(script))
    store = CheckpointStore(tmp_path / "runs.db")
    runner = Runner(store=store, agents=[agent])
    printed = io.StringIO()

    async def scenario() -> str:
        host = await ConsoleHost.start(runner, 0, printed)
        try:
            paused = await runner.run(agent, "message bo")
            url = printed.getvalue().split("open ")[1].split("/ui/")[0]
            waiting = asyncio.create_task(host.wait_for_decisions(paused, printed))
            async with httpx.AsyncClient(base_url=url) as http:
                answer = await http.post(
                    f"/v1/agent/runs/{paused.run_id}/decisions", json={"call_id": "c1", "approve": True}
                )
                assert answer.status_code == 202
            result = await asyncio.wait_for(waiting, 30)
            return result.status.value
        finally:
            await host.stop()

    with ThreadPoolExecutor(1) as pool:  # a loop of its own: Playwright's sync API may hold this thread's
        assert pool.submit(asyncio.run, scenario()).result() == "completed"
    assert outbox == ["bo: hi"]
    store.close()


def test_the_runs_fit_a_phone_without_console_errors(new_page: Any, host: AgentHost) -> None:
    run_id = host.start_run("one more for the phone")
    console = new_page(390, 844, mobile=True)
    page = console.page
    page.goto(f"{host.app.base_url}/ui/#agents")
    console.sign_in(API_KEY)
    page.click(f"#ag-runs tr[data-run-id='{run_id}']")
    page.wait_for_selector(".approval")
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 1
    assert console.errors == []
