"""Real servers on loopback for the server tests (uvicorn in a background thread, port 0) and probes."""

from __future__ import annotations

import json
import re
import shutil
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
from switchyard.engine.grammar_limits import GrammarLimits
from switchyard.server.launch import DrainingServer, server_for
from switchyard.server.state import ServerSettings
from switchyard.server.tls import TlsFiles

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
    tls: TlsFiles | None = None,
    grammar_limits: GrammarLimits | None = None,
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
    engine = AsyncLLMEngine(LLMEngine(config), max_waiting=max_waiting, grammar_limits=grammar_limits)
    server = server_for(
        engine,
        ServerSettings(served_model_names=(MODEL,), **settings),
        host="127.0.0.1",
        port=0,
        log_level="warning",
        tls=tls,
    )
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    scheme = "http" if tls is None else "https"
    return RunningServer(server, engine, thread, f"{scheme}://127.0.0.1:{port}")


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


# ChatML whose generation prompt follows the reasoning switches of real templates: Qwen3's
# `enable_thinking: false` writes an empty think block, and `open_think` ends the prompt inside one, as
# DeepSeek-R1's and Qwen3-Thinking-2507's templates do. An assistant turn replays its reasoning_content.
def thinking_template(open_by_default: bool = False) -> str:
    """The template; `open_by_default` ends every generation prompt inside <think> (DeepSeek-R1's way)."""
    opens = "open_think is not defined or open_think" if open_by_default else "open_think"
    return (
        "{% for message in messages %}<|im_start|>{{ message['role'] }}{{ '\\n' }}"
        "{% if message['role'] == 'assistant' and message['reasoning_content'] %}"
        "<think>{{ '\\n' }}{{ message['reasoning_content'] }}{{ '\\n' }}</think>{{ '\\n\\n' }}{% endif %}"
        "{{ message['content'] or '' }}"
        "{% if not (loop.last and message['role'] == 'assistant') %}<|im_end|>{{ '\\n' }}{% endif %}"
        "{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant{{ '\\n' }}"
        "{% if enable_thinking is defined and not enable_thinking %}<think>{{ '\\n\\n' }}</think>{{ '\\n\\n' }}"
        f"{{% elif {opens} %}}<think>{{{{ '\\n' }}}}{{% endif %}}{{% endif %}}"
    )


def with_template(tiny_model_dir: Path, folder: Path, template: str) -> Path:
    shutil.copytree(tiny_model_dir, folder, dirs_exist_ok=True)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = template
    config_path.write_text(json.dumps(config))
    return folder
