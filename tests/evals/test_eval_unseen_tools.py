"""The shipped `unseen-tools` suite grades as `eval-default`'s unseen-tools table does: the same turns, the same
scorers, under the table's metric names and targets (the file's currency is checked with every shipped suite's
in test_eval_bundled_gate.py)."""

from __future__ import annotations

from eval_helpers import gold_outcome, score_case

from switchyard.evals.outcome import Outcome
from switchyard.evals.suite import ChatCase, load_suite
from switchyard_training.corpus import generate_corpus, unseen_tools_config
from switchyard_training.example import Example
from switchyard_training.quality import METRICS, UNSEEN_METRICS, evaluate

EXAMPLES = 120
"""The suite's first conversations, graded both ways (a corpus extends its smaller self with the same seed)."""


def _graded(examples: list[Example]) -> list[tuple[str, Example, int]]:
    turns = []
    for index, example in enumerate(examples):
        graded = {
            c.turn for c in example.checks if any(m.grades(example.category, c) for m in UNSEEN_METRICS)
        }
        turns += [(f"unseen-{index:04d}-{turn}", example, turn) for turn in sorted(graded)]
    return turns


def test_the_suite_grades_as_the_unseen_table_does() -> None:
    suite = load_suite("unseen-tools")
    assert suite.thresholds == {m.name: m.target for m in UNSEEN_METRICS if m.target is not None}
    assert set(suite.metrics()) <= {m.name for m in UNSEEN_METRICS}
    assert set(suite.metrics()).isdisjoint(m.name for m in METRICS), "no unseen case counts in the gate"
    cases = {case.id: case for case in suite.cases}

    examples = generate_corpus(unseen_tools_config(size=EXAMPLES, seed=0))
    graded = _graded(examples)
    assert len(graded) > EXAMPLES // 2 and all(case_id in cases for case_id, _, _ in graded)
    for case_id, example, turn in graded:
        case = cases[case_id]
        assert isinstance(case, ChatCase) and len(case.messages) == turn and case.tools == example.tools
        assert all(score_case(case, gold_outcome(example.messages[turn])).values()), case_id

    # a model that repeats the request: every metric's count, suite and table alike
    parrot = evaluate(lambda messages, tools: messages[-1]["content"], examples, metrics=UNSEEN_METRICS)
    counts = {name: [0, 0] for name in parrot.metrics}
    for case_id, example, turn in graded:
        for metric, passed in score_case(
            cases[case_id], Outcome(example.messages[turn - 1]["content"])
        ).items():
            counts[metric][0] += passed
            counts[metric][1] += 1
    assert {m: (r.correct, r.total) for m, r in parrot.metrics.items()} == {
        m: tuple(c) for m, c in counts.items()
    }
    assert parrot.metrics["unseen_tool_selection"].total > 0 and parrot.metrics["unseen_no_call"].total > 0
