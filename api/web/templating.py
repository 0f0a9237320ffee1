"""Rendering pages: the Jinja2 environment (autoescape on), time travel, links that keep it, the response.

Time travel: `?as_of=N` (a seq) or `?as_of_time=2026-01-06T12:00:00Z` (the last event recorded at or
before that time) on any page. Pages then read the state as it was right after seq N, show a banner
"as of seq N", stop refreshing themselves, and every link they render carries `as_of=N`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import Request
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.responses import HTMLResponse

from partbuild.api.errors import InvalidInput
from partbuild.api.models.common import parse_digits
from partbuild.api.service import Service
from partbuild.api.web import identity as seam
from partbuild.api.web.identity import Identity, may_write
from partbuild.api.web.security import CSRF_FIELD, csrf_token, secure, set_csrf_cookie
from partbuild.state.queries.retention import cutoff_seq_before

HERE = Path(__file__).resolve().parent
ENV = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(["html"], default_for_string=True),
    undefined=StrictUndefined,  # a misspelt name is an error in tests, not an empty cell
    trim_blocks=True,
    lstrip_blocks=True,
)
ENV.filters["seg"] = lambda value: quote(str(value), safe="")  # one path segment: ids never split a path


def _time_ms(value: int | None) -> str:
    if not value:
        return ""
    return dt.datetime.fromtimestamp(value / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


ENV.filters["time"] = _time_ms


@dataclass
class PageContext:
    """What every template gets: who looks, the time travel, links that keep it, the CSRF token."""

    request: Request
    identity: Identity | None  # None: only on the sign-in page, before signing in
    as_of: int | None
    head_seq: int
    csrf: str = ""
    new_csrf: bool = False
    fragment: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def can_write(self) -> bool:
        """Forms are shown only to writers, and never on a past state (it cannot be changed)."""
        return may_write(self.identity) and self.as_of is None

    @property
    def csrf_field(self) -> str:
        return CSRF_FIELD

    def url(self, path: str, **params: Any) -> str:
        """`path` with `params` (None dropped) and the time travel of this page."""
        query = {key: value for key, value in params.items() if value is not None and value != ""}
        if self.as_of is not None:
            query["as_of"] = self.as_of
        return f"{path}?{urlencode(query)}" if query else path

    def now_url(self) -> str:
        """This page at the head of the log (time travel off)."""
        query = [(k, v) for k, v in self.request.query_params.multi_items() if k not in ("as_of", "as_of_time")]
        return f"{self.request.url.path}?{urlencode(query)}" if query else self.request.url.path


def page_for(request: Request, service: Service) -> PageContext:
    """The page context of `request`: identity, time travel (validated), CSRF token."""
    identity = seam.current_identity(request)
    head = service.reads.head_seq
    as_of = resolve_as_of(request, service)
    token, new = csrf_token(request)
    fragment = request.query_params.get("fragment") == "main"
    return PageContext(request, identity, as_of, head, csrf=token, new_csrf=new, fragment=fragment)


def resolve_as_of(request: Request, service: Service) -> int | None:
    """The seq of `?as_of=` or `?as_of_time=`; None without either. InvalidInput for anything else."""
    text = request.query_params.get("as_of", "").strip()
    if text:
        try:
            return parse_digits(text, "as_of", noun="a seq, an integer")
        except ValueError as exc:
            raise InvalidInput(str(exc)) from None
    when = request.query_params.get("as_of_time", "").strip()
    if not when:
        return None
    try:
        moment = dt.datetime.fromisoformat(when.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(f"as_of_time must be an ISO 8601 time, got {when[:40]!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    millis = int(moment.timestamp() * 1000)
    return cutoff_seq_before(service.log, millis + 1) - 1  # the last event recorded at or before it


def render_page(page: PageContext, template: str, http_status: int = 200, **data: Any) -> HTMLResponse:
    """The page (or only its `main` fragment) with security headers and, when new, the CSRF cookie."""
    html = ENV.get_template(template).render(page=page, **data)
    response = HTMLResponse(html, status_code=http_status)
    if page.new_csrf:
        set_csrf_cookie(page.request, response, page.csrf)
    secure(response)
    response.headers["Cache-Control"] = "no-store"  # pages hold state of the moment, and the CSRF token
    return response
