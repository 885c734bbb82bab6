"""The `switchyard` command line: help, the offline demo, generate, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from switchyard.cli import main
from switchyard.models.registry import BUNDLED_MODELS, DRAFT_MODEL


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for command in ("generate", "serve", "train-default", "eval-default", "demo"):
        assert command in out


def test_demo_runs_the_engine_offline(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--max-tokens", "4"]) == 0
    out = capsys.readouterr().out
    assert "4 requests" in out and "switchyard train-default" in out


def test_generate_prints_completions(tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["generate", "--model", str(tiny_model_dir), "--max-tokens", "5", "--dtype", "float32", "hello"]
    )
    assert code == 0
    assert "### hello" in capsys.readouterr().out


def test_unknown_model_is_a_clear_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["generate", "--model", str(tmp_path / "missing"), "hi"]) == 2
    err = capsys.readouterr().err
    assert "switchyard: error:" in err and "no model folder" in err


def test_speculative_config_takes_vllms_json_form() -> None:
    from switchyard.cli import build_parser
    from switchyard.engine_args import engine_config_from_args

    def config(*flags: str):  # type: ignore[no-untyped-def]
        return engine_config_from_args(build_parser().parse_args(["generate", *flags, "hi"]))

    given = config(
        "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 5}'
    )
    assert (given.speculative_method, given.num_speculative_tokens, given.spec_ngram_max) == ("ngram", 3, 5)
    drafted = config("--speculative-config", '{"model": "switchyard-chat-draft"}')
    assert (drafted.speculative_method, drafted.speculative_model) == (
        "draft",
        str(BUNDLED_MODELS[DRAFT_MODEL]),
    )
    flags = config("--speculative-method", "speculator", "--num-speculative-tokens", "2")
    assert (flags.speculative_method, flags.num_speculative_tokens) == ("speculator", 2)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--speculative-config", "{"], "not JSON"),
        (["--speculative-config", "[1]"], "JSON object"),
        (["--speculative-config", '{"methd": "ngram"}'], "unknown keys"),
        (
            ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": "4"}'],
            "must be an integer",
        ),
        (["--speculative-config", "{}"], "a method or a model"),
        (["--speculative-config", '{"method": "ngram"}', "--speculative-method", "ngram"], "give one form"),
    ],
)
def test_a_bad_speculative_config_is_a_clear_error(
    flags: list[str], message: str, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["generate", "--model", str(tiny_model_dir), *flags, "hi"]) == 2
    err = capsys.readouterr().err
    assert "switchyard: error:" in err and message in err


def test_generate_streams_past_the_trained_context_with_sinks(
    tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--sliding-window and --attention-sinks reach the engine: a model of 512 positions serves 1024."""
    flags = [
        "--sliding-window",
        "64",
        "--attention-sinks",
        "4",
        "--max-model-len",
        "1024",
        "--dtype",
        "float32",
    ]
    code = main(["generate", "--model", str(tiny_model_dir), "--max-tokens", "5", *flags, "hello"])
    assert code == 0 and "### hello" in capsys.readouterr().out


def test_sinks_without_a_window_are_a_clear_error(
    tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["generate", "--model", str(tiny_model_dir), "--attention-sinks", "4", "hi"]) == 2
    err = capsys.readouterr().err
    assert "switchyard: error:" in err and "attention_sinks needs sliding_window" in err
