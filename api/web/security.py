"""What keeps the pages safe: security headers, the CSRF double-submit token, form bodies.

CSRF: a page that shows a form sets a random `partbuild_csrf` cookie (HttpOnly,
SameSite=Strict) once, and every form carries the same value in a hidden
field. A post is accepted only when both are present and equal (compared in
constant time): another site can make a browser send the cookie (not with
SameSite=Strict, but older browsers ignore it), never read it to fill the field.
"""

from __future__ import annotations

import secrets
from urllib.parse import parse_qs

from fastapi import Request
from starlette.responses import Response

CSRF_COOKIE = "partbuild_csrf"
CSRF_FIELD = "csrf"
MAX_FORM_BYTES = 1024 * 1024  # a backfill of 10,000 refs typed as a list fits
# No inline scripts or styles anywhere: every script and stylesheet is a file under /static.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


class FormError(Exception):
    """A form post refused before it reached the service: the status to answer and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def secure(response: Response) -> Response:
    """`response` with the security headers every page carries."""
    response.headers.update(SECURITY_HEADERS)
    return response


def csrf_token(request: Request) -> tuple[str, bool]:
    """The browser's CSRF token, and whether it is new (then the response must set the cookie)."""
    token = request.cookies.get(CSRF_COOKIE, "")
    if 32 <= len(token) <= 128 and token.isascii():
        return token, False
    return secrets.token_urlsafe(32), True


def set_csrf_cookie(request: Request, response: Response, token: str) -> None:
    """Give the browser its CSRF cookie (Secure when the page came over HTTPS)."""
    response.set_cookie(
        CSRF_COOKIE,
        token,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )


async def read_form(request: Request) -> dict[str, list[str]]:
    """The urlencoded body of a form post, after checking its CSRF field against the cookie."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
        raise FormError(415, "a form post must be application/x-www-form-urlencoded")
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise FormError(413, f"a form post must be at most {MAX_FORM_BYTES} bytes")
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise FormError(400, "the form is not valid UTF-8") from None
    cookie = request.cookies.get(CSRF_COOKIE, "")
    sent = fields.get(CSRF_FIELD, [""])[0]
    if not cookie or not sent or not secrets.compare_digest(cookie.encode(), sent.encode()):
        raise FormError(403, "the form's CSRF token is missing or does not match its cookie; reload the page")
    return fields
