from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import transformers
from tokenizers import Tokenizer

from switchyard.models import load_model
from switchyard.models.attention import AttentionMetadata
from switchyard.models.registry import DRAFT_MODEL, MAIN_MODEL
from switchyard_training.data import pack_examples, tokenize_examples
from switchyard_training.example import Example
from switchyard_training.model_builder import build_model, count_parameters
from switchyard_training.pipeline import train_default
from switchyard_training.recipe import DRAFT_SHAPE, MAIN_SHAPE, TrainConfig
from switchyard_training.tokenizer_training import WordStarts
from switchyard_training.train import build_parser, main
from switchyard_training.train_loop import TrainResult, WarmupCosine, assistant_loss, train_model
from tests.training.factory import TINY_SHAPE, tiny_recipe

FILES = ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
         "README.md")  # fmt: skip


@pytest.fixture(scope="module")
def rows(bundled_tokenizer: Tokenizer, bundled_corpus: list[Example]):
    return pack_examples(tokenize_examples(bundled_tokenizer, bundled_corpus[:120]), row_len=768, pad_id=0)


def test_default_shapes_fit_the_parameter_limits() -> None:
    assert count_parameters(build_model(MAIN_SHAPE, 8192, 2, 0, 0)) <= 30_000_000
    assert count_parameters(build_model(DRAFT_SHAPE, 8192, 2, 0, 0)) <= 4_000_000


def test_warmup_cosine() -> None:
    schedule = WarmupCosine(warmup=10, total=110, min_ratio=0.1)
    assert schedule(0) == pytest.approx(0.1) and schedule(9) == pytest.approx(1.0)
    assert schedule(60) == pytest.approx(0.55)
    assert schedule(110) == pytest.approx(0.1) and schedule(500) == pytest.approx(0.1)


def test_assistant_loss_equals_transformers_loss(rows) -> None:
    model = build_model(TINY_SHAPE, 1280, 2, 0, 0)
    index = torch.arange(2)
    ours = assistant_loss(model, rows.input_ids[index], rows.position_ids[index], rows.labels[index])
    theirs = model(input_ids=rows.input_ids[index], position_ids=rows.position_ids[index],
                   labels=rows.labels[index], use_cache=False).loss  # fmt: skip
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-5)


def test_context_loss_weight_adds_prompt_tokens_but_never_crosses_examples(rows) -> None:
    model = build_model(TINY_SHAPE, 1280, 2, 0, 0)
    index = torch.arange(2)
    args = (model, rows.input_ids[index], rows.position_ids[index], rows.labels[index])
    base = assistant_loss(*args)
    assert assistant_loss(*args, 0.0, rows.row_tokens[index]).item() == pytest.approx(base.item())
    # By hand: per-token losses over the whole rows, then the weighted mean over the allowed targets.
    hidden_logits = model(input_ids=args[1], position_ids=args[2], use_cache=False).logits[:, :-1].float()
    losses = torch.nn.functional.cross_entropy(
        hidden_logits.transpose(1, 2), args[1][:, 1:], reduction="none"
    )
    assistant = args[3][:, 1:] != -100
    columns = torch.arange(1, args[1].shape[1])
    real = columns[None, :] < rows.row_tokens[index][:, None]
    context = real & (args[2][:, 1:] != 0) & ~assistant
    w = 0.3
    expected = (losses[assistant].sum() + w * losses[context].sum()) / (assistant.sum() + w * context.sum())
    got = assistant_loss(*args, w, rows.row_tokens[index])
    assert got.item() == pytest.approx(expected.item(), rel=1e-4)
    assert context.sum() > assistant.sum()  # prompts dominate the rows
    boundaries = (args[2][:, 1:] == 0) & real
    assert not (context & boundaries).any()


def test_packed_examples_do_not_attend_to_each_other(rows) -> None:
    """An example's logits are the same alone as packed behind another one (per-example causal mask)."""
    model = build_model(TINY_SHAPE, 1280, 2, 0, 0).eval()
    ids, pos = rows.input_ids[0], rows.position_ids[0]
    starts = (pos == 0).nonzero().flatten().tolist()
    second = slice(starts[1], starts[2] if len(starts) > 2 else len(ids))
    with torch.no_grad():
        packed = model(input_ids=ids[None], position_ids=pos[None], use_cache=False).logits[0, second]
        alone = model(input_ids=ids[None, second], use_cache=False).logits[0]
    torch.testing.assert_close(packed, alone, atol=1e-4, rtol=1e-4)


def test_smoke_run_writes_folders_loadable_by_transformers_and_switchyard(bundled_trained) -> None:
    folder, results = bundled_trained
    for name in (MAIN_MODEL, DRAFT_MODEL):
        assert all((folder / name / f).is_file() for f in FILES), name
    assert results[MAIN_MODEL].steps == 5 and results[DRAFT_MODEL].steps == 2
    assert math.isfinite(results[MAIN_MODEL].final_loss)
    config = json.loads((folder / MAIN_MODEL / "config.json").read_text())
    assert config["dtype"] == "bfloat16" and config["tie_word_embeddings"]
    card = (folder / MAIN_MODEL / "README.md").read_text()
    assert "tiny models trained on synthetic tasks" in card and "seed | 0" in card and "tokens seen" in card

    main_folder = folder / MAIN_MODEL
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(main_folder))
    text = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2 + 3?"}], tokenize=False,
                                         add_generation_prompt=True)  # fmt: skip
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"][0]
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(main_folder), dtype=torch.float32).eval()
    with torch.no_grad():
        expected = hf(input_ids=ids[None]).logits[0]

    ours = load_model(main_folder, dtype="float32")
    n, block = len(ids), 16
    blocks = -(-n // block)
    cfg = ours.config
    caches = [(torch.zeros(blocks, block, cfg.num_key_value_heads, cfg.head_dim),
               torch.zeros(blocks, block, cfg.num_key_value_heads, cfg.head_dim)) for _ in range(cfg.num_hidden_layers)]  # fmt: skip
    metadata = AttentionMetadata.build(
        slot_mapping=torch.arange(n), block_size=block, decode_block_tables=[], decode_context_lens=[],
        prefill_spans=[(0, n, n, list(range(blocks)))], device=torch.device("cpu"),
    )  # fmt: skip
    logits = ours.compute_logits(ours(ids, torch.arange(n), caches, metadata))
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=1e-4)


def test_resume_continues_the_step_count_and_matches_an_uninterrupted_run(rows, tmp_path: Path) -> None:
    config = TrainConfig(max_steps=4, batch_rows=2, warmup_steps=1, checkpoint_every=1)
    straight = build_model(TINY_SHAPE, 1280, 2, 0, seed=0)
    train_model(straight, rows, config, progress=False)

    interrupted = build_model(TINY_SHAPE, 1280, 2, 0, seed=0)
    first = train_model(interrupted, rows, replace(config, time_budget_s=0.0), tmp_path, progress=False)
    assert first.steps == 1 and first.stopped_by_budget

    resumed = build_model(
        TINY_SHAPE, 1280, 2, 0, seed=5
    )  # different init: everything must come from the file
    second = train_model(resumed, rows, config, tmp_path, resume=True, progress=False)
    assert second.steps == 4 and not second.stopped_by_budget
    assert second.tokens_seen > first.tokens_seen
    for a, b in zip(straight.parameters(), resumed.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_a_stop_request_checkpoints_the_finished_step_and_resume_loses_nothing(rows, tmp_path: Path) -> None:
    """A preemption's SIGTERM sets the event: the run stops at the next step boundary with a checkpoint, and a
    resume ends exactly where an uninterrupted run does."""
    import threading

    from switchyard_training.train_loop import TrainingPreempted

    config = TrainConfig(max_steps=4, batch_rows=2, warmup_steps=1, checkpoint_every=100)  # no periodic save
    straight = build_model(TINY_SHAPE, 1280, 2, 0, seed=0)
    train_model(straight, rows, config, progress=False)

    stop = threading.Event()
    stop.set()
    interrupted = build_model(TINY_SHAPE, 1280, 2, 0, seed=0)
    with pytest.raises(TrainingPreempted) as preempted:
        train_model(interrupted, rows, config, tmp_path, progress=False, stop=stop)
    assert preempted.value.step == 1
    resumed = build_model(TINY_SHAPE, 1280, 2, 0, seed=5)
    result = train_model(resumed, rows, config, tmp_path, resume=True, progress=False)
    assert result.steps == 4
    for a, b in zip(straight.parameters(), resumed.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_budget_replans_the_schedule(rows) -> None:
    model = build_model(TINY_SHAPE, 1280, 2, 0, seed=0)
    config = TrainConfig(
        max_steps=10_000, batch_rows=1, calibration_steps=2, calibration_skip=1, time_budget_s=5.0
    )
    result = train_model(model, rows, config, progress=False)
    assert result.planned_steps < 10_000
    assert result.steps <= result.planned_steps


def test_train_default_resume_skips_finished_models(bundled_trained, tmp_path: Path) -> None:
    folder, results = bundled_trained
    again = train_default(folder, folder.parent / "ckpt", time_budget_minutes=5, seed=0, resume=True,
                          recipe=tiny_recipe(), progress=False)  # fmt: skip
    assert again[MAIN_MODEL] == results[MAIN_MODEL]
    assert isinstance(again[DRAFT_MODEL], TrainResult)


def test_cli_help_and_arguments(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--output", "--checkpoint-dir", "--minutes", "--seed", "--resume"):
        assert flag in out
    args = build_parser().parse_args(["--minutes", "3", "--seed", "7", "--resume"])
    assert args.minutes == 3 and args.seed == 7 and args.resume


class StepClock:
    """Simulated seconds for the time budget: each forward pass advances them by `pace(call number)`, so a test
    sets the pace of every step whatever else the machine is doing."""

    def __init__(self, pace: Callable[[int], float]) -> None:
        self.pace = pace
        self.now = 0.0
        self.calls = 0

    def __call__(self) -> float:
        return self.now

    def hook(self, module: torch.nn.Module, args: object) -> None:
        self.calls += 1
        self.now += self.pace(self.calls)


def test_budget_replans_again_when_steps_slow_down(rows) -> None:
    """Steps that turn much slower mid-run shorten the plan again, so the cosine ends near the budget
    instead of being cut off part way down."""
    model = build_model(TINY_SHAPE, 1280, 2, 0, seed=0)
    clock = StepClock(lambda call: 0.04 if call <= 15 else 0.34)
    model.model.register_forward_pre_hook(clock.hook)
    config = TrainConfig(
        max_steps=100_000,
        batch_rows=1,
        calibration_steps=4,
        calibration_skip=1,
        replan_every=4,
        time_budget_s=4.0,
    )
    result = train_model(model, rows, config, progress=False, clock=clock)
    # The first plan, at the fast pace, holds 80+ steps; at 0.3 s more per step the budget holds about 25.
    assert result.planned_steps < 40
    assert result.steps >= 0.9 * result.planned_steps


def test_budget_plans_steps_back_when_a_slowdown_passes(rows, capsys) -> None:
    """A slow stretch shortens the plan; once steps are fast again the plan grows back, so the budget is spent
    training instead of ending early (and never past max_steps)."""
    model = build_model(TINY_SHAPE, 1280, 2, 0, seed=0)
    clock = StepClock(lambda call: 0.5 if 6 <= call <= 9 else 0.08)
    model.model.register_forward_pre_hook(clock.hook)
    config = TrainConfig(
        max_steps=100_000,
        batch_rows=1,
        calibration_steps=4,
        calibration_skip=1,
        replan_every=4,
        time_budget_s=6.0,
    )
    result = train_model(model, rows, config, progress=False, clock=clock)
    plans = [int(n) for n in re.findall(r"planning (\d+) steps", capsys.readouterr().out)]
    shrunk = min(plans)
    assert plans.index(shrunk) > 0, plans  # calibration first, then the slow window shortened it
    assert result.planned_steps > shrunk and result.steps > shrunk, (plans, result.steps)
    capped = train_model(build_model(TINY_SHAPE, 1280, 2, 0, seed=0), rows,
                         replace(config, max_steps=30, time_budget_s=60.0), progress=False)  # fmt: skip
    assert capped.planned_steps == 30 and capped.steps == 30


def test_mix_option_changes_the_corpus_shares_and_the_card_says_how_to_reproduce() -> None:
    from switchyard_training.example import Category
    from switchyard_training.model_card import reproduce_command
    from switchyard_training.recipe import DefaultRecipe
    from switchyard_training.train import parse_mix

    assert parse_mix("json_extraction=0.3, grounded=0") == {
        Category.JSON_EXTRACTION: 0.3,
        Category.GROUNDED: 0.0,
    }
    for bad in ("jsonx=0.3", "grounded", "grounded=-1", "grounded=nan"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["--mix", bad])
    recipe = DefaultRecipe()
    assert "--mix" not in reproduce_command(recipe, 0, 90)
    changed = replace(
        recipe,
        corpus_weights={**recipe.corpus_weights, Category.GROUNDED: 0.3},
        word_starts=WordStarts.LEARNED,
    )
    command = reproduce_command(changed, 3, 45)
    assert command.startswith("switchyard train-default --seed 3 --minutes 45 ")
    assert command.endswith("--mix grounded=0.3 --word-starts learned")
    # The command parses back to the same recipe fields.
    args = build_parser().parse_args(command.split()[2:])
    assert args.mix == {Category.GROUNDED: 0.3} and args.word_starts == "learned" and args.seed == 3


def test_grounded_forms_option_parses_and_reproduces() -> None:
    from switchyard_training.model_card import reproduce_command
    from switchyard_training.recipe import DefaultRecipe
    from switchyard_training.tasks.context import GroundedForms

    recipe = DefaultRecipe()
    assert "--grounded-forms" not in reproduce_command(recipe, 0, 90)
    changed = replace(recipe, grounded_forms=GroundedForms(quote=0.1, value=0.15, attribute=0.6))
    command = reproduce_command(changed, 0, 90)
    assert command.endswith("--grounded-forms quote=0.1,value=0.15,attribute=0.6")
    assert build_parser().parse_args(command.split()[2:]).grounded_forms == changed.grounded_forms
    assert build_parser().parse_args(["--grounded-forms", "value=0.1"]).grounded_forms == GroundedForms(
        quote=0.85, value=0.1
    )
    for bad in ("quote=0.9,value=0.2", "quote=0.5,attribute=0.4", "cite=0.1", "quote=x", "value=-1"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["--grounded-forms", bad])


def test_group_and_row_length_options_keep_the_tokens_per_step_and_reproduce(capsys) -> None:
    from switchyard_training.model_card import reproduce_command
    from switchyard_training.recipe import DefaultRecipe, with_row_len

    recipe = DefaultRecipe()
    assert recipe.group_size == 4 and recipe.row_len == 1152 and recipe.main.batch_rows == 4
    assert "--group-size" not in reproduce_command(recipe, 0, 90)
    lone = with_row_len(replace(recipe, group_size=1), 768)
    assert lone.row_len * lone.main.batch_rows == recipe.row_len * recipe.main.batch_rows
    assert lone.draft.batch_rows == lone.main.batch_rows == 6
    command = reproduce_command(lone, 0, 90)
    assert command.endswith("--group-size 1 --row-len 768")
    args = build_parser().parse_args(command.split()[2:])
    assert args.group_size == 1 and args.row_len == 768
    with pytest.raises(ValueError, match="divide"):
        with_row_len(recipe, 1000)
    for bad in (["--row-len", "1000"], ["--group-size", "0"], ["--group-size", "11"]):
        with pytest.raises(SystemExit):
            main(["--minutes", "0.01", "--output", "/nonexistent/x", *bad])
        assert "error" in capsys.readouterr().err


def test_a_resume_on_other_rows_is_refused(tmp_path: Path) -> None:
    """Resuming with a flag left out (here the message tool) would go on with another corpus: refused."""
    from switchyard_training.checkpoint import check_rows_fingerprint
    from switchyard_training.pipeline import prepare_data

    recipe = replace(tiny_recipe(), corpus_size=60)
    _, rows = prepare_data(recipe, 0, tmp_path, resume=False)
    check_rows_fingerprint(tmp_path, rows, resume=False)
    _, same = prepare_data(recipe, 0, tmp_path, resume=True)
    check_rows_fingerprint(tmp_path, same, resume=True)
    _, other = prepare_data(replace(recipe, message_tool=False), 0, tmp_path, resume=True)
    with pytest.raises(ValueError, match="resume with the flags the run started with"):
        check_rows_fingerprint(tmp_path, other, resume=True)
