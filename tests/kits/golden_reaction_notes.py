"""The golden log of issue 35 (durable reactions), its generator kept apart from golden_log.py.

A reactor notes a debounced firing and its cursor; a newer cause restarts the window and an older one noted
late changes nothing; the firing lands and is pending no more; a firing settled because its partition went
Live, another settled as failed (its job gone from the graph); cursors of two bucket scopes, one moving back
(kept where it was). Rejected: notes of the future, an on_code_change noted, a cause after the cursor.
"""

from __future__ import annotations

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.reactions import reaction_want_id
from partbuild.state.log.events import envelope, from_job_run, manual, system
from partbuild.state.rules.ids import instance_uuid

ORCHESTRATOR = system("orchestrator", "host:1:bbbb")
CONNECTOR = system("connector")
UPSTREAM = pb.REACTION_KIND_UPSTREAM_CHANGE
T0 = 1_810_000_000_000


class _Log:
    def __init__(self) -> None:
        self.events: list[pb.Event] = []

    def add(self, payload: object, source: pb.EventSource = ORCHESTRATOR) -> int:
        seq = len(self.events) + 1
        event = envelope(payload, source=source, timestamp_ms=T0 + seq * 1_000, event_id=f"n-{seq}")  # type: ignore[arg-type]
        self.events.append(event)
        return seq

    def observe(self, ref: str, version: str) -> str:
        seen = pb.PartitionObserved(
            partition_ref=ref, location=f"/{ref}/{version}", version=version, version_strong=True
        )
        return instance_uuid(self.add(seen, CONNECTOR), ref)


def _pending(ref: str, cause: tuple[str, str, str], seq: int, due_s: int, job: str = "d") -> pb.ReactionPending:
    cause_ref, uuid, previous = cause
    return pb.ReactionPending(
        job=job,
        kind=UPSTREAM,
        partition_ref=ref,
        cause_ref=cause_ref,
        cause_instance_uuid=uuid,
        previous_instance_uuid=previous,
        cause_seq=seq,
        due_ms=T0 + due_s * 1_000,
    )


def _fired(ref: str, cause: tuple[str, str, str]) -> pb.ReactionFired:
    cause_ref, uuid, previous = cause
    want = pb.WantCreate(want_id=reaction_want_id("d", UPSTREAM, uuid, ref), partition_refs=[ref])
    return pb.ReactionFired(
        job="d",
        kind=UPSTREAM,
        cause_ref=cause_ref,
        cause_instance_uuid=uuid,
        previous_instance_uuid=previous,
        want=want,
    )


def reaction_note_events() -> list[pb.Event]:
    """24 events; the comments give each one's seq."""
    log = _Log()
    raw1 = log.observe("raw/1", "v1")  # 1
    raw2 = log.observe("raw/2", "v1")  # 2
    wanted = log.add(pb.WantCreate(want_id="w", partition_refs=["d/1", "d/2"]), manual("ann"))  # 3
    d1, d2 = instance_uuid(wanted, "d/1"), instance_uuid(wanted, "d/2")
    log.add(pb.JobRunBuffer(job_run_id="r1", job_label="d", instance_uuids=[d1, d2]))  # 4
    log.add(pb.JobRunSuccess(job_run_id="r1", input_instance_uuids=[raw1, raw2]), from_job_run("r1"))  # 5
    log.add(pb.ReactionsNoted(upto_seq=5, scopes=[""]))  # 6: a first cursor, nothing owed
    raw1b = log.observe("raw/1", "v2")  # 7: d/1 stale
    first = ("raw/1", raw1b, raw1)
    log.add(pb.ReactionsNoted(upto_seq=7, scopes=[""], pending=[_pending("d/1", first, 7, 37)]))  # 8: 30 s window
    raw1c = log.observe("raw/1", "v3")  # 9: within the window
    newer = ("raw/1", raw1c, raw1)
    log.add(pb.ReactionsNoted(upto_seq=9, scopes=[""], pending=[_pending("d/1", newer, 9, 39)]))  # 10: restarted
    log.add(pb.ReactionsNoted(upto_seq=8, scopes=[""], pending=[_pending("d/1", first, 7, 37)]))  # 11: late, older
    log.add(pb.ReactionsNoted(upto_seq=12, scopes=[""]))  # 12: rejected, notes of its own seq
    code = _pending("d/1", newer, 9, 39)
    code.kind = pb.REACTION_KIND_CODE_CHANGE
    log.add(pb.ReactionsNoted(upto_seq=9, pending=[code]))  # 13: rejected, code changes owe nothing
    log.add(pb.ReactionsNoted(upto_seq=8, pending=[_pending("d/1", newer, 9, 39)]))  # 14: rejected, cause after
    log.add(_fired("d/1", newer))  # 15: fired, pending no more
    log.add(pb.ReactionsNoted(upto_seq=15, scopes=[""], pending=[_pending("d/1", newer, 9, 39)]))  # 16: fired, ignored
    raw2b = log.observe("raw/2", "v2")  # 17: d/2 stale
    second = ("raw/2", raw2b, raw2)
    gone = _pending("gone/2", second, 17, 47, job="gone")
    scopes = ["bucket ns 1/2", "bucket ns 2/2"]
    log.add(pb.ReactionsNoted(upto_seq=17, scopes=scopes, pending=[_pending("d/2", second, 17, 47), gone]))  # 18
    log.add(
        pb.JobRunBuffer(job_run_id="r2", job_label="d", instance_uuids=[instance_uuid(7, "d/2")])
    )  # 19: its successor since 7
    log.add(pb.JobRunSuccess(job_run_id="r2", input_instance_uuids=[raw2b]), from_job_run("r2"))  # 20: d/2 Live
    built = pb.ReactionSettled(job="d", kind=UPSTREAM, partition_ref="d/2", cause_instance_uuid=raw2b, reason="built")
    failed = pb.ReactionSettled(
        job="gone",
        kind=UPSTREAM,
        partition_ref="gone/2",
        cause_instance_uuid=raw2b,
        reason="job gone is not in the graph",
        failed=True,
    )
    log.add(pb.ReactionsNoted(upto_seq=20, scopes=scopes[:1], settled=[built, failed]))  # 21
    log.add(pb.ReactionsNoted(upto_seq=3, scopes=scopes))  # 22: a cursor never moves back
    raw1d = log.observe("raw/1", "v4")  # 23
    latest = ("raw/1", raw1d, raw1)
    log.add(pb.ReactionsNoted(upto_seq=23, scopes=[""], pending=[_pending("d/1", latest, 23, 83)]))  # 24: owed still
    return log.events
