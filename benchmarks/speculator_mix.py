"""Which proposal rule makes the most tokens per verification: the speculator, prompt lookup, or a mix.

Replays greedy decoding offline. The main model's greedy replies to the bundled held-out tasks are generated
once; its hidden states over prompt + reply are computed once (transformers, teacher-forced: the same states
the engine hands the speculator); then each rule is simulated cycle by cycle as the engine runs it: at the
newest token, propose k tokens, accept the run that matches the reply, emit it plus one, repeat. The result
is tokens per verification for each rule on the same replies, which the engine's speedup follows (a
verification costs about the same whatever proposed its drafts). No timing: wall-clock numbers come from
`benchmarks/spec_decode.py`.

Usage: python benchmarks/speculator_mix.py [--speculator switchyard-chat-speculator] [--requests 64] [--k 4]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from spec_decode import task_prompts

from switchyard import LLM, SamplingParams
from switchyard.engine.spec.ngram import NgramProposer
from switchyard.models.registry import MAIN_MODEL, SPECULATOR_MODEL, resolve_model
from switchyard.models.speculator import load_speculator
from switchyard_training.train_speculator import load_target


@dataclass(frozen=True)
class Candidates:
    """What each proposer offers after one reply token."""

    guesses: list[int]
    confidence: float
    """The speculator's probability of its first guess."""
    lookup: list[int]
    truth: list[int]
    """The reply's next tokens, for the hindsight bound only."""


def run_length(guess: list[int], truth: list[int]) -> int:
    run = 0
    while run < min(len(guess), len(truth)) and guess[run] == truth[run]:
        run += 1
    return run


Rule = Callable[[Candidates], list[int]]


def candidates(
    model: str, speculator_name: str, requests: int, k: int
) -> list[tuple[list[int], list[Candidates]]]:
    llm = LLM(model=model, dtype="bfloat16")
    prompts = task_prompts(llm, requests)
    params = SamplingParams(temperature=0, max_tokens=128)
    replies = [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
    target = load_target(resolve_model(model), torch.bfloat16)
    speculator = load_speculator(resolve_model(speculator_name), torch.float32)
    lookup = NgramProposer(2, 4)
    out = []
    for prompt, reply in zip(prompts, replies, strict=True):
        with torch.no_grad():
            hidden = target.model(input_ids=torch.tensor([prompt + reply])).last_hidden_state[0].float()
        rows = []
        for j, token in enumerate(reply):
            state, current, guesses = hidden[len(prompt) - 1 + j][None], torch.tensor([token]), []
            confidence = 0.0
            with torch.no_grad():
                for step in range(min(k, speculator.config.num_steps)):
                    state, logits = speculator.step(step, state, current)
                    probability, current = logits.softmax(-1).max(-1)
                    confidence = confidence or float(probability)
                    guesses.append(int(current))
            found = lookup.propose(prompt + reply[: j + 1], k)[0]
            rows.append(Candidates(guesses, confidence, found, reply[j + 1 : j + 1 + k]))
        out.append((reply, rows))
    return out


def tokens_per_verification(data: list[tuple[list[int], list[Candidates]]], rule: Rule) -> float:
    tokens = cycles = 0
    for reply, rows in data:
        j = 0
        while j < len(reply) - 1:
            truth = reply[j + 1 :]
            step = min(run_length(rule(rows[j]), truth) + 1, len(truth))
            j, tokens, cycles = j + step, tokens + step, cycles + 1
    return tokens / max(cycles, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=MAIN_MODEL)
    parser.add_argument("--speculator", default=SPECULATOR_MODEL)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    data = candidates(args.model, args.speculator, args.requests, args.k)
    rules: dict[str, Rule] = {
        "speculator": lambda c: c.guesses,
        "lookup": lambda c: c.lookup,
        "lookup, else speculator": lambda c: c.lookup or c.guesses,
    }
    for threshold in (0.3, 0.5, 0.6, 0.7, 0.9):
        rules[f"speculator, lookup below {threshold}"] = (
            lambda t: lambda c: c.guesses if c.confidence >= t or not c.lookup else c.lookup
        )(threshold)
    results = {name: tokens_per_verification(data, rule) for name, rule in rules.items()}
    # The better of the two proposals at every cycle, known in hindsight: what no rule can beat.
    results["best of both (hindsight)"] = tokens_per_verification(
        data, lambda c: max((c.guesses, c.lookup), key=lambda g: run_length(g, c.truth))
    )
    for name, value in results.items():
        print(f"{name:40s} {value:.3f}")
    if args.json:
        args.json.write_text(
            json.dumps({"k": args.k, "requests": args.requests, "tokens_per_verification": results}, indent=1)
        )


if __name__ == "__main__":
    main()
