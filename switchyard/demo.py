"""The offline generation demo `make serve` runs until the bundled model is trained.

It copies the bundled model's tokenizer (its files ship inside the package), saves a small
random-initialised Llama beside it, and drives the real engine through `LLM.chat`: batching, the paged KV cache
and sampling all run, but an untrained model's words are noise. It says so, and says how to get a real model.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer

from switchyard.engine.sampling_params import SamplingParams
from switchyard.errors import ModelLoadError
from switchyard.llm import LLM
from switchyard.models.registry import BUNDLED_MODELS, MAIN_MODEL

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
"""The bundled model's tokenizer and chat template, which the demo model reuses."""

PROMPTS = (
    "Hello! What can you do?",
    "What is the weather in Paris?",
    "Convert 10 miles to kilometers.",
    "Extract the name and city from: Ada lives in London.",
)


def build_demo_model(folder: Path, seed: int = 0, tokenizer_from: Path = BUNDLED_MODELS[MAIN_MODEL]) -> Path:
    """The bundled model's tokenizer files and a random 2-layer Llama that uses them, saved in `folder`."""
    missing = [name for name in TOKENIZER_FILES if not (tokenizer_from / name).is_file()]
    if missing:
        raise ModelLoadError(
            f"the demo needs the bundled tokenizer, but {tokenizer_from} lacks {', '.join(missing)}"
        )
    for name in TOKENIZER_FILES:
        shutil.copyfile(tokenizer_from / name, folder / name)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    config = transformers.LlamaConfig(
        vocab_size=-(-tokenizer.get_vocab_size() // 64) * 64,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.token_to_id("<|im_end|>"),
    )
    torch.manual_seed(seed)
    transformers.LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=True)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="switchyard demo",
        description="Run the offline generation demo on a small random-initialised model (no download).",
    )
    parser.add_argument("--max-tokens", type=int, default=24, help="tokens to generate per prompt")
    args = parser.parse_args(argv)
    print("Switchyard offline demo: the bundled model is not trained yet, so this runs the real engine on a")
    print("random-initialised model. Its replies are noise; the machinery is real.\n")
    with tempfile.TemporaryDirectory(prefix="switchyard-demo-") as tmp:
        try:
            folder = build_demo_model(Path(tmp))
        except ModelLoadError as error:
            print(f"switchyard demo: error: {error}", file=sys.stderr)
            return 2
        llm = LLM(str(folder), dtype="float32", max_model_len=2048, kv_cache_memory=64 << 20)
        params = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=args.max_tokens)
        start = time.perf_counter()
        outputs = llm.chat([[{"role": "user", "content": p}] for p in PROMPTS], params, use_tqdm=False)
        elapsed = time.perf_counter() - start
        tokens = 0
        for prompt, output in zip(PROMPTS, outputs, strict=True):
            completion = output.outputs[0]
            tokens += len(completion.token_ids)
            print(f"user:      {prompt}\nassistant: {completion.text!r}  ({completion.finish_reason})\n")
        print(
            f"{len(PROMPTS)} requests, {tokens} tokens in {elapsed:.2f} s ({tokens / elapsed:.0f} tokens/s)"
        )
    print("\nNext: `switchyard train-default` trains the bundled models (about 90 minutes on 2 cores;")
    print("it comes with the training package: `pip install -e ./training` in a checkout), then")
    print("`make serve` starts the OpenAI-compatible server on them. Any Hugging Face folder of a Llama,")
    print("Qwen2, Qwen3 or Mistral model works now: `switchyard serve PATH`.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
