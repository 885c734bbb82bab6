"""Optional dependencies: the error that names the extra to install when one of its packages is missing.

The core install serves models (engine and server); agents, RAG, the benchmark client and training come as
extras (`pip install 'switchyard[agents]'`, see pyproject.toml). A module that needs an extra's package
imports it inside `require_extra`, so a missing package reads as the one command that fixes it rather than a
bare ModuleNotFoundError.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from switchyard.errors import SwitchyardError


def install_hint(extra: str) -> str:
    """The pip command that installs `extra`."""
    return f"pip install 'switchyard[{extra}]'"


class MissingExtraError(SwitchyardError, ImportError):
    """A package an optional feature needs is not installed; the message names the extra that brings it."""

    def __init__(self, extra: str, module: str | None) -> None:
        self.extra = extra
        super().__init__(
            f"{module or 'a package'} is not installed; it comes with the '{extra}' extra: {install_hint(extra)}",
            name=module,
        )


@contextmanager
def require_extra(extra: str) -> Iterator[None]:
    """Raise MissingExtraError naming `extra` when an import in the block finds its package missing.

    Switchyard's own modules are not the extra's: a missing one of those is a bug and is re-raised as it is.
    """
    try:
        yield
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] == "switchyard":
            raise
        raise MissingExtraError(extra, error.name) from error
