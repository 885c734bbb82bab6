"""The console on `switchyard serve`, in a real browser: the key is asked for and checked, the playground
streams a reply, the dashboard's KV gauge follows a request, and both widths render without console errors."""

from __future__ import annotations

import json
import threading
from typing import Any

from console_harness import API_KEY

LONG_REQUEST = {
    "model": "tiny",
    "messages": [{"role": "user", "content": "hello " * 5}],
    "max_tokens": 180,
    "ignore_eos": True,
}


def open_console(new_page: Any, server: Any, view: str = "", **viewport: Any) -> Any:
    console = new_page(**viewport)
    console.page.goto(f"{server.base_url}/ui/#{view}")
    console.sign_in(API_KEY)
    console.page.wait_for_selector("#key-dialog", state="hidden")
    return console


def test_a_wrong_key_is_refused_and_the_right_one_opens_the_console(new_page: Any, keyed_server: Any) -> None:
    console = new_page()
    page = console.page
    page.goto(f"{keyed_server.base_url}/ui/")
    page.wait_for_selector("#key-dialog[open]")
    console.sign_in("not-the-key")
    page.wait_for_selector("#key-error:has-text('refused')")
    assert page.is_visible("#key-dialog")
    assert page.evaluate("sessionStorage.length") == 0  # a refused key is not kept
    console.sign_in(API_KEY)
    page.wait_for_selector("#key-dialog", state="hidden")
    page.wait_for_selector("#pg-model option[value='tiny']", state="attached")


def test_a_typed_message_gets_a_streamed_reply_with_its_numbers(new_page: Any, keyed_server: Any) -> None:
    console = open_console(new_page, keyed_server, "playground")
    page = console.page
    page.wait_for_selector("#pg-model option[value='tiny']", state="attached")
    page.fill("#pg-max-tokens", "12")
    page.fill("#pg-input", "Hello there")
    page.press("#pg-input", "Enter")
    page.wait_for_selector("#pg-log li.user:has-text('Hello there')")
    page.wait_for_selector("#pg-log li.assistant:not([aria-busy])")
    reply = page.inner_text("#pg-log li.assistant .content")
    stats = page.inner_text("#pg-log li.assistant .stats")
    assert reply.strip(), "the reply streamed no text"
    assert "completion 12 tok" in stats and "TTFT" in stats and "cached" in stats
    assert page.is_visible("#pg-send") and not page.is_visible("#pg-stop")
    assert console.errors == []


def test_the_kv_gauge_rises_during_requests_and_falls_after(new_page: Any, keyed_server: Any) -> None:
    console = open_console(new_page, keyed_server, "dashboard")
    page = console.page
    page.wait_for_function("document.getElementById('db-kv').dataset.value === '0'")
    seen_rise = threading.Event()

    def load() -> None:  # requests until the page has seen the gauge move: the tiny model is fast
        with keyed_server.http() as http:
            while not seen_rise.is_set():
                http.post(
                    "/v1/chat/completions", json=LONG_REQUEST, headers={"Authorization": f"Bearer {API_KEY}"}
                )

    workers = [threading.Thread(target=load) for _ in range(4)]
    for worker in workers:
        worker.start()
    try:
        page.wait_for_function("Number(document.getElementById('db-kv').dataset.value) > 0", timeout=30_000)
        assert float(page.get_attribute("#db-kv", "data-value") or 0) > 0
        assert page.inner_text("#db-gen-rate") not in ("–", "0.0")
    finally:
        seen_rise.set()
        for worker in workers:
            worker.join(timeout=30)
    page.wait_for_function("document.getElementById('db-kv').dataset.value === '0'", timeout=30_000)
    assert page.inner_text("#db-kv-text") == "0.0%"
    assert page.inner_text("#db-ttft-p50").endswith("ms")
    assert console.errors == []


def test_desktop_and_phone_widths_render_without_console_errors(new_page: Any, keyed_server: Any) -> None:
    for viewport in ({"width": 1280, "height": 800}, {"width": 390, "height": 844, "mobile": True}):
        for view in ("playground", "dashboard"):
            console = open_console(new_page, keyed_server, view, **viewport)
            page = console.page
            page.wait_for_selector(f"#view-{view}", state="visible")
            page.wait_for_timeout(1500)  # a live snapshot or two
            overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 1, f"{view} at {viewport} scrolls sideways by {overflow}px"
            assert console.errors == [], f"{view} at {viewport}: {console.errors}"


def test_json_schema_mode_gets_json_and_bad_tools_are_named_before_sending(
    new_page: Any, keyed_server: Any
) -> None:
    console = open_console(new_page, keyed_server, "playground")
    page = console.page
    page.wait_for_selector("#pg-model option[value='tiny']", state="attached")
    page.click("summary:has-text('Tools')")
    page.fill("#pg-tools", "[{not json")
    page.fill("#pg-input", "call something")
    page.press("#pg-input", "Enter")
    page.wait_for_selector("#pg-error:has-text('Tools are not valid JSON')")
    assert page.query_selector("#pg-log li") is None  # nothing was sent
    page.fill("#pg-tools", "")
    page.click("summary:has-text('JSON schema mode')")
    page.check("#pg-json-on")
    # a small enum and greedy decoding: the random model cannot wander (an unbounded integer or a sampled reply
    # could run to the budget before the grammar closes the object)
    schema = (
        '{"type": "object", "properties": {"n": {"type": "integer", "enum": [1, 2, 3]}}, "required": ["n"], '
        '"additionalProperties": false}'
    )
    page.fill("#pg-schema", schema)
    page.fill("#pg-temperature", "0")
    page.fill("#pg-max-tokens", "40")
    page.fill("#pg-input", "a number please")
    page.press("#pg-input", "Enter")
    page.wait_for_selector("#pg-log li.assistant:not([aria-busy])")
    stats = page.inner_text("#pg-log li.assistant .stats")
    reply = page.inner_text("#pg-log li.assistant .content")
    assert "finish: stop" in stats, stats  # the grammar closes the object well within the budget
    assert json.loads(reply)["n"] in (1, 2, 3)
    assert page.is_hidden("#pg-error")


def test_stop_ends_a_streaming_reply_and_frees_its_cache(new_page: Any, keyed_server: Any) -> None:
    console = open_console(new_page, keyed_server, "playground")
    page = console.page
    page.wait_for_selector("#pg-model option[value='tiny']", state="attached")
    # greedy on the random model repeats tokens without ending: the reply runs until stopped (or the context ends)
    page.fill("#pg-temperature", "0")
    page.fill("#pg-max-tokens", "220")  # the server's context is 256
    page.fill("#pg-input", "go on and on")
    # a slow network, so that the click lands while the reply still streams however fast the model is
    network = page.context.new_cdp_session(page)
    network.send("Network.enable")
    network.send(
        "Network.emulateNetworkConditions",
        {"offline": False, "latency": 0, "downloadThroughput": 4000, "uploadThroughput": -1},
    )
    page.press("#pg-input", "Enter")
    page.wait_for_function(
        "(document.querySelector('#pg-log li.assistant .content')?.textContent || '').length > 0"
    )
    page.click("#pg-stop")
    page.wait_for_selector("#pg-log li.assistant:not([aria-busy])")
    assert "stopped" in page.inner_text("#pg-log li.assistant .stats")
    assert page.is_visible("#pg-send") and not page.is_visible("#pg-stop")

    def running() -> float:
        with keyed_server.http() as http:
            text = http.get("/metrics", headers={"Authorization": f"Bearer {API_KEY}"}).text
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("switchyard:num_requests_running")
        )

    for _ in range(100):  # the abort reaches the server within a step or two
        if running() == 0:
            break
        page.wait_for_timeout(100)
    assert running() == 0  # the server saw the client go and freed the request
    assert console.errors == []
