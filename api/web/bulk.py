"""Bulk actions from the pages: retry, want again, taint or re-check many partitions in one request.

The grid's bulk form (and the retry/rebuild buttons of a partition's page) post to `/actions/bulk`
in two steps. `step=preview` asks `Service.bulk` for a dry run and shows the count it reports on a
confirmation page, whose form carries the same fields; `step=run` runs the action (one want, or one
append of taints or check requests) and goes back to the page it came from, which follows live. Writers
only, with the CSRF field, like every form post (actions.py); the API's error (a 413 over
`MAX_BULK_REFS`, a 422, a 409) is shown on the confirmation page with nothing recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

from fastapi import APIRouter, Request
from starlette.responses import Response

from partbuild.api.errors import ApiError
from partbuild.api.models.bulk import BulkOut, BulkRequest
from partbuild.api.web import identity as seam
from partbuild.api.web.actions import accepted_post
from partbuild.api.web.forms import FormInvalid, parse_model
from partbuild.api.web.pages import http_title, in_thread, redirect, service_of
from partbuild.api.web.templating import PageContext, render_page

router = APIRouter(include_in_schema=False)

ACTIONS = {"retry": "Retry failed", "want": "Want again", "taint": "Taint", "recheck": "Re-check"}
BACK_PATHS = ("/jobs/", "/partition")  # where a bulk action may go back to (never another site)
SHOWN = 20  # refs the confirmation names


@dataclass
class BulkForm:
    """The bulk form's fields as posted, kept to fill the confirmation's form."""

    action: str = "retry"
    scope: str = "refs"
    refs: str = ""
    ref_prefix: str = ""
    state: str = ""
    reason: str = ""
    back: str = "/"

    @classmethod
    def parse(cls, fields: dict[str, list[str]]) -> BulkForm:
        values = {name: fields.get(name, [""])[0] for name in cls.__dataclass_fields__}
        form = cls(**values)
        form.back = safe_back(form.back)
        return form

    @property
    def ref_list(self) -> list[str]:
        """The refs listed, one a line, each once, in their order."""
        return list(dict.fromkeys(line.strip() for line in self.refs.splitlines() if line.strip()))

    def request(self, dry_run: bool) -> BulkRequest:
        """The API's request for these fields; FormInvalid with the message the API would give."""
        if self.action not in ACTIONS:
            raise FormInvalid(f"action must be one of {', '.join(ACTIONS)}, not {self.action[:40]!r}")
        if self.action == "taint" and not self.reason.strip():
            raise FormInvalid("a taint needs a reason: say why these partitions are bad")
        selection: dict[str, Any]
        if self.scope == "filter":
            selection = {"ref_prefix": self.ref_prefix, "state": self.state or None}
        elif self.scope == "refs":
            if not self.ref_list:
                raise FormInvalid("select at least one partition (click cells, or select all shown)")
            selection = {"refs": self.ref_list}
        else:
            raise FormInvalid(f"scope must be refs or filter, not {self.scope[:40]!r}")
        body = {"action": self.action, "selection": selection, "reason": self.reason.strip(), "dry_run": dry_run}
        return parse_model(BulkRequest, body)


def safe_back(text: str) -> str:
    """Where to go after the action: a grid or partition page of this site, else the overview."""
    parts = urlsplit(text)
    if parts.scheme or parts.netloc or "\\" in text or not text.startswith(BACK_PATHS):
        return "/"
    return text


@router.post("/actions/bulk")
async def bulk_action(request: Request) -> Response:
    """`step=preview`: the dry run's counts to confirm; `step=run`: the action, then back where it came from."""
    accepted = await accepted_post(request)
    if isinstance(accepted, Response):
        return accepted
    identity, fields = accepted
    form = BulkForm.parse(fields)
    run = fields.get("step", [""])[0] == "run"
    try:
        done: BulkOut = await in_thread(service_of(request).bulk, form.request(dry_run=not run), identity.name)
    except (ApiError, FormInvalid) as exc:
        return _confirmation(request, form, None, str(exc), exc.status if isinstance(exc, ApiError) else 422)
    if not run:
        return _confirmation(request, form, done, "", 200)
    await in_thread(service_of(request).reads_caught_up)
    notice = {"bulk": done.action, "bulk_acted": done.acted_on, "bulk_want": done.want_id or ""}
    glue = "&" if "?" in form.back else "?"
    return redirect(form.back + glue + urlencode({k: v for k, v in notice.items() if v != ""}))


def _confirmation(request: Request, form: BulkForm, done: BulkOut | None, error: str, status: int) -> Response:
    """The confirmation page: what the dry run would act on and the form that runs it, or the API's error."""
    service = service_of(request)
    page = PageContext(request, seam.current_identity(request), None, service.reads.head_seq)
    page.csrf = request.cookies.get("partbuild_csrf", "")  # the post matched it: keep the same token
    return render_page(
        page,
        "bulk_confirm.html",
        status,
        status=status,
        form=form,
        done=done,
        error=error,
        actions=ACTIONS,
        shown=SHOWN,
        title=http_title(status) if status != 200 else "",
    )
