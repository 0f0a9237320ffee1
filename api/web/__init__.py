"""The web UI: server-rendered pages over the same `Service` the HTTP API calls (see pages.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

STATIC = Path(__file__).resolve().parent / "static"


class _Static(StaticFiles):
    """Static files with the pages' security headers (nosniff matters most for scripts)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from partbuild.api.web.security import SECURITY_HEADERS

        async def send_secured(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await super().__call__(scope, receive, send_secured)


def add_web_ui(app: FastAPI) -> None:
    """Serve the pages at `/` and their static files at `/static` (outside the OpenAPI document)."""
    from partbuild.api.web import actions, bulk, pages, signin
    from partbuild.api.web.identity import SignInNeeded

    app.include_router(pages.router)
    app.include_router(actions.router)
    app.include_router(bulk.router)
    app.include_router(signin.router)
    app.add_exception_handler(SignInNeeded, signin.to_signin)
    app.mount("/static", _Static(directory=STATIC), name="static")
