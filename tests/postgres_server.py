"""A throwaway PostgreSQL cluster for tests, from Debian's `postgresql` package binaries.

`postgres_cluster()` runs `initdb` into a temporary directory (as the `postgres` user when we are root: initdb refuses
root), starts the server with `pg_ctl` on a free loopback port with its socket in that directory and trust
authentication, creates one database, yields its URL, and at the end stops the server and deletes the directory.

Missing binaries fail the tests that need them, saying how to install them, because CI must really run them; set
AGENT_RUNNER_SKIP_POSTGRES=1 to skip those tests instead.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agent_runner.temporal_server import free_port

SKIP_ENV = "AGENT_RUNNER_SKIP_POSTGRES"
DATABASE = "agent_runner_test"
INSTALL_HINT = (
    "PostgreSQL's server binaries (initdb, pg_ctl) are missing: install Debian's package with "
    "`apt-get update && apt-get install -y postgresql` (bash .ci/run does it), or set "
    f"{SKIP_ENV}=1 to skip the PostgreSQL tests."
)


def postgres_bindir() -> Path | None:
    """The directory holding `initdb` and `pg_ctl`: Debian's newest `/usr/lib/postgresql/N/bin`, else PATH's."""
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if debian:
        return Path(debian[-1]).parent
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return Path(initdb).resolve().parent
    return None


@contextmanager
def postgres_cluster() -> Iterator[str]:
    """A running cluster with one empty database; yields ``postgresql://postgres@127.0.0.1:PORT/agent_runner_test``."""
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1")
    bindir = postgres_bindir()
    if bindir is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    root = Path(tempfile.mkdtemp(prefix="agent-runner-pg-"))
    data, log = root / "data", root / "server.log"
    as_owner: list[str] = []
    if os.geteuid() == 0:
        # initdb and postgres refuse to run as root: the cluster belongs to the package's `postgres` user.
        shutil.chown(root, user="postgres", group="postgres")
        as_owner = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    started = False
    try:
        _run([*as_owner, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
              "--no-sync", "--no-instructions"])  # fmt: skip
        # fsync off: the cluster is thrown away, so durability only costs test time.
        options = f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={root} -c fsync=off"
        _run([*as_owner, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options, "-w", "-t", "60",
              "start"])  # fmt: skip
        started = True
        import psycopg

        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/postgres", autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")
        yield f"postgresql://postgres@127.0.0.1:{port}/{DATABASE}"
    except subprocess.CalledProcessError as exc:
        server_log = log.read_text() if log.exists() else ""
        pytest.fail(f"starting PostgreSQL failed: {exc}\n{exc.stdout}\n{exc.stderr}\n{server_log}", pytrace=False)
    finally:
        if started:
            subprocess.run(
                [*as_owner, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                capture_output=True,
                timeout=60,
            )
        shutil.rmtree(root, ignore_errors=True)


def _run(command: list[str]) -> None:
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=120)
