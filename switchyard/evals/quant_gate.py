"""`switchyard eval quant`: is a quantized model good enough to serve in place of the unquantized one?

Both are served side by side (two `switchyard serve` processes on loopback: MODEL, and MODEL with
`--quantization X` or a quantized checkpoint folder) and compared over the API, as any client would see them:

- perplexity of held-out text, teacher-forced (`/v1/completions` with `echo` and `logprobs`, `max_tokens` 0):
  by default the suite's conversations rendered by the model's chat template (`/tokenize` with messages and
  tools), so the text is in the format the model was trained on;
- greedy-token agreement: the share of reply tokens equal at the same position, and of replies identical;
- task accuracy: a suite (default `bundled-gate`) run A/B, interleaved, paired (eval ab's machinery).

The verdict applies stated rollback thresholds (perplexity up by more than 3%, or the suite's success rate
down by more than 1 point, or any gated metric significantly worse, fails) and is recorded where the server
looks for it (`switchyard.quant_gates`): a quantized model without a verdict, or with a failed one, is served
with a warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from switchyard.errors import SwitchyardError
from switchyard.evals.ab import run_ab
from switchyard.evals.compare import compare_runs
from switchyard.evals.endpoint import Endpoint
from switchyard.evals.runner import RunSettings
from switchyard.evals.scorers import ScoringContext
from switchyard.evals.suite import ChatCase, Suite, load_suite
from switchyard.evals.summary import run_file, summarize
from switchyard.quant_gates import record_gate

BASE, CANDIDATE = "base", "quantized"


class QuantGateError(SwitchyardError):
    """A server of the comparison would not start, or answered what the gate cannot use."""


@dataclass(frozen=True)
class GateThresholds:
    """When a quantized model is rolled back."""

    max_perplexity_increase: float = 0.03
    """Relative: 0.03 fails a perplexity more than 3% above the unquantized model's."""
    max_success_drop: float = 0.01
    """Absolute: 0.01 fails a suite success rate more than 1 point below the unquantized model's."""


@dataclass(frozen=True)
class GateRequest:
    model: str
    """Bundled model name or folder: the unquantized side."""
    quantization: str | None = None
    """--quantization for the quantized side (of the same model)..."""
    candidate: str | None = None
    """...or a quantized checkpoint folder (`switchyard quantize`)."""
    suite: str = "bundled-gate"
    limit: int | None = 400
    """Suite cases used (None: all)."""
    texts: tuple[str, ...] = ()
    """Held-out text for perplexity (tokenized as plain prompts)..."""
    conversations: tuple[dict[str, Any], ...] = ()
    """...or held-out conversations (`messages` and `tools`, assistant replies included) rendered by the chat
    template; neither: the suite's conversations (their prompts)."""
    agreement_prompts: int = 64
    agreement_tokens: int = 32
    serve_args: tuple[str, ...] = ()
    """Extra `switchyard serve` flags for both sides (e.g. --dtype bfloat16)."""
    concurrency: int = 8
    thresholds: GateThresholds = field(default_factory=GateThresholds)

    def __post_init__(self) -> None:
        if (self.quantization is None) == (self.candidate is None):
            raise ValueError("give exactly one of --quantization METHOD or --candidate FOLDER")


@dataclass(frozen=True)
class GateResult:
    method: str
    model_root: str
    """The folder the quantized side loaded (what the server keys its warning by)."""
    perplexity_base: float
    perplexity_quantized: float
    scored_tokens: int
    token_agreement: float
    identical_replies: float
    success_base: float
    success_quantized: float
    cases: int
    regressions: list[str]
    passed: bool
    reason: str
    thresholds: dict[str, float]

    @property
    def perplexity_increase(self) -> float:
        return self.perplexity_quantized / self.perplexity_base - 1


def run_gate(request: GateRequest, output_dir: Path, progress: bool = True) -> GateResult:
    suite = load_suite(request.suite)
    if request.limit is not None:
        suite = replace(suite, cases=suite.cases[: request.limit])
    prompts = [case.messages for case in suite.cases if isinstance(case, ChatCase)][
        : request.agreement_prompts
    ]
    quantized_args = ("--quantization", request.quantization) if request.quantization else ()
    quantized_model = request.candidate or request.model
    with (
        served(request.model, BASE, request.serve_args) as base_url,
        served(quantized_model, CANDIDATE, (*request.serve_args, *quantized_args)) as quantized_url,
    ):
        card = _model_card(quantized_url)
        method = card.get("quantization")
        if not method:
            raise QuantGateError(f"{quantized_model} is served unquantized: nothing to gate")
        with httpx.Client(timeout=600) as http:
            texts = (
                [tokenized_text(http, base_url, BASE, {"prompt": text}) for text in request.texts]
                if request.texts
                else [
                    tokenized_text(http, base_url, BASE, conversation)
                    for conversation in suite_conversations(suite)
                ]
            )
            base_nll, tokens = teacher_forced_nll(http, base_url, BASE, texts)
            quantized_nll, _ = teacher_forced_nll(http, quantized_url, CANDIDATE, texts)
            agreement, identical = greedy_agreement(
                http, (base_url, BASE), (quantized_url, CANDIDATE), prompts, request.agreement_tokens
            )
        settings = {
            "a": RunSettings(endpoint=Endpoint(f"{base_url}/v1", BASE), concurrency=request.concurrency),
            "b": RunSettings(
                endpoint=Endpoint(f"{quantized_url}/v1", CANDIDATE), concurrency=request.concurrency
            ),
        }
        results = asyncio.run(
            run_ab(
                suite,
                settings,
                output_dir,
                ScoringContext(),
                concurrency=request.concurrency,
                fresh=True,
                progress=progress,
            )
        )
    runs = {
        side: run_file(suite, found, summarize(suite, found, settings[side].endpoint.model, "", {}))
        for side, found in (("a", results.a), ("b", results.b))
    }
    comparison = compare_runs(runs["a"], runs["b"])
    success = {side: run.summary.success.rate for side, run in runs.items()}
    result = verdict(
        method=str(method),
        model_root=str(card.get("root", quantized_model)),
        perplexities=(math.exp(base_nll / tokens), math.exp(quantized_nll / tokens)),
        scored_tokens=tokens,
        agreement=(agreement, identical),
        success=(success["a"], success["b"]),
        cases=len(suite.cases),
        regressions=[change.metric for change in comparison.regressions],
        thresholds=request.thresholds,
    )
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "gate.json").write_text(json.dumps(asdict(result), indent=2) + "\n")
    record_gate(result.model_root, result.method, asdict(result))
    return result


def verdict(
    *,
    method: str,
    model_root: str,
    perplexities: tuple[float, float],
    scored_tokens: int,
    agreement: tuple[float, float],
    success: tuple[float, float],
    cases: int,
    regressions: list[str],
    thresholds: GateThresholds,
) -> GateResult:
    """Apply the rollback thresholds (a pure function: tested on crafted numbers)."""
    reasons = []
    increase = perplexities[1] / perplexities[0] - 1
    if increase > thresholds.max_perplexity_increase:
        reasons.append(f"perplexity +{100 * increase:.1f}% > +{100 * thresholds.max_perplexity_increase:g}%")
    drop = success[0] - success[1]
    if drop > thresholds.max_success_drop:
        reasons.append(f"success rate -{100 * drop:.1f} points > -{100 * thresholds.max_success_drop:g}")
    if regressions:
        reasons.append(f"significantly worse: {', '.join(regressions)}")
    return GateResult(
        method=method,
        model_root=model_root,
        perplexity_base=perplexities[0],
        perplexity_quantized=perplexities[1],
        scored_tokens=scored_tokens,
        token_agreement=agreement[0],
        identical_replies=agreement[1],
        success_base=success[0],
        success_quantized=success[1],
        cases=cases,
        regressions=regressions,
        passed=not reasons,
        reason="; ".join(reasons) or "within every threshold",
        thresholds=asdict(thresholds),
    )


def suite_conversations(suite: Suite) -> list[dict[str, Any]]:
    """Each chat case's conversation (messages and tools) as a `/tokenize` body: held-out text in the model's
    own format (system prompt, tool specs, earlier turns, the question)."""
    bodies = []
    for case in suite.cases:
        if isinstance(case, ChatCase):
            body: dict[str, Any] = {"messages": case.messages, "add_generation_prompt": False}
            if case.tools:
                body["tools"] = case.tools
            bodies.append(body)
    return bodies


def _tokenize_body(conversation: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(conversation.get("messages"), list):
        raise QuantGateError("a held-out conversation needs a `messages` list")
    body: dict[str, Any] = {"messages": conversation["messages"], "add_generation_prompt": False}
    if conversation.get("tools"):
        body["tools"] = conversation["tools"]
    return body


def tokenized_text(http: httpx.Client, url: str, model: str, body: dict[str, Any]) -> list[int]:
    """Token ids of a text prompt or of messages rendered by the chat template, from the server's tokenizer."""
    answer = http.post(f"{url}/tokenize", json={"model": model, **body})
    if answer.status_code != 200:
        raise QuantGateError(f"{url} refused to tokenize: {answer.status_code} {answer.text[:200]}")
    return list(answer.json()["tokens"])


def teacher_forced_nll(
    http: httpx.Client, url: str, model: str, texts: Sequence[list[int]]
) -> tuple[float, int]:
    """Summed negative log-likelihood of the texts' tokens (after each text's first) and how many were scored."""
    total, count = 0.0, 0
    for ids in texts:
        body = {"model": model, "prompt": ids, "max_tokens": 0, "echo": True, "logprobs": 0}
        answer = http.post(f"{url}/v1/completions", json=body)
        if answer.status_code != 200:
            raise QuantGateError(f"{url} refused a scoring request: {answer.status_code} {answer.text[:200]}")
        logprobs = answer.json()["choices"][0]["logprobs"]["token_logprobs"]
        scored = [value for value in logprobs[1:] if value is not None]
        total -= sum(scored)
        count += len(scored)
    if count == 0:
        raise QuantGateError("no tokens were scored: give longer held-out text")
    return total, count


def greedy_agreement(
    http: httpx.Client,
    base: tuple[str, str],
    quantized: tuple[str, str],
    prompts: Sequence[list[dict[str, Any]]],
    max_tokens: int,
) -> tuple[float, float]:
    """(share of reply tokens equal at the same position, share of replies identical), greedy."""
    equal = positions = identical = 0
    for messages in prompts:
        replies = [_greedy_tokens(http, url, model, messages, max_tokens) for url, model in (base, quantized)]
        reference, candidate = replies
        longest = max(len(reference), len(candidate))
        equal += sum(a == b for a, b in zip(reference, candidate, strict=False))
        positions += longest
        identical += reference == candidate
    if not prompts:
        return 1.0, 1.0
    return equal / max(positions, 1), identical / len(prompts)


def _greedy_tokens(
    http: httpx.Client, url: str, model: str, messages: list[dict[str, Any]], max_tokens: int
) -> list[str]:
    body = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "logprobs": True,
    }
    answer = http.post(f"{url}/v1/chat/completions", json=body)
    if answer.status_code != 200:
        raise QuantGateError(f"{url} refused a chat request: {answer.status_code} {answer.text[:200]}")
    content = answer.json()["choices"][0].get("logprobs") or {}
    return [entry["token"] for entry in content.get("content") or []]


def _model_card(url: str) -> dict[str, Any]:
    cards = httpx.get(f"{url}/v1/models", timeout=30).json()["data"]
    return dict(cards[0])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def served(model: str, name: str, serve_args: Sequence[str], timeout: float = 600.0) -> Iterator[str]:
    """A `switchyard serve` process on a free loopback port for the block; yields its base URL (no /v1)."""
    port = _free_port()
    command = [sys.executable, "-m", "switchyard.cli", "serve", model, "--port", str(port)]
    command += ["--served-model-name", name, *serve_args]
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ)
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                error = process.stderr.read().decode(errors="replace") if process.stderr else ""
                raise QuantGateError(f"`switchyard serve {model}` exited: {error.strip()[-600:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise QuantGateError(f"`switchyard serve {model}` did not become healthy in {timeout:.0f} s")
            time.sleep(0.3)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def format_result(result: GateResult) -> str:
    return "\n".join(
        [
            f"quantization {result.method} of {result.model_root}: {'PASS' if result.passed else 'FAIL'} "
            f"({result.reason})",
            f"  perplexity {result.perplexity_base:.4f} -> {result.perplexity_quantized:.4f} "
            f"({100 * result.perplexity_increase:+.2f}%, {result.scored_tokens} tokens)",
            f"  greedy tokens equal {100 * result.token_agreement:.1f}%, replies identical "
            f"{100 * result.identical_replies:.1f}%",
            f"  suite success {100 * result.success_base:.1f}% -> {100 * result.success_quantized:.1f}% "
            f"({result.cases} cases)",
        ]
    )
