"""A process that records scripted events into a ledger and prints each id once recorded; the crash tests
kill it with SIGKILL.

    python ledger_writer.py DB SEED COUNT [KILL_AT_INDEX]

With KILL_AT_INDEX, the process kills itself with SIGKILL right after that event is committed to the log and
before the ledger applies it: the crash between append and apply, in a real process.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from ledger_model import scripted_events

from switchyard.fleet.ledger.event_log import EventLog
from switchyard.fleet.ledger.events import LedgerEvent
from switchyard.fleet.ledger.ledger import Ledger


class KillAfterAppend(EventLog):
    def __init__(self, path: Path, victim: str | None) -> None:
        super().__init__(path)
        self.victim = victim

    def append(self, event: LedgerEvent) -> bool:
        appended = super().append(event)
        if event.event_id == self.victim:
            os.kill(os.getpid(), signal.SIGKILL)
        return appended


def main(argv: list[str]) -> None:
    path, seed, count = Path(argv[0]), int(argv[1]), int(argv[2])
    events = scripted_events(seed, count)
    victim = events[int(argv[3])].event_id if len(argv) > 3 else None
    ledger = Ledger(KillAfterAppend(path, victim))
    print("ready", flush=True)
    for event in events:
        ledger.record(event)
        print(event.event_id, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
