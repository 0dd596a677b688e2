"""The model registry: publish a model file, list and fetch models, delete with the owner token."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, Header, HTTPException, Query, Request, UploadFile
from fastapi.responses import Response
from pydantic import BaseModel, Field

from py_in_browser import model_file
from py_in_browser.model_file import ModelFileError
from server.registry.store import NotOwnerError, StoredModel
from server.routers.common import problems, rate_limited, registry

router = APIRouter(prefix="/api/models", tags=["models"])
# Text without NUL characters: no text column stores them (PostgreSQL refuses them outright).
NO_NUL = r"^[^\x00]*$"


class ModelInfo(BaseModel):
    id: str
    name: str
    description: str
    labels: list[str] | None
    input_shape: list[int]
    output_shape: list[int]
    param_count: int
    layer_count: int
    preprocessing: dict[str, Any] | None
    backbone: dict[str, Any] | None = Field(
        None,
        description="a head trained on a pretrained backbone's features: the backbone its input "
        "comes from (name, version, sha256, output, input_shape); null for a self-contained model",
    )
    size: int = Field(description="bytes of the model file")
    sha256: str = Field(description="hex sha256 of the model file (also its ETag)")
    created_at: datetime
    file_url: str


class PublishedModel(ModelInfo):
    owner_token: str = Field(description="deletes this model; shown once, never stored")


class ModelPage(BaseModel):
    items: list[ModelInfo]
    total: int
    limit: int
    offset: int


def _info(model: StoredModel) -> dict[str, Any]:
    meta = model.metadata
    return {
        "id": model.id,
        "name": model.name,
        "description": model.description,
        "labels": meta["labels"],
        "input_shape": meta["input_shape"],
        "output_shape": meta["output_shape"],
        "param_count": meta["param_count"],
        "layer_count": meta["layer_count"],
        "preprocessing": meta["preprocessing"],
        "backbone": meta.get("backbone"),
        "size": model.size,
        "sha256": model.sha256,
        "created_at": datetime.fromtimestamp(model.created_at, UTC),
        "file_url": f"/api/models/{model.id}/file",
    }


def _json_list(text: str | None, what: str) -> Any:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise HTTPException(422, f"{what} must be a JSON array: {exc}") from exc
    if not isinstance(value, list):
        raise HTTPException(422, f"{what} must be a JSON array")
    return value


@router.post(
    "",
    status_code=201,
    response_model=PublishedModel,
    summary="Publish a model file",
    # 413, 429 (the client's upload bucket) and 503 come from server/request_limits.py, before
    # the body is read.
    responses=problems(400, 413, 422, 429, 503),
)
def publish_model(
    request: Request,
    response: Response,
    file: Annotated[UploadFile, File(description="a model file from `await model.save()`")],
    name: Annotated[str, Form(min_length=1, max_length=model_file.MAX_NAME_CHARS, pattern=NO_NUL)],
    description: Annotated[
        str, Form(max_length=model_file.MAX_DESCRIPTION_CHARS, pattern=NO_NUL)
    ] = "",
    labels: Annotated[
        str | None, Form(description='class names as a JSON array, e.g. ["up", "down"]')
    ] = None,
    input_shape: Annotated[
        str | None, Form(description="one example's shape as a JSON array, e.g. [64, 64, 3]")
    ] = None,
) -> dict[str, Any]:
    """Validates the file with the engine's reader and the shared caps, then stores it.

    `labels` and `input_shape` are optional: the file carries them; when given they must agree
    with it (labels may be given here for a file saved without them).
    """
    reg = registry(request)
    data = file.file.read(reg.config.limits.max_model_file_bytes + 1)
    try:
        header = model_file.read_header(data, reg.config.limits)
        given_shape = _json_list(input_shape, "input_shape")
        if given_shape is not None and given_shape != list(header.input_shape):
            raise ModelFileError(
                f"input_shape {given_shape} does not match the file's {list(header.input_shape)}"
            )
        given_labels = model_file.check_labels(_json_list(labels, "labels"), header.output_shape)
        if given_labels is not None and header.labels not in (None, given_labels):
            raise ModelFileError(f"labels {given_labels} do not match the file's {header.labels}")
    except ModelFileError as exc:
        raise HTTPException(422, f"invalid model file: {exc}") from exc
    metadata = header.metadata()
    metadata["labels"] = given_labels or header.labels
    model, token = reg.models.create(name, description or header.description, metadata, data)
    response.headers["Location"] = f"/api/models/{model.id}"
    return {**_info(model), "owner_token": token}


@router.get("", response_model=ModelPage, summary="List models, newest first")
def list_models(
    request: Request,
    name: Annotated[
        str | None,
        Query(max_length=100, pattern=NO_NUL, description="case-insensitive part of the name"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
) -> dict[str, Any]:
    items, total = registry(request).models.list(name, limit, offset)
    return {"items": [_info(m) for m in items], "total": total, "limit": limit, "offset": offset}


@router.get(
    "/{model_id}", response_model=ModelInfo, summary="A model's metadata", responses=problems(404)
)
def get_model(request: Request, model_id: str) -> dict[str, Any]:
    model = registry(request).models.get(model_id)
    if model is None:
        raise HTTPException(404, f"no model {model_id}")
    return _info(model)


@router.get(
    "/{model_id}/file",
    summary="A model's file",
    response_class=Response,
    responses={
        200: {
            "content": {"application/zip": {"schema": {"type": "string", "format": "binary"}}},
            "description": "the stored bytes; ETag and Repr-Digest carry their sha256",
        },
        **problems(304, 404),
    },
)
def get_model_file(
    request: Request,
    model_id: str,
    if_none_match: Annotated[str | None, Header()] = None,
) -> Response:
    found = registry(request).models.file(model_id)
    if found is None:
        raise HTTPException(404, f"no model {model_id}")
    model, data = found
    etag = f'"{model.sha256}"'
    headers = {"ETag": etag, "Cache-Control": "no-cache"}
    if if_none_match is not None and etag in (tag.strip() for tag in if_none_match.split(",")):
        return Response(status_code=304, headers=headers)
    digest = bytes.fromhex(model.sha256)
    headers["Repr-Digest"] = f"sha-256=:{base64.b64encode(digest).decode()}:"
    headers["Content-Disposition"] = f'attachment; filename="{model.id}.pibmodel"'
    return Response(data, media_type="application/zip", headers=headers)


@router.delete(
    "/{model_id}",
    status_code=204,
    response_class=Response,
    summary="Delete a model (owner only)",
    responses=problems(401, 403, 404, 429),
    dependencies=[rate_limited("delete")],
)
def delete_model(
    request: Request,
    model_id: str,
    authorization: Annotated[
        str | None, Header(description="Bearer <owner_token> as returned by POST")
    ] = None,
) -> Response:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise HTTPException(
            401,
            "send the owner token as Authorization: Bearer <token>",
            headers={"WWW-Authenticate": "Bearer"},
        )
    try:
        deleted = registry(request).models.delete(model_id, token.strip())
    except NotOwnerError as exc:
        raise HTTPException(403, "the owner token does not match this model") from exc
    if not deleted:
        raise HTTPException(404, f"no model {model_id}")
    return Response(status_code=204)
