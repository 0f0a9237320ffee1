"""Pure rules the fold, the orchestrator and the API share: no I/O, no clock, no state changes, and no
import of the rest of `state/` (the fold applies them; reads of the state live in `state/queries/`).

`ids` (instance UUIDs), `refs` (the ref rule), `bucketing`, `group` (worker groups), `topics` (webhook
subscriptions' topics and routing), `grid` (the status grid's shapes), `check_results` (a check's result
names), `redact`.
"""
