"""`train_default`, what `switchyard train-default` runs: corpus -> tokenizer -> main model -> draft model.

It is deterministic given the seed (corpus, tokenizer, initialisation and data order all derive from it) and
resumable: each model's checkpoint holds weights, optimizer, scheduler, RNG states and the step (`train_loop`).
Both models are transformers' `LlamaForCausalLM`, trained on CPU on examples packed into fixed-length rows
(`data`); the wall-clock budget covers the whole run.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path

from tokenizers import Tokenizer
from tqdm.auto import tqdm

from switchyard.models.registry import BUNDLED_DIR, DRAFT_MODEL, MAIN_MODEL
from switchyard_training.chat_format import ENDOFTEXT, IM_END, SPECIAL_TOKENS, TAG_TOKENS
from switchyard_training.checkpoint import CHECKPOINT_FILE, DONE_FILE, check_rows_fingerprint, load_checkpoint
from switchyard_training.corpus import CorpusConfig, generate_corpus
from switchyard_training.data import PackedRows, pack_examples, tokenize_examples
from switchyard_training.entities import training_entities
from switchyard_training.export import write_model_folder
from switchyard_training.induction_init import InductionInit, SpaceVariants
from switchyard_training.model_builder import build_guarded_model, count_parameters, padded_vocab_size
from switchyard_training.model_card import model_card, reproduce_command
from switchyard_training.pointer_loss import PointerSupervision
from switchyard_training.recipe import DefaultRecipe, ModelShape
from switchyard_training.tokenizer_training import (
    corpus_texts,
    load_tokenizer,
    save_tokenizer,
    train_tokenizer,
)
from switchyard_training.train_loop import TrainResult, train_model
from switchyard_training.vocab_drill import reply_counts, starved_pieces, vocabulary_drills


def prepare_data(
    recipe: DefaultRecipe, seed: int, checkpoint_dir: Path, resume: bool
) -> tuple[Tokenizer, PackedRows]:
    """Corpus, tokenizer (reused from the checkpoint dir on resume, so ids never shift) and packed rows."""
    examples = generate_corpus(
        CorpusConfig(
            seed=seed,
            size=recipe.corpus_size,
            entities=training_entities(recipe.entity_count, recipe.real_entity_share),
            weights=dict(recipe.corpus_weights),
            group_size=recipe.group_size,
            grounded_forms=recipe.grounded_forms,
            message_tool=recipe.message_tool,
            tool_vocab=recipe.tool_vocab,
        )
    )
    tokenizer_dir = checkpoint_dir / "tokenizer"
    if resume and (tokenizer_dir / "tokenizer.json").is_file():
        tokenizer = load_tokenizer(tokenizer_dir)
    else:
        tokenizer = train_tokenizer(
            corpus_texts(examples[: recipe.tokenizer_examples]),
            recipe.vocab_size,
            word_starts=recipe.word_starts,
            digits_per_token=recipe.digits_per_token,
        )
        save_tokenizer(tokenizer, tokenizer_dir)
    tokenized = tokenize_examples(tokenizer, examples)
    if recipe.vocab_drill_min_count > 0:
        plan = starved_pieces(tokenizer, reply_counts(tokenized, tokenizer.get_vocab_size()),
                              recipe.vocab_drill_min_count)  # fmt: skip
        drills = tokenize_examples(tokenizer, vocabulary_drills(tokenizer, plan, seed))
        if not recipe.drill_copy_starts:
            drills = [replace(d, copy_starts=False) for d in drills]
        tokenized += drills
    rows = pack_examples(tokenized, recipe.row_len, pad_id=tokenizer.token_to_id(ENDOFTEXT))
    return tokenizer, rows


def pointer_supervision(
    recipe: DefaultRecipe,
    shape: ModelShape,
    induction: InductionInit | None,
    vocab_size: int,
    variants: SpaceVariants,
    tokenizer: Tokenizer,
) -> PointerSupervision | None:
    """The copy-start attention loss for a model with locator heads, on the first query head of the locator
    group (the last kv head's), or None."""
    if recipe.pointer_weight <= 0 or induction is None or not induction.locator_layers:
        return None
    group = shape.num_attention_heads // shape.num_key_value_heads
    # chat control, tags, and punctuation: a copied value starts with a letter or digit, and JSON quotes or a
    # sentence's full stop "found" in the prompt are boilerplate that would take the head's attention
    control = {tokenizer.token_to_id(t) for t in (*SPECIAL_TOKENS, *TAG_TOKENS)}
    symbols = {
        i for i in range(tokenizer.get_vocab_size()) if not any(c.isalnum() for c in tokenizer.decode([i]))
    }
    return PointerSupervision.for_vocab(induction.locator_layers, (shape.num_key_value_heads - 1) * group,
                                        recipe.pointer_weight, vocab_size, variants.pairs,
                                        frozenset(control | symbols))  # fmt: skip


def train_default(
    output_dir: str | Path = BUNDLED_DIR,
    checkpoint_dir: str | Path = Path("checkpoints/train-default"),
    time_budget_minutes: float = 90.0,
    seed: int = 0,
    resume: bool = False,
    recipe: DefaultRecipe | None = None,
    progress: bool = True,
    stop: threading.Event | None = None,
) -> dict[str, TrainResult]:
    """Train and write both bundled models to `output_dir/<name>`; returns each model's TrainResult.

    The budget covers everything: corpus, tokenizer, both models and export. A model whose checkpoint dir
    holds done.json is skipped on resume (its folder was already written). `stop` (set by a SIGTERM) ends the
    run at the next step boundary with a checkpoint (`TrainingPreempted`).
    """
    recipe = recipe or DefaultRecipe()
    started = time.monotonic()
    deadline = started + time_budget_minutes * 60
    output_dir, checkpoint_dir = Path(output_dir), Path(checkpoint_dir)
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    tokenizer, rows = prepare_data(recipe, seed, checkpoint_dir, resume)
    check_rows_fingerprint(checkpoint_dir, rows, resume)
    if progress:
        tqdm.write(
            f"corpus: {recipe.corpus_size} examples -> {rows.num_rows} rows of {recipe.row_len} tokens "
            f"({rows.num_dropped} too long, dropped); vocab {tokenizer.get_vocab_size()}"
        )
    vocab = padded_vocab_size(tokenizer)
    eos, pad = tokenizer.token_to_id(IM_END), tokenizer.token_to_id(ENDOFTEXT)
    export_reserve_s = 20.0
    plans = [
        (MAIN_MODEL, "The main bundled model of Switchyard.", recipe.main_shape, recipe.main, recipe.main_budget_share),
        (DRAFT_MODEL, f"The draft model for speculative decoding with `{MAIN_MODEL}` (same tokenizer).",
         recipe.draft_shape, recipe.draft, 1.0),
    ]  # fmt: skip
    results: dict[str, TrainResult] = {}
    for name, role, shape, base_config, share in plans:
        model_ckpt = checkpoint_dir / name
        done = model_ckpt / DONE_FILE
        if resume and done.is_file() and (output_dir / name / "config.json").is_file():
            results[name] = TrainResult(**json.loads(done.read_text()))
            continue
        budget = max(0.0, (deadline - time.monotonic() - export_reserve_s) * share)
        config = replace(base_config, time_budget_s=budget, row_len=recipe.row_len, seed=seed)
        previous = load_checkpoint(model_ckpt / CHECKPOINT_FILE) if resume else None
        if previous is not None:
            # A resumed model keeps the budget and plan it started with; its elapsed time is in the checkpoint.
            config = replace(config, **{k: previous["config"][k] for k in ("time_budget_s", "max_steps")})
        variants = SpaceVariants.from_vocab(tokenizer.get_vocab())
        induction = recipe.induction
        if induction is not None and name == MAIN_MODEL:
            induction = replace(induction, locator_layers=recipe.main_locator_layers)
        model, guard = build_guarded_model(shape, vocab, eos, pad, seed, induction, variants)
        pointer = pointer_supervision(recipe, shape, induction, vocab, variants, tokenizer)
        result = train_model(model, rows, config, model_ckpt, resume=resume, desc=name, progress=progress,
                             guard=guard, pointer=pointer, stop=stop)  # fmt: skip
        card = model_card(name, role, count_parameters(model), shape, tokenizer.get_vocab_size(), seed, recipe,
                          rows, result, config, induction, reproduce_command(recipe, seed, time_budget_minutes))  # fmt: skip
        write_model_folder(model, tokenizer, output_dir / name, card, shape.max_position_embeddings)
        done.write_text(json.dumps(asdict(result)))
        results[name] = result
    return results
