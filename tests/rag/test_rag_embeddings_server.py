"""`switchyard rag serve-embeddings`' app on loopback: OpenAI's /v1/embeddings answered by the bundled MiniLM,
with the official client; bad input gets OpenAI-shaped errors."""

from __future__ import annotations

import base64
import socket
import threading
import time
from collections.abc import Iterator

import numpy as np
import openai
import pytest
import uvicorn

from switchyard.agents.rag.embeddings import MINILM_DIM, MiniLMEmbedder
from switchyard.agents.rag.embeddings_server import MODEL_NAME, build_embeddings_app

KEY = "embed-key"


@pytest.fixture(scope="module")
def base_url(minilm: MiniLMEmbedder) -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    app = build_embeddings_app(minilm, api_key=KEY)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/v1"
    server.should_exit = True
    thread.join(timeout=30)


def test_the_official_client_gets_normalised_vectors(base_url: str, minilm: MiniLMEmbedder) -> None:
    client = openai.OpenAI(base_url=base_url, api_key=KEY, max_retries=0)
    texts = ["a kettle boils water", "the tides"]
    answer = client.embeddings.create(model=MODEL_NAME, input=texts, encoding_format="float")
    vectors = np.asarray([item.embedding for item in answer.data], dtype=np.float32)
    assert vectors.shape == (2, MINILM_DIM)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(vectors, minilm.embed(texts), atol=1e-5)
    packed = client.embeddings.with_raw_response.create(
        model=MODEL_NAME, input="the tides", encoding_format="base64"
    )
    encoded = packed.http_response.json()["data"][0]["embedding"]
    np.testing.assert_allclose(
        np.frombuffer(base64.b64decode(encoded), dtype=np.float32), vectors[1], atol=1e-5
    )


def test_bad_requests_get_openai_errors(base_url: str) -> None:
    client = openai.OpenAI(base_url=base_url, api_key=KEY, max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=base_url, api_key="wrong", max_retries=0).embeddings.create(
            model=MODEL_NAME, input="x"
        )
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.embeddings.create(model="text-embedding-3-small", input="x")
    with pytest.raises(openai.BadRequestError, match="input"):
        client.embeddings.create(model=MODEL_NAME, input=[])
    with pytest.raises(openai.BadRequestError, match="characters"):
        client.embeddings.create(model=MODEL_NAME, input=["ok", ""])
