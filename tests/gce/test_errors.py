"""GCE error codes and google.api_core exceptions -> typed provider errors and retry decisions."""

from __future__ import annotations

import pytest
import requests
from google.api_core import exceptions as gexc
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.cloud import (
    FailureKind,
    InsufficientCapacity,
    InvalidRequest,
    NotFound,
    OfferingKey,
    QuotaExceeded,
    TransientError,
)
from autoscaler.gce.errors import AlreadyExists, classify, from_exception, from_operation_errors, is_retryable
from fleet.catalog import CapacityType

OFF = OfferingKey("gcp", "us-central1-a", "a3-megagpu-8g", CapacityType.SPOT)


def http(cls: type[gexc.GoogleAPICallError], message: str, reason: str | None = None) -> gexc.GoogleAPICallError:
    return cls(message, errors=[{"reason": reason, "message": message}] if reason else [])


@pytest.mark.parametrize(
    ("code", "message", "kind"),
    [
        ("ZONE_RESOURCE_POOL_EXHAUSTED", "", FailureKind.STOCKOUT),
        ("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "", FailureKind.STOCKOUT),
        ("RESOURCE_POOL_EXHAUSTED", "", FailureKind.STOCKOUT),
        ("STOCKOUT", "", FailureKind.STOCKOUT),
        ("UNKNOWN", "... ZONE_RESOURCE_POOL_EXHAUSTED ...", FailureKind.STOCKOUT),
        ("QUOTA_EXCEEDED", "", FailureKind.QUOTA),
        ("forbidden", "Quota 'NVIDIA_H100_GPUS' exceeded.  Limit: 8.0 in region us-central1.", FailureKind.QUOTA),
        ("RESOURCE_NOT_FOUND", "", FailureKind.NOT_FOUND),
        ("RESOURCE_OPERATION_RATE_EXCEEDED", "", FailureKind.TRANSIENT),
        ("INVALID_FIELD_VALUE", "bad machine type", FailureKind.INVALID),
        # a specific reservation that is full, not READY, or has no slot of the request's shape: capacity, backed
        # off (kubernetes/autoscaler's GetErrorInfo matches these messages, whatever the code)
        (
            "CONDITION_NOT_MET",
            "Specified reservation 'projects/p/zones/us-central1-a/reservations/r' does not have available resources"
            " for the request.",
            FailureKind.STOCKOUT,
        ),
        (
            "CONDITION_NOT_MET",
            "Cannot insert instance to a reservation with status CREATING, as it requires reservation to be in READY"
            " state.",
            FailureKind.STOCKOUT,
        ),
        ("INVALID_USAGE", "No available resources in specified reservations [r].", FailureKind.STOCKOUT),
        (None, "", FailureKind.INVALID),
    ],
)
def test_classify(code: str | None, message: str, kind: FailureKind) -> None:
    assert classify(code, message) is kind


def test_operation_errors_prefer_capacity_and_keep_every_message() -> None:
    err = from_operation_errors(
        [("INVALID_FIELD_VALUE", "x"), ("QUOTA_EXCEEDED", "q"), ("ZONE_RESOURCE_POOL_EXHAUSTED", "z")],
        offering=OFF,
        what="createInstances",
    )
    assert isinstance(err, InsufficientCapacity)
    assert (err.offering, err.code) == (OFF, "ZONE_RESOURCE_POOL_EXHAUSTED")
    assert "QUOTA_EXCEEDED: q" in str(err) and "INVALID_FIELD_VALUE: x" in str(err)
    assert isinstance(from_operation_errors([("QUOTA_EXCEEDED", "q")], offering=OFF, what="op"), QuotaExceeded)
    assert isinstance(from_operation_errors([("RESOURCE_ALREADY_EXISTS", "a")], offering=OFF, what="op"), AlreadyExists)
    assert isinstance(from_operation_errors([], offering=OFF, what="op"), InvalidRequest)


@pytest.mark.parametrize(
    ("exc", "retry", "cls"),
    [
        (http(gexc.TooManyRequests, "slow down", "rateLimitExceeded"), True, TransientError),
        (http(gexc.ServiceUnavailable, "try later", "backendError"), True, TransientError),
        (http(gexc.InternalServerError, "oops"), True, TransientError),
        (http(gexc.Forbidden, "Rate Limit Exceeded", "rateLimitExceeded"), True, TransientError),
        (http(gexc.Forbidden, "Quota 'CPUS' exceeded.  Limit: 24.0", "quotaExceeded"), False, QuotaExceeded),
        (http(gexc.Forbidden, "Required 'compute.instances.create' permission", "forbidden"), False, InvalidRequest),
        (http(gexc.ServiceUnavailable, "ZONE_RESOURCE_POOL_EXHAUSTED: no H100"), False, InsufficientCapacity),
        (http(gexc.NotFound, "The resource was not found", "notFound"), False, NotFound),
        (http(gexc.Conflict, "already exists", "alreadyExists"), False, AlreadyExists),
        (http(gexc.BadRequest, "Invalid value for field", "invalid"), False, InvalidRequest),
        (requests.exceptions.ReadTimeout("read timed out"), True, TransientError),
        (requests.exceptions.ConnectionError("refused"), True, TransientError),
        (ValueError("not an API error"), False, TransientError),
    ],
)
def test_exceptions_map_to_typed_errors(exc: Exception, retry: bool, cls: type) -> None:
    assert is_retryable(exc) is retry
    err = from_exception(exc, offering=OFF, what="createInstances")
    assert type(err) is cls
    assert err.offering == OFF
    assert str(err).startswith("createInstances")


def test_retry_error_is_transient_and_names_the_cause() -> None:
    cause = http(gexc.ServiceUnavailable, "try later")
    err = from_exception(gexc.RetryError("Timeout of 5.0s exceeded", cause), offering=None, what="deleteInstances")
    assert isinstance(err, TransientError)
    assert "gave up retrying" in str(err) and "try later" in str(err)


_REASONS = ["rateLimitExceeded", "quotaExceeded", "notFound", "alreadyExists", "invalid", "backendError", "forbidden"]


@settings(max_examples=200, deadline=None)
@given(
    status=st.sampled_from([400, 403, 404, 409, 429, 500, 502, 503, 504]),
    reason=st.one_of(st.none(), st.sampled_from(_REASONS), st.text(max_size=12)),
    message=st.one_of(st.text(max_size=40), st.sampled_from(["ZONE_RESOURCE_POOL_EXHAUSTED", "Quota 'X' exceeded"])),
)
def test_any_http_error_maps_to_one_typed_error_consistent_with_retrying(
    status: int, reason: str | None, message: str
) -> None:
    errors = [{"reason": reason, "message": message}] if reason is not None else []
    exc = gexc.from_http_status(status, message, errors=errors)
    err = from_exception(exc, offering=OFF, what="call")
    assert err.offering == OFF
    if is_retryable(exc):
        assert isinstance(err, TransientError)  # what was worth retrying stays retryable after the deadline
    else:
        assert not isinstance(err, TransientError)
    if status == 404:
        assert isinstance(err, NotFound)
