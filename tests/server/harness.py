"""Real servers on loopback for the server tests (uvicorn in a background thread, port 0) and probes."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai

from switchyard.config import EngineConfig
from switchyard.engine.async_engine import AsyncLLMEngine
from switchyard.engine.engine import LLMEngine
from switchyard.server.launch import DrainingServer, server_for
from switchyard.server.state import ServerSettings

MODEL = "tiny"


def blocks_in_use(engine: LLMEngine) -> int:
    """KV blocks some request holds; blocks kept only by the prefix cache are reusable, so they do not count."""
    manager = engine.block_manager
    return manager.num_blocks - manager.num_free_blocks


@dataclass
class RunningServer:
    server: DrainingServer
    engine: AsyncLLMEngine
    thread: threading.Thread
    base_url: str

    @property
    def llm_engine(self) -> LLMEngine:
        return self.engine.engine

    def client(self, **kwargs: Any) -> openai.OpenAI:
        kwargs.setdefault("api_key", "unused")
        return openai.OpenAI(base_url=f"{self.base_url}/v1", max_retries=0, timeout=30, **kwargs)

    def async_client(self, **kwargs: Any) -> openai.AsyncOpenAI:
        kwargs.setdefault("api_key", "unused")
        return openai.AsyncOpenAI(base_url=f"{self.base_url}/v1", max_retries=0, timeout=30, **kwargs)

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=30)

    def wait_for_free_blocks(self, timeout: float = 5.0) -> int:
        """0 once the engine holds no request and no KV block, or the blocks still held after `timeout` seconds.

        Waiting for requests too: one that is still queued holds no block yet, and an abort (a client gone)
        reaches it only on a later engine step, so "no blocks" alone can be seen before the work is released."""
        deadline = time.monotonic() + timeout
        engine = self.llm_engine
        while (blocks_in_use(engine) or engine.requests) and time.monotonic() < deadline:
            time.sleep(0.01)
        return blocks_in_use(self.llm_engine)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


WEATHER_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city_id": {"type": "integer", "minimum": 0, "maximum": 999},
        "unit": {"enum": ["c", "f"]},
    },
    "required": ["city_id", "unit"],
    "additionalProperties": False,
}
"""The weather tool's arguments in the tool-calling tests (a bounded integer and an enum)."""


def start_tool_server(folder: Path) -> RunningServer:
    """A tiny Llama with a 1024-token context built into `folder` and served: tool schemas make long prompts
    for the tiny byte-level tokenizer."""
    from model_factory import build_hf_model
    from tokenizer_factory import build_tokenizer

    build_hf_model("llama", folder, seed=0, max_position_embeddings=1024)
    build_tokenizer(folder, vocab_size=320)
    return start_server(folder, engine_overrides={"max_model_len": 1024, "kv_cache_memory": 16 << 20})


def start_server(
    model_dir: Path,
    *,
    max_waiting: int = 512,
    engine_overrides: dict[str, Any] | None = None,
    **settings: Any,
) -> RunningServer:
    engine_args: dict[str, Any] = {
        "dtype": "float32",
        "device": "cpu",
        "max_model_len": 256,
        "kv_cache_memory": 8 << 20,
        **(engine_overrides or {}),
    }
    config = EngineConfig(model=str(model_dir), **engine_args)
    engine = AsyncLLMEngine(LLMEngine(config), max_waiting=max_waiting)
    server = server_for(
        engine,
        ServerSettings(served_model_names=(MODEL,), **settings),
        host="127.0.0.1",
        port=0,
        log_level="warning",
    )
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return RunningServer(server, engine, thread, f"http://127.0.0.1:{port}")


def metric(text: str, name: str, **labels: str) -> float:
    """One sample's value in Prometheus text format; labels must be exactly those given plus model_name."""
    wanted = {"model_name": MODEL, **labels}
    for line in text.splitlines():
        match = re.fullmatch(r"([^{\s]+)(?:\{(.*)\})? (\S+)", line)
        if not match or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        if found == wanted:
            return float(match.group(3))
    raise KeyError(f"{name}{wanted} not in metrics")
