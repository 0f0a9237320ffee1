"""Worker groups: orchestrators that share buckets through a leader (`run --group`, docs/worker-group.md).

`membership`: joining, heartbeats, leaving, the live members and the reaper; the
leader is whoever holds the group's lock (`Group.leader_lock`), taken from a
holder that is no live member (`Group.holder_is_live`). `steps`: the
epoch and task messages a worker appends, pure. `worker`: the `GroupWorker`
thread of `run --group` (heartbeat, lead, speak). `ownership`: the decider's
scope for a member (the buckets it owns in the current epoch; fenced decisions).
"""
