"""Audit: replay the log (to a seq) for its digest, counts and rejected events, optionally verified from seq 0
(and the state store checked against it)."""

from __future__ import annotations

from partbuild.api.errors import Conflict
from partbuild.api.models.audit import AuditOut, RejectedEventOut
from partbuild.api.service.base import ServiceBase
from partbuild.state.log.audit import AuditInputError, audit
from partbuild.state.store.verify import store_problems


class AuditService(ServiceBase):
    """Audits of the log."""

    def audit(self, rejected_limit: int = 100, as_of_seq: int | None = None, verify: bool = False) -> AuditOut:
        """Replay the log (to `as_of_seq`), optionally verifying against a full replay from seq 0."""
        try:
            report = audit(
                self.log,
                self.log.snapshots,
                as_of=as_of_seq,
                verify=verify,
                rejected_limit=rejected_limit,
                verify_also=lambda state: store_problems(self.db.changes, state),
            )
        except AuditInputError as exc:  # a seq after the log head
            raise Conflict(str(exc).replace("--as-of", "as_of_seq")) from None
        rejected = [RejectedEventOut(seq=r.seq, event_type=r.event_type, reason=r.reason) for r in report.rejected]
        fields = {name: getattr(report, name) for name in AuditOut.model_fields if name != "rejected"}
        return AuditOut(rejected=rejected, **fields)
