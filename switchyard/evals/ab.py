"""A/B: two endpoints (or two configs of one) on the same cases, interleaved, then compared pairwise.

Interleaving matters for what the machine does to the numbers: case i goes to A then B, case i+1 to B then A,
on one shared worker pool, so neither side runs while the machine is quieter or its caches warmer. Each side
keeps its own per-case JSONL (and resumes on its own); the comparison reads them as base (A) and new (B).
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

from switchyard.evals.results import CaseResult, ResultsFile
from switchyard.evals.runner import (
    CaseRunner,
    Job,
    RunSettings,
    check_suite_needs,
    prepare_output,
    progress_bar,
    run_jobs,
)
from switchyard.evals.scorers import ScoringContext
from switchyard.evals.suite import Suite

SIDES = ("a", "b")


@dataclass(frozen=True)
class AbResults:
    a: dict[str, CaseResult]
    b: dict[str, CaseResult]


def interleave(
    suite: Suite, pending: dict[str, set[str]], runners: dict[str, CaseRunner], files: dict[str, ResultsFile]
) -> list[Job]:
    """Jobs in suite order, each case's two sides adjacent, the side that goes first alternating."""
    jobs: list[Job] = []
    for index, case in enumerate(suite.cases):
        order = SIDES if index % 2 == 0 else SIDES[::-1]
        jobs.extend(Job(runners[side], case, files[side]) for side in order if case.id in pending[side])
    return jobs


async def run_ab(
    suite: Suite,
    settings: dict[str, RunSettings],
    output_dir: Path,
    scoring: ScoringContext,
    *,
    concurrency: int,
    fresh: bool = False,
    progress: bool = True,
) -> AbResults:
    """Run both sides (`settings["a"]`, `settings["b"]`) over the suite, each into output_dir/a and /b."""
    check_suite_needs(suite, scoring)
    files = {side: prepare_output(output_dir / side, suite, settings[side], fresh) for side in SIDES}
    pending = {side: {c.id for c in suite.cases} - files[side].scored_ids() for side in SIDES}
    async with AsyncExitStack() as stack:
        runners = {
            side: await stack.enter_async_context(
                CaseRunner(suite, settings[side], scoring, output_dir / side)
            )
            for side in SIDES
        }
        jobs = interleave(suite, pending, runners, files)
        total = 2 * len(suite.cases)
        bar = progress_bar(total, total - len(jobs), f"{suite.name} A/B", progress)
        try:
            await run_jobs(jobs, concurrency, bar)
        finally:
            bar.close()
    return AbResults(files["a"].read(), files["b"].read())
