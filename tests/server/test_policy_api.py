"""Issue-6 behaviour through the real server: KV-full rejection, tenants from API keys, cache-hit metrics."""

from __future__ import annotations

import re
from pathlib import Path

import openai
import pytest
from harness import start_server

from switchyard.server.tenants import load_tenants

KV_BYTES_PER_BLOCK = 16 * 2 * 2 * 2 * 16 * 4


def metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_kv_full_reject_mode_answers_429_with_retry_after(tiny_model_dir: Path) -> None:
    running = start_server(
        tiny_model_dir,
        engine_overrides={"kv_cache_memory": 12 * KV_BYTES_PER_BLOCK, "kv_full_policy": "reject"},
    )
    try:
        client = running.client()
        statuses = []
        streams = []
        for _ in range(8):
            try:
                streams.append(
                    client.completions.create(
                        model="tiny", prompt=[7] * 60, max_tokens=60, temperature=0, stream=True
                    )
                )
                statuses.append(200)
            except openai.RateLimitError as exc:
                statuses.append(429)
                assert int(exc.response.headers["retry-after"]) >= 1
                assert exc.body["code"] == "kv_cache_full"  # type: ignore[index]
        assert 200 in statuses and 429 in statuses
        for stream in streams:
            for _ in stream:
                pass
        text = running.http().get("/metrics").text
        assert metric(text, "switchyard:kv_cache_full_decisions_total", decision="rejected") >= 1
        assert metric(text, "switchyard:request_rejected_total", reason="kv_cache_full") >= 1
    finally:
        running.stop()


def test_api_keys_name_tenants_and_metrics_count_them(tiny_model_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "tenants.toml"
    path.write_text('[tenants.alice]\nweight = 3\napi_key = "key-a"\n\n[tenants.bob]\napi_key = "key-b"\n')
    tenants = load_tenants(path)
    assert tenants.weights == {"alice": 3.0, "bob": 1.0}
    running = start_server(
        tiny_model_dir, engine_overrides={"tenant_weights": tenants.weights}, tenant_keys=tenants.keys
    )
    try:
        for key in ("key-a", "key-b"):
            running.client(api_key=key).completions.create(model="tiny", prompt="hello", max_tokens=3)
        with pytest.raises(openai.AuthenticationError):
            running.client(api_key="nope").completions.create(model="tiny", prompt="hello", max_tokens=3)
        text = running.http().get("/metrics").text
        assert metric(text, "switchyard:tenant_tokens_total", tenant="alice") > 0
        assert metric(text, "switchyard:tenant_tokens_total", tenant="bob") > 0
        assert metric(text, "switchyard:tenant_queue_time_seconds_count", tenant="alice") == 1
    finally:
        running.stop()


def test_prefix_cache_hits_show_in_usage_and_metrics(server) -> None:  # type: ignore[no-untyped-def]
    client = server.client()
    prompt = list(range(10, 90))  # 80 tokens = 5 full blocks, all reusable by a longer prompt
    client.completions.create(model="tiny", prompt=prompt, max_tokens=2, temperature=0)
    second = client.completions.create(model="tiny", prompt=[*prompt, 5, 6], max_tokens=2, temperature=0)
    assert second.usage is not None and second.usage.prompt_tokens_details is not None
    assert second.usage.prompt_tokens_details.cached_tokens == 80
    text = server.http().get("/metrics").text
    assert metric(text, "switchyard:prefix_cache_hits_total") >= 80
    assert 0 < metric(text, "switchyard:prefix_cache_hit_rate") <= 1


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("[tenants]\n", "expected a [tenants.NAME] table"),
        ("[tenants.a]\nweight = 0\n", "weight must be a number > 0"),
        ('[tenants.a]\napi_key = "k"\n[tenants.b]\napi_key = "k"\n', "share an api_key"),
        ("[tenants.a]\ncolour = 1\n", "unknown keys"),
        ("not toml [", "cannot read tenants file"),
    ],
)
def test_bad_tenants_files_are_named_errors(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "t.toml"
    path.write_text(content)
    with pytest.raises(ValueError, match=re.escape(problem)):
        load_tenants(path)


def test_max_queue_time_answers_429_queue_timeout(tiny_model_dir: Path) -> None:
    running = start_server(tiny_model_dir, engine_overrides={"max_num_seqs": 1, "max_queue_time": 0.05})
    try:
        client = running.client()
        for _attempt in range(5):  # on a loaded machine even the first request may wait past 0.05 s
            long = client.completions.create(
                model="tiny",
                prompt=[5, 6, 7],
                max_tokens=200,
                temperature=0,
                stream=True,
                extra_body={"ignore_eos": True},
            )
            try:
                next(iter(long))  # the long request holds the only sequence slot
                break
            except openai.APIError:
                long.close()
        with pytest.raises(openai.RateLimitError) as info:
            client.completions.create(model="tiny", prompt=[8, 9], max_tokens=2)
        assert info.value.body["code"] == "queue_timeout"  # type: ignore[index]
        long.close()
    finally:
        running.stop()
