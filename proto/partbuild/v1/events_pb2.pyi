from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorClass(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_CLASS_UNSPECIFIED: _ClassVar[ErrorClass]
    ERROR_CLASS_RETRYABLE: _ClassVar[ErrorClass]
    ERROR_CLASS_PERMANENT: _ClassVar[ErrorClass]

class SubscriptionAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SUBSCRIPTION_ACTION_UNSPECIFIED: _ClassVar[SubscriptionAction]
    SUBSCRIPTION_ACTION_PAUSE: _ClassVar[SubscriptionAction]
    SUBSCRIPTION_ACTION_RESUME: _ClassVar[SubscriptionAction]
    SUBSCRIPTION_ACTION_DELETE: _ClassVar[SubscriptionAction]

class SubscriptionQueue(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SUBSCRIPTION_QUEUE_UNSPECIFIED: _ClassVar[SubscriptionQueue]
    SUBSCRIPTION_QUEUE_MAIN: _ClassVar[SubscriptionQueue]
    SUBSCRIPTION_QUEUE_RQ: _ClassVar[SubscriptionQueue]
    SUBSCRIPTION_QUEUE_DLQ: _ClassVar[SubscriptionQueue]

class TickKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TICK_KIND_UNSPECIFIED: _ClassVar[TickKind]
    TICK_KIND_SCHEDULED: _ClassVar[TickKind]
    TICK_KIND_CATCH_UP: _ClassVar[TickKind]
    TICK_KIND_SKIPPED: _ClassVar[TickKind]
    TICK_KIND_MANUAL: _ClassVar[TickKind]

class ReactionKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REACTION_KIND_UNSPECIFIED: _ClassVar[ReactionKind]
    REACTION_KIND_UPSTREAM_CHANGE: _ClassVar[ReactionKind]
    REACTION_KIND_SOURCE_ARRIVAL: _ClassVar[ReactionKind]
    REACTION_KIND_CODE_CHANGE: _ClassVar[ReactionKind]
ERROR_CLASS_UNSPECIFIED: ErrorClass
ERROR_CLASS_RETRYABLE: ErrorClass
ERROR_CLASS_PERMANENT: ErrorClass
SUBSCRIPTION_ACTION_UNSPECIFIED: SubscriptionAction
SUBSCRIPTION_ACTION_PAUSE: SubscriptionAction
SUBSCRIPTION_ACTION_RESUME: SubscriptionAction
SUBSCRIPTION_ACTION_DELETE: SubscriptionAction
SUBSCRIPTION_QUEUE_UNSPECIFIED: SubscriptionQueue
SUBSCRIPTION_QUEUE_MAIN: SubscriptionQueue
SUBSCRIPTION_QUEUE_RQ: SubscriptionQueue
SUBSCRIPTION_QUEUE_DLQ: SubscriptionQueue
TICK_KIND_UNSPECIFIED: TickKind
TICK_KIND_SCHEDULED: TickKind
TICK_KIND_CATCH_UP: TickKind
TICK_KIND_SKIPPED: TickKind
TICK_KIND_MANUAL: TickKind
REACTION_KIND_UNSPECIFIED: ReactionKind
REACTION_KIND_UPSTREAM_CHANGE: ReactionKind
REACTION_KIND_SOURCE_ARRIVAL: ReactionKind
REACTION_KIND_CODE_CHANGE: ReactionKind

class EventSource(_message.Message):
    __slots__ = ("manual", "job_run", "system")
    MANUAL_FIELD_NUMBER: _ClassVar[int]
    JOB_RUN_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    manual: ManualSource
    job_run: JobRunSource
    system: SystemSource
    def __init__(self, manual: _Optional[_Union[ManualSource, _Mapping]] = ..., job_run: _Optional[_Union[JobRunSource, _Mapping]] = ..., system: _Optional[_Union[SystemSource, _Mapping]] = ...) -> None: ...

class ManualSource(_message.Message):
    __slots__ = ("user",)
    USER_FIELD_NUMBER: _ClassVar[int]
    user: str
    def __init__(self, user: _Optional[str] = ...) -> None: ...

class JobRunSource(_message.Message):
    __slots__ = ("job_run_id",)
    JOB_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    job_run_id: str
    def __init__(self, job_run_id: _Optional[str] = ...) -> None: ...

class SystemSource(_message.Message):
    __slots__ = ("component", "worker")
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    component: str
    worker: str
    def __init__(self, component: _Optional[str] = ..., worker: _Optional[str] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("event_id", "timestamp_ms", "source", "want_create", "want_cancel", "job_run_buffer", "job_run_heartbeat", "job_run_success", "job_run_failure", "job_run_cancel", "job_run_missing_deps", "partition_taint", "partition_observed", "instance_retention", "instances_wait_upstream", "clock_tick", "bucket_run_start", "bucket_layout", "group_epoch", "group_task_message", "source_scan_progress", "source_scan_request", "subscription_create", "subscription_change", "subscription_reshard", "subscription_offset_reset", "partition_gone", "checks_request", "checks_rerun", "schedule_tick", "schedule_control", "reaction_fired", "reactions_noted")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    WANT_CREATE_FIELD_NUMBER: _ClassVar[int]
    WANT_CANCEL_FIELD_NUMBER: _ClassVar[int]
    JOB_RUN_BUFFER_FIELD_NUMBER: _ClassVar[int]
    JOB_RUN_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    JOB_RUN_SUCCESS_FIELD_NUMBER: _ClassVar[int]
    JOB_RUN_FAILURE_FIELD_NUMBER: _ClassVar[int]
    JOB_RUN_CANCEL_FIELD_NUMBER: _ClassVar[int]
    JOB_RUN_MISSING_DEPS_FIELD_NUMBER: _ClassVar[int]
    PARTITION_TAINT_FIELD_NUMBER: _ClassVar[int]
    PARTITION_OBSERVED_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_RETENTION_FIELD_NUMBER: _ClassVar[int]
    INSTANCES_WAIT_UPSTREAM_FIELD_NUMBER: _ClassVar[int]
    CLOCK_TICK_FIELD_NUMBER: _ClassVar[int]
    BUCKET_RUN_START_FIELD_NUMBER: _ClassVar[int]
    BUCKET_LAYOUT_FIELD_NUMBER: _ClassVar[int]
    GROUP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    GROUP_TASK_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_SCAN_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_SCAN_REQUEST_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_CREATE_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_CHANGE_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_RESHARD_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_OFFSET_RESET_FIELD_NUMBER: _ClassVar[int]
    PARTITION_GONE_FIELD_NUMBER: _ClassVar[int]
    CHECKS_REQUEST_FIELD_NUMBER: _ClassVar[int]
    CHECKS_RERUN_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_TICK_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_CONTROL_FIELD_NUMBER: _ClassVar[int]
    REACTION_FIRED_FIELD_NUMBER: _ClassVar[int]
    REACTIONS_NOTED_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    timestamp_ms: int
    source: EventSource
    want_create: WantCreate
    want_cancel: WantCancel
    job_run_buffer: JobRunBuffer
    job_run_heartbeat: JobRunHeartbeat
    job_run_success: JobRunSuccess
    job_run_failure: JobRunFailure
    job_run_cancel: JobRunCancel
    job_run_missing_deps: JobRunMissingDeps
    partition_taint: PartitionTaint
    partition_observed: PartitionObserved
    instance_retention: InstanceRetention
    instances_wait_upstream: InstancesWaitUpstream
    clock_tick: ClockTick
    bucket_run_start: BucketRunStart
    bucket_layout: BucketLayout
    group_epoch: GroupEpoch
    group_task_message: GroupTaskMessage
    source_scan_progress: SourceScanProgress
    source_scan_request: SourceScanRequest
    subscription_create: SubscriptionCreate
    subscription_change: SubscriptionChange
    subscription_reshard: SubscriptionReshard
    subscription_offset_reset: SubscriptionOffsetReset
    partition_gone: PartitionGone
    checks_request: ChecksRequest
    checks_rerun: ChecksRerun
    schedule_tick: ScheduleTick
    schedule_control: ScheduleControl
    reaction_fired: ReactionFired
    reactions_noted: ReactionsNoted
    def __init__(self, event_id: _Optional[str] = ..., timestamp_ms: _Optional[int] = ..., source: _Optional[_Union[EventSource, _Mapping]] = ..., want_create: _Optional[_Union[WantCreate, _Mapping]] = ..., want_cancel: _Optional[_Union[WantCancel, _Mapping]] = ..., job_run_buffer: _Optional[_Union[JobRunBuffer, _Mapping]] = ..., job_run_heartbeat: _Optional[_Union[JobRunHeartbeat, _Mapping]] = ..., job_run_success: _Optional[_Union[JobRunSuccess, _Mapping]] = ..., job_run_failure: _Optional[_Union[JobRunFailure, _Mapping]] = ..., job_run_cancel: _Optional[_Union[JobRunCancel, _Mapping]] = ..., job_run_missing_deps: _Optional[_Union[JobRunMissingDeps, _Mapping]] = ..., partition_taint: _Optional[_Union[PartitionTaint, _Mapping]] = ..., partition_observed: _Optional[_Union[PartitionObserved, _Mapping]] = ..., instance_retention: _Optional[_Union[InstanceRetention, _Mapping]] = ..., instances_wait_upstream: _Optional[_Union[InstancesWaitUpstream, _Mapping]] = ..., clock_tick: _Optional[_Union[ClockTick, _Mapping]] = ..., bucket_run_start: _Optional[_Union[BucketRunStart, _Mapping]] = ..., bucket_layout: _Optional[_Union[BucketLayout, _Mapping]] = ..., group_epoch: _Optional[_Union[GroupEpoch, _Mapping]] = ..., group_task_message: _Optional[_Union[GroupTaskMessage, _Mapping]] = ..., source_scan_progress: _Optional[_Union[SourceScanProgress, _Mapping]] = ..., source_scan_request: _Optional[_Union[SourceScanRequest, _Mapping]] = ..., subscription_create: _Optional[_Union[SubscriptionCreate, _Mapping]] = ..., subscription_change: _Optional[_Union[SubscriptionChange, _Mapping]] = ..., subscription_reshard: _Optional[_Union[SubscriptionReshard, _Mapping]] = ..., subscription_offset_reset: _Optional[_Union[SubscriptionOffsetReset, _Mapping]] = ..., partition_gone: _Optional[_Union[PartitionGone, _Mapping]] = ..., checks_request: _Optional[_Union[ChecksRequest, _Mapping]] = ..., checks_rerun: _Optional[_Union[ChecksRerun, _Mapping]] = ..., schedule_tick: _Optional[_Union[ScheduleTick, _Mapping]] = ..., schedule_control: _Optional[_Union[ScheduleControl, _Mapping]] = ..., reaction_fired: _Optional[_Union[ReactionFired, _Mapping]] = ..., reactions_noted: _Optional[_Union[ReactionsNoted, _Mapping]] = ...) -> None: ...

class WantCreate(_message.Message):
    __slots__ = ("want_id", "partition_refs", "data_timestamp_ms", "ttl_seconds", "sla_seconds", "comment", "parent_want_id", "root_want_id", "fence")
    WANT_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_REFS_FIELD_NUMBER: _ClassVar[int]
    DATA_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SLA_SECONDS_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    PARENT_WANT_ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_WANT_ID_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    want_id: str
    partition_refs: _containers.RepeatedScalarFieldContainer[str]
    data_timestamp_ms: int
    ttl_seconds: int
    sla_seconds: int
    comment: str
    parent_want_id: str
    root_want_id: str
    fence: DecisionFence
    def __init__(self, want_id: _Optional[str] = ..., partition_refs: _Optional[_Iterable[str]] = ..., data_timestamp_ms: _Optional[int] = ..., ttl_seconds: _Optional[int] = ..., sla_seconds: _Optional[int] = ..., comment: _Optional[str] = ..., parent_want_id: _Optional[str] = ..., root_want_id: _Optional[str] = ..., fence: _Optional[_Union[DecisionFence, _Mapping]] = ...) -> None: ...

class WantCancel(_message.Message):
    __slots__ = ("want_id", "reason")
    WANT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    want_id: str
    reason: str
    def __init__(self, want_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class JobRunBuffer(_message.Message):
    __slots__ = ("job_run_id", "job_label", "instance_uuids", "bucket", "fence", "code_version", "blocking_checks", "serve_stale")
    JOB_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_LABEL_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_UUIDS_FIELD_NUMBER: _ClassVar[int]
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    CODE_VERSION_FIELD_NUMBER: _ClassVar[int]
    BLOCKING_CHECKS_FIELD_NUMBER: _ClassVar[int]
    SERVE_STALE_FIELD_NUMBER: _ClassVar[int]
    job_run_id: str
    job_label: str
    instance_uuids: _containers.RepeatedScalarFieldContainer[str]
    bucket: BucketScope
    fence: DecisionFence
    code_version: str
    blocking_checks: _containers.RepeatedScalarFieldContainer[str]
    serve_stale: bool
    def __init__(self, job_run_id: _Optional[str] = ..., job_label: _Optional[str] = ..., instance_uuids: _Optional[_Iterable[str]] = ..., bucket: _Optional[_Union[BucketScope, _Mapping]] = ..., fence: _Optional[_Union[DecisionFence, _Mapping]] = ..., code_version: _Optional[str] = ..., blocking_checks: _Optional[_Iterable[str]] = ..., serve_stale: _Optional[bool] = ...) -> None: ...

class BucketScope(_message.Message):
    __slots__ = ("namespace", "bucket_id", "bucket_total")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_TOTAL_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    bucket_id: int
    bucket_total: int
    def __init__(self, namespace: _Optional[str] = ..., bucket_id: _Optional[int] = ..., bucket_total: _Optional[int] = ...) -> None: ...

class BucketRunStart(_message.Message):
    __slots__ = ("bucket", "static_bucket")
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    STATIC_BUCKET_FIELD_NUMBER: _ClassVar[int]
    bucket: BucketScope
    static_bucket: bool
    def __init__(self, bucket: _Optional[_Union[BucketScope, _Mapping]] = ..., static_bucket: _Optional[bool] = ...) -> None: ...

class BucketLayout(_message.Message):
    __slots__ = ("namespace", "bucket_total")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    BUCKET_TOTAL_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    bucket_total: int
    def __init__(self, namespace: _Optional[str] = ..., bucket_total: _Optional[int] = ...) -> None: ...

class JobRunHeartbeat(_message.Message):
    __slots__ = ("job_run_id",)
    JOB_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    job_run_id: str
    def __init__(self, job_run_id: _Optional[str] = ...) -> None: ...

class OutputResult(_message.Message):
    __slots__ = ("instance_uuid", "location", "row_count", "bytes", "input_instance_uuids", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    INSTANCE_UUID_FIELD_NUMBER: _ClassVar[int]
    LOCATION_FIELD_NUMBER: _ClassVar[int]
    ROW_COUNT_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    INPUT_INSTANCE_UUIDS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    instance_uuid: str
    location: str
    row_count: int
    bytes: int
    input_instance_uuids: _containers.RepeatedScalarFieldContainer[str]
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, instance_uuid: _Optional[str] = ..., location: _Optional[str] = ..., row_count: _Optional[int] = ..., bytes: _Optional[int] = ..., input_instance_uuids: _Optional[_Iterable[str]] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CheckResult(_message.Message):
    __slots__ = ("name", "passed", "blocking", "description", "metrics", "errored", "duration_ms")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    BLOCKING_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    ERRORED_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    passed: bool
    blocking: bool
    description: str
    metrics: _containers.ScalarMap[str, float]
    errored: bool
    duration_ms: int
    def __init__(self, name: _Optional[str] = ..., passed: _Optional[bool] = ..., blocking: _Optional[bool] = ..., description: _Optional[str] = ..., metrics: _Optional[_Mapping[str, float]] = ..., errored: _Optional[bool] = ..., duration_ms: _Optional[int] = ...) -> None: ...

class InstanceChecks(_message.Message):
    __slots__ = ("instance_uuid", "results")
    INSTANCE_UUID_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    instance_uuid: str
    results: _containers.RepeatedCompositeFieldContainer[CheckResult]
    def __init__(self, instance_uuid: _Optional[str] = ..., results: _Optional[_Iterable[_Union[CheckResult, _Mapping]]] = ...) -> None: ...

class JobRunSuccess(_message.Message):
    __slots__ = ("job_run_id", "input_instance_uuids", "outputs", "checks", "failed_outputs")
    JOB_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_INSTANCE_UUIDS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    FAILED_OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    job_run_id: str
    input_instance_uuids: _containers.RepeatedScalarFieldContainer[str]
    outputs: _containers.RepeatedCompositeFieldContainer[OutputResult]
    checks: _containers.RepeatedCompositeFieldContainer[InstanceChecks]
    failed_outputs: _containers.RepeatedCompositeFieldContainer[OutputFailure]
    def __init__(self, job_run_id: _Optional[str] = ..., input_instance_uuids: _Optional[_Iterable[str]] = ..., outputs: _Optional[_Iterable[_Union[OutputResult, _Mapping]]] = ..., checks: _Optional[_Iterable[_Union[InstanceChecks, _Mapping]]] = ..., failed_outputs: _Optional[_Iterable[_Union[OutputFailure, _Mapping]]] = ...) -> None: ...

class OutputFailure(_message.Message):
    __slots__ = ("instance_uuid", "error_class", "message")
    INSTANCE_UUID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CLASS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    instance_uuid: str
    error_class: ErrorClass
    message: str
    def __init__(self, instance_uuid: _Optional[str] = ..., error_class: _Optional[_Union[ErrorClass, str]] = ..., message: _Optional[str] = ...) -> None: ...

class JobRunFailure(_message.Message):
    __slots__ = ("job_run_id", "error_class", "message", "retry_after_ms", "fence", "checks", "failed_outputs", "split")
    JOB_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CLASS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    FAILED_OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    job_run_id: str
    error_class: ErrorClass
    message: str
    retry_after_ms: int
    fence: DecisionFence
    checks: _containers.RepeatedCompositeFieldContainer[InstanceChecks]
    failed_outputs: _containers.RepeatedCompositeFieldContainer[OutputFailure]
    split: bool
    def __init__(self, job_run_id: _Optional[str] = ..., error_class: _Optional[_Union[ErrorClass, str]] = ..., message: _Optional[str] = ..., retry_after_ms: _Optional[int] = ..., fence: _Optional[_Union[DecisionFence, _Mapping]] = ..., checks: _Optional[_Iterable[_Union[InstanceChecks, _Mapping]]] = ..., failed_outputs: _Optional[_Iterable[_Union[OutputFailure, _Mapping]]] = ..., split: _Optional[bool] = ...) -> None: ...

class JobRunCancel(_message.Message):
    __slots__ = ("job_run_id", "reason", "replace_instances")
    JOB_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REPLACE_INSTANCES_FIELD_NUMBER: _ClassVar[int]
    job_run_id: str
    reason: str
    replace_instances: bool
    def __init__(self, job_run_id: _Optional[str] = ..., reason: _Optional[str] = ..., replace_instances: _Optional[bool] = ...) -> None: ...

class JobRunMissingDeps(_message.Message):
    __slots__ = ("job_run_id", "missing_refs")
    JOB_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    MISSING_REFS_FIELD_NUMBER: _ClassVar[int]
    job_run_id: str
    missing_refs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job_run_id: _Optional[str] = ..., missing_refs: _Optional[_Iterable[str]] = ...) -> None: ...

class PartitionTaint(_message.Message):
    __slots__ = ("partition_ref", "reason", "only_this_ref", "instance_uuid", "keep_serving")
    PARTITION_REF_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ONLY_THIS_REF_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_UUID_FIELD_NUMBER: _ClassVar[int]
    KEEP_SERVING_FIELD_NUMBER: _ClassVar[int]
    partition_ref: str
    reason: str
    only_this_ref: bool
    instance_uuid: str
    keep_serving: bool
    def __init__(self, partition_ref: _Optional[str] = ..., reason: _Optional[str] = ..., only_this_ref: _Optional[bool] = ..., instance_uuid: _Optional[str] = ..., keep_serving: _Optional[bool] = ...) -> None: ...

class PartitionObserved(_message.Message):
    __slots__ = ("partition_ref", "location", "row_count", "bytes", "metadata", "version", "version_strong", "judge_gone_by_version")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PARTITION_REF_FIELD_NUMBER: _ClassVar[int]
    LOCATION_FIELD_NUMBER: _ClassVar[int]
    ROW_COUNT_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    VERSION_STRONG_FIELD_NUMBER: _ClassVar[int]
    JUDGE_GONE_BY_VERSION_FIELD_NUMBER: _ClassVar[int]
    partition_ref: str
    location: str
    row_count: int
    bytes: int
    metadata: _containers.ScalarMap[str, str]
    version: str
    version_strong: bool
    judge_gone_by_version: bool
    def __init__(self, partition_ref: _Optional[str] = ..., location: _Optional[str] = ..., row_count: _Optional[int] = ..., bytes: _Optional[int] = ..., metadata: _Optional[_Mapping[str, str]] = ..., version: _Optional[str] = ..., version_strong: _Optional[bool] = ..., judge_gone_by_version: _Optional[bool] = ...) -> None: ...

class InstancesWaitUpstream(_message.Message):
    __slots__ = ("waits", "fence")
    WAITS_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    waits: _containers.RepeatedCompositeFieldContainer[InstanceWait]
    fence: DecisionFence
    def __init__(self, waits: _Optional[_Iterable[_Union[InstanceWait, _Mapping]]] = ..., fence: _Optional[_Union[DecisionFence, _Mapping]] = ...) -> None: ...

class InstanceWait(_message.Message):
    __slots__ = ("instance_uuid", "upstream_refs")
    INSTANCE_UUID_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_REFS_FIELD_NUMBER: _ClassVar[int]
    instance_uuid: str
    upstream_refs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, instance_uuid: _Optional[str] = ..., upstream_refs: _Optional[_Iterable[str]] = ...) -> None: ...

class ClockTick(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class InstanceRetention(_message.Message):
    __slots__ = ("drop_superseded_created_before_seq", "drop_superseded_before_seq")
    DROP_SUPERSEDED_CREATED_BEFORE_SEQ_FIELD_NUMBER: _ClassVar[int]
    DROP_SUPERSEDED_BEFORE_SEQ_FIELD_NUMBER: _ClassVar[int]
    drop_superseded_created_before_seq: int
    drop_superseded_before_seq: int
    def __init__(self, drop_superseded_created_before_seq: _Optional[int] = ..., drop_superseded_before_seq: _Optional[int] = ...) -> None: ...

class GroupTaskState(_message.Message):
    __slots__ = ("task_id", "state_timestamp_ms", "data", "share")
    class ShareEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: str
        def __init__(self, key: _Optional[int] = ..., value: _Optional[str] = ...) -> None: ...
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    state_timestamp_ms: int
    data: _containers.RepeatedScalarFieldContainer[int]
    share: _containers.ScalarMap[int, str]
    def __init__(self, task_id: _Optional[str] = ..., state_timestamp_ms: _Optional[int] = ..., data: _Optional[_Iterable[int]] = ..., share: _Optional[_Mapping[int, str]] = ...) -> None: ...

class GroupEpoch(_message.Message):
    __slots__ = ("group", "epoch_id", "previous_epoch_id", "namespace", "bucket_total", "leader_task_id", "message_timestamp_ms", "members", "connector_state", "fences_removed_runs")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    EPOCH_ID_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_EPOCH_ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    BUCKET_TOTAL_FIELD_NUMBER: _ClassVar[int]
    LEADER_TASK_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    CONNECTOR_STATE_FIELD_NUMBER: _ClassVar[int]
    FENCES_REMOVED_RUNS_FIELD_NUMBER: _ClassVar[int]
    group: str
    epoch_id: str
    previous_epoch_id: str
    namespace: str
    bucket_total: int
    leader_task_id: str
    message_timestamp_ms: int
    members: _containers.RepeatedScalarFieldContainer[str]
    connector_state: _containers.RepeatedCompositeFieldContainer[GroupTaskState]
    fences_removed_runs: bool
    def __init__(self, group: _Optional[str] = ..., epoch_id: _Optional[str] = ..., previous_epoch_id: _Optional[str] = ..., namespace: _Optional[str] = ..., bucket_total: _Optional[int] = ..., leader_task_id: _Optional[str] = ..., message_timestamp_ms: _Optional[int] = ..., members: _Optional[_Iterable[str]] = ..., connector_state: _Optional[_Iterable[_Union[GroupTaskState, _Mapping]]] = ..., fences_removed_runs: _Optional[bool] = ...) -> None: ...

class GroupTaskMessage(_message.Message):
    __slots__ = ("group", "epoch_id", "task_id", "message_timestamp_ms", "connector_state")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    EPOCH_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    CONNECTOR_STATE_FIELD_NUMBER: _ClassVar[int]
    group: str
    epoch_id: str
    task_id: str
    message_timestamp_ms: int
    connector_state: _containers.RepeatedCompositeFieldContainer[GroupTaskState]
    def __init__(self, group: _Optional[str] = ..., epoch_id: _Optional[str] = ..., task_id: _Optional[str] = ..., message_timestamp_ms: _Optional[int] = ..., connector_state: _Optional[_Iterable[_Union[GroupTaskState, _Mapping]]] = ...) -> None: ...

class DecisionFence(_message.Message):
    __slots__ = ("group", "epoch_id", "task_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    EPOCH_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    epoch_id: str
    task_id: str
    def __init__(self, group: _Optional[str] = ..., epoch_id: _Optional[str] = ..., task_id: _Optional[str] = ...) -> None: ...

class SourceScanProgress(_message.Message):
    __slots__ = ("source", "pass_number", "after_key", "last_key", "resume_token", "done", "items", "partitions", "error", "error_retryable", "shard", "split_keys", "bytes", "split_hint")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    PASS_NUMBER_FIELD_NUMBER: _ClassVar[int]
    AFTER_KEY_FIELD_NUMBER: _ClassVar[int]
    LAST_KEY_FIELD_NUMBER: _ClassVar[int]
    RESUME_TOKEN_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    SPLIT_KEYS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    SPLIT_HINT_FIELD_NUMBER: _ClassVar[int]
    source: str
    pass_number: int
    after_key: bytes
    last_key: bytes
    resume_token: bytes
    done: bool
    items: int
    partitions: int
    error: str
    error_retryable: bool
    shard: int
    split_keys: _containers.RepeatedScalarFieldContainer[bytes]
    bytes: int
    split_hint: bytes
    def __init__(self, source: _Optional[str] = ..., pass_number: _Optional[int] = ..., after_key: _Optional[bytes] = ..., last_key: _Optional[bytes] = ..., resume_token: _Optional[bytes] = ..., done: _Optional[bool] = ..., items: _Optional[int] = ..., partitions: _Optional[int] = ..., error: _Optional[str] = ..., error_retryable: _Optional[bool] = ..., shard: _Optional[int] = ..., split_keys: _Optional[_Iterable[bytes]] = ..., bytes: _Optional[int] = ..., split_hint: _Optional[bytes] = ...) -> None: ...

class PartitionGone(_message.Message):
    __slots__ = ("partition_ref", "location", "source", "pass_number", "shard", "scan_seq")
    PARTITION_REF_FIELD_NUMBER: _ClassVar[int]
    LOCATION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    PASS_NUMBER_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    SCAN_SEQ_FIELD_NUMBER: _ClassVar[int]
    partition_ref: str
    location: str
    source: str
    pass_number: int
    shard: int
    scan_seq: int
    def __init__(self, partition_ref: _Optional[str] = ..., location: _Optional[str] = ..., source: _Optional[str] = ..., pass_number: _Optional[int] = ..., shard: _Optional[int] = ..., scan_seq: _Optional[int] = ...) -> None: ...

class SourceScanRequest(_message.Message):
    __slots__ = ("source", "reason")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    source: str
    reason: str
    def __init__(self, source: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class SubscriptionFilter(_message.Message):
    __slots__ = ("event_types", "ref_prefixes", "ref_patterns", "job", "root_want")
    EVENT_TYPES_FIELD_NUMBER: _ClassVar[int]
    REF_PREFIXES_FIELD_NUMBER: _ClassVar[int]
    REF_PATTERNS_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    ROOT_WANT_FIELD_NUMBER: _ClassVar[int]
    event_types: _containers.RepeatedScalarFieldContainer[str]
    ref_prefixes: _containers.RepeatedScalarFieldContainer[str]
    ref_patterns: _containers.RepeatedScalarFieldContainer[str]
    job: str
    root_want: str
    def __init__(self, event_types: _Optional[_Iterable[str]] = ..., ref_prefixes: _Optional[_Iterable[str]] = ..., ref_patterns: _Optional[_Iterable[str]] = ..., job: _Optional[str] = ..., root_want: _Optional[str] = ...) -> None: ...

class RetryPolicy(_message.Message):
    __slots__ = ("max_attempts", "backoff_initial_ms", "backoff_max_ms", "max_age_ms", "timeout_ms")
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_INITIAL_MS_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_MAX_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    max_attempts: int
    backoff_initial_ms: int
    backoff_max_ms: int
    max_age_ms: int
    timeout_ms: int
    def __init__(self, max_attempts: _Optional[int] = ..., backoff_initial_ms: _Optional[int] = ..., backoff_max_ms: _Optional[int] = ..., max_age_ms: _Optional[int] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class SubscriptionCreate(_message.Message):
    __slots__ = ("name", "endpoint", "filter", "ordering", "format", "retry", "shard_count", "main_partitions", "rq_partitions", "dlq_partitions", "secret_digest", "start_after_seq")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    ORDERING_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    SHARD_COUNT_FIELD_NUMBER: _ClassVar[int]
    MAIN_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    RQ_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    DLQ_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    SECRET_DIGEST_FIELD_NUMBER: _ClassVar[int]
    START_AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    name: str
    endpoint: str
    filter: SubscriptionFilter
    ordering: str
    format: str
    retry: RetryPolicy
    shard_count: int
    main_partitions: int
    rq_partitions: int
    dlq_partitions: int
    secret_digest: str
    start_after_seq: int
    def __init__(self, name: _Optional[str] = ..., endpoint: _Optional[str] = ..., filter: _Optional[_Union[SubscriptionFilter, _Mapping]] = ..., ordering: _Optional[str] = ..., format: _Optional[str] = ..., retry: _Optional[_Union[RetryPolicy, _Mapping]] = ..., shard_count: _Optional[int] = ..., main_partitions: _Optional[int] = ..., rq_partitions: _Optional[int] = ..., dlq_partitions: _Optional[int] = ..., secret_digest: _Optional[str] = ..., start_after_seq: _Optional[int] = ...) -> None: ...

class SubscriptionChange(_message.Message):
    __slots__ = ("name", "action", "reason")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    name: str
    action: SubscriptionAction
    reason: str
    def __init__(self, name: _Optional[str] = ..., action: _Optional[_Union[SubscriptionAction, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class SubscriptionReshard(_message.Message):
    __slots__ = ("name", "shard_count", "main_partitions", "rq_partitions", "dlq_partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHARD_COUNT_FIELD_NUMBER: _ClassVar[int]
    MAIN_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    RQ_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    DLQ_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    shard_count: int
    main_partitions: int
    rq_partitions: int
    dlq_partitions: int
    def __init__(self, name: _Optional[str] = ..., shard_count: _Optional[int] = ..., main_partitions: _Optional[int] = ..., rq_partitions: _Optional[int] = ..., dlq_partitions: _Optional[int] = ...) -> None: ...

class SubscriptionOffsetReset(_message.Message):
    __slots__ = ("name", "queue", "to_seq", "reason")
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    TO_SEQ_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    name: str
    queue: SubscriptionQueue
    to_seq: int
    reason: str
    def __init__(self, name: _Optional[str] = ..., queue: _Optional[_Union[SubscriptionQueue, str]] = ..., to_seq: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class ChecksRequest(_message.Message):
    __slots__ = ("request_id", "instance_uuid", "comment")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_UUID_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    instance_uuid: str
    comment: str
    def __init__(self, request_id: _Optional[str] = ..., instance_uuid: _Optional[str] = ..., comment: _Optional[str] = ...) -> None: ...

class ChecksRerun(_message.Message):
    __slots__ = ("request_id", "checks", "skipped")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    checks: InstanceChecks
    skipped: str
    def __init__(self, request_id: _Optional[str] = ..., checks: _Optional[_Union[InstanceChecks, _Mapping]] = ..., skipped: _Optional[str] = ...) -> None: ...

class ScheduleTick(_message.Message):
    __slots__ = ("schedule", "tick_ms", "kind", "missed", "want", "error")
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    TICK_MS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MISSED_FIELD_NUMBER: _ClassVar[int]
    WANT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    schedule: str
    tick_ms: int
    kind: TickKind
    missed: int
    want: WantCreate
    error: str
    def __init__(self, schedule: _Optional[str] = ..., tick_ms: _Optional[int] = ..., kind: _Optional[_Union[TickKind, str]] = ..., missed: _Optional[int] = ..., want: _Optional[_Union[WantCreate, _Mapping]] = ..., error: _Optional[str] = ...) -> None: ...

class ScheduleControl(_message.Message):
    __slots__ = ("schedule", "paused", "reason")
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    schedule: str
    paused: bool
    reason: str
    def __init__(self, schedule: _Optional[str] = ..., paused: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class ReactionFired(_message.Message):
    __slots__ = ("job", "kind", "cause_ref", "cause_instance_uuid", "previous_instance_uuid", "want", "built_version", "current_version")
    JOB_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CAUSE_REF_FIELD_NUMBER: _ClassVar[int]
    CAUSE_INSTANCE_UUID_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_INSTANCE_UUID_FIELD_NUMBER: _ClassVar[int]
    WANT_FIELD_NUMBER: _ClassVar[int]
    BUILT_VERSION_FIELD_NUMBER: _ClassVar[int]
    CURRENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    job: str
    kind: ReactionKind
    cause_ref: str
    cause_instance_uuid: str
    previous_instance_uuid: str
    want: WantCreate
    built_version: str
    current_version: str
    def __init__(self, job: _Optional[str] = ..., kind: _Optional[_Union[ReactionKind, str]] = ..., cause_ref: _Optional[str] = ..., cause_instance_uuid: _Optional[str] = ..., previous_instance_uuid: _Optional[str] = ..., want: _Optional[_Union[WantCreate, _Mapping]] = ..., built_version: _Optional[str] = ..., current_version: _Optional[str] = ...) -> None: ...

class ReactionsNoted(_message.Message):
    __slots__ = ("upto_seq", "scopes", "pending", "settled")
    UPTO_SEQ_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    SETTLED_FIELD_NUMBER: _ClassVar[int]
    upto_seq: int
    scopes: _containers.RepeatedScalarFieldContainer[str]
    pending: _containers.RepeatedCompositeFieldContainer[ReactionPending]
    settled: _containers.RepeatedCompositeFieldContainer[ReactionSettled]
    def __init__(self, upto_seq: _Optional[int] = ..., scopes: _Optional[_Iterable[str]] = ..., pending: _Optional[_Iterable[_Union[ReactionPending, _Mapping]]] = ..., settled: _Optional[_Iterable[_Union[ReactionSettled, _Mapping]]] = ...) -> None: ...

class ReactionPending(_message.Message):
    __slots__ = ("job", "kind", "partition_ref", "cause_ref", "cause_instance_uuid", "previous_instance_uuid", "cause_seq", "due_ms")
    JOB_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PARTITION_REF_FIELD_NUMBER: _ClassVar[int]
    CAUSE_REF_FIELD_NUMBER: _ClassVar[int]
    CAUSE_INSTANCE_UUID_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_INSTANCE_UUID_FIELD_NUMBER: _ClassVar[int]
    CAUSE_SEQ_FIELD_NUMBER: _ClassVar[int]
    DUE_MS_FIELD_NUMBER: _ClassVar[int]
    job: str
    kind: ReactionKind
    partition_ref: str
    cause_ref: str
    cause_instance_uuid: str
    previous_instance_uuid: str
    cause_seq: int
    due_ms: int
    def __init__(self, job: _Optional[str] = ..., kind: _Optional[_Union[ReactionKind, str]] = ..., partition_ref: _Optional[str] = ..., cause_ref: _Optional[str] = ..., cause_instance_uuid: _Optional[str] = ..., previous_instance_uuid: _Optional[str] = ..., cause_seq: _Optional[int] = ..., due_ms: _Optional[int] = ...) -> None: ...

class ReactionSettled(_message.Message):
    __slots__ = ("job", "kind", "partition_ref", "cause_instance_uuid", "reason", "failed")
    JOB_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PARTITION_REF_FIELD_NUMBER: _ClassVar[int]
    CAUSE_INSTANCE_UUID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    job: str
    kind: ReactionKind
    partition_ref: str
    cause_instance_uuid: str
    reason: str
    failed: bool
    def __init__(self, job: _Optional[str] = ..., kind: _Optional[_Union[ReactionKind, str]] = ..., partition_ref: _Optional[str] = ..., cause_instance_uuid: _Optional[str] = ..., reason: _Optional[str] = ..., failed: _Optional[bool] = ...) -> None: ...
