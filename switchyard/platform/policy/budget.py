"""The preemption budget: how often one job, and how much of one team, may be preempted.

Preemption is how serving gets capacity and borrowed GPUs come back, but every preemption throws away work
since the victim's checkpoint; the budget caps that churn so no job or team is preempted into starvation.
It paces *discretionary* preemption only: one that admits serving-class work, or that gives a team back GPUs
inside its own guarantee (reclaiming what a borrower took), is an entitlement the budget may not veto. Those
are still recorded and still count towards a team's hourly loss, so they leave less room for the
discretionary kind.
"""

from __future__ import annotations

from dataclasses import dataclass

from switchyard.platform.jobs import Job
from switchyard.platform.usage import UsageLedger


@dataclass(frozen=True)
class PreemptionBudget:
    min_interval_per_job_s: float = 1800.0
    """The per-job window: a job preempted `max_preemptions_per_job` times within it is left alone."""
    max_preemptions_per_job: int = 1
    """Preemptions one job may take per `min_interval_per_job_s` (1: a preempted job is left alone for the
    whole window)."""
    max_team_loss_per_hour: float = 0.25
    """Share of a team's running GPUs that preemptions may take within any trailing hour."""
    min_team_loss_gpus: int = 8
    """GPUs a team may always lose per hour, however little it runs (else a small team is never preemptible)."""

    exempt_serving: bool = True
    """Preemptions that admit serving-class jobs ignore the team cap (the per-job interval still holds)."""
    exempt_reclaim: bool = True
    """Preemptions that return GPUs to a team within its guarantee ignore the team cap (likewise)."""

    def __post_init__(self) -> None:
        if self.min_interval_per_job_s < 0 or not 0 <= self.max_team_loss_per_hour <= 1:
            raise ValueError("min_interval_per_job_s must be >= 0 and max_team_loss_per_hour within [0, 1]")
        if self.min_team_loss_gpus < 0 or self.max_preemptions_per_job < 1:
            raise ValueError("min_team_loss_gpus must be >= 0 and max_preemptions_per_job >= 1")

    def caps(self, *, serving: bool, reclaim: bool) -> bool:
        """Whether the team cap applies to a preemption made for a serving job / to reclaim a guarantee."""
        return not ((serving and self.exempt_serving) or (reclaim and self.exempt_reclaim))

    def job_protected(self, job: Job, now: float) -> bool:
        """True when the job was preempted too often, too recently, to be preempted again."""
        times = job.preempted_at
        n = self.max_preemptions_per_job
        return len(times) >= n and now - times[-n] < self.min_interval_per_job_s

    def team_allowance(self, team: str, running_gpus: int, ledger: UsageLedger, now: float) -> int:
        """GPUs that may still be taken from the team this hour, given what it runs now."""
        taken = ledger.preempted_gpus_since(team, now - 3600.0)
        # The share is of what the team held before this hour's preemptions, so taking GPUs does not
        # shrink the base the next preemption is measured against.
        cap = max(self.min_team_loss_gpus, int(self.max_team_loss_per_hour * (running_gpus + taken)))
        return max(0, cap - taken)
