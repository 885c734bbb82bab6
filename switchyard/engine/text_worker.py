"""Chat-template rendering and tokenization for the server, on threads of their own, bounded in size.

Tokenizing a long prompt takes seconds (about 14 s for 8 MB of text). Done on the engine thread, that time
would stall every running request's next step; done on the event loop, every request. This worker keeps
private copies of the tokenizer (fast tokenizers are not safe to share across threads) on two threads of its
own, where `tokenizers` releases the GIL while it encodes:

- a size check first, before any tokenizing: a text longer than the context could hold even if every token
  were the vocabulary's longest (`max_chars`) is refused at once with a 400 naming the limit, however large;
- texts over `LARGE_TEXT_CHARS` go to a lane of their own, so the short prompts most requests send never
  queue behind a large one;
- a job still queued when its caller goes away (a client that disconnected) is dropped without running.

Each method is one trip to a thread: a request's text work (render, tokenize, read the prompt's end) is done
in a single call, so it waits in a queue once.
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

LARGE_TEXT_CHARS = 64 * 1024
"""Texts (or conversations) longer than this are tokenized on the large-text lane."""


@dataclass(frozen=True)
class RenderedChat:
    """A conversation rendered with the chat template: the prompt's token ids and the text of its end."""

    prompt_token_ids: list[int]
    tail_text: str
    """The prompt's last `tail_tokens` tokens decoded (special tokens kept); empty when none were asked for."""


@dataclass(frozen=True)
class TextLimit:
    """The most characters a prompt may have before it is tokenized: a token covers at most
    `chars_per_token` characters (the vocabulary's longest piece), so a longer text cannot fit in
    `max_model_len` tokens whatever it says."""

    max_model_len: int
    chars_per_token: int

    @property
    def max_chars(self) -> int:
        return self.max_model_len * self.chars_per_token

    def check(self, num_chars: int, param: str) -> None:
        if num_chars > self.max_chars:
            raise InvalidRequestError(
                f"the prompt has {num_chars:,} characters, more than the {self.max_chars:,} that could fit in the "
                f"maximum context length of {self.max_model_len} tokens (at most {self.chars_per_token} characters "
                "a token); it was refused before tokenizing",
                param=param,
            )


def longest_token_chars(tokenizer: Any) -> int:
    """Characters in the vocabulary's longest token (byte-level pieces: bytes, never fewer than characters)."""
    vocab = tokenizer.get_vocab() if tokenizer is not None else {}
    return max((len(piece) for piece in vocab), default=1) or 1


class TextWorker:
    """Renders, encodes and decodes with private tokenizer copies on two worker threads (small and large
    texts), refusing texts too long for the context before tokenizing them."""

    def __init__(self, tokenizer: Any, limit: TextLimit | None = None) -> None:
        self.limit = limit
        self._small = _Lane(tokenizer, "switchyard-text")
        self._large = _Lane(tokenizer, "switchyard-text-large")

    async def render_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        template_kwargs: Mapping[str, Any] | None = None,
        tail_tokens: int = 0,
        truncating: bool = False,
    ) -> RenderedChat:
        """The conversation rendered with the model's chat template, and the text of its last `tail_tokens`
        tokens (where a template leaves markers such as an opened <think>), in one trip to a thread.

        The size check counts the characters of every string in the messages and tools (the rendered prompt
        holds them all); a request `truncating` its prompt to its last tokens skips it, and a long one is
        tokenized on the large lane."""
        num_chars = text_chars(messages) + text_chars(tools)
        if self.limit is not None and not truncating:
            self.limit.check(num_chars, "messages")
        lane = self._lane(num_chars)
        tokenizer = lane.require()

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

        return await self._run(lane, render)

    async def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of a text prompt, special tokens added as the engine adds them (unless told not to)."""
        if self.limit is not None:
            self.limit.check(len(text), "prompt")
        lane = self._lane(len(text))
        tokenizer = lane.require()
        return await self._run(lane, lambda: _encode(tokenizer, text, add_special_tokens))

    async def encode_prompts(
        self, prompts: Sequence[str | list[int]], truncating: bool = False
    ) -> list[list[int]]:
        """Token ids of several prompts in one trip: text encoded as the engine encodes it, ids as given.

        A text over the size limit is refused, or, for a request `truncating` its prompt to its last tokens,
        cut to the limit's last characters first: those already hold more tokens than the context."""
        if all(not isinstance(prompt, str) for prompt in prompts):
            return [list(prompt) for prompt in prompts]
        if self.limit is not None:
            if truncating:
                cut = self.limit.max_chars
                prompts = [p[-cut:] if isinstance(p, str) else p for p in prompts]
            else:
                for prompt in prompts:
                    if isinstance(prompt, str):
                        self.limit.check(len(prompt), "prompt")
        lane = self._lane(sum(len(p) for p in prompts if isinstance(p, str)))
        tokenizer = lane.require()
        return await self._run(
            lane, lambda: [_encode(tokenizer, p, True) if isinstance(p, str) else list(p) for p in prompts]
        )

    async def decode(self, token_ids: Sequence[int]) -> str:
        lane = self._lane(len(token_ids))
        return await self._run(lane, lane.require().decode, list(token_ids))

    def shutdown(self) -> None:
        self._small.shutdown()
        self._large.shutdown()

    async def _run(self, lane: _Lane, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """One trip to `lane`'s thread (every method makes exactly one)."""
        return await lane.run(fn, *args, **kwargs)

    def _lane(self, num_chars: int) -> _Lane:
        return self._large if num_chars > LARGE_TEXT_CHARS else self._small


class _Lane:
    """One thread with its own tokenizer copy."""

    def __init__(self, tokenizer: Any, name: str) -> None:
        self._tokenizer = copy.deepcopy(tokenizer) if tokenizer is not None else None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    def require(self) -> Any:
        if self._tokenizer is None:
            raise InvalidRequestError("this model has no tokenizer: pass prompt token ids", param="prompt")
        return self._tokenizer

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        # Cancelling the await (a client gone) cancels the job too if it has not started yet.
        return await asyncio.wrap_future(self._executor.submit(functools.partial(fn, *args, **kwargs)))

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def text_chars(value: Any) -> int:
    """Characters in all the strings of a JSON-like value (a conversation, a tool list); iterative, so deep
    nesting costs no recursion."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return total


def _encode(tokenizer: Any, text: str, add_special_tokens: bool) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=add_special_tokens))
