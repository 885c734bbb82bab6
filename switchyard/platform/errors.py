"""Typed errors of the platform's control plane; the HTTP API maps each to one status code in one place."""

from __future__ import annotations

from switchyard.errors import SwitchyardError


class PlatformError(SwitchyardError):
    """Base class of the control plane's deliberate errors."""


class JobSpecError(PlatformError, ValueError):
    """A submitted job the platform cannot accept: a malformed field, an unknown team, a gang no node holds."""


class UnknownTeamError(JobSpecError):
    """A job names a team that has no quota: set one first with `switchyard cluster quota set`."""


class JobNotFoundError(PlatformError, LookupError):
    """No job has that id."""


class NodeNotFoundError(PlatformError, LookupError):
    """No node of the cluster has that id."""


class JobFinishedError(PlatformError):
    """The job has already ended (succeeded, failed or cancelled): there is nothing left to stop."""
