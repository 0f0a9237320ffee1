"""Reads over the folded state: what the API, the orchestrator and the audits ask of a `BuildState`.

`changes` (what changed between two seqs, a page of it), `lineage` (history of a ref, provenance, lineage),
`listing` (indexes for paged lists, now and as of a seq), `staleness` (instances built by another code
version), `wanted` (waiting instances no active want needs), `retention` (what a retention drops; the seq a
point in time maps to). They read the state (state/fold/) and may read the log (state/log/); nothing in
the fold or the log imports them.
"""
