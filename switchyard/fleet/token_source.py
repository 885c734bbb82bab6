"""Where a pool's token-keyed routing (`RoutingPolicy.needs_tokens`) gets a prompt's token ids.

Preferably from the model's own tokenizer, loaded in the gateway (prompt_tokens.py: no round trip): from the
pool's configured `tokenizer` folder, else from the folder a Switchyard replica on this machine reports as its
model's `root`. Where neither is to be had (another kind of server, another machine) or the body is one the
gateway does not reproduce, a replica counts the prompt itself (replica_tokenize.py: one round trip).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from switchyard.errors import ModelLoadError
from switchyard.fleet.prompt_tokens import PromptTokenizer, replica_model_folder
from switchyard.fleet.replica import Replica
from switchyard.fleet.replica_tokenize import prompt_token_ids

logger = logging.getLogger(__name__)

LOOKUP_RETRY_SECONDS = 30.0
"""How long to count through replicas before looking for a local tokenizer folder again."""


class PromptTokenSource:
    def __init__(self, model: str, folder: str | None) -> None:
        self.model = model
        self._configured = folder
        self._tokenizer: PromptTokenizer | None = None
        self._next_lookup = 0.0

    async def token_ids(
        self,
        http: httpx.AsyncClient,
        replica: Replica,
        path: str,
        body: Mapping[str, Any],
        headers: Mapping[str, str],
        timeout: float,
    ) -> tuple[int, ...] | None:
        """The prompt's ids as `replica` will count them; None when they cannot be had (route by load)."""
        tokenizer = await self._local(http, replica)
        if tokenizer is not None:
            tokens = await tokenizer.token_ids_async(path, body)
            if tokens is not None:
                return tokens
        endpoint = path.removeprefix("/v1/").replace("chat/completions", "chat")
        return await prompt_token_ids(http, replica, body, endpoint, headers, timeout)

    def close(self) -> None:
        if self._tokenizer is not None:
            self._tokenizer.close()

    async def _local(self, http: httpx.AsyncClient, replica: Replica) -> PromptTokenizer | None:
        if self._tokenizer is not None or time.monotonic() < self._next_lookup:
            return self._tokenizer
        self._next_lookup = time.monotonic() + LOOKUP_RETRY_SECONDS
        folder: Path | None = Path(self._configured) if self._configured else None
        if folder is None:
            folder = await replica_model_folder(http, replica.url, self.model)
        if folder is None:
            return None
        try:
            self._tokenizer = PromptTokenizer.from_folder(folder)
        except ModelLoadError as exc:
            logger.warning("pool %s: %s; replicas count prompts instead", self.model, exc)
        return self._tokenizer
