"""The group checker (`state.log.group_verify`, `partbuild group verify`): quiet on a sound log, loud on a fold bug.

A sound fold never accepts what the checker flags, so the failing cases simulate
fold bugs: a check of `state/fold/group.py` (or a fence check) patched to accept
everything, then the checker replays the log with that same broken fold.
"""

from __future__ import annotations

import pytest

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold import group as group_fold
from partbuild.state.fold import job_runs
from partbuild.state.log.events import envelope
from partbuild.state.log.group_verify import verify, verify_report
from partbuild.state.log.store import EventLog
from partbuild.state.rules.bucketing import bucket

from foldkit import Story
from groupkit import NAMESPACE, as_task, epoch, fenced, group_of, message, settle, start, with_state

REFS = [f"noop/{n}" for n in range(40)]


def _accept(*args: object) -> None:
    return None


def grouped() -> Story:
    """Group g (a leads, b, c) over 6 buckets, settled, with wants for REFS."""
    story = Story()
    story.want("w", *REFS)
    start(story, ["a", "b", "c"], "a", "e1")
    settle(story)
    return story


def _ref_of(story: Story, task: str, index: int = 0) -> str:
    """The index-th wanted ref whose bucket `task` owns now."""
    owners = group_of(story).owners
    return [ref for ref in REFS if owners.get(bucket(NAMESPACE, ref, 6)) == task][index]


def _run(story: Story, run_id: str, ref: str, task: str) -> pb.JobRunBuffer:
    return pb.JobRunBuffer(
        job_run_id=run_id, job_label="noop", instance_uuids=[story.uuid(ref)], fence=fenced(story, task)
    )


def test_a_sound_log_with_rebalances_hand_offs_and_rejected_late_decisions_verifies() -> None:
    story = grouped()
    ref = _ref_of(story, "b")
    story.ok(_run(story, "r1", ref, "b"), source=as_task("b"))
    late = _run(story, "r2", _ref_of(story, "b", 1), "b")
    story.rejected(_run(story, "r3", _ref_of(story, "c"), "b"), "does not own bucket")
    start(story, ["a", "c", "d"], "c", "e2")
    story.rejected(late, "is an old epoch")
    settle(story)
    owner = group_of(story).owners[bucket(NAMESPACE, ref, 6)]  # b's stale run: its bucket's new owner fails it
    story.ok(pb.JobRunFailure(job_run_id="r1", fence=fenced(story, owner)), source=as_task(owner))
    story.ok(pb.WantCreate(want_id="d", partition_refs=["raw/x"], fence=fenced(story, "d")), source=as_task("d"))
    report = verify_report(story.events)
    assert report.problems == [] and verify(list(enumerate(story.events, 1))) == []
    assert (report.groups, report.epochs, report.fenced_decisions, report.rejected) == (1, 2, 3, 2)
    assert report.task_messages == sum(e.WhichOneof("payload") == "group_task_message" for e in story.events)
    assert report.events == len(story.events)


def test_a_fold_accepting_a_non_owners_run_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(job_runs, "fenced_decision_problem", _accept)
    story = grouped()
    theirs = _ref_of(story, "c")
    story.ok(_run(story, "r1", theirs, "b"))
    (problem,) = verify(story.events)
    assert problem.seq == len(story.events)
    assert (
        problem.text == f"job_run_buffer of 'b' names {theirs!r} in bucket {bucket(NAMESPACE, theirs, 6)}, owned by 'c'"
    )


def test_a_fold_accepting_a_stolen_bucket_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_fold, "step_problem", _accept)
    monkeypatch.setattr(group_fold, "_others_problem", _accept)
    story = grouped()
    story.ok(message(story, with_state(group_of(story).states["a"], share={1: "c"})))  # a hands 1 to c
    msg = message(story, with_state(group_of(story).states["b"], data={1, 2, 4, 6}))  # b takes 1 and a's 2 ...
    msg.connector_state[2].data.append(6)  # ... and writes 6 into c's state
    story.ok(msg)
    texts = [str(problem) for problem in verify(story.events)]
    seq = len(story.events)
    assert texts == [
        f"seq {seq}: task message of 'b' changed the state of 'c'",
        f"seq {seq}: bucket 1 moved to 'b' without being shared to it",
        f"seq {seq}: bucket 2 has 2 owners: 'a', 'b'",
    ]


def test_a_fold_accepting_a_stale_or_unsticky_epoch_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_fold, "_next_epoch_problem", _accept)
    monkeypatch.setattr(group_fold, "epoch_problem", _accept)
    story = grouped()
    stale = epoch(story, ["a", "b", "c"], "a", "e2")
    stale.previous_epoch_id = "e0"
    del stale.connector_state[1].data[0]  # b loses 4 ...
    stale.connector_state[0].data.append(4)  # ... to the leader
    stale.connector_state[0].data.sort()
    del stale.connector_state[2].data[:]  # c loses everything: nobody owns 3 and 5
    story.ok(stale)
    texts = [problem.text for problem in verify(story.events)]
    assert texts == [
        "epoch 'e2' replaced 'e1' but was built on 'e0'",
        "surviving member 'b' lost buckets 4 and gained none",
        "surviving member 'c' lost buckets 3,5 and gained none",
        "epoch 'e2' starts with buckets 3,5 owned by nobody",
    ]


def test_unparseable_payloads_are_replayed_as_rejections() -> None:
    story = grouped()
    payloads = [(seq, event.SerializeToString()) for seq, event in enumerate(story.events, 1)]
    payloads.append((len(payloads) + 1, b"\xff\xff"))
    report = verify_report(payloads)
    assert report.problems == [] and report.events == len(payloads)


# ----------------------------------------------------------------- the command


def test_cli_group_verify(capsys: pytest.CaptureFixture[str], sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from clikit import run_cli

    story = grouped()
    with EventLog.open(sqlite_url, auto_upgrade=True) as log:
        log.append(story.events)
        code, out, err = run_cli(capsys, "group", "verify", "--db", sqlite_url)
        assert code == 0 and err == "" and out.count("\n") == 1, (out, err)
        assert out.startswith(f"group invariants hold at every seq up to {len(story.events)}: ")
        assert "1 groups, 1 epochs" in out
        monkeypatch.setattr(job_runs, "fenced_decision_problem", _accept)  # a fold bug, in this process
        bad = Story()
        bad.state, bad.clock_ms, bad.events = story.state, story.clock_ms, list(story.events)
        theirs = _ref_of(bad, "c")
        log.append([envelope(_run(bad, "r1", theirs, "b"), timestamp_ms=bad.clock_ms + 1)])
        code, out, err = run_cli(capsys, "group", "verify", "--db", sqlite_url)
    assert code == 1 and out.startswith(f"seq {len(story.events) + 1}: job_run_buffer of 'b' names {theirs!r}")
    assert err.strip() == f"partbuild: error: 1 group invariant problems in {len(story.events) + 1} events"
    code, _, err = run_cli(capsys, "group", "verify", "--db", "sqlite:////nonexistent/x.db")
    assert code == 2 and "no database at" in err
