"""The property of issue 34 over generated histories: readers keep the last good version.

A chain raw -> daily -> monthly, built by jobs that serve stale data, gets random events: new raw versions,
builds that succeed, fail, fail one output on its own or fail as a whole and split, a person's taint (which
withdraws), a keep-serving taint (out of date, not wrong), retention. At every seq:

1. every ref that ever had a Live instance readers got, and was not withdrawn since (by a taint that reached
   it, or a job of the withdraw policy made out of date), has one now;
2. a read of the past (`served_at`, from what the fold kept) answers, as of every earlier seq, what the live
   state answered then;
3. the instance readers get is Live, and a stale one is not canonical while its successor is.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.past import served_at
from partbuild.state.fold.records import InstanceState

from foldkit import Story

REFS = ("raw/1", "raw/2", "daily/1", "daily/2", "monthly/1")
INPUTS = {"daily/1": ("raw/1",), "daily/2": ("raw/2",), "monthly/1": ("daily/1", "daily/2")}
BUILT = ("daily/1", "daily/2", "monthly/1")

# Weighted towards what makes stale periods: sources observed again, builds that succeed, serving stale data.
action = st.one_of(
    st.tuples(st.just("observe"), st.sampled_from(REFS[:2]), st.integers(1, 9)),
    st.tuples(
        st.just("build"),
        st.lists(st.sampled_from(BUILT), min_size=1, max_size=3, unique=True),
        st.sampled_from(["success"] * 4 + ["one fails", "split", "retryable", "permanent"]),
        st.sampled_from([True, True, True, False]),  # the job serves stale data (else: withdraw)
    ),
    st.tuples(st.just("build"), st.just(list(BUILT)), st.just("success"), st.just(True)),
    st.tuples(st.just("taint"), st.sampled_from(REFS), st.booleans()),  # keep serving?
    st.tuples(st.just("retention"), st.integers(0, 10)),
)


class Serving:
    """Applies actions to a Story and checks the property after each event."""

    def __init__(self) -> None:
        self.story = Story()
        self.runs = 0
        self.served_then: list[dict[str, str | None]] = [{}]  # by seq: ref -> UUID readers got
        self.readable: set[str] = set()  # refs that must have a Live instance readers get

    def event(self, payload: object) -> bool:
        story = self.story
        withdraws = isinstance(payload, pb.PartitionTaint)
        before = {ref: story.state.served_instance(ref) for ref in REFS}
        applied = story.apply(payload) is None  # type: ignore[arg-type]
        state = story.state
        now = {ref: state.served_instance(ref) for ref in REFS}
        if applied:
            for ref in REFS:
                lost = before[ref] is not None and now[ref] is None
                # Readable may be lost only to a withdrawal: a taint, or an out-of-date instance of a job that
                # withdraws (its builder run did not serve stale data).
                if lost and ref in self.readable:
                    builder = state.job_runs.get(before[ref].built_by or "")
                    assert withdraws or (builder is not None and not builder.serve_stale), (ref, payload)
                    self.readable.discard(ref)
                if now[ref] is not None:
                    self.readable.add(ref)
        self.served_then.append({ref: (i.uuid if i is not None else None) for ref, i in now.items()})
        self._check(state)
        return applied

    def _check(self, state: BuildState) -> None:
        for ref in self.readable:
            assert state.served_instance(ref) is not None, ref
        for ref, uuid in state.serving.items():
            instance = state.instances[uuid]
            assert instance.state == InstanceState.LIVE and instance.superseded_seq, ref
            assert state.canonical[ref] != uuid

    def check_the_past(self) -> None:
        state = self.story.state
        for seq, then in enumerate(self.served_then):
            for ref in REFS:
                try:
                    past = served_at(state, ref, seq)
                except LookupError:  # retention dropped what the read needs (the API's 410)
                    continue
                assert past == then.get(ref), (ref, seq)

    def act(self, step: tuple) -> None:  # type: ignore[type-arg]
        kind = step[0]
        if kind == "observe":
            _, ref, version = step
            self.event(pb.PartitionObserved(partition_ref=ref, location=f"/{ref}/v{version}", version=f"v{version}"))
        elif kind == "build":
            self._build(*step[1:])
        elif kind == "taint":
            _, ref, keep = step
            self.event(pb.PartitionTaint(partition_ref=ref, reason="checked", keep_serving=keep))
        else:
            self.event(pb.InstanceRetention(drop_superseded_before_seq=max(1, self.story.state.head_seq - step[1])))

    def _outputs(self, refs: list[str], uuids: list[str]) -> list[pb.OutputResult]:
        """Each output with its own inputs: their canonical instances, but those built by this same run."""
        canonical = self.story.state.canonical
        return [
            pb.OutputResult(
                instance_uuid=uuid,
                location=f"/{uuid}",
                input_instance_uuids=[
                    canonical[i] for i in INPUTS[ref] if i in canonical and canonical[i] not in uuids
                ],
            )
            for ref, uuid in zip(refs, uuids, strict=True)
        ]

    def _build(self, refs: list[str], outcome: str, serve_stale: bool) -> None:
        state = self.story.state
        self.runs += 1
        run_id = f"r{self.runs}"
        self.event(pb.WantCreate(want_id=f"w{self.runs}", partition_refs=refs))
        uuids = [state.canonical[ref] for ref in refs]
        if not self.event(
            pb.JobRunBuffer(job_run_id=run_id, job_label="job", instance_uuids=uuids, serve_stale=serve_stale)
        ):
            return
        if outcome == "success":
            self.event(pb.JobRunSuccess(job_run_id=run_id, outputs=self._outputs(refs, uuids)))
        elif outcome == "one fails" and len(uuids) > 1:
            failure = pb.OutputFailure(instance_uuid=uuids[0], error_class=pb.ERROR_CLASS_PERMANENT, message="bad")
            outputs = self._outputs(refs[1:], uuids[1:])
            self.event(pb.JobRunSuccess(job_run_id=run_id, outputs=outputs, failed_outputs=[failure]))
        elif outcome == "split" and len(uuids) > 1:
            self.event(pb.JobRunFailure(job_run_id=run_id, message="boom", split=True))
        else:
            error_class = pb.ERROR_CLASS_PERMANENT if outcome == "permanent" else pb.ERROR_CLASS_RETRYABLE
            self.event(pb.JobRunFailure(job_run_id=run_id, error_class=error_class, message="boom"))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(action, min_size=12, max_size=60))
def test_readers_keep_the_last_good_version_at_every_seq(steps: list[tuple]) -> None:  # type: ignore[type-arg]
    serving = Serving()
    for step in steps:
        serving.act(step)
    serving.check_the_past()
    replayed = BuildState(strict=True)
    for seq, event in enumerate(serving.story.events, start=1):
        replayed.apply(seq, event)
    assert replayed.serving == serving.story.state.serving


def test_the_generator_reaches_a_stale_period_that_ends_and_one_that_is_withdrawn() -> None:
    """The property above is not vacuous: a hand-picked history has both ends of a stale period."""
    serving = Serving()
    serving.act(("observe", "raw/1", 1))
    serving.act(("build", ["daily/1"], "success", True))
    serving.act(("observe", "raw/1", 2))
    assert serving.story.state.serving  # stale, still serving
    serving.act(("build", ["daily/1"], "permanent", True))
    assert serving.story.state.serving
    serving.act(("build", ["daily/1"], "success", True))
    assert not serving.story.state.serving  # the successor went Live
    serving.act(("observe", "raw/1", 3))
    serving.act(("taint", "daily/1", False))
    assert not serving.story.state.serving and "daily/1" not in serving.readable
    serving.check_the_past()
