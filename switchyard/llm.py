"""The offline API, shaped like vLLM's: `LLM(model=...).generate(prompts, SamplingParams(...))`."""

from __future__ import annotations

import itertools
from collections.abc import Sequence as Seq
from typing import Any

from tqdm.auto import tqdm

from switchyard.config import EngineConfig
from switchyard.engine.engine import LLMEngine
from switchyard.engine.sampling_params import SamplingParams
from switchyard.engine.sequence import RequestOutput
from switchyard.engine_args import resolve_model_folders
from switchyard.errors import InvalidRequestError
from switchyard.models.tokenizer import render_chat

Prompt = str | list[int] | dict[str, Any]
"""Text, token ids, or vLLM's prompt dicts: {"prompt": text} or {"prompt_token_ids": ids}."""
Message = dict[str, Any]


class LLM:
    """Loads a model once and generates for batches of prompts with continuous batching.

    Engine settings are EngineConfig's fields as keyword arguments: LLM(model="switchyard-chat", dtype="bfloat16").
    Bundled model names (the model's, the speculative model's) are resolved to their folders here.
    """

    def __init__(
        self, model: str = "switchyard-chat", *, config: EngineConfig | None = None, **engine_args: Any
    ):
        config = config or EngineConfig(model=model, **engine_args)
        self.engine = LLMEngine(resolve_model_folders(config))
        self._ids = itertools.count()

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    def get_tokenizer(self) -> Any:
        """The model's tokenizer (vLLM's spelling of the `tokenizer` property)."""
        return self.engine.tokenizer

    def generate(
        self,
        prompts: Prompt | Seq[Prompt],
        sampling_params: SamplingParams | Seq[SamplingParams] | None = None,
        *,
        use_tqdm: bool | None = None,
    ) -> list[RequestOutput]:
        """Generate for each prompt (text, token ids or a prompt dict); outputs come back in the prompts' order.

        A bad prompt, parameter or grammar raises InvalidRequestError before any work starts.
        """
        batch = _as_prompt_list(prompts)
        params = _as_params_list(sampling_params, len(batch))
        ids = [f"offline-{next(self._ids)}" for _ in batch]
        added: list[str] = []
        for spec in {
            p.structured_outputs.cache_key(): p.structured_outputs for p in params if p.structured_outputs
        }.values():
            self.engine.structured_outputs.compile(spec)  # a bad grammar raises here, before any work
        try:
            for request_id, prompt, p in zip(ids, batch, params, strict=True):
                self.engine.add_request(request_id, prompt, p)
                added.append(request_id)
        except Exception:
            for request_id in added:
                self.engine.abort_request(request_id)
            self.engine.step()  # drain the abort outputs
            raise
        return self._run(ids, use_tqdm if use_tqdm is not None else len(batch) >= 16)

    def chat(
        self,
        messages: list[Message] | list[list[Message]],
        sampling_params: SamplingParams | Seq[SamplingParams] | None = None,
        *,
        tools: list[dict[str, Any]] | None = None,
        use_tqdm: bool | None = None,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        chat_template_kwargs: dict[str, Any] | None = None,
        **template_kwargs: Any,
    ) -> list[RequestOutput]:
        """Apply the model's chat template to one conversation or a list of them, then generate.

        As vLLM's: `continue_final_message` continues the final (assistant) message instead of opening a new
        turn, and `chat_template_kwargs` (or further keyword arguments) become template variables."""
        if self.tokenizer is None:
            raise InvalidRequestError("chat needs a tokenizer", param="messages")
        if continue_final_message and add_generation_prompt:
            add_generation_prompt = False  # the reply continues the final message rather than opening a turn
        variables = {**(chat_template_kwargs or {}), **template_kwargs}
        conversations = [messages] if messages and isinstance(messages[0], dict) else messages
        prompts = [
            render_chat(
                self.tokenizer,
                conv,  # type: ignore[arg-type]
                tools=tools,
                add_generation_prompt=add_generation_prompt,
                continue_final_message=continue_final_message,
                template_kwargs=variables,
            )
            for conv in conversations
        ]
        return self.generate(prompts, sampling_params, use_tqdm=use_tqdm)

    def reset_prefix_cache(self) -> int:
        """Forget cached prompt prefixes that no request uses; returns the number of KV blocks freed."""
        return self.engine.reset_prefix_cache()

    def _run(self, ids: list[str], show_progress: bool) -> list[RequestOutput]:
        finished: dict[str, RequestOutput] = {}
        wanted = set(ids)
        with tqdm(total=len(ids), desc="generating", unit="req", disable=not show_progress) as bar:
            while len(finished) < len(ids):
                for output in self.engine.step():
                    if output.finished and output.request_id in wanted:
                        finished[output.request_id] = output
                        bar.update(1)
        return [finished[i] for i in ids]


def _as_prompt_list(prompts: Prompt | Seq[Prompt]) -> list[str | list[int]]:
    if isinstance(prompts, (str, dict)):
        return [_unpack_prompt(prompts)]
    if isinstance(prompts, list) and prompts and isinstance(prompts[0], int):
        return [_unpack_prompt(prompts)]
    if not isinstance(prompts, Seq):
        raise InvalidRequestError(
            f"prompts must be text, token ids, a prompt dict or a list of them, not {type(prompts).__name__}",
            param="prompts",
        )
    result = [_unpack_prompt(p) for p in prompts]
    if not result:
        raise InvalidRequestError("no prompts given", param="prompts")
    return result


def _unpack_prompt(prompt: Any) -> str | list[int]:
    """One prompt as text or token ids; a dict must hold exactly one of "prompt" / "prompt_token_ids"."""
    if isinstance(prompt, dict):
        keys = set(prompt) & {"prompt", "prompt_token_ids"}
        if len(keys) != 1:
            raise InvalidRequestError(
                'a prompt dict needs exactly one of "prompt" (text) or "prompt_token_ids"', param="prompts"
            )
        prompt = prompt[keys.pop()]
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, (list, tuple)) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in prompt
    ):
        return list(prompt)
    raise InvalidRequestError(
        f"a prompt must be text or a list of token ids, not {type(prompt).__name__}", param="prompts"
    )


def _as_params_list(params: SamplingParams | Seq[SamplingParams] | None, count: int) -> list[SamplingParams]:
    if params is None:
        return [SamplingParams() for _ in range(count)]
    if isinstance(params, SamplingParams):
        return [params] * count
    result = list(params)
    if len(result) != count:
        raise InvalidRequestError(
            f"got {len(result)} sampling params for {count} prompts", param="sampling_params"
        )
    return result
