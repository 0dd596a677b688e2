"""Request bodies capped before they are read, and uploads limited before they are received.

An ASGI middleware, so it acts before any form parsing: a Content-Length over the cap is answered
413 at once; a body that streams past the cap without one (chunked) is cut off with 413 as soon
as the count passes it. An upload first takes a token from its client's rate-limit bucket (429 +
Retry-After when empty: a flood of large uploads is refused before its bytes are read), then an
upload slot (server/registry/upload_slots.py: the cap on uploads in flight, across the server
processes sharing a PostgreSQL registry); with none free it is answered 503 + Retry-After.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

TOO_LARGE = "request body over {cap:,} bytes"


class RequestBodyLimits:
    def __init__(
        self,
        app: ASGIApp,
        *,
        upload_path: str,
        max_upload_bytes: int,
        max_body_bytes: int,
        take_upload_token: Callable[[str], float | None],
        acquire_upload_slot: Callable[[], Callable[[], None] | None],
    ) -> None:
        self.app = app
        self.upload_path = upload_path
        self.max_upload_bytes, self.max_body_bytes = max_upload_bytes, max_body_bytes
        # Takes a token for the client (an address); the seconds to wait when there is none.
        self.take_upload_token = take_upload_token
        # Takes an upload slot: the function giving it back, or None when none is free.
        self.acquire_upload_slot = acquire_upload_slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        is_upload = scope["method"] == "POST" and scope["path"] == self.upload_path
        cap = self.max_upload_bytes if is_upload else self.max_body_bytes
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > cap):
            await _answer(send, 413, TOO_LARGE.format(cap=cap))
            return
        if is_upload:
            client = scope["client"][0] if scope.get("client") else "unknown"
            wait = await run_in_threadpool(self.take_upload_token, client)
            if wait is not None:
                detail = f"too many upload requests from this client; retry in {wait:.0f} s"
                await _answer(send, 429, detail, {"retry-after": f"{wait:.0f}"})
                return
        release = None
        if is_upload:
            release = await run_in_threadpool(self.acquire_upload_slot)
            if release is None:
                await _answer(send, 503, "too many uploads in progress", {"retry-after": "1"})
                return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > cap:
                # Raised inside the route's body parsing; FastAPI re-raises HTTPExceptions.
                raise HTTPException(413, TOO_LARGE.format(cap=cap))
            return message

        try:
            await self.app(scope, counting_receive, send)
        finally:
            if release is not None:
                await run_in_threadpool(release)


async def _answer(
    send: Send, status: int, detail: str, extra: dict[str, str] | None = None
) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
