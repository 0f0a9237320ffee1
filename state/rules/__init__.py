"""Pure rules the fold, the orchestrator and the API share: no I/O, no clock, no state changes.

`ids` (instance UUIDs), `refs` (the ref rule), `bucketing`, `group` (worker groups),
`topics` and `subscriptions` (webhook subscriptions), `retention`, `queries`,
`listing`, `redact`.
"""
