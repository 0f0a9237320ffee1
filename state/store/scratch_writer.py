"""Writes a bounded replay's scratch rows, in a process of its own while the replay folds on.

A span's rows are made in the folding process (they read the state); writing them (SQLite's B-trees, most of a
bounded replay's time besides the fold) is work a second core can do. Not on a thread: the driver lets go of
the GIL at each row's step and then waits for the folding thread's switch interval to get it back, so a
writing thread wrote next to nothing until the fold stopped to wait for it (measured in line: 23.6 s, on a
thread 26.7 s, for 250k events). The child is this module run by the same interpreter, fed its database's URL
then pickled `Rows` on its standard input, answering each span on its standard output (no multiprocessing:
its spawn runs the caller's main module again, which a script of a user's need not allow).

Spans are written one at a time, in order, and every read of the rows waits for what was handed over before it
(`wait`): a record evicted before its row is in is read back once the row is there, never found missing. Once
the last span is in, a verifying replay hands the child the comparison of the two stores (`compare`), made there
while the replay's digest is made here (state/store/store_compare.py).
"""

from __future__ import annotations

import contextlib
import pickle
import subprocess
import sys
from dataclasses import dataclass
from types import TracebackType
from typing import IO, Any, NamedTuple

from partbuild.state.db import create_engine_for
from partbuild.state.store.changes import ChangeStore
from partbuild.state.store.counts import CountRow
from partbuild.state.store.records import RecordStore, Rows
from partbuild.state.store.store_compare import store_differences


class ScratchWriteFailed(RuntimeError):
    """The child could not write a span's rows (its error said), or it went away."""


@dataclass(frozen=True)
class ChangeRows:
    """A span's change rows (`change_row`s) and the count rows they make, for a scratch `ChangeStore` (a span
    that holds no retention: one that does is written in line, its dropped instances known to the fold alone)."""

    first: int
    last: int
    changes: list[tuple[object, ...]]
    counts: list[CountRow]


class Span(NamedTuple):
    """What a span writes to the scratch stores: the records' rows, and the changes with their counts."""

    rows: Rows
    changes: ChangeRows | None = None


class _Compare(NamedTuple):
    """A request to the child: compare the store at `real_url` with the scratch ones (`store_differences`)."""

    real_url: str
    upto: int
    whole: bool


class _Compared(NamedTuple):
    """The child's answer to a `_Compare`: the differences found, or what went wrong."""

    problems: list[str]
    failure: str | None = None


class RowWriter:
    """Writes spans into `records` (and `changes`, a `ChangeStore` of another database, when given): in line
    (`in_child` False: what a test or a small replay needs), or from a child process, each span while the next
    is folded."""

    def __init__(self, records: RecordStore, changes: ChangeStore | None = None, *, in_child: bool = False) -> None:
        self.records, self.changes = records, changes
        self._child: subprocess.Popen[bytes] | None = None
        self._pending = False
        self._compared: list[str] | None = None  # in line: the comparison's answer
        self._comparing = False  # in a child: a comparison handed over, its answer not yet read
        if in_child:
            command = [sys.executable, "-m", __name__]
            self._child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            # On its standard input, not its command line: a database URL may hold a password (`ps` shows argv).
            _send(self._child, (_url(records.engine), _url(changes.records.engine) if changes is not None else None))

    def submit(self, rows: Rows, changes: ChangeRows | None = None) -> None:
        """Write `rows` (and `changes`) after every span handed over before (in line: now)."""
        self.wait()
        if self._child is None:
            _write(self.records, self.changes, Span(rows, changes))
            return
        _send(self._child, Span(rows, changes))
        self._pending = True

    def wait(self) -> None:
        """Until every span handed over is written (a failure to write one is raised here)."""
        if self._child is None or not self._pending:
            return
        self._pending = False
        failure = self._answer()
        if failure is not None:
            raise ScratchWriteFailed(f"writing the scratch rows failed: {failure}")

    def compare(self, real: ChangeStore, upto: int, *, whole: bool) -> None:
        """Compare `real` with the scratch stores once every span handed over is written (`store_differences`;
        in a child, while the caller goes on); `differences` says what was found."""
        if self.changes is None:
            raise ValueError("a writer of rows alone has no scratch changes to compare")
        self.wait()
        if self._child is None:
            self._compared = store_differences(real, self.changes, self.records, upto, whole=whole)
            return
        _send(self._child, _Compare(_url(real.records.engine), upto, whole))
        self._comparing = True

    def differences(self) -> list[str]:
        """What `compare` found ([] if the stores agree), waiting for the child's answer."""
        if self._child is None or not self._comparing:
            if self._compared is None:
                raise RuntimeError("no comparison was handed over")
            return self._compared
        self._comparing = False
        answer = self._answer()
        if not isinstance(answer, _Compared) or answer.failure is not None:
            failure = answer.failure if isinstance(answer, _Compared) else repr(answer)
            raise ScratchWriteFailed(f"comparing the stores failed: {failure}")
        self._compared = answer.problems
        return answer.problems

    def _answer(self) -> Any:
        assert self._child is not None and self._child.stdout is not None
        try:
            return pickle.load(self._child.stdout)
        except EOFError:
            raise ScratchWriteFailed(f"the scratch rows' writer exited ({self._child.wait()})") from None

    def close(self) -> None:
        """Wait for the writes, then let the child go (it closes its connections first)."""
        child = self._child
        if child is None:
            return
        try:
            self.wait()
            if self._comparing:  # an answer never asked for (the caller failed first): read, and not said
                with contextlib.suppress(ScratchWriteFailed):
                    self.differences()
        finally:
            self._child = None
            with contextlib.suppress(ScratchWriteFailed, OSError):  # gone already: said by `wait` or `submit`
                _send(child, None)
            for pipe in (child.stdin, child.stdout):
                if pipe is not None:
                    with contextlib.suppress(OSError):  # what is left in a pipe to a child gone
                        pipe.close()
            child.wait(timeout=60)

    def __enter__(self) -> RowWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


def _url(engine: Any) -> str:
    return str(engine.url.render_as_string(hide_password=False))


def _send(child: subprocess.Popen[bytes], message: object) -> None:
    assert child.stdin is not None
    try:
        pickle.dump(message, child.stdin, protocol=pickle.HIGHEST_PROTOCOL)
        child.stdin.flush()
    except BrokenPipeError:
        raise ScratchWriteFailed(f"the scratch rows' writer exited ({child.wait()})") from None


def _write(records: RecordStore, changes: ChangeStore | None, span: Span) -> None:
    records.dump(span.rows)
    moved = span.changes
    if moved is None:
        return
    if changes is None:
        raise ScratchWriteFailed("a span's changes came to a writer of rows alone")
    if not changes.write_rows(moved.first, moved.last, moved.changes, moved.counts):
        raise ScratchWriteFailed(f"the scratch store's watermark is not at {moved.first}")


def serve(requests: IO[bytes], answers: IO[bytes]) -> None:
    """The child: write each `Span` read from `requests` into the stores at the URLs read first, answering None
    or what went wrong, and compare the stores when asked (`_Compare`), until a None (or the end) comes."""
    records_url, changes_url = pickle.load(requests)
    records = RecordStore(create_engine_for(records_url))
    changes = ChangeStore(create_engine_for(changes_url)) if changes_url is not None else None
    engines = [records.engine, *([changes.records.engine] if changes is not None else [])]
    try:
        while True:
            try:
                message: Any = pickle.load(requests)
            except EOFError:
                return
            if message is None:
                return
            answer = (
                _compared(message, records, changes)
                if isinstance(message, _Compare)
                else _written(message, records, changes)
            )
            pickle.dump(answer, answers)
            answers.flush()
    finally:
        for engine in engines:
            engine.dispose()


def _written(span: Span, records: RecordStore, changes: ChangeStore | None) -> str | None:
    """The child's answer to a span: None once written, else what went wrong (the replay stops there)."""
    try:
        _write(records, changes, span)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _compared(request: _Compare, records: RecordStore, changes: ChangeStore | None) -> _Compared:
    """The child's answer to a `_Compare` (never sent to a writer of rows alone: `RowWriter.compare` refuses)."""
    assert changes is not None
    real = ChangeStore(create_engine_for(request.real_url))
    try:
        return _Compared(store_differences(real, changes, records, request.upto, whole=request.whole))
    except Exception as exc:  # (the URL is not said: it may hold a password)
        return _Compared([], f"{type(exc).__name__}: {exc}")
    finally:
        real.records.engine.dispose()


if __name__ == "__main__":
    # The module by its name, not this `__main__` copy: the requests unpickle as its classes (`_Compare`).
    from partbuild.state.store import scratch_writer

    scratch_writer.serve(sys.stdin.buffer, sys.stdout.buffer)
