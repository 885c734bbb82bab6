"""Replicas as local processes: `switchyard serve` N times on this machine, each on its own port, the cores
split between them, each restarted with backoff when it dies.

Every replica writes to its own log file (`<log_dir>/<replica name>.log`, appended across restarts), so a
crash's traceback is kept and the launcher can quote it when it gives up. Servers run in their own session,
so a Ctrl-C at the gateway's terminal reaches the gateway alone, which drains first and then stops them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from switchyard.fleet.replica import Replica, ReplicaHealth
from switchyard.fleet.replicas.base import ReplicaLauncher, ReplicaSpec, RestartListener
from switchyard.fleet.replicas.ports import free_port, http_url, port_is_free
from switchyard.fleet.replicas.serve_command import (
    available_cores,
    check_serve_args,
    die_with_parent,
    serve_command,
    server_environment,
)
from switchyard.fleet.replicas.supervision import (
    RestartBackoff,
    RestartPolicy,
    RunOutcome,
    exit_cause,
    notify_restart,
    watch_run,
)

logger = logging.getLogger(__name__)

LOG_TAIL_LINES = 20
"""Lines of a replica's log quoted when the launcher gives up on it."""


@dataclass
class LocalServer:
    """One replica's process and where it listens; the `Replica` object outlives the processes."""

    replica: Replica
    port: int
    log_path: Path
    process: asyncio.subprocess.Process | None = None
    launches: int = 0


class LocalLauncher(ReplicaLauncher):
    """Runs a pool's replicas as child processes of the gateway and keeps them running."""

    def __init__(
        self,
        spec: ReplicaSpec,
        on_restart: RestartListener | None = None,
        host: str = "127.0.0.1",
        *,
        log_dir: Path | None = None,
        restart_policy: RestartPolicy | None = None,
    ) -> None:
        check_serve_args(spec)
        self.spec = spec
        self.on_restart = on_restart
        self.host = host
        self.log_dir = log_dir
        self.restart_policy = restart_policy or RestartPolicy()
        self._servers: list[LocalServer] = []
        self._supervisors: list[asyncio.Task[None]] = []
        self._restarts = 0
        self._stopping = False

    @property
    def threads_per_replica(self) -> int:
        """Torch threads each server gets: the spec's, else this machine's cores split evenly (at least 1)."""
        return self.spec.threads or max(1, available_cores() // self.spec.count)

    @property
    def num_restarts(self) -> int:
        return self._restarts

    @property
    def replicas(self) -> list[Replica]:
        return [server.replica for server in self._servers]

    def log_path(self, replica: Replica) -> Path:
        return self._server_of(replica).log_path

    def process_id(self, replica: Replica) -> int | None:
        """The pid of the replica's current server process (None before launch or after it exited)."""
        process = self._server_of(replica).process
        return None if process is None or process.returncode is not None else process.pid

    async def start(self) -> list[Replica]:
        if self._servers:
            raise RuntimeError("this launcher has already started its replicas")
        log_dir = self.log_dir or Path(tempfile.mkdtemp(prefix="switchyard-fleet-"))
        log_dir.mkdir(parents=True, exist_ok=True)
        for index in range(self.spec.count):
            name = f"{self.spec.served_name}-{index}"
            port = free_port(self.host)
            replica = Replica(name=name, url=http_url(self.host, port), model=self.spec.served_name)
            self._servers.append(LocalServer(replica, port, log_dir / f"{name}.log"))
        logger.info(
            "starting %d replica(s) of %s with %d thread(s) each; logs in %s",
            self.spec.count,
            self.spec.served_name,
            self.threads_per_replica,
            log_dir,
        )
        launched: list[tuple[LocalServer, asyncio.subprocess.Process]] = []
        try:
            for server in self._servers:
                launched.append((server, await self._launch(server)))
        except BaseException:
            for _, process in launched:  # no supervisor would ever stop them
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
            raise
        self._supervisors = [
            asyncio.create_task(self._supervise(server, process), name=f"supervise {server.replica.name}")
            for server, process in launched
        ]
        return self.replicas

    async def stop(self, grace: float) -> None:
        self._stopping = True
        for supervisor in self._supervisors:
            supervisor.cancel()
        await asyncio.gather(*self._supervisors, return_exceptions=True)
        running = [
            (server.replica, server.process)
            for server in self._servers
            if server.process is not None and server.process.returncode is None
        ]
        for replica, process in running:
            replica.health = ReplicaHealth.DRAINING
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        exits = [asyncio.ensure_future(process.wait()) for _, process in running]
        if exits:
            await asyncio.wait(exits, timeout=grace)
        for replica, process in running:
            if process.returncode is None:
                logger.warning("replica %s did not drain in %.0f s; killing it", replica.name, grace)
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
        await asyncio.gather(*exits)
        for server in self._servers:
            server.replica.health = ReplicaHealth.DEAD

    def _server_of(self, replica: Replica) -> LocalServer:
        for server in self._servers:
            if server.replica is replica:
                return server
        raise KeyError(f"{replica.name} is not one of this launcher's replicas")

    async def _launch(self, server: LocalServer) -> asyncio.subprocess.Process:
        """Start the replica's server, on its old port when that is still free (else on a new one)."""
        if server.launches and not port_is_free(self.host, server.port):
            server.port = free_port(self.host)
            server.replica.url = http_url(self.host, server.port)
        server.launches += 1
        command = serve_command(self.spec, self.host, server.port)
        with server.log_path.open("ab") as log:
            log.write(
                f"--- launch {server.launches} of {server.replica.name}: {' '.join(command)}\n".encode()
            )
            log.flush()
            process = await asyncio.create_subprocess_exec(
                *command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=server_environment(self.threads_per_replica),
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        server.process = process
        server.replica.health = ReplicaHealth.STARTING
        return process

    async def _supervise(self, server: LocalServer, process: asyncio.subprocess.Process) -> None:
        backoff = RestartBackoff(self.restart_policy)
        outcome = await self._watch(server.replica, process)
        while not self._stopping:
            server.replica.health = ReplicaHealth.DEAD
            delay = backoff.delay_after(outcome)
            if delay is None:
                self._give_up(server, outcome)
                return
            logger.warning(
                "replica %s %s after %.0f s; restarting it in %.1f s",
                server.replica.name,
                outcome.cause,
                outcome.uptime,
                delay,
            )
            await asyncio.sleep(delay)
            try:
                process = await self._launch(server)
            except OSError as error:
                outcome = RunOutcome(f"could not be launched ({error})", 0.0, became_healthy=False)
                continue
            self._restarts += 1
            notify_restart(self.on_restart, server.replica)
            outcome = await self._watch(server.replica, process)

    async def _watch(self, replica: Replica, process: asyncio.subprocess.Process) -> RunOutcome:
        async def exited() -> str:
            return exit_cause(await process.wait())

        return await watch_run(replica, exited(), self.restart_policy)

    def _give_up(self, server: LocalServer, outcome: RunOutcome) -> None:
        logger.error(
            "replica %s %s; it died before becoming healthy %d times in a row, so it stays down. "
            "The end of its log (%s):\n%s",
            server.replica.name,
            outcome.cause,
            self.restart_policy.max_failed_starts,
            server.log_path,
            log_tail(server.log_path, LOG_TAIL_LINES),
        )


def log_tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as error:
        return f"(unreadable: {error})"
    return "\n".join(text.splitlines()[-lines:])
