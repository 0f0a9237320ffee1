"""Keep the S3 client library's own log lines from quoting keys and credentials.

botocore and urllib3 log the wire at DEBUG: request URLs (bucket, prefix,
`start-after=<key>`), headers (the Authorization header names the access key
id), response bodies (every listed key). Their warnings quote URLs too. Once a
connector has built its client, `withhold_wire_logs` puts a filter on every
botocore, boto3, s3transfer and urllib3 logger that exists by then (they are
module loggers, created at import): records below WARNING are dropped, and
the text of the others is replaced by a fixed notice that keeps the logger
name and level. This is process-wide for those loggers, by design: a record
cannot tell which client made it.
"""

from __future__ import annotations

import logging

WIRE_LOGGER_ROOTS = ("botocore", "boto3", "s3transfer", "urllib3")
WITHHELD = "client library message withheld: it may quote object keys or credentials"


class WireLogFilter(logging.Filter):
    """Drops wire traces, replaces the text of warnings and errors."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return False
        record.msg = WITHHELD
        record.args = None
        record.exc_info = None  # a traceback's text quotes the same URLs
        record.exc_text = None
        return True


_FILTER = WireLogFilter()


def _is_wire_logger(name: str) -> bool:
    return any(name == root or name.startswith(root + ".") for root in WIRE_LOGGER_ROOTS)


def withhold_wire_logs() -> int:
    """Put the filter on every client-library logger that exists now; returns how many got it."""
    count = 0
    for name in [*logging.Logger.manager.loggerDict, *WIRE_LOGGER_ROOTS]:
        if not _is_wire_logger(name):
            continue
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
        count += 1
    return count
