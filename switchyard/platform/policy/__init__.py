"""Scheduling policies: the fair-share policy Switchyard runs, and the baselines it is measured against."""

from switchyard.platform.policy.budget import PreemptionBudget
from switchyard.platform.policy.quotas import TeamQuota
from switchyard.platform.policy.scheduler import Decision, Preemption, Scheduler

__all__ = ["Decision", "Preemption", "PreemptionBudget", "Scheduler", "TeamQuota"]
