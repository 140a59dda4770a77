"""Kubernetes API errors, mapped from HTTP responses to a few meaningful exception types."""

from __future__ import annotations

import json

import requests


class KubeError(Exception):
    """An API call failed. ``status`` is the HTTP status, ``reason`` the API's reason field."""

    def __init__(self, message: str, *, status: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class NotFound(KubeError):
    """404: the object (or its kind) does not exist."""


class Conflict(KubeError):
    """409: already exists, or a resourceVersion/UID precondition failed."""


class Forbidden(KubeError):
    """403: RBAC or admission (Pod Security, quota) refused the request."""


class Invalid(KubeError):
    """422: the object failed validation (schema, CEL rule, immutable field)."""


class Gone(KubeError):
    """410: a watch or list continuation expired."""


class Unavailable(KubeError):
    """The API could not be reached or answered 5xx/429: worth retrying."""


class NotOurs(KubeError):
    """An object with the name we need exists but belongs to someone else: never touch it."""


_BY_STATUS = {404: NotFound, 409: Conflict, 403: Forbidden, 422: Invalid, 410: Gone}


def from_response(response: requests.Response, what: str) -> KubeError:
    """Build the right ``KubeError`` for a failed response, keeping the API's own message."""
    message, reason = response.text[:500], ""
    try:
        body = response.json()
        message, reason = body.get("message", message), body.get("reason", "")
    except (ValueError, json.JSONDecodeError, AttributeError):
        pass
    status = response.status_code
    if status == 429 or status >= 500:
        cls: type[KubeError] = Unavailable
    else:
        cls = _BY_STATUS.get(status, KubeError)
    return cls(f"{what}: {message}", status=status, reason=reason)


def raise_for(response: requests.Response, what: str) -> requests.Response:
    """Return the response when it succeeded, else raise the mapped error."""
    if response.ok:
        return response
    raise from_response(response, what)
