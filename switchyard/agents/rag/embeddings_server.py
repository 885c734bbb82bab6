"""`switchyard rag serve-embeddings`: the bundled MiniLM behind OpenAI's `POST /v1/embeddings`.

For clients that embed over HTTP and must not load torch themselves: the fleet gateway's semantic response cache
(`[response_cache.semantic]`) is one. The request and answer are OpenAI's (`input` a string or a list of strings,
`encoding_format` float or base64); vectors are L2-normalised, so a dot product is their cosine.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any, Literal

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from switchyard.agents.rag.embeddings import MINILM_DIM, MiniLMEmbedder
from switchyard.bearer_key import BearerKeyMiddleware

MODEL_NAME = "all-MiniLM-L6-v2"
MAX_INPUTS = 2048
MAX_INPUT_CHARS = 32_768


class EmbeddingsRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    input: str | list[str] = Field(min_length=1)
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    user: str | None = None


def build_embeddings_app(
    embedder: MiniLMEmbedder, api_key: str | None = None, name: str = MODEL_NAME
) -> FastAPI:
    app = FastAPI(title="Switchyard embeddings", docs_url=None, redoc_url=None)
    if api_key is not None:
        app.add_middleware(BearerKeyMiddleware, key=api_key)
    lock = asyncio.Lock()  # one encode at a time: the model's threads are the machine's

    def refused(status: int, message: str, kind: str, param: str | None = None) -> JSONResponse:
        error = {"message": message, "type": kind, "param": param, "code": None}
        return JSONResponse({"error": error}, status_code=status)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> Any:
        return {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "switchyard"}]}

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> Any:
        try:
            body = EmbeddingsRequest.model_validate_json(await request.body())
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            return refused(400, f"{where}: {first['msg']}", "invalid_request_error", where or None)
        if body.model is not None and body.model != name:
            return refused(404, f"the model `{body.model}` does not exist here (this server embeds with {name})",
                           "invalid_request_error", "model")  # fmt: skip
        texts = [body.input] if isinstance(body.input, str) else body.input
        if len(texts) > MAX_INPUTS:
            return refused(400, f"at most {MAX_INPUTS} inputs per request", "invalid_request_error", "input")
        if any(not text or len(text) > MAX_INPUT_CHARS for text in texts):
            return refused(400, f"each input must be 1 to {MAX_INPUT_CHARS} characters", "invalid_request_error",
                           "input")  # fmt: skip
        async with lock:
            vectors = await asyncio.to_thread(embedder.embed, texts)
        data = [
            {"object": "embedding", "index": index, "embedding": _encoded(vector, body.encoding_format)}
            for index, vector in enumerate(vectors)
        ]
        tokens = sum(len(text.split()) for text in texts)  # whitespace words: the usage is informational
        return {
            "object": "list",
            "data": data,
            "model": name,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    return app


def _encoded(vector: np.ndarray, encoding: str) -> list[float] | str:
    if encoding == "base64":
        return base64.b64encode(np.ascontiguousarray(vector, dtype=np.float32).tobytes()).decode()
    return [float(value) for value in vector]


__all__ = ["MINILM_DIM", "MODEL_NAME", "build_embeddings_app"]
