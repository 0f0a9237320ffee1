"""The write forms: fields to the API's request models, the range of a pattern's field for backfills.

Forms call the same `Service` methods as the HTTP API, with request models
built by the same pydantic validation, so a form fails exactly where the API
would and shows the API's message.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from partbuild.api.errors import ApiError, validation_message
from partbuild.api.models.common import parse_digits
from partbuild.api.models.wants import MAX_BATCH_REFS, WantRequest
from partbuild.orchestrator.graph import Graph, GraphError, PartitionPattern

MAX_RANGE = MAX_BATCH_REFS
PREVIEW_SHOWN = 5


class FormInvalid(Exception):
    """A form whose fields the API would refuse: the message it would give."""


@dataclass
class WantForm:
    """The want form's fields as typed, kept to refill the form after an error or a preview."""

    mode: str = "one"  # one | list | range
    ref: str = ""
    refs: str = ""
    pattern: str = ""
    start: str = ""
    end: str = ""
    comment: str = ""
    sla_seconds: str = ""
    error: str = ""
    preview: list[str] = field(default_factory=list)
    preview_count: int | None = None

    @classmethod
    def parse(cls, fields: dict[str, list[str]]) -> WantForm:
        # The typed fields, all str (the derived ones, a preview and its count, are left to their defaults).
        values: dict[str, Any] = {
            name: fields.get(name, [""])[0] for name in cls.__dataclass_fields__ if name not in _DERIVED
        }
        form = cls(**values)
        if form.mode not in ("one", "list", "range"):
            form.mode = "one"
        return form

    def wanted_refs(self) -> list[str]:
        """The refs this form asks for; FormInvalid with a message when there are none or too many."""
        if self.mode == "one":
            refs = [self.ref] if self.ref else []
        elif self.mode == "list":
            refs = list(dict.fromkeys(line.strip() for line in self.refs.splitlines() if line.strip()))
        else:
            refs = range_refs(self.pattern, self.start, self.end)
        if not refs:
            raise FormInvalid("name at least one partition ref")
        if len(refs) > MAX_RANGE:
            raise FormInvalid(f"at most {MAX_RANGE} refs in one want; this form names more")
        return refs

    def request(self, refs: list[str]) -> WantRequest:
        """The API's request for these refs (its validation, its messages)."""
        body: dict[str, Any] = {"refs": refs, "comment": self.comment}
        if self.sla_seconds.strip():
            try:  # ASCII digits only ("²" is a digit to str.isdigit), and no longer than a bound can be
                body["sla_seconds"] = parse_digits(self.sla_seconds.strip(), "sla_seconds", noun="a whole number")
            except ValueError as exc:
                raise FormInvalid(f"{exc} (seconds)") from None
        return parse_model(WantRequest, body)


_DERIVED = ("error", "preview", "preview_count")


def parse_model(model: type[Any], body: dict[str, Any]) -> Any:
    """`model` from `body`, or FormInvalid with the message the API gives for the same body."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise FormInvalid(validation_message(exc.errors(), "invalid input")) from None


def range_refs(template: str, start: str, end: str) -> list[str]:
    """The refs of a one-field pattern from `start` to `end` inclusive (int, date and ISO-week fields)."""
    try:
        pattern = PartitionPattern(template)
    except GraphError as exc:
        raise FormInvalid(str(exc)) from None
    if len(pattern.fields) != 1:
        raise FormInvalid(f"a range needs a pattern with exactly one field, {template!r} has {len(pattern.fields)}")
    ((name, kind),) = pattern.fields.items()
    try:
        first, last = kind.parse(start.strip()), kind.parse(end.strip())
    except (ValueError, TypeError):
        raise FormInvalid(f"field {name!r}: {start!r} and {end!r} must be values of its type") from None
    refs: list[str] = []
    for value in _steps(first, last):
        ref = pattern.format(**{name: value})
        if not refs or refs[-1] != ref:
            refs.append(ref)
        if len(refs) > MAX_RANGE:
            break  # the caller says how many are allowed
    return refs


def _steps(first: Any, last: Any) -> Any:
    """The values from `first` to `last` of a field type that can be counted through (capped past MAX_RANGE)."""
    if isinstance(first, int) and isinstance(last, int):
        return range(first, min(last, first + MAX_RANGE) + 1)
    if isinstance(first, dt.date) and isinstance(last, dt.date):
        days = (last - first).days
        return [first + dt.timedelta(days=i) for i in range(min(days, MAX_RANGE) + 1)] if days >= 0 else []
    kind = type(first)
    if hasattr(first, "monday") and hasattr(kind, "of"):  # an ISO week (examples/clicks/isoweek.py)
        weeks = (last.monday() - first.monday()).days // 7
        if weeks < 0:
            return []
        return [kind.of(first.monday() + dt.timedelta(weeks=i)) for i in range(min(weeks, MAX_RANGE) + 1)]
    raise FormInvalid("a range works on int, date and ISO-week fields")


def patterns(graph: Graph | None) -> list[str]:
    """The served graph's output and source patterns, to pick a range's pattern from."""
    if graph is None:
        return []
    found = [pattern.template for job in graph.jobs.values() for pattern in job.patterns]
    found += [source.partition_pattern.template for source in graph.sources.values()]
    return sorted(found)


def api_message(exc: ApiError) -> str:
    """The API's problem detail for an error."""
    return str(exc)


def grid_selection(graph: Graph | None, name: str, filters: dict[str, str]) -> dict[str, str] | None:
    """The grid's filter as a bulk selection (every partition of the job, in the filter's state), or None when
    a prefix cannot say it: several patterns, a key range, a check, error or maker filter, or a grid-only
    state (warning, tainted)."""
    narrowing = ("start", "end", "check", "check_result", "error", "made_by")
    if graph is None or any(filters.get(name) for name in narrowing):
        return None
    job, source = graph.jobs.get(name), graph.sources.get(name)
    patterns = list(job.patterns) if job is not None else [source.partition_pattern] if source is not None else []
    if len(patterns) != 1 or filters.get("state") in ("warning", "tainted"):
        return None
    return {"ref_prefix": patterns[0].prefix, "state": filters.get("state", "")}
