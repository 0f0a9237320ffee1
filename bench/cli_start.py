"""CLI start-up, before and after, in one run: `partbuild --version`, `partbuild --help` and a `--server` read.

Each figure is the wall time of a whole `partbuild` process (what a user waits for), the median of
`--runs` runs, the two checkouts' runs interleaved so both see the same load. The `--server` read is
`partbuild wants --server URL --limit 10` against one real `partbuild serve` (of this checkout) on a small
SQLite log written by `partbuild demo`; both checkouts' clients read from the same server, so only the
client's start-up differs. Targets (issue 26, item 4): --version and --help under 0.3 s, a --server read
under 0.5 s. Not an instance-count benchmark: `--instances` does not apply.

Python's bytecode cache: an installed package has one, so by default the commands run with a fresh cache in
a temporary folder (PYTHONPYCACHEPREFIX; the unmeasured first run fills it, and nothing is written into the
checkouts), whatever PYTHONDONTWRITEBYTECODE says. `--bytecode env` runs them in the environment as it is
(with PYTHONDONTWRITEBYTECODE=1 and no `__pycache__` in the checkouts, every partbuild module compiles anew).

    .venv/bin/python bench/cli_start.py [--before /work/wt/fast-cli-before] [--runs 7] [--bytecode env]

`--before` is a checkout (with its own .venv) of the commit to compare with, e.g.
`git worktree add /work/wt/fast-cli-before <commit> && make -C /work/wt/fast-cli-before .venv/bin/.installed`.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from _common import machine
from _servekit import Server

HERE = Path(__file__).resolve().parent.parent
TARGETS_S = {"--version": 0.3, "--help": 0.3, "--server read": 0.5}


def timed(command: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """Wall seconds of one whole process, and its CPU seconds (user + system); it must succeed.

    On a loaded machine the wall time is mostly waiting for a core; the CPU time is what the process
    itself costs, close to what a quiet machine's wall time would be (less any wait for the server).
    """
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()[:300]}")
    return elapsed, (after.ru_utime - used.ru_utime) + (after.ru_stime - used.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, default=Path("/work/wt/fast-cli-before"))
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument(
        "--bytecode", choices=("cached", "env"), default="cached", help="a fresh bytecode cache, or the env as is"
    )
    args = parser.parse_args()
    sides = {"before": args.before / ".venv/bin/partbuild", "after": HERE / ".venv/bin/partbuild"}
    for side, exe in sides.items():
        if not exe.exists():
            raise SystemExit(f"no {exe} ({side}): make its .venv first")
    print(f"machine: {machine()}")
    print(f"load average before: {_load()}")
    with tempfile.TemporaryDirectory(prefix="cli-start-") as tmp:
        workdir = Path(tmp)
        env = _environment(args.bytecode, workdir)
        print(f"bytecode: {'a fresh cache (PYTHONPYCACHEPREFIX)' if env else 'as the environment says'}")
        db_file = workdir / "demo.db"
        timed([str(sides["after"]), "demo", "--db", f"sqlite:///{db_file}", "--weeks", "2", "--sites", "1"])
        with Server(sides["after"], db_file, workdir, startup_timeout_s=120, min_available_gib=0.5) as server:
            print(f"server: {server.base_url}, log head {server.head_seq}")
            commands = {
                "--version": ["--version"],
                "--help": ["--help"],
                "--server read": ["wants", "--server", server.base_url, "--limit", "10"],
            }
            times: dict[tuple[str, str], list[tuple[float, float]]] = {}
            for exe in sides.values():  # a first, unmeasured run of each: bytecode and page cache warm
                for argv in commands.values():
                    timed([str(exe), *argv], env)
            for _ in range(args.runs):
                for name, argv in commands.items():
                    for side, exe in sides.items():
                        times.setdefault((name, side), []).append(timed([str(exe), *argv], env))
    print(f"load average after: {_load()}")
    print(f"\nmedians of {args.runs} runs (seconds, whole processes): wall time, and CPU time (user + system)")
    print(f"{'command':<16}{'before':>9}{'after':>9}{'cpu before':>12}{'cpu after':>11}{'target':>9}  met")
    for name, target in TARGETS_S.items():
        before, after = times[(name, "before")], times[(name, "after")]
        wall = {side: statistics.median(run[0] for run in runs) for side, runs in (("b", before), ("a", after))}
        cpu = {side: statistics.median(run[1] for run in runs) for side, runs in (("b", before), ("a", after))}
        print(
            f"{name:<16}{wall['b']:>9.3f}{wall['a']:>9.3f}{cpu['b']:>12.3f}{cpu['a']:>11.3f}"
            f"{target:>9.2f}  {'yes' if wall['a'] < target else 'NO'}"
        )


def _load() -> str:
    return " ".join(f"{load:.2f}" for load in os.getloadavg())


def _environment(bytecode: str, workdir: Path) -> dict[str, str] | None:
    """The measured commands' environment: None for the env as is, else one writing bytecode under `workdir`."""
    if bytecode == "env":
        return None
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
    return env


if __name__ == "__main__":
    main()
