"""The gateway's connection to a Ray cluster, shared by every pool placed on it.

Ray allows one connection per process, so pools share it, and only whoever opened it may close it: closing
it ends every actor this process owns, and with a local instance it started, the instance itself. A gateway
with several Ray pools opens one `RayConnection`, hands it to each `RayLauncher`, stops the pools, then
closes it; a launcher given none opens and closes its own.
"""

from __future__ import annotations

import logging

import ray

logger = logging.getLogger(__name__)


class RayConnection:
    def __init__(self, address: str | None = None) -> None:
        self.address = address
        """A running cluster's address (`auto`, `HOST:PORT`); None starts a local Ray instance."""
        self._opened = False

    def open(self) -> None:
        """Connect, unless this process already is (then the connection stays its opener's to close)."""
        if ray.is_initialized():
            return
        if self.address is None:
            logger.info("starting a local Ray instance")
            ray.init(include_dashboard=False, logging_level=logging.ERROR)
        else:
            ray.init(address=self.address, logging_level=logging.ERROR)
        self._opened = True

    def close(self) -> None:
        """Disconnect if `open` connected: a local instance it started stops, a cluster it joined stays up."""
        if self._opened:
            ray.shutdown()
            self._opened = False
