"""ComputeApi / RetryPolicy construction errors name the argument and the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.gce import ComputeApi, RetryPolicy


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"initial": 0}, "initial"),
        ({"maximum": -1}, "maximum"),
        ({"deadline": 0}, "deadline"),
        ({"attempt_timeout": 0}, "attempt_timeout"),
        ({"multiplier": 0.5}, "multiplier"),
    ],
)
def test_retry_policy_rejects_bad_values(kw: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=rf"RetryPolicy\.{field}: must be"):
        RetryPolicy(**kw)


def test_missing_default_credentials_are_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match=r"credentials: no Application Default Credentials.*'anonymous'"):
        ComputeApi()


def test_operation_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"operation_timeout: must be > 0"):
        ComputeApi(credentials="anonymous", operation_timeout=0)
