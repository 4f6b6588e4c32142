"""Compute Engine errors -> the provider protocol's typed errors.

GCE reports trouble three ways: an HTTP error (google.api_core exception with `errors[].reason`),
an operation that completes with `error.errors[].code`, and per-instance `lastAttempt.errors` of a
MIG creation.  Everything here maps those codes and messages onto `FailureKind` and the
`ProviderError` classes the planner's backoff understands, and decides what is worth retrying.
Pure functions over exception attributes and strings: no calls are made.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from google.api_core import exceptions as gexc

from autoscaler.cloud import (
    FailureKind,
    InsufficientCapacity,
    InvalidRequest,
    NotFound,
    OfferingKey,
    ProviderError,
    QuotaExceeded,
    TransientError,
)

STOCKOUT_CODES = frozenset(
    {
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
        "RESOURCE_POOL_EXHAUSTED",
        "REGION_RESOURCE_POOL_EXHAUSTED",
        "STOCKOUT",
    }
)
QUOTA_CODES = frozenset({"QUOTA_EXCEEDED", "quotaExceeded"})
NOT_FOUND_CODES = frozenset({"RESOURCE_NOT_FOUND", "NOT_FOUND", "notFound"})
ALREADY_EXISTS_CODES = frozenset({"RESOURCE_ALREADY_EXISTS", "ALREADY_EXISTS", "alreadyExists"})
TRANSIENT_CODES = frozenset(
    {
        "RESOURCE_OPERATION_RATE_EXCEEDED",
        "RATE_LIMIT_EXCEEDED",
        "rateLimitExceeded",
        "userRateLimitExceeded",
        "INTERNAL_ERROR",
        "backendError",
        "SERVICE_UNAVAILABLE",
        "TIMEOUT",
    }
)
RATE_LIMIT_REASONS = frozenset({"rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED"})
QUOTA_MESSAGE = re.compile(r"Quota '([A-Za-z0-9_./-]+)' exceeded")
_STOCKOUT_IN_TEXT = re.compile("|".join(sorted(STOCKOUT_CODES, key=len, reverse=True)))
# A specific reservation with no free slot, not READY, or with no slot of the request's shape: no capacity in that
# offering now, whatever the code it comes with (CONDITION_NOT_MET, ...).  The messages kubernetes/autoscaler's GCE
# client matches (autoscaling_gce_client.go: isReservationCapacityExceeded, isReservationNotReady,
# isReservationIncompatible), after the stockout and quota codes as here.
RESERVATION_UNAVAILABLE = re.compile(
    r"Specified reservation .* does not have available resources for the request"
    r"|it requires reservation to be in READY state"
    r"|No available resources in specified reservations"
)

_CLASSES: dict[FailureKind, type[ProviderError]] = {
    FailureKind.STOCKOUT: InsufficientCapacity,
    FailureKind.QUOTA: QuotaExceeded,
    FailureKind.NOT_FOUND: NotFound,
    FailureKind.INVALID: InvalidRequest,
    FailureKind.TRANSIENT: TransientError,
}


class AlreadyExists(InvalidRequest):
    """409 alreadyExists: the named resource is there.  Callers treat it as idempotent success."""


def classify(code: str | None, message: str = "") -> FailureKind:
    """The failure kind of one GCE error code (operation / lastAttempt / HTTP reason) and message.  A reservation
    that is full or not READY is a STOCKOUT: the offering is backed off and the planner falls back (an INVALID
    failure is not remembered, so the planner would choose the reservation again every tick)."""
    code = code or ""
    if code in STOCKOUT_CODES or _STOCKOUT_IN_TEXT.search(message):
        return FailureKind.STOCKOUT
    if code in QUOTA_CODES or QUOTA_MESSAGE.search(message):
        return FailureKind.QUOTA
    if RESERVATION_UNAVAILABLE.search(message):
        return FailureKind.STOCKOUT
    if code in NOT_FOUND_CODES:
        return FailureKind.NOT_FOUND
    if code in TRANSIENT_CODES:
        return FailureKind.TRANSIENT
    return FailureKind.INVALID


def is_already_exists(code: str | None) -> bool:
    return (code or "") in ALREADY_EXISTS_CODES


def error_for(kind: FailureKind, message: str, *, offering: OfferingKey | None, code: str | None) -> ProviderError:
    return _CLASSES[kind](message, offering=offering, code=code)


_SEVERITY = [FailureKind.STOCKOUT, FailureKind.QUOTA, FailureKind.NOT_FOUND, FailureKind.INVALID, FailureKind.TRANSIENT]


def from_operation_errors(
    errors: Iterable[tuple[str, str]], *, offering: OfferingKey | None, what: str
) -> ProviderError:
    """One typed error for an operation that finished with `error.errors` [(code, message)].
    Capacity beats quota beats the rest: that is what the planner must back off from."""
    errs = list(errors) or [("UNKNOWN", "operation failed without error details")]
    if all(is_already_exists(code) for code, _ in errs):
        code, message = errs[0]
        return AlreadyExists(f"{what}: {message}", offering=offering, code=code)
    ranked = sorted(errs, key=lambda e: _SEVERITY.index(classify(*e)))
    code, message = ranked[0]
    text = "; ".join(f"{c}: {m}" for c, m in errs)
    return error_for(classify(code, message), f"{what}: {text}", offering=offering, code=code)


def _reasons(exc: gexc.GoogleAPICallError) -> list[str]:
    return [e.get("reason", "") for e in (exc.errors or []) if isinstance(e, dict)]


def _is_network_error(exc: BaseException) -> bool:
    import requests

    return isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout | TimeoutError)


def is_retryable(exc: BaseException) -> bool:
    """Retry with backoff: 429, 5xx (except a stockout reported as 503), 403 rate limits, timeouts
    and dropped connections.  Never a stockout, quota or validation error."""
    if _is_network_error(exc):
        return True
    if not isinstance(exc, gexc.GoogleAPICallError):
        return False
    if _STOCKOUT_IN_TEXT.search(exc.message or ""):
        return False
    if isinstance(exc, gexc.TooManyRequests | gexc.ServerError):
        return True
    return isinstance(exc, gexc.Forbidden) and any(r in RATE_LIMIT_REASONS for r in _reasons(exc))


def from_exception(exc: BaseException, *, offering: OfferingKey | None, what: str) -> ProviderError:
    """The typed error for an exception raised by a google-cloud-compute call (after retries)."""
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, gexc.RetryError):
        cause = exc.cause or exc
        return TransientError(f"{what}: gave up retrying: {cause}", offering=offering, code=type(cause).__name__)
    if _is_network_error(exc):
        return TransientError(f"{what}: {type(exc).__name__}: {exc}", offering=offering, code="TIMEOUT")
    if not isinstance(exc, gexc.GoogleAPICallError):
        return TransientError(f"{what}: unexpected {type(exc).__name__}: {exc}", offering=offering)
    reasons = _reasons(exc)
    reason = reasons[0] if reasons else None
    message = f"{what}: HTTP {exc.code}: {exc.message}"
    if isinstance(exc, gexc.Conflict) and (reason is None or is_already_exists(reason)):
        return AlreadyExists(message, offering=offering, code=reason or "alreadyExists")
    if isinstance(exc, gexc.NotFound):
        return NotFound(message, offering=offering, code=reason or "notFound")
    if is_retryable(exc):
        return TransientError(message, offering=offering, code=reason or str(exc.code))
    kind = classify(reason, exc.message or "")
    if kind is FailureKind.TRANSIENT:  # a transient reason on a non-retryable status: still the caller's call
        kind = FailureKind.INVALID
    return error_for(kind, message, offering=offering, code=reason or str(exc.code))
