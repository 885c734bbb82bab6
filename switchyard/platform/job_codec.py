"""Job specs and placements to and from JSON: what the API accepts, the store keeps and the CLI prints.

Every field a user can get wrong is checked here, once, and a bad one is a `JobSpecError` naming it.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from typing import Any

from switchyard.platform.errors import JobSpecError
from switchyard.platform.jobs import (
    CheckpointPolicy,
    InvalidJobSpec,
    JobSpec,
    Placement,
    PriorityClass,
    WorkerSlot,
)

_SPEC_FIELDS = frozenset(
    (
        "name",
        "team",
        "priority_class",
        "gpus_per_worker",
        "workers",
        "same_node",
        "preemptible",
        "checkpoint",
        "expected_runtime_s",
        "command",
    )
)
_CHECKPOINT_FIELDS = frozenset(("signal", "grace_period_s", "interval_s"))


def priority_class_named(value: object) -> PriorityClass:
    """`serving`, `interactive` or `batch` (any case), or the class's number."""
    if isinstance(value, PriorityClass):
        return value
    if isinstance(value, str) and value.upper() in PriorityClass.__members__:
        return PriorityClass[value.upper()]
    if isinstance(value, int) and not isinstance(value, bool) and value in PriorityClass._value2member_map_:
        return PriorityClass(value)
    names = ", ".join(member.name.lower() for member in PriorityClass)
    raise JobSpecError(f"priority_class must be one of {names}, not {value!r}")


def signal_named(name: object) -> str:
    """A signal's canonical name (`SIGTERM`, `SIGUSR1`...); `TERM` and `usr1` are accepted too."""
    if not isinstance(name, str):
        raise JobSpecError(f"checkpoint.signal must be a signal name such as SIGTERM, not {name!r}")
    canonical = name.upper() if name.upper().startswith("SIG") else f"SIG{name.upper()}"
    if canonical not in signal.Signals.__members__ or canonical in ("SIGKILL", "SIGSTOP"):
        raise JobSpecError(
            f"checkpoint.signal {name!r} is not a signal a job can catch (try SIGTERM or SIGUSR1)"
        )
    return canonical


def spec_from_dict(data: Mapping[str, Any]) -> JobSpec:
    """A JobSpec from its JSON form; every mistake is a JobSpecError that says which field and why."""
    if not isinstance(data, Mapping):
        raise JobSpecError("a job spec must be a JSON object")
    unknown = sorted(set(data) - _SPEC_FIELDS)
    if unknown:
        raise JobSpecError(f"unknown job spec field(s): {', '.join(unknown)}")
    for required in ("name", "team", "priority_class", "gpus_per_worker"):
        if required not in data:
            raise JobSpecError(f"a job spec needs {required!r}")
    name, team = data["name"], data["team"]
    if not isinstance(name, str) or not name:
        raise JobSpecError("name must be a non-empty string")
    if not isinstance(team, str) or not team:
        raise JobSpecError("team must be a non-empty string")
    command = data.get("command", ())
    if isinstance(command, str) or not all(isinstance(part, str) for part in command):
        raise JobSpecError("command must be a list of strings (the program and its arguments)")
    try:
        return JobSpec(
            name=name,
            team=team,
            priority_class=priority_class_named(data["priority_class"]),
            gpus_per_worker=_whole(data["gpus_per_worker"], "gpus_per_worker"),
            workers=_whole(data.get("workers", 1), "workers"),
            same_node=_flag(data.get("same_node", True), "same_node"),
            preemptible=_flag(data.get("preemptible", True), "preemptible"),
            checkpoint=_checkpoint(data.get("checkpoint")),
            expected_runtime_s=_seconds(data.get("expected_runtime_s"), "expected_runtime_s"),
            command=tuple(command),
        )
    except InvalidJobSpec as error:
        raise JobSpecError(str(error)) from error


def spec_to_dict(spec: JobSpec) -> dict[str, Any]:
    checkpoint = None
    if spec.checkpoint is not None:
        checkpoint = {
            "signal": spec.checkpoint.signal,
            "grace_period_s": spec.checkpoint.grace_period_s,
            "interval_s": spec.checkpoint.interval_s,
        }
    return {
        "name": spec.name,
        "team": spec.team,
        "priority_class": spec.priority_class.name.lower(),
        "gpus_per_worker": spec.gpus_per_worker,
        "workers": spec.workers,
        "same_node": spec.same_node,
        "preemptible": spec.preemptible,
        "checkpoint": checkpoint,
        "expected_runtime_s": spec.expected_runtime_s,
        "command": list(spec.command),
    }


def placement_to_list(placement: Placement) -> list[dict[str, Any]]:
    return [{"node_id": slot.node_id, "gpus": list(slot.gpus)} for slot in placement.workers]


def placement_from_list(data: list[dict[str, Any]]) -> Placement:
    return Placement(tuple(WorkerSlot(slot["node_id"], tuple(slot["gpus"])) for slot in data))


def _checkpoint(data: object) -> CheckpointPolicy | None:
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise JobSpecError('checkpoint must be an object such as {"signal": "SIGTERM", "grace_period_s": 30}')
    unknown = sorted(set(data) - _CHECKPOINT_FIELDS)
    if unknown:
        raise JobSpecError(f"unknown checkpoint field(s): {', '.join(unknown)}")
    grace = _seconds(data.get("grace_period_s", CheckpointPolicy.grace_period_s), "checkpoint.grace_period_s")
    return CheckpointPolicy(
        signal=signal_named(data.get("signal", CheckpointPolicy.signal)),
        grace_period_s=CheckpointPolicy.grace_period_s if grace is None else grace,
        interval_s=_seconds(data.get("interval_s"), "checkpoint.interval_s"),
    )


def _whole(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise JobSpecError(f"{field} must be a whole number >= 1, not {value!r}")
    return value


def _flag(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise JobSpecError(f"{field} must be true or false, not {value!r}")
    return value


def _seconds(value: object, field: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise JobSpecError(f"{field} must be a number of seconds >= 0, not {value!r}")
    return float(value)
