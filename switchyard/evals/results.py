"""Per-case results: one JSON line per scored case, appended and fsync'd as each finishes, read back to resume.

A crash loses at most the cases in flight: every finished case is on disk before the next is written, and a
rerun with the same output folder skips the ids already there. A case that failed to run (the endpoint was
down) is recorded with its error and run again on resume. A line cut short by the crash is ignored.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class CheckResult:
    scorer: str
    passed: bool
    value: float | None = None
    detail: str = ""


@dataclass(frozen=True)
class CaseResult:
    id: str
    kind: str
    checks: dict[str, CheckResult] = field(default_factory=dict)
    """Metric -> its verdict on this case."""
    latency_s: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    output: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    """Why the case could not run (it is retried on resume, and counts as failed until then)."""
    tags: tuple[str, ...] = ()

    @property
    def success(self) -> bool:
        """Every check passed (and the case ran)."""
        return self.error is None and all(c.passed for c in self.checks.values())

    def to_json(self) -> str:
        data = asdict(self)
        data["tags"] = list(self.tags)
        return json.dumps(data, ensure_ascii=False)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> CaseResult:
        checks = {name: CheckResult(**check) for name, check in raw.get("checks", {}).items()}
        return cls(**{**raw, "checks": checks, "tags": tuple(raw.get("tags", ()))})


@dataclass(frozen=True)
class ResultsFile:
    path: Path

    def append(self, result: CaseResult) -> None:
        """Write one record durably: the line is on disk when this returns."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as out:
            out.write(result.to_json() + "\n")
            out.flush()
            os.fsync(out.fileno())

    def read(self) -> dict[str, CaseResult]:
        """The latest record of each case id (a rerun's record replaces an errored one)."""
        latest: dict[str, CaseResult] = {}
        if not self.path.is_file():
            return latest
        for line in self.path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            try:
                result = CaseResult.from_dict(json.loads(line))
            except (json.JSONDecodeError, TypeError, KeyError):
                continue  # the line a crash cut short
            latest[result.id] = result
        return latest

    def scored_ids(self) -> set[str]:
        """Cases with a verdict: skipped on resume."""
        return {case_id for case_id, result in self.read().items() if result.error is None}

    def rewrite(self, results: Iterable[CaseResult]) -> None:
        """Replace the file with exactly these records (compacting retried errors away)."""
        temporary = self.path.with_suffix(".tmp")
        with temporary.open("w", encoding="utf-8") as out:
            for result in results:
                out.write(result.to_json() + "\n")
            out.flush()
            os.fsync(out.fileno())
        temporary.replace(self.path)
