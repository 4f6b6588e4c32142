"""The daemon calls GCE as its cluster's autoscaler account: `provider.impersonate_service_account` makes every
Compute client use impersonated credentials minted from the VM's own (Application Default) credentials."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autoscaler.daemon.build import build_provider, load_pools
from autoscaler.daemon.config import ConfigError, parse_config
from tests.e2e.env import inventory

EMAIL = "c1-autoscaler@my-proj.iam.gserviceaccount.com"


def config(tmp_path: Path, **provider: object):
    (tmp_path / "inv.json").write_text(json.dumps([p.model_dump(mode="json") for p in inventory()]))
    return parse_config({"inventory": "inv.json", "provider": {"kind": "gce", **provider}}, base=tmp_path)


def test_every_compute_client_impersonates_the_autoscaler_account(tmp_path: Path, monkeypatch) -> None:
    import google.auth
    from google.auth import impersonated_credentials
    from google.auth.credentials import AnonymousCredentials

    source = AnonymousCredentials()  # stands in for the VM's metadata-server credentials
    monkeypatch.setattr(google.auth, "default", lambda scopes=None: (source, "my-proj"))
    cfg = config(tmp_path, impersonate_service_account=EMAIL)
    inv, _ = load_pools(cfg)
    api = build_provider(cfg, inv).api  # type: ignore[attr-defined]
    for client in (api.migs, api.zone_operations, api.resize_requests, api.reservations, api.regions):
        creds = client._transport._credentials
        assert isinstance(creds, impersonated_credentials.Credentials)
        assert creds.service_account_email == EMAIL and isinstance(creds._source_credentials, type(source))


@pytest.mark.parametrize(
    ("provider", "why"),
    [
        ({"impersonate_service_account": "not an email"}, "impersonate_service_account"),
        ({"impersonate_service_account": EMAIL, "anonymous": True, "endpoint": "http://127.0.0.1:1"}, "exclude"),
    ],
)
def test_bad_impersonation_settings_are_refused(tmp_path: Path, provider: dict, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        config(tmp_path, **provider)
