"""Health and repair through the gateway: a replica killed mid-run, ejection and return, replicas' 429s,
overload at the edge, no healthy replica, a client leaving the queue."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest
from fleet_harness import Replicas, free_port, gateway_config, metric, start_gateway, wait_for

CHAT = [{"role": "user", "content": "Tell me a long story."}]
LONG = {"ignore_eos": True}
"""Generate all max_tokens: a long request stays in flight long enough to be interrupted."""


def _stream_outcome(stream: Any) -> str:
    """`completed` when a stream ran to its end, `error` when it ended with an error event."""
    try:
        for _ in stream:
            pass
    except openai.APIError as error:
        assert "replica" in str(error.message)
        return "error"
    return "completed"


def test_killed_replica_streams_end_cleanly_requests_retry_and_it_comes_back(replicas: Replicas) -> None:
    gateway = start_gateway(gateway_config({"tiny": [replicas.a.url, replicas.b.url]}))
    pool = gateway.runtime.pools["tiny"]
    by_url = {replica.url: replica for replica in pool.replicas}
    on_b = by_url[replicas.b.url]
    try:
        gateway.wait_all_healthy()
        client = gateway.client()
        # Two long streams: round robin puts one on each replica (create() returns at the first event).
        streams = [
            client.chat.completions.create(
                model="tiny", messages=CHAT, max_tokens=220, stream=True, extra_body=LONG
            )
            for _ in range(2)
        ]
        # Non-streamed requests, some of them at b when it dies: nothing reached their clients yet.
        with ThreadPoolExecutor(4) as executor:
            pending = [
                executor.submit(
                    client.completions.create, model="tiny", prompt="Once", max_tokens=150, extra_body=LONG
                )
                for _ in range(4)
            ]
            wait_for(lambda: on_b.in_flight >= 2, what="b to hold a stream and a plain request")
            replicas.b.kill()
            outcomes = sorted(_stream_outcome(stream) for stream in streams)
            completions = [future.result(timeout=300) for future in pending]
        assert outcomes == ["completed", "error"]
        assert all(c.choices[0].finish_reason == "length" for c in completions)
        text = gateway.metrics()
        assert metric(text, "switchyard:fleet_retries_total", replica=on_b.name) >= 1
        assert metric(text, "switchyard:fleet_requests_total", replica=on_b.name, status="stream_error") == 1
        wait_for(lambda: gateway.replicas()[on_b.name]["health"] == "ejected", what="b ejected")
        assert client.completions.create(model="tiny", prompt="x", max_tokens=2).choices  # a alone serves

        replicas.b.start()  # the same port, as a supervisor would restart it
        wait_for(lambda: gateway.replicas()[on_b.name]["health"] == "healthy", 300, "b back in the pool")
        served_before = metric(gateway.metrics(), "switchyard:fleet_requests_total", replica=on_b.name)
        for _ in range(4):
            client.completions.create(model="tiny", prompt="x", max_tokens=2)
        assert metric(gateway.metrics(), "switchyard:fleet_requests_total", replica=on_b.name) > served_before
        assert metric(gateway.metrics(), "switchyard:fleet_ejections_total", replica=on_b.name) >= 1
    finally:
        gateway.stop()
        if replicas.b.process is not None and replicas.b.process.poll() is not None:
            replicas.b.start()
        replicas.b.wait_healthy()


def test_a_replicas_429_is_retried_on_another(replicas: Replicas) -> None:
    """`narrow` runs one request and queues one; its third at once gets 429, which the gateway retries on b."""
    gateway = start_gateway(gateway_config({"tiny": [replicas.narrow.url, replicas.b.url]}))
    try:
        gateway.wait_all_healthy()
        client = gateway.client()
        with ThreadPoolExecutor(6) as executor:
            futures = [
                executor.submit(
                    client.completions.create, model="tiny", prompt="Once", max_tokens=80, extra_body=LONG
                )
                for _ in range(6)
            ]
            results = [future.result(timeout=300) for future in futures]
        assert all(result.choices[0].finish_reason == "length" for result in results)
        narrow = next(r for r in gateway.runtime.pools["tiny"].replicas if r.url == replicas.narrow.url)
        text = gateway.metrics()
        assert metric(text, "switchyard:fleet_retries_total", replica=narrow.name, reason="429") >= 1
        assert gateway.replicas()[narrow.name]["health"] == "healthy"  # a 429 is load, not a fault
    finally:
        gateway.stop()


def test_when_every_replica_429s_the_last_429_passes_on(replicas: Replicas) -> None:
    gateway = start_gateway(gateway_config({"tiny-solo": [replicas.narrow.url]}))
    try:
        gateway.wait_all_healthy()
        client = gateway.client()

        def complete() -> str:
            try:
                client.completions.create(model="tiny-solo", prompt="Once", max_tokens=60, extra_body=LONG)
            except openai.RateLimitError as error:
                assert error.response.headers["retry-after"].isdigit()
                assert (
                    isinstance(error.body, dict) and error.body["code"] == "queue_full"
                )  # the replica's own
                return "429"
            return "200"

        with ThreadPoolExecutor(5) as executor:
            statuses = list(executor.map(lambda _: complete(), range(5)))
        assert statuses.count("429") >= 1 and statuses.count("200") >= 2
    finally:
        gateway.stop()


def test_overload_is_shed_at_the_edge_with_retry_after_and_nothing_lost(replicas: Replicas) -> None:
    """One request per replica in flight, two waiting in the gateway; the rest get 429 at once."""
    gateway = start_gateway(
        gateway_config({"tiny": [replicas.a.url, replicas.b.url]}, max_in_flight_per_replica=1, max_queue=2)
    )
    try:
        gateway.wait_all_healthy()
        client = gateway.client()
        release = threading.Barrier(12)

        def complete() -> str:
            release.wait()
            try:
                client.completions.create(model="tiny", prompt="Once", max_tokens=40, extra_body=LONG)
            except openai.RateLimitError as error:
                assert int(error.response.headers["retry-after"]) >= 1
                assert isinstance(error.body, dict) and error.body["code"] == "queue_full"
                return "429"
            return "200"

        with ThreadPoolExecutor(12) as executor:
            statuses = list(executor.map(lambda _: complete(), range(12)))
        assert len(statuses) == 12  # every request answered: admitted ones finished, the rest refused
        assert statuses.count("200") >= 4 and statuses.count("429") >= 1
        text = gateway.metrics()
        assert metric(text, "switchyard:fleet_requests_total", decision="queue_full") == statuses.count("429")
        assert metric(text, "switchyard:fleet_queue_depth", pool="tiny") == 0
    finally:
        gateway.stop()


def test_no_healthy_replica_is_503_with_retry_after(replicas: Replicas) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    gateway = start_gateway(gateway_config({"tiny": [replicas.a.url], "ghost": [nowhere]}))
    try:
        wait_for(lambda: gateway.runtime.pools["tiny"].routable() != [], what="a healthy")
        with pytest.raises(openai.APIStatusError) as raised:
            gateway.client().completions.create(model="ghost", prompt="hi", max_tokens=2)
        assert raised.value.status_code == 503
        assert int(raised.value.response.headers["retry-after"]) >= 1
        assert isinstance(raised.value.body, dict) and raised.value.body["code"] == "no_healthy_replica"
        health = httpx.get(f"{gateway.base_url}/health", timeout=30)
        assert health.status_code == 503 and health.json()["unavailable"] == ["ghost"]
    finally:
        gateway.stop()


def test_a_waiting_request_whose_client_leaves_drops_out_of_the_queue(replicas: Replicas) -> None:
    """Replica a is paused holding the one request it may have; a second waits in the gateway, its client
    gives up, and the queue is empty again while the first is still held."""
    gateway = start_gateway(
        # Health checks far apart: a paused replica would fail one and be ejected, answering the waiter 503.
        gateway_config(
            {"tiny": [replicas.a.url]}, max_in_flight_per_replica=1, max_queue=4, health_interval=60
        )
    )
    pool = gateway.runtime.pools["tiny"]
    try:
        gateway.wait_all_healthy()
        replicas.a.pause()
        with ThreadPoolExecutor(1) as executor:
            held = executor.submit(
                gateway.client().completions.create, model="tiny", prompt="Once", max_tokens=2
            )
            wait_for(lambda: pool.replicas[0].in_flight == 1, what="the first request at a")
            with pytest.raises(httpx.ReadTimeout), gateway.http(timeout=httpx.Timeout(30, read=1.0)) as http:
                http.post("/v1/completions", json={"model": "tiny", "prompt": "hi", "max_tokens": 2})
            wait_for(lambda: pool.admission.depth == 0, what="the waiter gone")
            assert not held.done()
            replicas.a.resume()
            assert held.result(timeout=120).choices
        assert metric(gateway.metrics(), "switchyard:fleet_requests_total", pool="tiny") == 1
    finally:
        replicas.a.resume()
        gateway.stop()


def test_a_hung_replicas_stream_ends_with_an_error_event_not_at_the_read_timeout(replicas: Replicas) -> None:
    """A paused replica keeps its connections open and sends nothing: its health checks time out, the breaker
    ejects it, and the stream it was serving ends at once rather than after the (long) read timeout."""
    gateway = start_gateway(gateway_config({"tiny": [replicas.a.url]}, health_timeout=0.5, read_timeout=3600))
    try:
        gateway.wait_all_healthy()
        stream = gateway.client().completions.create(
            model="tiny", prompt="Once", max_tokens=220, stream=True, extra_body=LONG
        )
        replicas.a.pause()
        try:
            assert _stream_outcome(stream) == "error"
            assert gateway.runtime.pools["tiny"].replicas[0].health.value == "ejected"
        finally:
            replicas.a.resume()
        wait_for(lambda: gateway.replicas()["tiny-worker-0"]["health"] == "healthy", 120, "a back")
    finally:
        replicas.a.resume()
        gateway.stop()
