"""A RAG case: retrieve passages for the question from a collection (the agents' hybrid store), ask the model
to answer citing them as [n], and keep the passages in the `Outcome` for the citation scorers.

A suite ships its collections as folders of documents; the run ingests them once into a store in its output
folder (unchanged files are skipped on resume). `--rag-db` points at an existing store instead.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import openai

from switchyard.agents.rag.chunking import ChunkingConfig
from switchyard.agents.rag.citations import rag_messages
from switchyard.agents.rag.embeddings import Embedder
from switchyard.agents.rag.store import Passage, RagStore
from switchyard.evals.chat_case import request_kwargs
from switchyard.evals.endpoint import Prices
from switchyard.evals.outcome import Outcome
from switchyard.evals.suite import RagCase, RagSettings


class MissingCollectionError(ValueError):
    """A RAG case names a collection neither the suite ships nor the given store holds."""


def open_store(
    settings: RagSettings, embedder: Embedder, path: Path, needed: set[str], ingest: bool = True
) -> RagStore:
    """The store at `path`, with the suite's collections ingested (unless `ingest` is False: a user's own store
    is only read); every needed collection must be there."""
    store = RagStore(
        embedder, path, ChunkingConfig(max_chars=settings.chunk_chars, overlap_chars=settings.overlap_chars)
    )
    for name, folder in settings.collections.items():
        if ingest and name in needed:
            report = store.ingest([folder], name)
            if report.errors:
                raise MissingCollectionError(f"collection {name!r}: {report.errors[0]}")
    missing = needed - set(store.collections())
    if missing:
        store.close()
        raise MissingCollectionError(
            f"collection(s) {', '.join(sorted(missing))} are neither shipped with the suite nor in {path}"
        )
    return store


def rag_prompt(settings: RagSettings, question: str, passages: Sequence[Passage]) -> list[dict[str, Any]]:
    """The suite's prompt around the numbered passages, or the agents' own RAG prompt."""
    if settings.prompt is None:
        return list(rag_messages(question, passages))
    written = "\n".join(
        settings.passage.format(n=p.n, text=p.text.strip(), source=p.citation()) for p in passages
    )
    return [{"role": "user", "content": settings.prompt.format(passages=written, question=question)}]


async def run_rag_case(
    case: RagCase,
    settings: RagSettings,
    store: RagStore,
    client: openai.AsyncOpenAI,
    model: str,
    params: Mapping[str, Any],
    prices: Prices,
) -> Outcome:
    started = time.perf_counter()
    passages = store.query(case.question, case.collection, k=settings.k)
    reply = await client.chat.completions.create(
        model=model, messages=rag_prompt(settings, case.question, passages), **request_kwargs(params)
    )  # type: ignore[call-overload]
    latency = time.perf_counter() - started
    usage = reply.usage
    input_tokens = usage.prompt_tokens if usage else 0
    output_tokens = usage.completion_tokens if usage else 0
    choice = reply.choices[0]
    return Outcome(
        content=choice.message.content or "",
        finish_reason=choice.finish_reason,
        prompt=case.question,
        passages=tuple(passages),
        latency_s=latency,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost=prices.cost(input_tokens, output_tokens),
    )
