"""Chat-template rendering and tokenization for the server, on a thread of their own.

Tokenizing a long prompt takes seconds (about 14 s for 8 MB of text), and a request that big is only refused
once its tokens are counted. Done on the engine thread, that time would stall every running request's next
step. This worker keeps a private copy of the tokenizer (fast tokenizers are not safe to share across threads)
and runs on one thread of its own, where `tokenizers` releases the GIL while it encodes, so the engine keeps
stepping while a big prompt is tokenized.

Each method is one trip to that thread: a request's text work (render, tokenize, read the prompt's end) is
done in a single call, so it waits in the thread's queue once.
"""

from __future__ import annotations

import asyncio
import copy
import functools
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from switchyard.errors import InvalidRequestError
from switchyard.models.tokenizer import render_chat

T = TypeVar("T")


@dataclass(frozen=True)
class RenderedChat:
    """A conversation rendered with the chat template: the prompt's token ids and the text of its end."""

    prompt_token_ids: list[int]
    tail_text: str
    """The prompt's last `tail_tokens` tokens decoded (special tokens kept); empty when none were asked for."""


class TextWorker:
    """Renders, encodes and decodes with a private tokenizer copy on a single worker thread."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = copy.deepcopy(tokenizer) if tokenizer is not None else None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="switchyard-text")

    async def render_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        template_kwargs: Mapping[str, Any] | None = None,
        tail_tokens: int = 0,
    ) -> RenderedChat:
        """The conversation rendered with the model's chat template, and the text of its last `tail_tokens`
        tokens (where a template leaves markers such as an opened <think>), in one trip to the thread."""
        tokenizer = self._require()

        def render() -> RenderedChat:
            token_ids = render_chat(
                tokenizer,
                messages,
                tools=tools,
                add_generation_prompt=add_generation_prompt,
                continue_final_message=continue_final_message,
                template_kwargs=template_kwargs,
            )
            tail = tokenizer.decode(token_ids[-tail_tokens:]) if tail_tokens > 0 else ""
            return RenderedChat(prompt_token_ids=token_ids, tail_text=tail)

        return await self._run(render)

    async def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of a text prompt, special tokens added as the engine adds them (unless told not to)."""
        tokenizer = self._require()
        return await self._run(lambda: _encode(tokenizer, text, add_special_tokens))

    async def encode_prompts(self, prompts: Sequence[str | list[int]]) -> list[list[int]]:
        """Token ids of several prompts in one trip: text encoded as the engine encodes it, ids as given."""
        if all(not isinstance(prompt, str) for prompt in prompts):
            return [list(prompt) for prompt in prompts]
        tokenizer = self._require()
        return await self._run(
            lambda: [_encode(tokenizer, p, True) if isinstance(p, str) else list(p) for p in prompts]
        )

    async def decode(self, token_ids: Sequence[int]) -> str:
        return await self._run(self._require().decode, list(token_ids))

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _require(self) -> Any:
        if self._tokenizer is None:
            raise InvalidRequestError("this model has no tokenizer: pass prompt token ids", param="prompt")
        return self._tokenizer

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.wrap_future(self._executor.submit(functools.partial(fn, *args, **kwargs)))


def _encode(tokenizer: Any, text: str, add_special_tokens: bool) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=add_special_tokens))
