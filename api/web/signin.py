"""Signing in to the web UI with a token, and out again.

`POST /signin` checks the token (`auth.sign_in`) and sets the session cookie;
the form carries the CSRF token like every other form, so another site cannot
sign a browser in as someone else (login CSRF). `next` only ever leads to a
path of this site.
"""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse, Response

from partbuild.api.auth import identity_of, sign_in, sign_out
from partbuild.api.errors import Unauthorized
from partbuild.api.web.identity import SignInNeeded
from partbuild.api.web.pages import error_page, redirect, service_of
from partbuild.api.web.security import FormError, csrf_token, read_form, secure
from partbuild.api.web.templating import PageContext, render_page

router = APIRouter(include_in_schema=False)
MAX_NEXT_LENGTH = 2048


def safe_next(value: str) -> str:
    """Where to go after signing in: a path of this site, never another host (`//evil`, `/\\evil`)."""
    if not value.startswith("/") or value.startswith("//") or "\\" in value or len(value) > MAX_NEXT_LENGTH:
        return "/"
    return value if value.isprintable() else "/"


def _signin_page(request: Request, next_path: str, status: int = 200, error: str = "") -> HTMLResponse:
    token, new = csrf_token(request)
    page = PageContext(request, identity_of(request), None, service_of(request).live.head_seq, csrf=token, new_csrf=new)
    return render_page(page, "signin.html", status, next_path=safe_next(next_path), error=error)


@router.get("/signin", response_class=HTMLResponse)
def signin_page(request: Request) -> HTMLResponse:
    return _signin_page(request, request.query_params.get("next", "/"))


@router.post("/signin")
async def signin_action(request: Request) -> Response:
    try:
        fields = await read_form(request)
    except FormError as exc:
        return error_page(request, service_of(request), exc.status, str(exc))
    next_path = safe_next(fields.get("next", ["/"])[0])
    response = redirect(next_path)
    try:
        sign_in(request, response, fields.get("token", [""])[0])
    except Unauthorized as exc:
        return _signin_page(request, next_path, 401, str(exc))  # never echoes the token
    return response


@router.post("/signout")
async def signout_action(request: Request) -> Response:
    try:
        await read_form(request)
    except FormError as exc:
        return error_page(request, service_of(request), exc.status, str(exc))
    response = redirect("/signin")
    sign_out(response)
    return response


def to_signin(request: Request, exc: Exception) -> Response:
    """A page asked for without valid credentials: sign in, then come back (after a post: the overview)."""
    assert isinstance(exc, SignInNeeded)
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    back = here if request.method in ("GET", "HEAD") else "/"
    return secure(Response(status_code=303, headers={"Location": "/signin?" + urlencode({"next": safe_next(back)})}))
