"""Where a trained bundled model looks when it starts writing a copied value (issue 4 diagnosis).

For held-out conversations, teacher-forced up to the first token of a value the reply copies from the prompt
(a tool call's city, a JSON extraction's string values), it reports how often the model predicts that first
token, and each head's attention mass on the value's span in the prompt. A head that finds values puts most of
its attention there; the locator heads of the recipe (layers 3-4, last kv head's query heads) are meant to.

Usage: python training/probes/value_attention.py --model <folder of switchyard-chat> [--cases 40]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer

from switchyard_training.chat_format import render_chat
from switchyard_training.corpus import generate_corpus, heldout_config
from switchyard_training.example import Category, Example


@dataclass(frozen=True)
class ValueSite:
    """A copied value: the text up to its start in the reply, the value, and where it sits in the prompt."""

    prefix: str
    value: str
    source_start: int
    label: str


def tool_city_sites(example: Example, text: str) -> Iterator[ValueSite]:
    marker = '"arguments": {"city": "'
    at = text.find(marker)
    while at >= 0:
        start = at + len(marker)
        city = text[start : text.index('"', start)]
        source = text.rfind(city, 0, at)
        if source >= 0:
            yield ValueSite(text[:start], city, source, "tool city")
        at = text.find(marker, start)


def json_value_sites(example: Example, text: str) -> Iterator[ValueSite]:
    reply = example.messages[-1]["content"]
    reply_at = text.rfind(reply)
    for field, value in json.loads(reply).items():
        if not isinstance(value, str):
            continue
        start = text.find(f'"{field}": "', reply_at) + len(field) + 5
        source = text.rfind(value, 0, reply_at)
        if source >= 0:
            yield ValueSite(text[:start], value, source, f"json {field}")


SITES = {
    Category.TOOL_CALL: tool_city_sites,
    Category.TOOL_PARALLEL: tool_city_sites,
    Category.JSON_EXTRACTION: json_value_sites,
}


def measure(model, tokenizer: Tokenizer, sites: list[ValueSite]) -> tuple[float, torch.Tensor]:  # type: ignore[no-untyped-def]
    """(first-token accuracy, [layers, heads] mean attention mass on the value's prompt span)."""
    config = model.config
    mass = torch.zeros(config.num_hidden_layers, config.num_attention_heads)
    correct = 0
    for site in sites:
        encoding = tokenizer.encode(site.prefix + site.value, add_special_tokens=False)
        first = next(i for i, (s, _) in enumerate(encoding.offsets) if s >= len(site.prefix))
        # Byte-level BPE attaches the preceding space to a word's first token, hence the - 1.
        span = [
            i
            for i, (s, e) in enumerate(encoding.offsets)
            if s >= site.source_start - 1 and e <= site.source_start + len(site.value)
        ]
        with torch.no_grad():
            out = model(torch.tensor([encoding.ids[:first]]), output_attentions=True)
        correct += int(out.logits[0, -1].argmax().item() == encoding.ids[first])
        for layer, attention in enumerate(out.attentions):
            mass[layer] += attention[0, :, first - 1, span].sum(-1)
    return correct / max(len(sites), 1), mass / max(len(sites), 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, required=True, help="folder of a trained main model")
    parser.add_argument("--cases", type=int, default=40, help="values measured per kind")
    parser.add_argument("--seed", type=int, default=0, help="training seed the held-out corpus derives from")
    args = parser.parse_args(argv)
    tokenizer = Tokenizer.from_file(str(args.model / "tokenizer.json"))
    model = transformers.AutoModelForCausalLM.from_pretrained(
        args.model, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    kinds: dict[str, list[ValueSite]] = {"tool city": [], "json": []}
    for example in generate_corpus(heldout_config(size=3000, seed=args.seed)):
        finder = SITES.get(example.category)
        if finder is None:
            continue
        text = render_chat(example.messages, example.tools).text
        for site in finder(example, text):
            kind = kinds["tool city" if site.label == "tool city" else "json"]
            if len(kind) < args.cases:
                kind.append(site)
        if all(len(sites) >= args.cases for sites in kinds.values()):
            break
    for name, sites in kinds.items():
        accuracy, mass = measure(model, tokenizer, sites)
        print(
            f"{name}: {len(sites)} values, first token predicted {accuracy:.2f}; attention mass on the value:"
        )
        for layer, row in enumerate(mass.tolist()):
            print(f"  layer {layer}: " + " ".join(f"{v:.2f}" for v in row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
