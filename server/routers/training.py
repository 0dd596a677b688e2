"""Training permits: the page asks before fit; the server checks the caps and the client's budgets."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, Field

from py_in_browser.limits import DEFAULT_LIMITS, LimitExceededError, ModelSummary, TrainingConfig
from server.registry.training_permits import BudgetExceededError
from server.routers.common import client_of, problems, rate_limited, registry

router = APIRouter(prefix="/api/training", tags=["training"])
# The schema states the default caps (a server may only lower them), so valid requests fit.
CAPS = DEFAULT_LIMITS
InputSide = Annotated[int, Field(ge=1, le=CAPS.max_input_side)]


class ModelSummaryIn(BaseModel):
    input_shape: list[InputSide] = Field(min_length=1, max_length=8)
    param_count: Annotated[int, Field(ge=1, le=CAPS.max_params)]
    layer_count: Annotated[int, Field(ge=1, le=CAPS.max_layers)]


class TrainingConfigIn(BaseModel):
    model: ModelSummaryIn
    samples: Annotated[int, Field(ge=1, le=CAPS.max_samples)]
    epochs: Annotated[int, Field(ge=1, le=CAPS.max_epochs)]
    batch_size: Annotated[int, Field(ge=1, le=CAPS.max_batch_size)]
    streamed: bool = Field(False, description="examples come batch by batch from storage")


class PermitOut(BaseModel):
    permit: str = Field(description="signed token; the engine trains only within its bounds")
    id: str
    expires_at: float = Field(description="Unix seconds")
    max_epochs: int
    max_samples: int
    max_batch_size: int


class TrainingPolicy(BaseModel):
    permits_required: bool
    limits: dict[str, int]
    permits_per_hour: int
    work_per_day: int


@router.get("/policy", response_model=TrainingPolicy, summary="Caps and whether fit needs a permit")
def training_policy(request: Request) -> dict[str, Any]:
    config = registry(request).config
    return {
        "permits_required": config.require_permits,
        "limits": config.limits.as_dict(),
        "permits_per_hour": config.budgets.permits_per_hour,
        "work_per_day": config.budgets.work_per_day,
    }


@router.post(
    "/permits",
    status_code=201,
    response_model=PermitOut,
    summary="Ask for a training permit",
    responses=problems(400, 413, 422, 429),
    dependencies=[rate_limited("permit")],
)
def request_permit(request: Request, body: TrainingConfigIn) -> dict[str, Any]:
    """Checks the configuration against the shared caps (422 naming the cap) and the client's
    budgets (429 with Retry-After), then signs an expiring permit for exactly this training."""
    config = TrainingConfig(
        model=ModelSummary(
            tuple(body.model.input_shape), body.model.param_count, body.model.layer_count
        ),
        samples=body.samples,
        epochs=body.epochs,
        batch_size=body.batch_size,
        streamed=body.streamed,
    )
    try:
        token, permit = registry(request).permits.issue(client_of(request), config)
    except LimitExceededError as exc:
        raise HTTPException(422, str(exc)) from exc
    except BudgetExceededError as exc:
        raise HTTPException(429, str(exc), headers={"Retry-After": str(exc.retry_after)}) from exc
    return {
        "permit": token,
        "id": permit.id,
        "expires_at": permit.expires_at,
        "max_epochs": permit.max_epochs,
        "max_samples": permit.max_samples,
        "max_batch_size": permit.max_batch_size,
    }
