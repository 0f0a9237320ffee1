"""Shared bits of the benchmarks: machine description and the simulated W1-shaped history."""

from __future__ import annotations

import itertools
import os
import platform
import signal
import sys
from collections.abc import Iterator

from partbuild.examples.clicks.simulate import SimulationPlan, simulate
from partbuild.proto.v1 import events_pb2 as pb

WEEKS_PER_SITE = 52


def machine() -> str:
    """One line naming the machine, for RESULTS.md."""
    cpu = "unknown cpu"
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores, {ram_gib():.0f} GiB RAM, "
        f"Python {platform.python_version()} ({sys.implementation.name})"
    )


def ram_gib() -> float:
    """Total memory of the machine, from /proc/meminfo (0 when unknown)."""
    try:
        with open("/proc/meminfo") as info:
            kib = next(int(line.split()[1]) for line in info if line.startswith("MemTotal:"))
    except (OSError, StopIteration):
        return 0.0
    return kib / 2**20


def w1_history(events: int, heartbeats_per_run: int = 1) -> Iterator[pb.Event]:
    """The first `events` events of a simulated W1 history big enough to hold them."""
    # simulate() is lazy: ask for more sites than can be needed and stop at `events`.
    plan = SimulationPlan(weeks=WEEKS_PER_SITE, sites=events, heartbeats_per_run=heartbeats_per_run)
    return itertools.islice(simulate(plan), events)


def rss_bytes() -> tuple[int, int]:
    """(current, peak) resident set size of this process, from /proc."""
    fields = {}
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(("VmRSS:", "VmHWM:")):
                name, value = line.split(":")
                fields[name] = int(value.split()[0]) * 1024
    return fields["VmRSS"], fields["VmHWM"]


def proc_stats() -> Iterator[tuple[int, str, list[str]]]:
    """(pid, command name, the /proc/<pid>/stat fields after the name) of every process we can read.

    The fields start at `state`: [0] state, [1] ppid, [2] pgrp, ... [11] utime, [12] stime.
    """
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                text = stat.read()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        yield int(entry), text[text.index("(") + 1 : text.rindex(")")], text.rsplit(")", 1)[1].split()


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so `with` blocks stop child processes and remove temporary files."""

    def handler(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
