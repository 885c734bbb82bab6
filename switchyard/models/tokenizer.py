"""Loads a model folder's tokenizer, its generation defaults and chat template, with errors a user can act on.

Why a wrapper around transformers: a missing or broken tokenizer must surface as a ModelLoadError naming the
folder (not a stack trace from deep inside transformers), the set of end-of-sequence ids is spread over three
files, and `apply_chat_template` returns different shapes across transformers versions.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import transformers

from switchyard.errors import InvalidRequestError, ModelLoadError

TOKENIZER_FILES: tuple[str, ...] = (
    "tokenizer.json",
    "tokenizer.model",
    "vocab.json",
    "tokenizer_config.json",
)
"""At least one of these must be in a folder for it to hold a tokenizer."""

GENERATION_CONFIG_FILE = "generation_config.json"


def load_tokenizer(folder: str | os.PathLike[str]) -> transformers.PreTrainedTokenizerBase:
    """Load the tokenizer in `folder` (never from the network); any failure is a ModelLoadError naming it."""
    path = Path(folder)
    if not path.is_dir():
        raise ModelLoadError("tokenizer folder does not exist or is not a directory", path=str(path))
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise ModelLoadError(
            f"no tokenizer files found (expected one of {', '.join(TOKENIZER_FILES)})", path=str(path)
        )
    try:
        return transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as error:  # transformers raises many types (OSError, ValueError, KeyError, ...)
        raise ModelLoadError(
            f"cannot load tokenizer: {type(error).__name__}: {error}", path=str(path)
        ) from error


def load_chat_template(value: str) -> str:
    """A chat template given as a file path or as the Jinja text itself (as vLLM's `--chat-template` takes it);
    a missing file or a template Jinja cannot parse is a ModelLoadError, raised at start, not per request."""
    path = Path(value)
    looks_like_template = "{{" in value or "{%" in value
    if not looks_like_template:
        try:
            value = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise ModelLoadError(
                f"chat template is neither a readable file nor a Jinja template: {error}", path=str(path)
            ) from error
    try:
        jinja2.Environment().parse(value)
    except jinja2.TemplateSyntaxError as error:
        raise ModelLoadError(f"chat template does not parse: line {error.lineno}: {error.message}") from error
    return value


@dataclass(frozen=True)
class GenerationDefaults:
    """The model author's sampling defaults from generation_config.json; None where the file says nothing."""

    eos_token_ids: tuple[int, ...] = ()
    """End-of-sequence ids (the file's `eos_token_id`, an int or a list)."""
    bos_token_id: int | None = None
    pad_token_id: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    max_new_tokens: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Every other key of the file, untouched (e.g. `do_sample`), for callers that want more."""


_INT_FIELDS = ("bos_token_id", "pad_token_id", "top_k", "max_new_tokens")
_FLOAT_FIELDS = ("temperature", "top_p", "min_p", "repetition_penalty")


def load_generation_defaults(folder: str | os.PathLike[str]) -> GenerationDefaults:
    """Read `folder/generation_config.json` if present; a missing file means no defaults."""
    path = Path(folder) / GENERATION_CONFIG_FILE
    if not path.is_file():
        return GenerationDefaults()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelLoadError(f"malformed JSON: {error}", path=str(path)) from error
    if not isinstance(raw, dict):
        raise ModelLoadError("expected a JSON object at the top level", path=str(path))
    values: dict[str, Any] = {"eos_token_ids": _as_token_ids(raw.get("eos_token_id"), "eos_token_id", path)}
    for name in _INT_FIELDS:
        value = raw.get(name)
        if value is not None and not _is_int(value):
            raise ModelLoadError(f"{name} must be an integer, got {value!r}", path=str(path))
        values[name] = value
    for name in _FLOAT_FIELDS:
        value = raw.get(name)
        if value is not None and not (_is_int(value) or isinstance(value, float)):
            raise ModelLoadError(f"{name} must be a number, got {value!r}", path=str(path))
        values[name] = None if value is None else float(value)
    known = {"eos_token_id", *_INT_FIELDS, *_FLOAT_FIELDS}
    values["extra"] = {key: value for key, value in raw.items() if key not in known}
    return GenerationDefaults(**values)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _as_token_ids(value: object, name: str, path: Path) -> tuple[int, ...]:
    if value is None:
        return ()
    if _is_int(value):
        return (value,)  # type: ignore[return-value]
    if isinstance(value, list) and all(_is_int(item) for item in value):
        return tuple(value)
    raise ModelLoadError(f"{name} must be an integer or a list of integers, got {value!r}", path=str(path))


def eos_token_ids(
    tokenizer: transformers.PreTrainedTokenizerBase | None,
    arch_eos_ids: Iterable[int] | int | None,
    generation_defaults: GenerationDefaults,
) -> tuple[int, ...]:
    """Every id that ends a sequence: config.json's, generation_config.json's and the tokenizer's, in that order.

    Models disagree about where they declare it (Llama 3 Instruct lists <|eot_id|> only in
    generation_config.json), so stopping on the union is what makes chat models stop.
    """
    ids: list[int] = []
    if isinstance(arch_eos_ids, int):
        ids.append(arch_eos_ids)
    elif arch_eos_ids is not None:
        ids.extend(arch_eos_ids)
    ids.extend(generation_defaults.eos_token_ids)
    tokenizer_eos = getattr(tokenizer, "eos_token_id", None)
    if tokenizer_eos is not None:
        ids.append(tokenizer_eos)
    return tuple(dict.fromkeys(int(i) for i in ids))


def _renderer_arguments(tokenizer: Any) -> set[str]:
    """Names `apply_chat_template` takes itself, which template variables must not shadow."""
    parameters = inspect.signature(tokenizer.apply_chat_template).parameters
    return {name for name, p in parameters.items() if p.kind is not inspect.Parameter.VAR_KEYWORD} | {
        "messages"
    }


def render_chat(
    tokenizer: transformers.PreTrainedTokenizerBase,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    continue_final_message: bool = False,
    template_kwargs: Mapping[str, Any] | None = None,
) -> list[int]:
    """Render one conversation with the tokenizer's chat template and return the prompt's token ids.

    `template_kwargs` become template variables (a request's `chat_template_kwargs`); one that would replace an
    argument of the renderer itself is refused. A missing template, or one that rejects the conversation (its
    `raise_exception`), is an InvalidRequestError.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise InvalidRequestError("model has no chat template", param="messages")
    template_kwargs = dict(template_kwargs or {})
    reserved = sorted(set(template_kwargs) & _renderer_arguments(tokenizer))
    if reserved:
        raise InvalidRequestError(
            f"chat_template_kwargs cannot set {', '.join(reserved)}: the server sets them",
            param="chat_template_kwargs",
        )
    try:
        rendered = tokenizer.apply_chat_template(
            list(messages),
            tools=list(tools) if tools is not None else None,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
            tokenize=True,
            **template_kwargs,
        )
    except jinja2.TemplateError as error:
        raise InvalidRequestError(
            f"chat template cannot render these messages: {error}", param="messages"
        ) from error
    except ValueError as error:  # transformers: a final message the template does not render verbatim
        if not continue_final_message:
            raise
        raise InvalidRequestError(f"cannot continue the final message: {error}", param="messages") from error
    # transformers 5 returns a BatchEncoding by default, 4.x a plain list.
    ids = rendered["input_ids"] if isinstance(rendered, Mapping) else rendered
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    if ids and isinstance(ids[0], list):
        if len(ids) != 1:
            raise InvalidRequestError("render_chat takes one conversation", param="messages")
        ids = ids[0]
    return [int(i) for i in ids]
