"""The victim rule: which running jobs to stop so a waiting job can start.

A waiting job may take GPUs from a job of a lower class (strict priority), or, within its own class or a
lower one, from a team running beyond its guarantee while the waiting job's team is within its own
(borrowed GPUs are reclaimed first, and only the borrowed part). Among eligible victims the rule is:
lowest class first, then the team most over its guarantee, then the least work lost since a checkpoint.
On one node the fewest, cheapest victims that free enough GPUs win; the cheapest node wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from switchyard.platform.inventory import ClusterView
from switchyard.platform.jobs import Job, PriorityClass


@dataclass(frozen=True)
class Candidate:
    """A running job that could be preempted, with what the rule needs to rank it."""

    job: Job
    over_share: float
    """The team's GPUs over its guarantee, per guaranteed GPU (larger: more over its share)."""
    lost_gpu_s: float

    @property
    def key(self) -> tuple[int, float, float, str]:
        return (int(self.job.priority_class), -self.over_share, self.lost_gpu_s, self.job.id)


@dataclass(frozen=True)
class VictimChoice:
    node_id: str
    victims: tuple[Job, ...]
    cost: tuple[int, float, int, int]
    """(highest victim class, GPU-seconds lost, GPUs taken, minus the smallest budget a victim's team keeps):
    compared between nodes, smallest wins. The last term spreads preemptions over teams with budget to spare,
    so one team's exhausted budget does not leave the next serving job without victims."""


def over_share(team_running: int, guaranteed: int) -> float:
    return (team_running - guaranteed) / max(guaranteed, 1)


def may_preempt(
    waiting: Job,
    candidate: Job,
    *,
    waiting_team_within_guarantee: bool,
    candidate_team_borrowing_gpus: int,
) -> bool:
    """Whether the rule lets `waiting` take GPUs from `candidate` (budget aside)."""
    if candidate.team == waiting.team and candidate.priority_class >= waiting.priority_class:
        return False
    if candidate.priority_class < waiting.priority_class:
        return True
    return (
        candidate.priority_class <= waiting.priority_class
        and waiting_team_within_guarantee
        and candidate_team_borrowing_gpus >= candidate.spec.gpus
    )


def choose_on_nodes(
    need: int,
    waiting: Job,
    candidates_by_node: Mapping[str, list[Candidate]],
    cluster: ClusterView,
    *,
    waiting_team_within_guarantee: bool,
    borrowing: Mapping[str, int],
    allowance: Mapping[str, int],
    max_class: PriorityClass,
) -> VictimChoice | None:
    """The cheapest single-node victim set freeing `need` GPUs for `waiting`, or None.

    `borrowing` is each team's GPUs beyond its guarantee, `allowance` the GPUs each team may still lose this
    hour; candidates already stopped in this plan (no longer allocated) are skipped.
    """
    best: VictimChoice | None = None
    for node_id, ranked in candidates_by_node.items():
        have = cluster.free_count(node_id)
        if len(cluster.nodes[node_id].schedulable_gpus()) < need:
            continue
        chosen: list[Job] = []
        taken_per_team: dict[str, int] = {}
        lost = 0.0
        top_class = 0
        for candidate in ranked:
            if have >= need:
                break
            job = candidate.job
            if job.priority_class > max_class or job.id not in cluster.allocations:
                continue
            team_taken = taken_per_team.get(job.team, 0)
            if not may_preempt(
                waiting,
                job,
                waiting_team_within_guarantee=waiting_team_within_guarantee,
                candidate_team_borrowing_gpus=borrowing.get(job.team, 0) - team_taken,
            ):
                continue
            if allowance.get(job.team, 0) - team_taken < job.spec.gpus:
                continue
            on_node = sum(
                len(slot.gpus) for slot in cluster.allocations[job.id].workers if slot.node_id == node_id
            )
            chosen.append(job)
            taken_per_team[job.team] = team_taken + job.spec.gpus
            have += on_node
            lost += candidate.lost_gpu_s
            top_class = max(top_class, int(job.priority_class))
        if have < need or not chosen:
            continue
        kept = min(allowance.get(team, 0) - taken for team, taken in taken_per_team.items())
        cost = (top_class, lost, sum(job.spec.gpus for job in chosen), -kept)
        if best is None or (cost, node_id) < (best.cost, best.node_id):
            best = VictimChoice(node_id=node_id, victims=tuple(chosen), cost=cost)
    return best
