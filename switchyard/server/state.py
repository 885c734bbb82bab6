"""What the request handlers share: settings, the engine, metrics, and the draining flag."""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from switchyard.engine.async_engine import AsyncLLMEngine, EngineDeadError, QueueFullError, RequestStream
from switchyard.engine.sampling_params import SamplingParams
from switchyard.errors import CapacityError, InvalidRequestError
from switchyard.reasoning import THINK_CLOSE, THINK_OPEN, check_reasoning_parser
from switchyard.server.cors import CorsPolicy
from switchyard.server.errors import ModelNotFoundError, ServerDrainingError
from switchyard.server.metrics import DEFAULT_MAX_EXTRA_TENANTS, ServerMetrics
from switchyard.tool_calling import ToolCallFormat, detect_format, get_format

DEFAULT_MAX_REQUEST_BYTES = 16 << 20
"""16 MiB: millions of tokens of text, far past any context window, yet a bound."""


@dataclass(frozen=True)
class ServerSettings:
    """Server options, read and validated once by the CLI (or a test) and fixed for the app's life."""

    served_model_names: tuple[str, ...]
    """Names clients may put in `model`; the first is reported in responses and metrics."""
    api_key: str | None = None
    """When set, /v1 routes require `Authorization: Bearer <api_key>`; its tenant is "default"."""
    tenant_keys: dict[str, str] = field(default_factory=dict)
    """More accepted API keys, each mapped to its tenant's name (from `--tenants`)."""
    request_timeout: float | None = None
    """Seconds a request may take in all, queueing included; None means no limit."""
    shutdown_grace: float = 30.0
    """Seconds in-flight requests get to finish after SIGTERM before they are aborted."""
    tool_call_parser: str | None = None
    """Tool-call format (`hermes`, `llama3_json`); None detects it from the chat template."""
    max_request_bytes: int | None = DEFAULT_MAX_REQUEST_BYTES
    """Largest request body accepted (413 beyond it, before the body is parsed); None accepts any size. Parsing,
    templating and tokenizing a prompt take over a hundred times its bytes for a moment (8 MiB of text: 1.9 GB
    with a 320-piece vocabulary), so without a cap one large body could take the memory every other request
    needs."""

    return_tokens_as_token_ids: bool = False
    """Logprob entries name tokens as "token_id:N" unless a request says otherwise; a token that is part of a
    UTF-8 character then stays identifiable (its `bytes` are still the token's own)."""
    reasoning_parser: str | None = None
    """`think`, `qwen3` or `deepseek_r1` (`switchyard.reasoning`): <think> text goes to `message.reasoning`
    (and `reasoning_content`) instead of the content; None leaves replies whole."""
    cors: CorsPolicy | None = None
    """Which browser origins may call the API (`serve --allowed-origins`); None sends no CORS headers."""
    max_tenant_labels: int = DEFAULT_MAX_EXTRA_TENANTS
    """Tenants besides the configured ones (`--tenants`) that metrics label by name, the first seen; the rest
    are labelled "other". With API keys off a tenant is the request's `user`, which any client can vary."""
    root_path: str = ""
    """The path prefix a reverse proxy serves the API under (`serve --root-path /llm`), which the proxy strips
    before forwarding, as uvicorn and FastAPI expect: routes stay at /v1/..., while the API docs and
    `request.url` name the public URL. Empty when clients reach the server directly."""

    def __post_init__(self) -> None:
        if not self.served_model_names:
            raise ValueError("served_model_names must name at least one model")
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError("api_key must not be empty or blank: a blank key would let any client in")
        if self.request_timeout is not None and self.request_timeout <= 0:
            raise ValueError("request_timeout must be > 0 seconds")
        if self.shutdown_grace < 0:
            raise ValueError("shutdown_grace must be >= 0 seconds")
        if self.tool_call_parser is not None:
            get_format(self.tool_call_parser)  # ValueError naming the known formats
        if self.reasoning_parser is not None:
            check_reasoning_parser(self.reasoning_parser)
        if self.root_path and (
            not self.root_path.startswith("/")
            or self.root_path.endswith("/")
            or any(c in self.root_path for c in "?#")
        ):
            raise ValueError(
                f"root_path must be a path such as /llm: starting with /, without a trailing / and without ? or #; "
                f"got {self.root_path!r}"
            )
        if self.max_tenant_labels < 0:
            raise ValueError("max_tenant_labels must be >= 0")
        if self.max_request_bytes is not None and self.max_request_bytes <= 0:
            raise ValueError("max_request_bytes must be > 0 (None accepts any size)")


@dataclass
class ServerState:
    engine: AsyncLLMEngine
    settings: ServerSettings
    metrics: ServerMetrics
    created: int = field(default_factory=lambda: int(time.time()))
    draining: bool = False
    """Set on SIGTERM: new requests get 503 while those in flight finish."""

    @functools.cached_property
    def tool_format(self) -> ToolCallFormat:
        """How this model writes tool calls: the configured format, else the one its chat template uses."""
        if self.settings.tool_call_parser:
            return get_format(self.settings.tool_call_parser)
        return detect_format(getattr(self.engine.tokenizer, "chat_template", None))

    @functools.cached_property
    def special_token_texts(self) -> frozenset[str]:
        """Texts of the tokenizer's special tokens, which detokenizing drops unless a request keeps them."""
        added = getattr(self.engine.tokenizer, "added_tokens_decoder", None) or {}
        return frozenset(token.content for token in added.values() if token.special)

    @property
    def tool_trigger_is_special(self) -> bool:
        """Whether the tool-call trigger is a special token (Mistral's [TOOL_CALLS]), which replies must keep."""
        return self.tool_format.trigger in self.special_token_texts

    @property
    def reasoning_tags_are_special(self) -> bool:
        """Whether <think> or </think> is a special token here, which replies must keep for the splitter."""
        return bool({THINK_OPEN, THINK_CLOSE} & self.special_token_texts)

    @property
    def model_name(self) -> str:
        return self.settings.served_model_names[0]

    def check_accepting(self) -> None:
        """Raise ServerDrainingError once shutdown has begun."""
        if self.draining:
            raise ServerDrainingError("the server is shutting down and accepts no new requests")

    def resolve_model(self, model: str | None) -> str:
        """The served name a request asked for (the first one when it names none); 404 for any other."""
        if not model:
            return self.model_name
        if model not in self.settings.served_model_names:
            raise ModelNotFoundError(model)
        return model

    async def admit(
        self,
        request_id: str,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        priority: int,
        tenant: str | None,
    ) -> RequestStream:
        """Hand a request to the engine under the server's timeout; count refusals by reason."""
        try:
            return await self.engine.add_request(
                request_id,
                prompt,
                params,
                priority=priority,
                tenant=tenant,
                timeout=self.settings.request_timeout,
            )
        except QueueFullError:
            self.metrics.observe_rejection("queue_full")
            raise
        except CapacityError:
            self.metrics.observe_rejection("kv_cache_full")
            raise
        except InvalidRequestError:
            self.metrics.observe_rejection("invalid")
            raise
        except EngineDeadError:
            self.metrics.observe_rejection("engine_unavailable")
            raise

    @functools.cached_property
    def token_texts(self) -> TokenTexts:
        return TokenTexts(self.engine.tokenizer)

    @functools.cached_property
    def token_id_texts(self) -> TokenTexts:
        return TokenTexts(self.engine.tokenizer, as_token_ids=True)

    def logprob_texts(self, as_token_ids: bool | None) -> TokenTexts:
        """How a request's logprob entries name tokens: its own `return_tokens_as_token_ids`, else the server's."""
        if as_token_ids is None:
            as_token_ids = self.settings.return_tokens_as_token_ids
        return self.token_id_texts if as_token_ids else self.token_texts


class TokenTexts:
    """Text and bytes of single tokens for logprob entries, cached: the vocabulary is fixed and ids recur.

    A token may hold part of a UTF-8 character, which decodes to U+FFFD on its own; `bytes` gives the token's
    real bytes so a client can join them back (as OpenAI's API does). Decoding is read-only on the tokenizer,
    so doing it on the event loop beside the engine thread is safe.
    """

    def __init__(self, tokenizer: Any, *, as_token_ids: bool = False) -> None:
        self._tokenizer = tokenizer
        backend = getattr(tokenizer, "backend_tokenizer", None)
        decoder = getattr(backend, "decoder", None)
        self._byte_level = type(decoder).__name__ == "ByteLevel"
        self._decoded = functools.lru_cache(maxsize=1 << 16)(self._decode_one)
        self.text = _token_id_text if as_token_ids else self._decoded
        self.bytes = functools.lru_cache(maxsize=1 << 16)(self._bytes)

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of several tokens, special ones kept."""
        if self._tokenizer is None:
            return ""
        return str(self._tokenizer.decode(list(token_ids), skip_special_tokens=False))

    def _decode_one(self, token_id: int) -> str:
        if self._tokenizer is None:
            return _token_id_text(token_id)
        return self._tokenizer.decode([token_id], skip_special_tokens=False)

    def _bytes(self, token_id: int) -> list[int]:
        if self._tokenizer is not None:
            piece = self._tokenizer.convert_ids_to_tokens(token_id)
            if isinstance(piece, str):
                if self._byte_level and all(ch in _BYTE_OF_CHAR for ch in piece):
                    return [_BYTE_OF_CHAR[ch] for ch in piece]
                if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):  # byte fallback
                    return [int(piece[3:5], 16)]
        return list(self._decoded(token_id).encode("utf-8"))


def _token_id_text(token_id: int) -> str:
    return f"token_id:{token_id}"


def _byte_level_alphabet() -> dict[str, int]:
    """Byte-level BPE's printable stand-in character for each byte value, inverted (char -> byte).

    Printable Latin-1 bytes stand for themselves; the others are shifted to code points from 256 up, in order.
    """
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = {b: chr(b) for b in printable}
    shifted = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + shifted)
            shifted += 1
    return {ch: b for b, ch in chars.items()}


_BYTE_OF_CHAR = _byte_level_alphabet()


def tenant_of(http_request: Any, user: str | None) -> str | None:
    """The request's tenant: its API key's tenant when keys are on, else the OpenAI `user` field."""
    return getattr(http_request.state, "tenant", None) or user


def check_token_ids(token_ids: Sequence[int], vocab_size: int, param: str) -> None:
    """InvalidRequestError unless every id is in [0, vocab_size): checked before anything decodes them (a
    tokenizer overflows on a negative id)."""
    bad = next((token for token in token_ids if not 0 <= token < vocab_size), None)
    if bad is not None:
        raise InvalidRequestError(f"token id {bad} is outside the vocabulary [0, {vocab_size})", param=param)


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"
