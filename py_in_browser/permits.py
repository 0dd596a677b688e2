"""Training permits: a server's signed, expiring promise that one training configuration is fine.

A page that runs against a server requiring permits asks POST /api/training/permits with its
TrainingConfig; the server checks it against the caps (limits.py) and the client's budgets and
answers a token. The engine then trains only within the token's bounds (`check_training`).

Token format: `<claims>.<signature>`, both base64url without padding; claims are the JSON object
of Permit's fields (sorted keys, compact), signature is HMAC-SHA256 over the claims' encoded
bytes with the server's key. The engine cannot check the signature (it has no key) and does not
need to: the bounds protect the visitor's own GPU from a page asking for more than it was granted;
the server verifies signatures (`verify`) wherever a permit is presented back to it.

Pure Python (stdlib only), below the engine's other layers like limits.py.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from dataclasses import asdict, dataclass, fields
from typing import Any

from .limits import TrainingConfig


class PermitError(ValueError):
    """A permit that is missing, malformed, forged, expired or too small for the training.

    ``fit(..., permit=token)`` raises it before any step when the fit goes past one of the
    permit's bounds (epochs it runs, samples, batch size, the model's parameter count and input
    shape) or the permit has expired, and at an epoch boundary when the permit expires while
    training runs (the weights trained so far stay).

    Example:
        >>> import time
        >>> from py_in_browser import permits
        >>> model = pib.Sequential([pib.layers.Dense(1, input_shape=(2,))])
        >>> model.compile(optimizer="sgd", loss="mse")
        >>> granted = permits.Permit(
        ...     id="p1", client="127.0.0.1", issued_at=time.time(),
        ...     expires_at=time.time() + 60, max_epochs=2, max_samples=8, max_batch_size=4,
        ...     param_count=3, input_shape=(2,))
        >>> token = permits.sign(granted, b"the server's key")  # the server answers this
        >>> x, y = np.ones((8, 2)), np.zeros((8, 1))
        >>> try:
        ...     await model.fit(x, y, epochs=3, batch_size=4, permit=token)
        ... except pib.PermitError as err:
        ...     print(err)
        epochs=3 goes past the permit's bound 2
        >>> len((await model.fit(x, y, epochs=2, batch_size=4, permit=token)).history["loss"])
        2
    """


@dataclass(frozen=True)
class Permit:
    """The bounds one permit grants, for one client, until `expires_at` (Unix seconds)."""

    id: str
    client: str
    issued_at: float
    expires_at: float
    max_epochs: int
    max_samples: int
    max_batch_size: int
    param_count: int
    input_shape: tuple[int, ...]

    def claims(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":")).encode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign(permit: Permit, key: bytes) -> str:
    claims = _b64(permit.claims())
    return claims + "." + _b64(hmac.new(key, claims.encode(), hashlib.sha256).digest())


def read(token: str) -> Permit:
    """The permit's claims, without checking the signature (for the engine, which has no key)."""
    try:
        claims_text, _signature = token.split(".")
        data = json.loads(_unb64(claims_text))
        names = {f.name for f in fields(Permit)}
        if not isinstance(data, dict) or set(data) != names:
            raise PermitError(f"permit claims must be exactly {sorted(names)}")
        data["input_shape"] = tuple(int(side) for side in data["input_shape"])
        return Permit(**data)
    except PermitError:
        raise
    except (ValueError, TypeError) as exc:
        raise PermitError(f"malformed permit: {exc}") from exc


def verify(token: str, key: bytes, now: float | None = None) -> Permit:
    """The permit, after checking its signature (constant time) and that it has not expired."""
    permit = read(token)
    claims_text, signature = token.split(".")
    expected = hmac.new(key, claims_text.encode(), hashlib.sha256).digest()
    try:
        given = _unb64(signature)
    except ValueError as exc:
        raise PermitError("malformed permit signature") from exc
    if not hmac.compare_digest(expected, given):
        raise PermitError("permit signature does not match: it was not issued by this server")
    check_unexpired(permit, now)
    return permit


def check_unexpired(permit: Permit, now: float | None = None) -> None:
    """Raises PermitError once `permit` has expired (at `now`, Unix seconds; default: the clock)."""
    if (time.time() if now is None else now) >= permit.expires_at:
        raise PermitError(f"permit {permit.id} expired; ask the server for a new one")


def check_within(permit: Permit, config: TrainingConfig, now: float | None = None) -> None:
    """Raises PermitError naming the first bound `config` goes past, or if the permit expired."""
    check_unexpired(permit, now)
    bounds = (
        ("epochs", config.epochs, permit.max_epochs),
        ("samples", config.samples, permit.max_samples),
        ("batch_size", config.batch_size, permit.max_batch_size),
    )
    for name, value, bound in bounds:
        if value > bound:
            raise PermitError(f"{name}={value} goes past the permit's bound {bound}")
    if config.model.param_count != permit.param_count:
        raise PermitError(
            f"the permit is for a model of {permit.param_count:,} parameters, "
            f"not {config.model.param_count:,}"
        )
    if config.model.input_shape != permit.input_shape:
        raise PermitError(
            f"the permit is for inputs {permit.input_shape}, not {config.model.input_shape}"
        )


def check_training(
    config: TrainingConfig, token: Any, *, required: bool, now: float | None = None
) -> Permit | None:
    """The engine's gate before fit (`fit(..., permit=token)`): no permit is fine unless the
    server requires one; a given one must cover `config`. Returns the permit read."""
    if token is None:
        if required:
            raise PermitError("this server requires a training permit: POST /api/training/permits")
        return None
    if not isinstance(token, str):
        raise PermitError(
            f"permit must be the token string a server granted, got {type(token).__name__}"
        )
    permit = read(token)
    check_within(permit, config, now)
    return permit
