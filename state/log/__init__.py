"""The event log and what is built from it by replay: the truth everything in `BuildState` comes from.

`store` (EventLog, SnapshotStore), `events` (envelopes for writers), `snapshot`
(encoding), `replay`, `live` (the one BuildState of a process), `digest`,
`audit`, `group_verify` (the worker-group checker), `collector` (GC pauses).
"""
