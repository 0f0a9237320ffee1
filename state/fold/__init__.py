"""The fold's event handlers, by entity, and the one table that registers them.

`BuildState` (state/fold/build_state.py) holds the data and runs `apply`; what each
event type does lives here. Every handler is two functions:

- check(state, seq, msg, event) -> str | plan. Pure: validates the event
  against the state and resolves every object the apply phase will need.
  A `str` is the rejection reason (the log's audit trail: keep reason texts
  stable); anything else is the plan (a small tuple, or the resolved object
  itself; plans never outlive the event and are never pickled). It never
  mutates anything, so an exception raised here (a bug) can be recorded as a
  rejection with the state unchanged.
- apply(state, seq, plan, event) -> None. Mutates, using only the plan and
  the event's envelope (its timestamp). It makes no lookup that can fail on a
  valid plan: the only lookups left follow the state's own indexes, whose
  targets exist by the fold's invariants. An exception raised here leaves the
  state half-applied; `BuildState.apply` raises it as a `FoldError` and the
  state refuses further events, so it is never served or snapshotted.

Modules:

- transitions: the shared state-machine primitives (new canonical instance,
  instance state changes with want tallies, waiters and the upstream
  live/failed cascades, want refresh and end).
- wants: WantCreate, WantCancel, TTL expiry.
- job_runs: JobRunBuffer, JobRunHeartbeat, JobRunSuccess, JobRunFailure,
  JobRunCancel, JobRunMissingDeps.
- instances: PartitionTaint, PartitionObserved, InstanceRetention,
  InstancesWaitUpstream.
- clock: ClockTick.
- buckets: BucketRunStart, BucketLayout, and the bucket scopes of sharded decisions.
- group: GroupEpoch, GroupTaskMessage (worker groups), and the fences of members' decisions.
- sources: SourceScanProgress (the cursors of connector scans), SourceScanRequest.
- subscriptions: SubscriptionCreate, SubscriptionChange, SubscriptionReshard,
  SubscriptionOffsetReset (webhook subscriptions and their topics' layouts).
- validation: pure helpers of the check phases (id and ref rules, quoting).
- records: the records a state holds (`Instance`, `Want`, `JobRun`, `Rejection`,
  `SourceScan`, `ScanRange`) and the state enums.
- layout: how each `BuildState` attribute is declared for the digest (`BuildState.LAYOUT`).
- registry: one row per event type (`EventType`: handler, refs, wants, job run,
  build event, fence, run phase) and the list of record classes a state may hold;
  `HANDLERS` and every event-type list outside the fold derive from it.

Adding an event type means: the message and its `Event.payload` oneof member in
proto/partbuild/v1/events.proto (then `make proto`); one handler (check + apply)
in the module of its entity; one row in `registry.ROWS`, in `Event.payload`
order; its writer; and a golden-log entry (tests/kits/golden_log.py) with its file.
The dispatch, the subscription filters, the delivery messages' ordering keys,
the payload formats' event sets and the group checker's fences follow from the
row. A new entity also needs its record class (in `records` or beside its
rules, listed in `registry.RECORD_CLASSES`) and its `BuildState` attribute (set
in `__init__`, declared in `BuildState.LAYOUT`); tests/state/fold/test_registry.py fails
until both are. Snapshots pick up any change by themselves: their format
fingerprints every module of this package and of `state/rules/`.
"""
