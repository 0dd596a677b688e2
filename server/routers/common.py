"""What the API routers share: the registry, the client's identity, rate limits, error bodies."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, HTTPException, Request
from pydantic import BaseModel

from server.registry import Registry


class Problem(BaseModel):
    """An error: `detail` says what was wrong (a list of field errors for malformed requests)."""

    detail: str | list[dict[str, Any]]


def registry(request: Request) -> Registry:
    return request.app.state.registry.get()


def client_of(request: Request) -> str:
    """Who spends a budget: the peer address (uvicorn's --proxy-headers puts the real one here)."""
    return request.client.host if request.client else "unknown"


def rate_limited(kind: str) -> Any:
    """A dependency taking one token from the client's `kind` bucket, or answering 429."""

    def take_token(request: Request) -> None:
        reg = registry(request)
        wait = reg.rate_limiter.take(kind, client_of(request), reg.config.rate_limits[kind])
        if wait is not None:
            raise HTTPException(
                429,
                f"too many {kind} requests from this client; retry in {wait:.0f} s",
                headers={"Retry-After": f"{wait:.0f}"},
            )

    return Depends(take_token)


def problems(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the error statuses an endpoint can answer."""
    descriptions = {
        304: "not modified (the If-None-Match ETag matches)",
        400: "the body cannot be parsed (not UTF-8 JSON, or broken multipart)",
        401: "no owner token",
        403: "wrong owner token",
        404: "no such model",
        413: "request body over the size cap",
        422: "invalid request or model file; detail names the problem",
        429: "rate limit or budget exceeded; see Retry-After",
        503: "too many uploads in progress; see Retry-After",
    }
    return {
        code: {"description": descriptions[code]}
        if code == 304
        else {"model": Problem, "description": descriptions[code]}
        for code in codes
    }
