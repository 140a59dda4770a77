"""Kubernetes API errors, mapped from HTTP responses to a few meaningful exception types.

    KubeError            every failure below; ``status`` (HTTP) and ``reason`` (the API's reason)
      ConfigError        the kubeconfig (or in-cluster service account) is missing or unusable
      BadRequest         400: the API could not take the request as sent
      Invalid            422, or a 400 from strict field validation: the object was refused
                         (schema, CEL rule, immutable field, unknown or duplicate field);
                         ``unknown_fields`` names the fields strict validation did not know
      TooLarge           413, or etcd's "request is too large": not retryable, make it smaller
      Unauthorized       401: the credentials were refused (an expired or rotated token)
      Forbidden          403: RBAC or admission (Pod Security, quota)
      NotFound           404
      Conflict           409: already exists, or a resourceVersion/UID precondition failed
      Gone               410: a watch or list continuation expired
      Unavailable        no connection, 5xx or 429, or a success answer that is not JSON (a
                         proxy's page): worth retrying
        TooManyRequests  429: not now (the API's rate limits, or an eviction that a
                         PodDisruptionBudget does not allow at the moment)
      TimedOut           a call bounded by its caller's timeout did not finish in it (pods/exec)
        Unconfirmed      an attach sent every byte, and the container never said it read them
      NotOurs            a name we need is taken by an object that is not ours

Only ``Unavailable`` (``Conflict`` by re-reading, ``Gone`` by listing again from the start) is
worth retrying as is.
"""

from __future__ import annotations

import json
import re
from typing import Any

import requests


class KubeError(Exception):
    """An API call failed. ``status`` is the HTTP status, ``reason`` the API's reason field."""

    def __init__(self, message: str, *, status: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class ConfigError(KubeError):
    """The kubeconfig file (or the in-cluster service account) is missing or unusable."""


class BadRequest(KubeError):
    """400: the API could not take the request as sent (malformed body or parameters)."""


class NotFound(KubeError):
    """404: the object (or its kind) does not exist."""


class OwnerGone(NotFound):
    """Not created: the RolloutBatch it would belong to is gone or being deleted."""


class Conflict(KubeError):
    """409: already exists, or a resourceVersion/UID precondition failed."""


class Unauthorized(KubeError):
    """401: the API server did not accept the credentials (an expired, rotated or revoked token, a
    certificate it does not trust). Asking again with the same ones cannot help."""


class Forbidden(KubeError):
    """403: RBAC or admission (Pod Security, quota) refused the request."""


class Invalid(KubeError):
    """The object failed validation: 422 (schema, CEL rule, immutable field), or the 400 that
    strict field validation answers for an unknown or duplicate field.

    ``unknown_fields`` lists the field paths strict validation named (``spec.paralellism``).
    """

    def __init__(self, message: str, *, status: int | None = None, reason: str = "",
                 unknown_fields: tuple[str, ...] = ()) -> None:
        super().__init__(message, status=status, reason=reason)
        self.unknown_fields = tuple(unknown_fields)


class TooLarge(KubeError):
    """413, or etcd's "request is too large" (which can come as a 5xx): retrying cannot help."""


class Gone(KubeError):
    """410: a watch or list continuation expired."""


class Unavailable(KubeError):
    """The API could not be reached, answered 5xx/429, or answered with something that is not JSON
    (something between us and it did): worth retrying."""


class TooManyRequests(Unavailable):
    """429: not now. The API's rate limits, or an eviction a PodDisruptionBudget refuses at the
    moment; asking again later may succeed."""


class TimedOut(KubeError):
    """A call bounded by a timeout of its caller's (a command run through pods/exec) did not
    finish in it. Not ``Unavailable``: most often the work itself took too long, and asking again
    would take as long; the caller decides (a command may even still be running)."""


class Unconfirmed(TimedOut):
    """An attach sent every byte but the container never said it read them (pods/attach): it may be
    running what it was handed (its line lost), or it never got it. Not a reason to act as if it
    never did."""


class NotOurs(KubeError):
    """An object with the name we need exists but belongs to someone else: never touch it."""


_BY_STATUS = {400: BadRequest, 401: Unauthorized, 404: NotFound, 409: Conflict, 403: Forbidden, 422: Invalid,
              410: Gone, 413: TooLarge}
# The API server's strict decoding errors (fieldValidation=Strict), e.g.
# 'strict decoding error: unknown field "spec.paralellism", duplicate field "image"'.
_STRICT_FIELD = re.compile(r'(unknown|duplicate) field "([^"]*)"')
# etcd refuses a value past its request limit (--max-request-bytes); the API server passes the
# message on, often as a 500.
_TOO_LARGE = ("request is too large", "Request entity too large")


MAX_MESSAGE = 2000


def condense(message: str) -> str:
    """The API's message, short: a refused patch quotes the whole patched object (a results
    ConfigMap can be 900 KiB) before "strict decoding error: ..."; keep that tail."""
    if len(message) <= MAX_MESSAGE:
        return message
    at = message.find("strict decoding error:")
    if at > 0:
        message = message[:min(message.find(":") + 1 or at, 200)] + " ... " + message[at:]
    return message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE - 1] + "…"


def unknown_fields(message: str) -> tuple[str, ...]:
    """The field paths a strict decoding error names as unknown, in order, without repeats."""
    seen: dict[str, None] = {}
    for kind, path in _STRICT_FIELD.findall(message):
        if kind == "unknown":
            seen.setdefault(path, None)
    return tuple(seen)


def classify(status: int | None, message: str, reason: str = "", what: str = "") -> KubeError:
    """The ``KubeError`` for an HTTP status and the API's ``message`` and ``reason``.

    ``what`` (the call, e.g. "create RolloutBatch ns/x") prefixes the error's text.
    """
    fields = unknown_fields(message)
    message = condense(message)
    text = f"{what}: {message}" if what else message
    if status == 413 or any(needle.lower() in message.lower() for needle in _TOO_LARGE):
        return TooLarge(text, status=status, reason=reason)
    if status == 422 or (status == 400 and _STRICT_FIELD.search(message)):
        return Invalid(text, status=status, reason=reason, unknown_fields=fields)
    if status == 429:
        return TooManyRequests(text, status=status, reason=reason)
    if status is not None and status >= 500:
        return Unavailable(text, status=status, reason=reason)
    cls = _BY_STATUS.get(status, KubeError) if status is not None else KubeError
    return cls(text, status=status, reason=reason)


def from_response(response: requests.Response, what: str) -> KubeError:
    """Build the right ``KubeError`` for a failed response, keeping the API's own message."""
    return from_text(response.status_code, response.text, what)


def from_text(status: int, text: str, what: str) -> KubeError:
    """The ``KubeError`` for a failed answer's status and body (the API's Status: its message and
    reason; any other body as its first 500 characters)."""
    message, reason = text[:500], ""
    try:
        body = json.loads(text)
        message, reason = str(body.get("message", message)), str(body.get("reason") or "")
    except (ValueError, AttributeError):
        pass
    return classify(status, message, reason, what)


def json_answer(body: str | bytes, what: str) -> dict:
    """A success answer's JSON object ({} when empty); ``Unavailable`` when it is not one: the API server
    answers JSON, so something else answered (a proxy's login or error page), which may pass.
    Bytes are decoded as json.loads does (UTF-8, -16 or -32, RFC 8259)."""
    try:
        answer = json.loads(body) if body else {}
    except ValueError:   # UnicodeDecodeError too
        answer = None
    if not isinstance(answer, dict):   # every answer of the API is an object (a Status at least)
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        raise Unavailable(f"{what}: the API server's answer is not a JSON object: {text[:200]!r}") from None
    return answer


def check_path(path: str, what: str) -> str:
    """``path`` when each of its segments names something, else BadRequest before anything is sent:
    an empty name makes an object's path its collection's (``rolloutpools/``, where a DELETE is a
    deletecollection), and ``..`` may be resolved by the client to the namespace above."""
    segments = path.partition("?")[0].split("/")
    if not path.startswith("/") or any(s in ("", ".", "..") for s in segments[1:]):
        raise BadRequest(f"{what}: {path!r} has an empty or dot segment (an object's name missing?)")
    return path


def raise_for(response: requests.Response, what: str) -> requests.Response:
    """Return the response when it succeeded, else raise the mapped error."""
    if response.ok:
        return response
    raise from_response(response, what)
