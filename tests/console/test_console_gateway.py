"""The console on the fleet gateway, in a real browser: the fleet view shows the replicas with their health
and load, the routing decisions and online evaluation per pool, and the playground chats through the gateway."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from console_harness import API_KEY
from server.harness import start_server

from switchyard.fleet.online_eval.config import OnlineEvalConfig
from tests.fleet.gateway.fleet_harness import RunningGateway, gateway_config, start_gateway, wait_for


@pytest.fixture(scope="module")
def gateway(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    worker = start_server(tiny_model_dir)
    log = tmp_path_factory.mktemp("online-eval") / "log.db"
    config = gateway_config(
        {"tiny": [worker.base_url]}, api_key=API_KEY, online_eval=OnlineEvalConfig(sample=1.0, log=str(log))
    )
    running = start_gateway(config)
    with running.http(headers={"Authorization": f"Bearer {API_KEY}"}) as http:
        wait_for(
            lambda: all(row["health"] == "healthy" for row in http.get("/v1/fleet/replicas").json()["data"]),
            what="the replica healthy",
        )
    yield running
    running.stop()
    worker.stop()


def open_console(new_page: Any, gateway: RunningGateway, view: str) -> Any:
    console = new_page()
    console.page.goto(f"{gateway.base_url}/ui/#{view}")
    console.sign_in(API_KEY)
    console.page.wait_for_selector("#key-dialog", state="hidden")
    return console


def test_the_fleet_view_shows_replicas_routing_and_online_eval(
    new_page: Any, gateway: RunningGateway
) -> None:
    client = gateway.client(api_key=API_KEY)
    for _ in range(2):
        client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
    console = open_console(new_page, gateway, "fleet")
    page = console.page
    assert page.inner_text("#nav").split() == ["Playground", "Fleet"]
    page.wait_for_selector("#fl-replicas tbody td.health-healthy")
    replica_row = page.inner_text("#fl-replicas tbody tr")
    assert "tiny" in replica_row and "healthy" in replica_row
    page.wait_for_selector("#fl-routing tbody tr:has-text('200')")
    page.wait_for_function(
        "[...document.querySelectorAll('#fl-eval tbody tr')].some(r => r.cells[0].textContent === 'tiny'"
        " && Number(r.cells[2].textContent) >= 2)",
        timeout=30_000,
    )
    eval_row = page.inner_text("#fl-eval tbody tr").split("\t")
    assert eval_row[7].endswith(" s")  # mean latency of the logged requests, by pool
    assert page.inner_text("#fl-lat-p50").endswith("ms")
    assert console.errors == []


def test_the_playground_chats_through_the_gateway(new_page: Any, gateway: RunningGateway) -> None:
    console = open_console(new_page, gateway, "playground")
    page = console.page
    page.wait_for_selector("#pg-model option[value='tiny']", state="attached")
    page.fill("#pg-max-tokens", "6")
    page.fill("#pg-input", "Hello gateway")
    page.click("#pg-send")
    page.wait_for_selector("#pg-log li.assistant:not([aria-busy])")
    assert "completion 6 tok" in page.inner_text("#pg-log li.assistant .stats")
    assert console.errors == []


def test_the_fleet_view_fits_a_phone_without_console_errors(new_page: Any, gateway: RunningGateway) -> None:
    console = new_page(390, 844, mobile=True)
    console.page.goto(f"{gateway.base_url}/ui/#fleet")
    console.sign_in(API_KEY)
    console.page.wait_for_selector("#fl-replicas tbody td.health-healthy")
    assert console.page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 1
    # an empty table's note (no tenants here) wraps inside the screen rather than running off its edge
    note = console.page.wait_for_selector("#fl-tenants td.empty > span")
    box = note.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
    assert console.errors == []
