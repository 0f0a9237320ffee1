"""The service behind the HTTP API and the CLI: validated writes to the log, reads from a live BuildState.

`Service` implements `partbuild.api.surface.Client` in-process (the CLI's `--db`
back end) and is what the HTTP routes call. It is composed of one class per
resource (`wants`, `partitions`, `runs`, `groups`, `sources`, `subscriptions`,
`events`, `changes`, `audit`, `jobs`, `operations`: the same modules as in `partbuild.api.surface`
and `partbuild.api.models`), each deriving from `base.ServiceBase`, which holds
the database, the live state (its own, or the one a process shares with its
orchestrator in `up`, so one process holds one BuildState), the guarded append
and the consistent reads. Each resource's module also converts its state
records to response models. Errors are the domain exceptions of `partbuild.api.errors`.
"""

from __future__ import annotations

from partbuild.api.service.audit import AuditService
from partbuild.api.service.automation import AutomationService
from partbuild.api.service.bulk import BulkService
from partbuild.api.service.changes import ChangesService
from partbuild.api.service.events import EventsService
from partbuild.api.service.groups import GroupsService
from partbuild.api.service.jobs import JobsService
from partbuild.api.service.operations import OperationsService
from partbuild.api.service.partitions import PartitionsService
from partbuild.api.service.runs import RunsService
from partbuild.api.service.sources import SourcesService
from partbuild.api.service.subscriptions import SubscriptionsService
from partbuild.api.service.wants import WantsService

__all__ = ["Service"]


class Service(
    WantsService,
    PartitionsService,
    BulkService,
    RunsService,
    GroupsService,
    SourcesService,
    AutomationService,
    SubscriptionsService,
    EventsService,
    ChangesService,
    AuditService,
    OperationsService,
    JobsService,
):
    """Validated writes and consistent reads over one event log: every operation of `Client`."""
