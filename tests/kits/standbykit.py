"""A PostgreSQL primary and its hot standby of the test's own: two clusters on free ports, the standby fed by
streaming replication from a base backup of the primary.

The machine's PostgreSQL server stays as it is (its pg_hba.conf allows no replication); these clusters are
made with the installed server's binaries in a temporary folder, run as the `postgres` user (the server
refuses to run as root), and stopped and removed after. Skips where there is no such server or user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from upkit import free_port

DATABASE = "test"


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def _as_postgres(*command: str | Path) -> None:
    """Run a server binary as the `postgres` user (from root) or as ourselves."""
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    done = subprocess.run([*prefix, *map(str, command)], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} failed ({done.returncode}): {done.stdout}{done.stderr}")


def _configure(data: Path, port: int, sockets: Path) -> None:
    with (data / "postgresql.conf").open("a") as conf:  # later lines win over the copied ones
        conf.write(
            f"port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{sockets}'\n"
            "wal_level = replica\nmax_wal_senders = 4\nhot_standby = on\nfsync = off\n"
        )


def _wait_ready(bin_dir: Path, port: int) -> None:
    deadline = time.monotonic() + 60
    while subprocess.run([bin_dir / "pg_isready", "-h", "127.0.0.1", "-p", str(port)], capture_output=True).returncode:
        assert time.monotonic() < deadline, f"the cluster on port {port} is not ready within 60 s"
        time.sleep(0.2)


@contextmanager
def hot_standby() -> Iterator[tuple[str, str]]:
    """Yield (the primary's URL, the standby's URL), both of database `test`, the standby replicating."""
    bin_dir = _bin_dir()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server binaries under /usr/lib/postgresql")
    try:
        owner = pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("no postgres user to run a PostgreSQL cluster as")
    folder = Path(tempfile.mkdtemp(prefix="pb-standby-"))
    os.chown(folder, owner.pw_uid, owner.pw_gid)
    primary, standby = folder / "primary", folder / "standby"
    ports = free_port(), free_port()
    started: list[Path] = []
    try:
        _as_postgres(bin_dir / "initdb", "-D", primary, "-A", "trust", "-U", "postgres", "--no-sync")
        _configure(primary, ports[0], folder)
        _as_postgres(bin_dir / "pg_ctl", "-D", primary, "-l", folder / "primary.log", "-w", "start")
        started.append(primary)
        _wait_ready(bin_dir, ports[0])
        host = ["-h", "127.0.0.1", "-U", "postgres"]
        _as_postgres(bin_dir / "createdb", *host, "-p", str(ports[0]), DATABASE)
        # -R: standby.signal and the primary's connection, so the copy starts as its hot standby.
        _as_postgres(
            bin_dir / "pg_basebackup", *host, "-p", str(ports[0]), "-D", standby, "-R", "-c", "fast", "--no-sync"
        )
        _configure(standby, ports[1], folder)
        _as_postgres(bin_dir / "pg_ctl", "-D", standby, "-l", folder / "standby.log", "-w", "start")
        started.append(standby)
        _wait_ready(bin_dir, ports[1])
        yield (
            f"postgresql+psycopg://postgres@127.0.0.1:{ports[0]}/{DATABASE}",
            f"postgresql+psycopg://postgres@127.0.0.1:{ports[1]}/{DATABASE}",
        )
    finally:
        for data in reversed(started):
            _as_postgres(bin_dir / "pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
        shutil.rmtree(folder, ignore_errors=True)
