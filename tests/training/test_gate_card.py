"""The quality gate's section in the model cards: written once, replaced on a rerun, other sections kept."""

from __future__ import annotations

import shutil

from switchyard_training.gate_card import SECTION, UNSEEN_SECTION, replace_section

CARD = "# switchyard-chat\n\nintro\n\n## How it was made\n\ntable\n\n## Chat format\n\nChatML\n"


def test_a_card_without_the_section_gets_it_appended() -> None:
    card = replace_section(CARD, SECTION, f"{SECTION}\n\nfirst\n")
    assert card == CARD + f"\n{SECTION}\n\nfirst\n"


def test_a_rerun_replaces_the_section_wherever_it_sits() -> None:
    last = replace_section(CARD, SECTION, f"{SECTION}\n\nfirst\n")
    assert replace_section(last, SECTION, f"{SECTION}\n\nsecond\n") == CARD + f"\n{SECTION}\n\nsecond\n"
    middle = CARD.replace("## Chat format", f"{SECTION}\n\nold\n\n## Chat format")
    replaced = replace_section(middle, SECTION, f"{SECTION}\n\nnew\n")
    assert replaced.count(SECTION) == 1 and "old" not in replaced
    assert replaced.index("new") < replaced.index("## Chat format") and replaced.endswith("ChatML\n")
    assert "## How it was made\n\ntable" in replaced


def test_eval_card_option_writes_both_cards_naming_models_not_paths(bundled_trained, tmp_path) -> None:
    from switchyard_training.quality import main

    source, _ = bundled_trained
    folder = tmp_path / "models"
    shutil.copytree(source, folder)
    main_card, draft_card = (
        folder / "switchyard-chat" / "README.md",
        folder / "switchyard-chat-draft" / "README.md",
    )
    made = main_card.read_text()
    argv = ["--model", str(folder / "switchyard-chat"), "--draft", str(folder / "switchyard-chat-draft"),
            "--examples", "3", "--max-new-tokens", "4", "--unseen-examples", "4", "--no-progress",
            "--card"]  # fmt: skip
    main(argv)
    main(argv)  # a rerun replaces the sections
    card = main_card.read_text()
    assert card.startswith(made.rstrip("\n")) and card.count(SECTION) == 1
    assert "| tool_selection |" in card and "| json_extraction |" in card and "the gate failed" in card
    assert (
        card.count(UNSEEN_SECTION) == 1
        and "| unseen_tool_selection |" in card
        and "on 4 conversations" in card
    )
    assert card.index(SECTION) < card.index(UNSEEN_SECTION)
    command = "`switchyard eval-default --model switchyard-chat --examples 3 --max-new-tokens 4 --unseen-examples 4 "
    assert command + "--draft " in card
    assert str(tmp_path) not in card
    draft = draft_card.read_text()
    assert draft.count("## Agreement with the main model") == 1 and "agreement with switchyard-chat" in draft
    assert str(tmp_path) not in draft
