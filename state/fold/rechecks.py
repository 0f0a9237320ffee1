"""Checks run again on what is already Live (issue 24): ChecksRequest and its answer, ChecksRerun.

Someone (the API, the CLI) asks for a job's checks to run again on one of its Live instances,
after a check was added or changed: a `ChecksRequest`. An orchestrator runs the job's current
checks on the instance and answers with a `ChecksRerun` carrying the results (or, `skipped`,
why none ran). The fold keeps the results with the others (`record_checks`, so the instance
shows them as of the answer's seq) and accepts one answer per request: a second orchestrator,
or one restarted half-way, is rejected. A blocking failure on the canonical Live instance comes
with a `PartitionTaint` naming that instance in the same append (state/fold/instances.py rejects
it once the instance is no longer canonical); an errored check taints nothing (the check is at
fault, not the data): it is recorded as errored.

What the fold keeps: `BuildState.check_requests`, request id -> `(instance UUID, requested seq,
answered seq or 0)`, in the order they were asked for (digested as items: empty in every older
log, it hashes nothing), and the index `pending_check_requests` (request ids not answered yet,
oldest first). Requests are rare (an operator's), so reads scan them. As of a seq N, a request
exists if asked for by N and is pending if not answered by N (`PastCheckRequests`): the fields
are set once each, so no history is needed. Retention keeps requests (UUIDs only).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.checks import CheckRow, check_rows, record_checks
from partbuild.state.fold.records import InstanceState
from partbuild.state.fold.validation import id_problem, short

if TYPE_CHECKING:
    from partbuild.state.fold.build_state import BuildState

MAX_REQUEST_COMMENT = 2_000
MAX_SKIPPED = 1_000

# (instance UUID, seq of the ChecksRequest, seq of its ChecksRerun or 0 while pending)
CheckRequest = tuple[str, int, int]
# (request id, instance UUID, what to record on it: None when the rerun skipped)
RerunPlan = tuple[str, str, tuple[CheckRow, ...] | None]


def check_checks_request(state: BuildState, seq: int, msg: pb.ChecksRequest, event: pb.Event) -> str | CheckRequest:
    """Validate a ChecksRequest: a new id, a Live instance a job built, no request of it pending."""
    problem = id_problem("checks request id", msg.request_id) or id_problem("instance UUID", msg.instance_uuid)
    if problem:
        return problem
    if msg.request_id in state.check_requests:
        return f"checks request {short(msg.request_id)} already exists"
    if len(msg.comment) > MAX_REQUEST_COMMENT:
        return f"a checks request's comment is longer than {MAX_REQUEST_COMMENT} characters"
    instance = state.instances.get(msg.instance_uuid)
    if instance is None:
        return f"unknown partition instance {short(msg.instance_uuid)}"
    if instance.built_by is None:
        return f"instance {instance.uuid} of {short(instance.ref)} is source data: no job's checks apply to it"
    # Live only: the checks guard what readers may read; a Failed or Tainted instance is read by nobody.
    if instance.state != InstanceState.LIVE:
        what = instance.state.name.lower()
        return f"instance {instance.uuid} of {short(instance.ref)} is {what}; only a Live instance's checks run again"
    for request_id in state.pending_check_requests:
        if state.check_requests[request_id][0] == instance.uuid:
            return f"checks of instance {instance.uuid} are already requested (request {short(request_id)}, pending)"
    return msg.instance_uuid, seq, 0


def apply_checks_request(state: BuildState, seq: int, plan: CheckRequest, event: pb.Event) -> None:
    """Record the request as pending."""
    request_id = event.checks_request.request_id
    state.check_requests[request_id] = plan
    state.pending_check_requests[request_id] = None
    if state.touched is not None:
        state.touched.check_requests.add(request_id)


def check_checks_rerun(state: BuildState, seq: int, msg: pb.ChecksRerun, event: pb.Event) -> str | RerunPlan:
    """Validate a ChecksRerun: the answer to a pending request, with its instance's results or why it skipped."""
    request = state.check_requests.get(msg.request_id)
    if request is None:
        return f"unknown checks request {short(msg.request_id)}"
    uuid, _, answered = request
    if answered:
        return f"checks request {short(msg.request_id)} was already answered at seq {answered}"
    if msg.skipped:
        if msg.HasField("checks"):
            return "a checks rerun that skipped carries no results"
        if len(msg.skipped) > MAX_SKIPPED:
            return f"a checks rerun's skipped reason is longer than {MAX_SKIPPED} characters"
        return msg.request_id, uuid, None
    if not msg.HasField("checks") or not msg.checks.results:
        return "a checks rerun carries results or says why it skipped"
    if msg.checks.instance_uuid != uuid:
        return f"checks request {short(msg.request_id)} is about instance {uuid}, not {short(msg.checks.instance_uuid)}"
    if uuid not in state.instances:  # retention dropped it since: there is nothing to record the results on
        return f"instance {uuid} was dropped by retention; the rerun can only skip"
    rows = check_rows(msg.checks.results, uuid, success=False)  # a rerun may carry failures and errors
    if isinstance(rows, str):
        return rows
    return msg.request_id, uuid, rows


def apply_checks_rerun(state: BuildState, seq: int, plan: RerunPlan, event: pb.Event) -> None:
    """Answer the request; record the results on the instance (its checks as of this seq)."""
    request_id, uuid, rows = plan
    _, requested, _ = state.check_requests[request_id]
    state.check_requests[request_id] = (uuid, requested, seq)
    del state.pending_check_requests[request_id]
    if state.touched is not None:
        state.touched.check_requests.add(request_id)
    if rows is not None:
        built_by = state.instances[uuid].built_by  # a request's instance has one (`check_checks_request`)
        run = state.job_runs.get(built_by) if built_by is not None else None
        record_checks(state, seq, ((uuid, rows),), run.job_label if run is not None else "")


def requests_of(requests: Mapping[str, CheckRequest], uuid: str) -> list[tuple[str, CheckRequest]]:
    """The checks requests of one instance, oldest first (a scan: requests are rare)."""
    return [(request_id, request) for request_id, request in requests.items() if request[0] == uuid]


class PastCheckRequests(Mapping[str, CheckRequest]):
    """`check_requests` as of a seq: those asked for by then, unanswered if answered later."""

    def __init__(self, live: Mapping[str, CheckRequest], seq: int) -> None:
        self._live = live
        self._seq = seq

    def __getitem__(self, request_id: str) -> CheckRequest:
        uuid, requested, answered = self._live[request_id]
        if requested > self._seq:
            raise KeyError(request_id)
        return uuid, requested, answered if answered <= self._seq else 0

    def __iter__(self) -> Iterator[str]:
        # In the order asked for, so the ones asked for by the seq are a prefix.
        for request_id, (_, requested, _) in self._live.items():
            if requested > self._seq:
                return
            yield request_id

    def __len__(self) -> int:
        return sum(1 for _ in self)


def past_pending(requests: Mapping[str, CheckRequest]) -> dict[str, None]:
    """The pending index of `requests` (as of a seq: a `PastCheckRequests`), oldest first."""
    return {request_id: None for request_id, request in requests.items() if not request[2]}
