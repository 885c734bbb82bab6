"""Running a suite against an endpoint: cases concurrently (a pool of workers, in suite order), each scored as
it finishes and appended to the per-case JSONL, resumable after a crash, with a progress bar.

`CaseRunner` is one side (an endpoint and what its cases need: the agent config, the RAG store); `run_jobs`
drives any list of (side, case) jobs, which is how `eval ab` interleaves two sides over the same cases.
"""

from __future__ import annotations

import asyncio
import json
import zlib
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import openai

from switchyard.errors import SwitchyardError
from switchyard.evals.agent_case import AgentEndpointError, run_agent_case
from switchyard.evals.agent_config import AgentConfig, load_agent_config
from switchyard.evals.chat_case import run_chat_case
from switchyard.evals.endpoint import Endpoint, Prices
from switchyard.evals.outcome import Outcome
from switchyard.evals.results import CaseResult, CheckResult, ResultsFile
from switchyard.evals.scorers import ScoringContext, get_scorer
from switchyard.evals.suite import AgentCase, Case, ChatCase, RagCase, Suite

RESULTS_FILE = "cases.jsonl"
CONFIG_FILE = "run-config.json"
if TYPE_CHECKING:
    from switchyard.agents.model import OpenAIModelClient
    from switchyard.agents.rag.store import RagStore

ENDPOINT_ERRORS: tuple[type[BaseException], ...] = (
    openai.APIError,
    AgentEndpointError,
    TimeoutError,
    OSError,
)
"""Failures of the endpoint, not of the harness: the case is recorded as not run and retried on resume."""


class RunConfigMismatchError(SwitchyardError, ValueError):
    """The output folder holds a run of another suite or other settings, which a resume would mix in."""


@dataclass(frozen=True)
class RunSettings:
    """How one side runs: where, with what sampling overrides, at what concurrency and prices."""

    endpoint: Endpoint
    concurrency: int = 8
    overrides: Mapping[str, Any] = field(default_factory=dict)
    """Request parameters over every case's own (--temperature, --max-tokens)."""
    seed: int | None = None
    """Sampling seed of the run; each case gets its own, derived from this and its id."""
    prices: Prices = field(default_factory=Prices)
    agent_config: Path | None = None
    """Overrides the suite's agent config (--agent)."""
    rag_db: Path | None = None
    """An existing RAG store holding the cases' collections (default: one built in the output folder)."""

    def fingerprint(self, suite: Suite) -> dict[str, Any]:
        """What a resumed run must share with the run it continues (the URL may change: a restarted server)."""
        return {
            "suite": suite.name,
            "suite_sha256": suite.sha256,
            "model": self.endpoint.model,
            "overrides": dict(self.overrides),
            "seed": self.seed,
            "agent_config": str(self.agent_config) if self.agent_config else None,
        }

    def case_params(self, case: ChatCase | RagCase) -> dict[str, Any]:
        params: dict[str, Any] = {**(case.params if isinstance(case, ChatCase) else {}), **self.overrides}
        if self.seed is not None:
            params["seed"] = (self.seed * 1_000_003 + zlib.crc32(case.id.encode())) % 2**31
        return params


def prepare_output(output_dir: Path, suite: Suite, settings: RunSettings, fresh: bool = False) -> ResultsFile:
    """The folder's results file, after checking a run already there is the same run (or clearing it)."""
    output_dir.mkdir(parents=True, exist_ok=True)
    config_path = output_dir / CONFIG_FILE
    results = ResultsFile(output_dir / RESULTS_FILE)
    wanted = settings.fingerprint(suite)
    if fresh:
        results.path.unlink(missing_ok=True)
    elif config_path.is_file() and results.path.is_file():
        found = json.loads(config_path.read_text())
        differing = sorted(k for k in wanted if found.get(k) != wanted[k])
        if differing:
            raise RunConfigMismatchError(
                f"{output_dir} holds a run with other {', '.join(differing)}; resuming would mix the two: "
                "give another --output-dir, or --fresh to start over"
            )
    config_path.write_text(json.dumps({**wanted, "base_url": settings.endpoint.base_url}, indent=1) + "\n")
    return results


class CaseRunner:
    """One side of a run: its endpoint, clients and the resources its cases need, open for the run's length."""

    def __init__(self, suite: Suite, settings: RunSettings, scoring: ScoringContext, workdir: Path) -> None:
        self.suite, self.settings, self.scoring, self.workdir = suite, settings, scoring, workdir
        self._stack = AsyncExitStack()
        self.client: openai.AsyncOpenAI | None = None
        self.agent_config: AgentConfig | None = None
        self.agent_client: OpenAIModelClient | None = None
        self.store: RagStore | None = None

    async def __aenter__(self) -> CaseRunner:
        self.client = await self._stack.enter_async_context(self.settings.endpoint.client())
        kinds = {type(case) for case in self.suite.cases}
        if AgentCase in kinds:
            path = self.settings.agent_config or self.suite.agent_config
            if path is None:
                raise SwitchyardError(
                    f"suite {self.suite.name} has agent cases: give an agent config (--agent FILE)"
                )
            self.agent_config = load_agent_config(path)
            from switchyard.agents.model import OpenAIModelClient

            self.agent_client = OpenAIModelClient(client=self.client)
        if RagCase in kinds:
            from switchyard.evals.rag_case import open_store

            needed = {case.collection for case in self.suite.cases if isinstance(case, RagCase)}
            path = self.settings.rag_db or self.workdir / "rag.db"
            ingest = self.settings.rag_db is None
            self.store = open_store(self.suite.rag, self.scoring.embedder(), path, needed, ingest)
            self._stack.callback(self.store.close)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def outcome(self, case: Case) -> Outcome:
        endpoint, prices = self.settings.endpoint, self.settings.prices
        assert self.client is not None, "use CaseRunner as an async context manager"
        if isinstance(case, ChatCase):
            return await run_chat_case(
                case, self.client, endpoint.model, self.settings.case_params(case), prices
            )
        if isinstance(case, AgentCase):
            assert self.agent_config is not None and self.agent_client is not None
            return await run_agent_case(case, self.agent_config, endpoint.model, self.agent_client, prices)
        from switchyard.evals.rag_case import run_rag_case

        assert self.store is not None
        return await run_rag_case(
            case,
            self.suite.rag,
            self.store,
            self.client,
            endpoint.model,
            self.settings.case_params(case),
            prices,
        )

    async def run(self, case: Case) -> CaseResult:
        """The case run and scored; an endpoint failure is recorded as the case's error."""
        try:
            outcome = await self.outcome(case)
        except ENDPOINT_ERRORS as exc:
            return CaseResult(case.id, str(case.kind), error=f"{type(exc).__name__}: {exc}", tags=case.tags)
        checks = {}
        for check in case.checks:
            verdict = await get_scorer(check.scorer).score(check.params, outcome, self.scoring)
            checks[check.metric] = CheckResult(check.scorer, verdict.passed, verdict.value, verdict.detail)
        return CaseResult(
            id=case.id,
            kind=str(case.kind),
            checks=checks,
            latency_s=outcome.latency_s,
            input_tokens=outcome.input_tokens,
            output_tokens=outcome.output_tokens,
            cost=outcome.cost,
            output=outcome.output_dict(),
            tags=case.tags,
        )


@dataclass(frozen=True)
class Job:
    runner: CaseRunner
    case: Case
    results: ResultsFile


async def run_jobs(jobs: Sequence[Job], concurrency: int, progress: Any = None) -> int:
    """Run the jobs on `concurrency` workers, in order, appending each result as it lands; returns how many
    succeeded. `progress` (a tqdm bar) advances per job."""
    queue: asyncio.Queue[Job] = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)
    successes = finished = 0

    async def worker() -> None:
        nonlocal successes, finished
        while True:
            try:
                job = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            result = await job.runner.run(job.case)
            job.results.append(result)
            successes += result.success
            finished += 1
            if progress is not None:
                progress.set_postfix_str(f"success {successes}/{finished}", refresh=False)
                progress.update(1)

    await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, len(jobs))))))
    return successes


def check_suite_needs(suite: Suite, scoring: ScoringContext) -> None:
    """Fail before any request when a scorer the suite uses cannot run (no judge model given)."""
    if scoring.judge is None and any(c.scorer == "judge" for case in suite.cases for c in case.checks):
        raise SwitchyardError(
            f"suite {suite.name} uses the judge scorer: give a judge model (--judge-model, --judge-base-url)"
        )


def progress_bar(total: int, done: int, description: str, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(
        total=total, initial=done, desc=description, unit="case", disable=not enabled, dynamic_ncols=True
    )


async def run_suite(
    suite: Suite,
    settings: RunSettings,
    output_dir: Path,
    scoring: ScoringContext,
    *,
    fresh: bool = False,
    progress: bool = True,
) -> dict[str, CaseResult]:
    """Run the suite's cases not yet scored in `output_dir` and return every case's latest result."""
    check_suite_needs(suite, scoring)
    results = prepare_output(output_dir, suite, settings, fresh)
    done = results.scored_ids()
    pending = [case for case in suite.cases if case.id not in done]
    async with CaseRunner(suite, settings, scoring, output_dir) as runner:
        bar = progress_bar(len(suite.cases), len(suite.cases) - len(pending), suite.name, progress)
        try:
            await run_jobs([Job(runner, case, results) for case in pending], settings.concurrency, bar)
        finally:
            bar.close()
    return results.read()
