"""Connectors: discover a source's items through a paged, resumable, redacting contract.

- `toxic`: `ItemKey`, `ItemRef`, `ResumeToken`, bytes from a source that never print themselves
- `paging`: `Cursor`, `Budgets`, `KeyRange` (a key range of a scan)
- `items`: `ScanItem`, `Page`, `Version`, `StableItemId`, `ConnectorTag`, `Location`
- `errors`: `EnumerateError`, `ReadError`, retryable or permanent, sanitized messages
- `contract`: `Capabilities` and the `Connector` protocol
- `in_memory`: `InMemoryConnector`, the deterministic reference connector
- `filesystem`: `FilesystemConnector`, regular files under a root in path byte order (`fs_walk`: the
  bounded-memory walk and seek; `fs_read`: confined reads; `fs_errors`: errno classes)
- `object_store`: `ObjectStoreConnector`, objects under an S3 bucket and prefix through boto3's
  ListObjectsV2 (`s3_config`: configuration and `Secret` credentials; `s3_keys`: StartAfter and bound
  continuation tokens; `s3_errors`: error classes; `s3_logging`: the client library's wire logs withheld)
- `conformance`: the checks every connector must pass; `conformance_pytest` runs them under pytest
- `split_estimator`: `SplitEstimator`, a byte-weighted median key in fixed memory
"""
