"""The form posts: want, cancel a want, cancel a job run, taint a ref, pause, resume or tick a schedule.

Each is refused (403, nothing appended) unless the identity may write and the
CSRF field matches its cookie; then it calls the same `Service` method as the
HTTP API, with the identity's name as the user recorded on the event, and
either redirects to what changed (303) or shows the API's error message.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Request
from starlette.responses import Response

from partbuild.api.errors import ApiError
from partbuild.api.models.common import CancelRequest
from partbuild.api.models.partitions import TaintRequest
from partbuild.api.models.wants import WantBatchRequest
from partbuild.api.web import identity as seam
from partbuild.api.web.forms import PREVIEW_SHOWN, FormInvalid, WantForm, parse_model, patterns
from partbuild.api.web.identity import Identity, may_write
from partbuild.api.web.pages import error_page, form_failure, http_title, in_thread, redirect, service_of
from partbuild.api.web.security import FormError, read_form
from partbuild.api.web.templating import PageContext, render_page

router = APIRouter(include_in_schema=False)


async def accepted_post(request: Request) -> tuple[Identity, dict[str, list[str]]] | Response:
    """The identity and form fields of a post, or the 403/4xx page refusing it."""
    identity = seam.current_identity(request)
    if not may_write(identity):
        return error_page(
            request, service_of(request), 403, f"{identity.name} ({identity.role.value}) may not change anything"
        )
    try:
        return identity, await read_form(request)
    except FormError as exc:
        return error_page(request, service_of(request), exc.status, str(exc))


def _one(fields: dict[str, list[str]], name: str) -> str:
    return fields.get(name, [""])[0]


@router.post("/actions/want")
async def want_action(request: Request) -> Response:
    accepted = await accepted_post(request)
    if isinstance(accepted, Response):
        return accepted
    identity, fields = accepted
    service = service_of(request)
    form = WantForm.parse(fields)
    try:
        refs = form.wanted_refs()
        want = form.request(refs)
        if _one(fields, "action") == "preview":
            await in_thread(service.validate_wants, WantBatchRequest(wants=[want]))
            form.preview_count, form.preview = len(refs), refs[:PREVIEW_SHOWN]
            return _want_form_page(request, form, 200)
        created = await in_thread(service.create_want, want, identity.name)
        await in_thread(service.reads_caught_up)
    except (ApiError, FormInvalid) as exc:
        form.error = str(exc)
        return _want_form_page(request, form, exc.status if isinstance(exc, ApiError) else 422)
    return redirect(f"/wants/{quote(created.want_id, safe='')}")


@router.post("/actions/cancel-want")
async def cancel_want_action(request: Request) -> Response:
    accepted = await accepted_post(request)
    if isinstance(accepted, Response):
        return accepted
    identity, fields = accepted
    want_id = _one(fields, "want_id")
    return await _write(
        request,
        lambda: service_of(request).cancel_want(want_id, _cancel(fields), identity.name),
        f"/wants/{quote(want_id, safe='')}",
    )


@router.post("/actions/cancel-run")
async def cancel_run_action(request: Request) -> Response:
    accepted = await accepted_post(request)
    if isinstance(accepted, Response):
        return accepted
    identity, fields = accepted
    run_id = _one(fields, "job_run_id")
    return await _write(
        request,
        lambda: service_of(request).cancel_job_run(run_id, _cancel(fields), identity.name),
        f"/runs/{quote(run_id, safe='')}",
    )


@router.post("/actions/taint")
async def taint_action(request: Request) -> Response:
    accepted = await accepted_post(request)
    if isinstance(accepted, Response):
        return accepted
    identity, fields = accepted
    ref = _one(fields, "ref")
    body = {"ref": ref, "reason": _one(fields, "reason"), "only_this_ref": _one(fields, "only_this_ref") == "true"}
    return await _write(
        request,
        lambda: service_of(request).taint(parse_model(TaintRequest, body), identity.name),
        "/partition?" + urlencode({"ref": ref}),
    )


@router.post("/actions/schedule")
async def schedule_action(request: Request) -> Response:
    accepted = await accepted_post(request)
    if isinstance(accepted, Response):
        return accepted
    identity, fields = accepted
    service, name, action = service_of(request), _one(fields, "schedule"), _one(fields, "action")
    calls = {
        "pause": lambda: service.pause_schedule(name, None, identity.name),
        "resume": lambda: service.resume_schedule(name, identity.name),
        "trigger": lambda: service.trigger_schedule(name, identity.name),
    }
    if action not in calls:
        return error_page(request, service, 422, f"action must be pause, resume or trigger, not {action[:40]!r}")
    return await _write(request, calls[action], "/automation")


def _cancel(fields: dict[str, list[str]]) -> CancelRequest:
    return parse_model(CancelRequest, {"reason": _one(fields, "reason")})


async def _write(request: Request, call: Any, then: str) -> Response:
    """Run a write; redirect to `then`, or show the API's error."""
    try:
        await in_thread(call)
        await in_thread(service_of(request).reads_caught_up)
    except (ApiError, FormInvalid) as exc:
        return form_failure(request, exc, back=then)
    return redirect(then)


def _want_form_page(request: Request, form: WantForm, status: int) -> Response:
    """The want form again: with its preview (200) or the API's error (4xx)."""
    service = service_of(request)
    page = PageContext(request, seam.current_identity(request), None, service.reads.head_seq)
    page.csrf = request.cookies.get("partbuild_csrf", "")  # the post matched it: keep the same token
    title = http_title(status) if status != 200 else ""
    return render_page(
        page, "want_new.html", status, form=form, patterns=patterns(service.graph), status=status, title=title
    )
