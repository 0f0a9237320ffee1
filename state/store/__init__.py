"""The state store: what the fold decided, projected into tables of the log's database (issue 37).

The log stays the truth and the fold keeps deciding validity; the store holds what reads need, keyed so
that a read costs its answer, and it is derived: replay rebuilds it. Its tables: every change by seq
(`ChangeStore`, changes.py), the counts by state at each seq one moved (counts.py), and every instance,
want, job run and ref in a row with what a read of the past needs (`RecordStore`, records.py; read alone by
`StoredRecords`, stored.py), kept up to the live state's head by a `Projector`. Each projection has a
watermark, the seq its rows are written up to: a read answers from the store only when the watermark has
reached what it asks about, and from the live state otherwise.

Above `queries/` (it projects what they compute) and below `database.py` (which hands it out).
"""
