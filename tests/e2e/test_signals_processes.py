"""Stop signals acted on by a watcher thread: a SIGTERM that lands while the main thread holds a lock still stops."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.process

# The main thread spends nearly all its time inside `Event.clear()`, holding the event's lock,
# as the orchestrator's loop does between steps. A handler that set that event in the main
# thread would wait for the lock forever; the watcher thread takes it once the main thread lets go.
BUSY_MAIN_THREAD = textwrap.dedent(
    """
    import sys, threading
    from partbuild.api.commands.signals import on_stop_signal

    stop, wake = threading.Event(), threading.Event()

    def request_stop(signum):
        print(signum.name, flush=True)
        stop.set()
        wake.set()

    on_stop_signal(request_stop)
    print("ready", flush=True)
    while not stop.is_set():
        wake.clear()
    sys.exit(0)
    """
)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_stops_a_main_thread_busy_inside_a_lock(signum: signal.Signals) -> None:
    for _attempt in range(5):  # several landings at random points of the loop
        child = subprocess.Popen([sys.executable, "-c", BUSY_MAIN_THREAD], stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
        time.sleep(0.05)
        child.send_signal(signum)
        try:
            out, _ = child.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            child.kill()
            pytest.fail(f"{signum.name} did not stop a process whose main thread was inside Event.clear()")
        assert child.returncode == 0
        assert out == f"{signum.name}\n"
