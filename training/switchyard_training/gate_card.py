"""The quality gate's results, written into the bundled models' cards (`eval-default --card`).

The trainer writes each card before the gate can run, so the gate adds its own section afterwards: a user
reading the card sees how far the model was measured to go, on which held-out sample, and the command that
measured it. Running the gate again replaces the section instead of appending a second one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # quality.py imports this module for `eval-default --card`
    from switchyard_training.quality import QualityReport

SECTION = "## Quality gate"
UNSEEN_SECTION = "## Unseen tools"
DRAFT_SECTION = "## Agreement with the main model"
_HEADER = ["| metric | rate | 95% interval | correct | target | |", "|---|---|---|---|---|---|"]


def _rows(report: QualityReport) -> list[str]:
    """One table row per metric: rate, Wilson interval, count, target and verdict."""
    rows = []
    for metric in report.metrics.values():
        target = "-" if metric.target is None else f"{metric.target:.2f}"
        verdict = "" if metric.target is None else ("pass" if metric.passed else "**fail**")
        interval = f"[{metric.interval.low:.3f}, {metric.interval.high:.3f}]"
        rows.append(
            f"| {metric.name} | {metric.rate:.3f} | {interval} | {metric.correct} / {metric.total} | {target} "
            f"| {verdict} |"
        )
    return rows


def gate_section(report: QualityReport, command: str, num_examples: int) -> str:
    """The main model's card section: every metric with its interval, count and target, and the verdict."""
    verdict = "passed" if report.passed else "failed"
    lines = [
        SECTION,
        "",
        f"Greedy replies on {num_examples} held-out conversations (another seed, names the training corpus never",
        f"had), {report.graded_turns} graded turns; the gate {verdict}. Measured with `{command}`.",
        "",
        *_HEADER,
        *_rows(report),
    ]
    if report.draft_agreement is not None:
        lines += [
            "",
            f"The draft's greedy next-token agreement along these replies: {report.draft_agreement:.3f}.",
        ]
    return "\n".join(lines) + "\n"


def unseen_section(report: QualityReport, command: str, num_examples: int) -> str:
    """The main model's card section on tools it never saw: each rate with its Wilson 95% interval."""
    verdict = "all met" if report.passed else "not all met"
    lines = [
        UNSEEN_SECTION,
        "",
        f"Greedy replies on {num_examples} conversations over generated tools whose names, domains and phrasings",
        f"the training corpus never had, {report.graded_turns} graded turns; targets {verdict} (reported apart",
        f"from the quality gate). Measured with `{command}`.",
        "",
        *_HEADER,
        *_rows(report),
    ]
    return "\n".join(lines) + "\n"


def draft_section(agreement: float, main_name: str, command: str) -> str:
    """The draft's card section: how often it guesses the main model's next token, what speculation uses."""
    return (
        f"{DRAFT_SECTION}\n\n"
        f"Greedy next-token agreement with {main_name} along {main_name}'s own replies to the held-out\n"
        f"conversations of its quality gate: {agreement:.3f}. Measured with `{command}`.\n"
    )


def replace_section(card: str, heading: str, section: str) -> str:
    """The card with `section` in place of the one under `heading` (up to the next `## ` heading), or appended."""
    lines = card.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == heading), None)
    if start is None:
        return card.rstrip("\n") + "\n\n" + section
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    rest = "".join(lines[end:])
    return "".join(lines[:start]) + section + ("\n" + rest if rest else "")


def write_section(folder: Path, heading: str, section: str) -> None:
    """Put `section` into the folder's README.md; a folder without a card gets one holding just the section."""
    card_path = folder / "README.md"
    card = card_path.read_text() if card_path.is_file() else ""
    card_path.write_text(replace_section(card, heading, section) if card else section)
