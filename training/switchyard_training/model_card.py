"""The README.md of a bundled model: what it is, how it was made (with the command that rebuilds it), and how
far to trust it."""

from __future__ import annotations

from switchyard_training.data import PackedRows
from switchyard_training.induction_init import InductionInit
from switchyard_training.recipe import DefaultRecipe, ModelShape, TrainConfig
from switchyard_training.train_loop import TrainResult


def reproduce_command(recipe: DefaultRecipe, seed: int, minutes: float) -> str:
    """The `switchyard train-default` line that rebuilds these models (recipe fields the CLI can set)."""
    command = (
        f"switchyard train-default --seed {seed} --minutes {minutes:g} --corpus-size {recipe.corpus_size} "
        f"--main-steps {recipe.main.max_steps} --draft-steps {recipe.draft.max_steps}"
    )
    default = DefaultRecipe()
    changed = {c: w for c, w in recipe.corpus_weights.items() if default.corpus_weights.get(c) != w}
    if changed:
        command += " --mix " + ",".join(f"{c}={w:g}" for c, w in changed.items())
    if recipe.main.context_loss_weight != default.main.context_loss_weight:
        command += f" --context-loss-weight {recipe.main.context_loss_weight:g}"
    if recipe.word_starts != default.word_starts:
        command += f" --word-starts {recipe.word_starts}"
    if recipe.digits_per_token != default.digits_per_token:
        command += f" --digits-per-token {recipe.digits_per_token}"
    if recipe.group_size != default.group_size:
        command += f" --group-size {recipe.group_size}"
    if recipe.row_len != default.row_len:
        command += f" --row-len {recipe.row_len}"
    if recipe.main_locator_layers != default.main_locator_layers:
        layers = ",".join(str(layer) for layer in recipe.main_locator_layers) or "none"
        command += f" --locator-layers {layers}"
    if recipe.entity_count != default.entity_count:
        command += f" --entity-count {recipe.entity_count}"
    if recipe.real_entity_share != default.real_entity_share:
        command += f" --real-entity-share {recipe.real_entity_share}"
    if recipe.vocab_drill_min_count != default.vocab_drill_min_count:
        command += f" --vocab-drill-min-count {recipe.vocab_drill_min_count}"
    if recipe.drill_copy_starts != default.drill_copy_starts:
        command += " --drill-copy-starts" if recipe.drill_copy_starts else " --no-drill-copy-starts"
    if recipe.pointer_weight != default.pointer_weight:
        command += f" --pointer-weight {recipe.pointer_weight:g}"
    if not recipe.message_tool:
        command += " --no-message-tool"
    if recipe.grounded_forms != default.grounded_forms:
        forms = recipe.grounded_forms
        command += (
            f" --grounded-forms quote={forms.quote:g},value={forms.value:g},attribute={forms.attribute:g}"
        )
    return command


def model_card(name: str, role: str, params: int, shape: ModelShape, vocab_size: int, seed: int,
               recipe: DefaultRecipe, rows: PackedRows, result: TrainResult, config: TrainConfig,
               induction: InductionInit | None = None, command: str | None = None) -> str:  # fmt: skip
    """README.md of a bundled model: what it is, how it was made, and how far to trust it."""
    loss_terms = (
        f"assistant tokens at weight 1, prompt tokens at {config.context_loss_weight:g}"
        if config.context_loss_weight > 0
        else "assistant tokens only"
    )
    budget_note = " (stopped at the time budget)" if result.stopped_by_budget else ""
    init = "random"
    if induction is not None:
        context = "two tokens" if induction.bigram_dims > 0 else "one token"
        init = ("random, plus a copy circuit wired into layers 0-1 (previous-token heads and an induction head "
                f"matching {context} of context, held fixed in training, on 50x embeddings; spaced and bare forms "
                "of a token start alike; `switchyard_training.induction_init`)")  # fmt: skip
        if induction.locator_layers:
            layers = ", ".join(str(i) for i in induction.locator_layers)
            init += f"; locator heads (fixed copy output, learned attention) in layers {layers}"
            if result.final_pointer_loss is not None:
                init += (f", one head each also trained to attend where a copied span starts (weight "
                         f"{recipe.pointer_weight:g}, final {result.final_pointer_loss:.3f})")  # fmt: skip
    weights = recipe.corpus_weights
    total = sum(weights.values())
    mix = ", ".join(f"{category} {weight / total:.2f}" for category, weight in weights.items() if weight > 0)
    digits = recipe.digits_per_token
    numbers = "one token per digit" if digits == 1 else f"numbers in groups of {digits} digits"
    grouping = ""
    if recipe.group_size > 1:
        grouping = (f"; tool and grounded conversations in groups of {recipe.group_size} sharing their prompt, "
                    f"packed once: {rows.num_shared_tokens:,} tokens saved")  # fmt: skip
    grouping += f"; {recipe.entity_count} added entries a training name list"
    if recipe.real_entity_share:
        grouping += (f", {recipe.real_entity_share:.0%} of the people, cities, jobs, products and topics among "
                     f"them real-world ones (Faker {_faker_version()} tables)")  # fmt: skip
    drills = rows.num_examples + rows.num_dropped - recipe.corpus_size
    if drills > 0:
        grouping += (f"; plus {drills} copy drills for word pieces the corpus' replies use fewer than "
                     f"{recipe.vocab_drill_min_count} times")  # fmt: skip
        if not recipe.drill_copy_starts:
            grouping += ", their copy starts left out of the copy-start attention loss"
    return f"""---
license: apache-2.0
library_name: transformers
pipeline_tag: text-generation
tags: [switchyard, llama, tiny, synthetic-data]
---

# {name}

{role}

**These are tiny models trained on synthetic tasks.** They were trained from scratch on a CPU (wall time
below), on a corpus generated by Switchyard itself (greetings and a small fact table, tool calls, JSON
extraction, grounded answers with citations, ignoring injected instructions). They know almost nothing about
the world and fail outside those task formats. They exist so Switchyard can be served, tested and benchmarked
without downloading anything; point `--model` at any Hugging Face folder for real use. How far they go is
measured by `switchyard eval-default --card`, which adds its results to these cards: the main model's quality
gate on held-out conversations of the demo world's tools and its rates on tools never seen in training, each
with its 95% interval, and the draft's agreement with it.

## How it was made

Reproduce with `{command or f"switchyard train-default --seed {seed}"}`.

| | |
|---|---|
| architecture | LlamaForCausalLM, hidden {shape.hidden_size}, {shape.num_hidden_layers} layers, {shape.num_attention_heads} heads ({shape.num_key_value_heads} KV), MLP {shape.intermediate_size}, tied embeddings |
| parameters | {params / 1e6:.2f}M |
| initialisation | {init} |
| tokenizer | byte-level BPE, {vocab_size} tokens, {numbers}, ChatML template with Qwen2.5-style tool calls |
| seed | {seed} |
| corpus | {recipe.corpus_size} synthetic conversations ({rows.num_examples} packed into {rows.num_rows} rows of {config.row_len} tokens{grouping}) |
| corpus mix | {mix} (shares of conversations) |
| steps | {result.steps} of {result.planned_steps} planned{budget_note}, batch {config.batch_rows} rows |
| tokens seen | {result.tokens_seen:,} ({result.loss_tokens_seen:,} assistant tokens trained on) |
| final loss | {result.final_loss:.4f} (mean over the last steps, {loss_terms}) |
| wall time | {result.wall_time_s / 60:.1f} minutes |
| optimiser | AdamW, lr {config.lr}, warmup {config.warmup_steps} steps, cosine to {config.min_lr_ratio} x lr, weight decay {config.weight_decay} |
| precision | {"bf16 matrix products under autocast" if result.bf16_autocast else "float32"}, float32 weights and optimiser state |

## Chat format

ChatML (`<|im_start|>role ... <|im_end|>`). Tools go in the system turn as JSON schemas inside `<tools>`;
the model calls them as `<tool_call>\\n{{"name": ..., "arguments": {{...}}}}\\n</tool_call>` and reads results
wrapped in `<tool_response>`. The template in tokenizer_config.json renders all of this from OpenAI-style
messages.
"""


def _faker_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("faker")
    except PackageNotFoundError:
        return "?"
