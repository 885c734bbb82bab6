"""The recipe of the bundled models: their shapes, each model's optimisation, and everything else
`train_default` fixes besides the seed and the budget (`DefaultRecipe`). Changing a default here changes what
`switchyard train-default` builds; each field's docstring records the run that chose it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import transformers

from switchyard_training.corpus import DEFAULT_WEIGHTS
from switchyard_training.example import Category
from switchyard_training.induction_init import InductionInit
from switchyard_training.tasks.context import GroundedForms
from switchyard_training.tasks.tool_vocab import WIDE_TRAIN_TOOL_VOCAB, ToolVocab
from switchyard_training.tokenizer_training import WordStarts


@dataclass(frozen=True)
class ModelShape:
    """The Llama architecture of one bundled model (vocab size comes from the trained tokenizer)."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0
    """The wired induction head (`induction_init`) wants a high theta (5e5) for more slow RoPE pairs."""

    def llama_config(self, vocab_size: int, eos_token_id: int, pad_token_id: int) -> transformers.LlamaConfig:
        return transformers.LlamaConfig(
            vocab_size=vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            max_position_embeddings=self.max_position_embeddings,
            rope_theta=self.rope_theta,
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
            bos_token_id=None,
            eos_token_id=eos_token_id,
            pad_token_id=pad_token_id,
            attn_implementation="sdpa",
        )


MAIN_SHAPE = ModelShape(
    hidden_size=256,
    intermediate_size=1024,
    num_hidden_layers=6,
    num_attention_heads=4,
    num_key_value_heads=2,
    rope_theta=5e5,
)
"""~6M parameters at a 4k vocab. Small on purpose: copying and passage lookup need few layers but many
optimizer steps, and on two shared CPU cores this shape trains at about 1.6x the tokens/s of 384 x 8."""
DRAFT_SHAPE = ModelShape(
    hidden_size=192,
    intermediate_size=512,
    num_hidden_layers=4,
    num_attention_heads=3,
    num_key_value_heads=1,
    rope_theta=5e5,
)
"""~3M parameters: several times cheaper per token than the main model, the point of a draft."""


RECIPE_WEIGHTS: dict[Category, float] = {
    **DEFAULT_WEIGHTS,
    Category.TOOL_CALL: 0.12,
    Category.TOOL_PARALLEL: 0.05,
    Category.NO_TOOL: 0.05,
    Category.OPEN_TOOL_CALL: 0.0,
    Category.OPEN_TOOL_PARALLEL: 0.0,
    Category.OPEN_NO_TOOL: 0.0,
    Category.JSON_EXTRACTION: 0.31,
    Category.GROUNDED: 0.28,
    Category.INJECTION: 0.07,
    Category.COPY: 0.07,
}
"""The recipe's corpus mix: `corpus.DEFAULT_WEIGHTS` with 0.12 of the example shares moved from tool calls,
no-tool turns, injections and copy drills to extraction and grounded answers (runs 30-32: JSON 0.832 -> 0.918,
grounded 0.716 -> 0.838, training/RESULTS.md). The generated-tool categories (`tasks.open_tools`) are at 0, so
this is run 32's recipe, the shipped models': runs 33 and 34 moved 0.13-0.14 of the demo tools' 0.22 to them
(run 34: `--mix 'tool_call=0.05,tool_parallel=0.02,no_tool=0.02,open_tool_call=0.075,open_tool_parallel=0.025,
open_no_tool=0.04'`) and learned unseen tools only in part (right tool 0.16 in-process, 0.31 served) while the
demo gate's JSON extraction fell under its target (0.873)."""


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation of one model."""

    max_steps: int
    batch_rows: int = 6
    """Small batches, more steps: early in training the loss falls per token faster with more updates."""
    row_len: int = 768
    """Every corpus example fits in 768 tokens. With per-example attention a longer row costs no more per
    token; shared-prefix groups (`DefaultRecipe.group_size`) fit in fewer pieces in longer rows."""
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 30
    weight_decay: float = 0.1
    beta2: float = 0.95
    grad_clip: float = 1.0
    bf16_autocast: bool | None = None
    """bf16 matmuls under autocast (weights and optimizer stay float32); None: where this CPU computes bf16
    natively (`models.cpu_bf16`). On the reference 2-core AVX512-BF16 machine it trains the main shape 1.6x and
    the draft 1.45x faster than float32; on a 2-core AVX2 machine a main-model step took 71 s under it against
    4.8 s in float32 (`training/probes/train_step.py --precision fp32`)."""
    packed_attention: bool = True
    """Attend within each packed example only, one causal SDPA per example (`packed_attention`), instead of
    the full row under a block-diagonal mask: same results, 1.07x the main model's steps per second on the
    corpus' rows (`training/probes/train_step.py`: 1.00 s against 1.08 s a step, same run)."""
    time_budget_s: float | None = None
    """Wall-clock cap for this model, counted across resumes."""
    calibration_steps: int = 20
    """Steps timed before deciding whether max_steps fits the budget. The first few steps of a process are
    slow (allocator, kernels warming up) and are left out of the timing, or the plan comes out far short."""
    calibration_skip: int = 3
    replan_every: int = 100
    """After calibration the plan is checked again every this many steps, against the pace of those steps, and
    moved to what the rest of the budget holds (never past `max_steps`): on a machine that slows down mid-run
    (shared cores, a busy neighbour) the cosine still ends at the budget instead of being cut off part way
    down, and when the slowdown passes the steps it cost are planned back instead of the budget ending early."""
    replan_tolerance: float = 0.01
    """A re-check moves the plan only when it is off by more than this fraction, so the cosine does not
    jitter with every window's pace."""
    context_loss_weight: float = 0.0
    """Weight of the loss on prompt tokens (system, user, tool results) next to the assistant tokens' 1.0.
    0 trains on replies only. Prompts are full of copy events (tool results repeat the call's arguments,
    passages repeat names), so a small weight gives copying far more gradient per step; it costs the LM head and
    softmax on every token (`chunked_loss` keeps that cheap). The recipe uses 0.1 for both models."""
    checkpoint_every: int = 50
    seed: int = 0


@dataclass(frozen=True)
class DefaultRecipe:
    """Everything `train_default` fixes besides the seed and the budget."""

    corpus_size: int = 200_000
    """More than the main model's steps reach (110-140k conversations in 90 minutes), so none is seen twice."""
    tokenizer_examples: int = 12_000
    """The tokenizer learns its merges from this many conversations; more changes the merges very little."""
    vocab_size: int = 4096
    """The corpus' invented names would fill 8k entries with merges of one-off words; at 4k, names (held-out
    ones too) split into pieces every name shares, and copying a name is copying familiar tokens."""
    word_starts: WordStarts = WordStarts.SPACE_LAST
    """How the tokenizer merges a word's leading space (`tokenizer_training.WordStarts`): space last, so a value
    copied from a sentence into JSON splits into the same pieces (the mirror left 26 of 300 held-out JSON
    conversations with a value that split differently)."""
    digits_per_token: int = 1
    """Digits per number token (`train_tokenizer`): 1 splits every digit; 2 or 3 cut fixed groups (2 halved
    exact arguments in a 30-minute ablation, see the tokenizer's docstring)."""
    corpus_weights: dict[Category, float] = field(default_factory=lambda: dict(RECIPE_WEIGHTS))
    """Relative shares of the categories, by example count (`RECIPE_WEIGHTS`)."""
    grounded_forms: GroundedForms = field(default_factory=lambda: GroundedForms(quote=0.85, value=0.15))
    """How answerable grounded questions are answered (`tasks.context.GroundedForms`): quotes and value-first replies,
    none citing first. Run 27 dropped the cite-first "According to [k]" form (run 26: 0.15), whose replies
    opened with something other than a company name 44 times in 150; run 28 with 11 (training/RESULTS.md)."""
    tool_vocab: ToolVocab = WIDE_TRAIN_TOOL_VOCAB
    """What the generated tools are made of, when the mix has any (`tasks.tool_vocab`): invented domains, objects
    and actions too many to memorise, so the model copies a tool's name off the offered list (run 33, on the
    small `TRAIN_TOOL_VOCAB`, wrote no held-out name at all; run 34, on this one, 0.16 of them)."""
    message_tool: bool = True
    """Offer `send_message` among the tools (the agent demo's acting tool, which it asks approval for); runs up
    to 27 had only the reading tools, and False reproduces their corpora exactly."""
    group_size: int = 4
    """Tool and grounded conversations come in groups of this many sharing their prompt (`sessions`), packed
    with the shared part once (`data.pack_examples`): 1.37-1.43x the conversations per second of lone ones
    (`training/probes/train_step.py`), and on the 1200-conversation gate JSON 0.36 -> 0.56, grounded 0.20 -> 0.37
    (training/RESULTS.md, run 6)."""
    row_len: int = 1152
    """Rows long enough for a group of tool conversations (prefix ~260 tokens, ~140 per member); 4 rows a step
    keep the 4608 tokens per step the recipe was tuned with."""
    main_shape: ModelShape = MAIN_SHAPE
    draft_shape: ModelShape = DRAFT_SHAPE
    # Step caps above what fits: the time budget plans both models down to what the measured pace allows (on
    # 2 cores, 4608-token steps with the context loss: main ~1.0-1.1 s, ~4350 steps in its 80 minutes; draft
    # ~0.75 s, ~550).
    # Copying forms late at low learning rates, hence 3e-3. Prompt tokens train at a tenth of the replies'
    # weight: run 7 against run 6 on the 1200-conversation gate, with 18% fewer steps, tool selection
    # 0.894 -> 0.959, arguments 0.718 -> 0.850, JSON 0.564 -> 0.645, grounded 0.369 -> 0.247 (RESULTS.md).
    main: TrainConfig = TrainConfig(
        max_steps=7000, batch_rows=4, lr=3e-3, warmup_steps=50, context_loss_weight=0.1
    )
    draft: TrainConfig = TrainConfig(
        max_steps=2800, batch_rows=4, lr=3e-3, warmup_steps=50, context_loss_weight=0.1
    )
    main_budget_share: float = 0.90
    """Of the training time (the budget less corpus and tokenizer work): the rest goes to the draft, which
    reached 0.86 greedy agreement with 15% of it and 0.90 with 10%; the gate grades only the main model."""
    induction: InductionInit | None = field(default_factory=InductionInit)
    """Wire a protected copy circuit into both models at init (see `switchyard_training.induction_init`): on the
    real corpus it is what makes tool arguments, extraction and citations copy from the prompt in the steps this
    budget buys (measured at step 300: teacher-forced accuracy on copyable reply tokens of held-out examples 0.67,
    loss 1.08; the same circuit guarded but at the 0.02 embedding scale: 0.03 and 1.80). None trains from a plain
    random init."""
    main_locator_layers: tuple[int, ...] = (3, 4)
    """The main model's locator heads (`InductionInit.locator_layers`): copy-valued heads whose attention is
    learned, so finding where a value starts in the prompt is the only thing left to learn. The draft has one kv
    head, already the wired one, and gets none. Measured (copy probe, 400 steps): loss 0.93 against 0.96 without,
    copied-span starts 0.59 against 0.54; a small gain at that horizon."""
    entity_count: int = 6000
    """Invented entries added to each of the training corpus' name lists (people, cities; products, jobs and
    the rest get a fraction; `entities.widen_for_training`). Companies have their own, larger count: widening
    them from 810 to 24k lifted grounded answers from 0.487 to 0.583 (run 24); the other lists cost JSON about
    0.07 between training and held-out names on run 24 (`training/probes/entity_gap.py`). 6000, not run 24's 1500,
    since run 25: the grounded reply opened with the asked company 128 times in 150 instead of 103, p(another
    company) 0.05 instead of 0.23 (training/RESULTS.md)."""
    real_entity_share: float = 0.5
    """Share of the added people, cities, jobs, products and document topics that are real-world entries (from
    Faker's tables, none sharing a word with the held-out lists) instead of invented ones
    (`entities.widen_for_training`). Run 25's lists were ~99% invented; it copied held-out real values into JSON
    at 0.71 against 0.93 for training ones, writing invented-looking pieces for real words, and searched
    documents for held-out topics ("conference travel") with runaway queries."""
    vocab_drill_min_count: int = 0
    """Word pieces of the trained tokenizer that are reply tokens fewer times than this in the corpus get copy
    drills until they are (`vocab_drill`): a piece never trained on cannot be written, even copied (run 20
    broke every held-out "... Analytics" name at "tics"). 0 adds none, the recipe: run 21 (24, 47k drills)
    lifted tool arguments to 0.901 and evened the company suffixes out, but grounded fell to 0.280, its replies
    opening less often with the asked company (training/RESULTS.md)."""
    drill_copy_starts: bool = True
    """Whether the drills' copy starts teach the locator heads too (`pointer_loss`). A drill's copy start is an
    easy lookup (one echoed line), yet drill rows hold 3x the supervised queries of corpus rows: at run 21's
    dose about 8 a step next to the corpus' ~68, of which only ~10 are grounded (a 4000-conversation sample with
    run 21's tokenizer). Off keeps the heads' supervision on the corpus' lookups while the drills still train
    the pieces as outputs."""
    pointer_weight: float = 0.1
    """Weight of the copy-start attention loss (`pointer_loss`) on the first query head of each locator layer,
    next to the language-model loss's 1.0; 0 leaves the locators to the language-model loss alone. Run 16 against
    run 15 on the 1200-conversation gate: grounded 0.343 -> 0.417, JSON 0.559 -> 0.645, arguments 0.758 ->
    0.857, and a grounded reply's first token names the asked company 226 of 300 times, not 158 (RESULTS.md)."""


def with_row_len(recipe: DefaultRecipe, row_len: int) -> DefaultRecipe:
    """The recipe with rows of `row_len` tokens and as many rows per step as keep its tokens per step."""
    step_tokens = recipe.main.batch_rows * recipe.row_len
    if row_len <= 0 or step_tokens % row_len:
        raise ValueError(f"row length must divide the recipe's {step_tokens} tokens per step, got {row_len}")
    rows = step_tokens // row_len
    return replace(recipe, row_len=row_len, main=replace(recipe.main, batch_rows=rows),
                   draft=replace(recipe.draft, batch_rows=rows))  # fmt: skip
