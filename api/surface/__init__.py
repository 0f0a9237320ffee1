"""partbuild's API, declared once: every operation's name, parameters, result and HTTP route, by resource.

Each resource (wants, partitions, bulk, runs, groups, sources, automation, subscriptions,
events, changes, audit, jobs, operations) is a module here holding a Protocol of its operations, each
marked with `@operation(...)`, and its `TAG` in the document. The same name is
the resource's module in `partbuild.api.models` and `partbuild.api.service`.

`Client`, the union of the resource protocols, is the one flat interface the CLI
talks to. Its two implementations never restate a signature:
- `Service` (the in-process back end, `--db`) implements each method; a test
  checks its signatures against these;
- `HttpClient` (`--server`) and the FastAPI routes (one router per resource)
  are derived from `OPERATIONS`.

Adding an endpoint: a method with `@operation(...)` in its resource's protocol,
its models, its method on the resource's service class, and its test.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Protocol

from partbuild.api.surface.audit import AuditApi
from partbuild.api.surface.automation import AutomationApi
from partbuild.api.surface.bulk import BulkApi
from partbuild.api.surface.changes import ChangesApi
from partbuild.api.surface.common import (
    ANONYMOUS,
    MAX_SEQ,
    USER_HEADER,
    AsOfSeq,
    Cursor,
    Limit,
    MinSeq,
    Operation,
    User,
    operation,
)
from partbuild.api.surface.events import EventsApi
from partbuild.api.surface.groups import GroupsApi
from partbuild.api.surface.jobs import JobsApi
from partbuild.api.surface.operations import OperationsApi
from partbuild.api.surface.partitions import PartitionsApi
from partbuild.api.surface.runs import RunsApi
from partbuild.api.surface.sources import SourcesApi
from partbuild.api.surface.subscriptions import SubscriptionsApi
from partbuild.api.surface.wants import WantsApi

__all__ = [
    "ANONYMOUS",
    "MAX_SEQ",
    "OPERATIONS",
    "RESOURCES",
    "USER_HEADER",
    "AsOfSeq",
    "Client",
    "Cursor",
    "Limit",
    "MinSeq",
    "Operation",
    "Resource",
    "User",
    "operation",
]


# The order of the bases is the order of the routers, so of the paths in the document.
class Client(
    WantsApi,
    PartitionsApi,
    BulkApi,
    RunsApi,
    GroupsApi,
    SourcesApi,
    AutomationApi,
    SubscriptionsApi,
    EventsApi,
    ChangesApi,
    AuditApi,
    OperationsApi,
    JobsApi,
    Protocol,
):
    """Every read and write of partbuild, as the CLI, the HTTP API and tests use them."""


@dataclass(frozen=True)
class Resource:
    """One resource of the API: its name (its module in surface, models and service), tag and protocol."""

    name: str
    tag: str
    protocol: type


def _resource(protocol: type) -> Resource:
    module = sys.modules[protocol.__module__]
    return Resource(name=protocol.__module__.rsplit(".", 1)[-1], tag=module.TAG, protocol=protocol)


RESOURCES: dict[str, Resource] = {
    resource.name: resource for resource in (_resource(base) for base in Client.__bases__ if base is not Protocol)
}


def _operations() -> dict[str, Operation]:
    """Every marked method of every resource protocol, in the resources' order and then as declared."""
    found: dict[str, Operation] = {}
    for resource in RESOURCES.values():
        for name, function in vars(resource.protocol).items():
            marks = getattr(function, "__operation__", None)
            if marks is None:
                continue
            assert name not in found, f"operation {name!r} is declared twice"
            found[name] = Operation(name=name, resource=resource.name, declared=function, **marks)
    return found


OPERATIONS: dict[str, Operation] = _operations()
