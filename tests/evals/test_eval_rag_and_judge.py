"""RAG cases over the shipped collection (the real store and embedder) and the LLM judge (a real server asked
under a JSON schema), against the tiny server: the plumbing end to end, whatever a random model answers."""

from __future__ import annotations

import re
from pathlib import Path

from eval_helpers import read_jsonl, run_cli, write_suite
from server.harness import RunningServer

from switchyard.agents.rag.embeddings import MiniLMEmbedder
from switchyard.agents.rag.store import RagStore
from switchyard.evals.rag_case import open_store, rag_prompt
from switchyard.evals.suite import load_suite


def test_the_shipped_collection_gives_one_fact_per_passage(minilm: MiniLMEmbedder, tmp_path: Path) -> None:
    suite = load_suite("rag-citations")
    store: RagStore = open_store(suite.rag, minilm, tmp_path / "rag.db", {"companies"})
    try:
        question = suite.cases[0]
        passages = store.query(question.prompt, "companies", k=suite.rag.k)
        assert len(passages) == 4 and all("\n" not in p.text and not p.text.endswith(".") for p in passages)
        answer = question.checks[0].params["answer"]
        assert any(answer in p.text for p in passages), "retrieval finds the asked fact"
        prompt = rag_prompt(suite.rag, question.prompt, passages)[0]["content"]
        assert prompt.startswith("Answer the question using only the passages below.")
        assert f"{passages[0].text} [1].\n{passages[1].text} [2]." in prompt
        assert prompt.endswith(f"Question: {question.prompt}")
    finally:
        store.close()


def test_rag_cases_run_and_resume(eval_server: RunningServer, tmp_path: Path) -> None:
    out = tmp_path / "rag"
    flags = (
        "--base-url",
        f"{eval_server.base_url}/v1",
        "--model",
        "tiny",
        "--output-dir",
        str(out),
        "--no-progress",
    )
    done = run_cli("run", "rag-citations", "--limit", "3", *flags)
    assert done.returncode == 0, done.stdout + done.stderr
    records = read_jsonl(out / "cases.jsonl")
    assert len(records) == 3 and (out / "rag.db").is_file()
    for record in records:
        assert set(record["checks"]) == {"cited_answer", "citation_grounded"}
        assert [p["n"] for p in record["output"]["passages"]] == [1, 2, 3, 4]
    again = run_cli("run", "rag-citations", "--limit", "3", *flags)
    assert again.returncode == 0 and len(read_jsonl(out / "cases.jsonl")) == 3


def test_the_judge_grades_with_a_schema_bound_score(eval_server: RunningServer, tmp_path: Path) -> None:
    cases = [
        {
            "id": f"j{i}",
            "messages": [{"role": "user", "content": "Name a colour."}],
            "params": {"max_tokens": 6},
            "checks": [{"scorer": "judge", "rubric": "The reply names a colour.", "reference": "blue"}],
        }
        for i in range(2)
    ]
    suite = write_suite(tmp_path / "judged.jsonl", cases, {"name": "judged"})
    url = f"{eval_server.base_url}/v1"
    out = tmp_path / "run"
    missing = run_cli("run", str(suite), "--base-url", url, "--model", "tiny", "--output-dir", str(out))
    assert missing.returncode == 2 and "give a judge model" in missing.stderr
    done = run_cli("run", str(suite), "--base-url", url, "--model", "tiny", "--judge-model", "tiny",
                   "--output-dir", str(out), "--no-progress")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    for record in read_jsonl(out / "cases.jsonl"):
        check = record["checks"]["judge"]
        # the tiny model is no judge, but the schema keeps its answer a score in range
        assert re.match(r"[1-5]/5: ", check["detail"]), check["detail"]
        assert 0.0 <= check["value"] <= 1.0 and check["passed"] == (check["value"] >= 0.75)
