"""The fake Compute server run as a process (`python -m tests.fakes.serve`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from google.cloud import compute_v1

from tests.gce.conftest import pool_dict

pytestmark = pytest.mark.gce

ROOT = Path(__file__).resolve().parents[2]


def test_serve_seeds_state_from_flags_and_stops_on_sigterm(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"autoscaler_inventory": [pool_dict("spot", "spot")]}))
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "tests.fakes.serve", "--inventory", str(inventory),
            "--quota", "us-central1:NVIDIA_H100_MEGA_GPUS=64", "--reservation", "us-central1-a:resv:a3-megagpu-8g:4",
        ],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("FAKE_COMPUTE_URL=http://127.0.0.1:")
        url = line.split("=", 1)[1]
        from google.api_core.client_options import ClientOptions
        from google.auth.credentials import AnonymousCredentials

        kw = {
            "transport": "rest",
            "credentials": AnonymousCredentials(),
            "client_options": ClientOptions(api_endpoint=url),
        }
        region = compute_v1.RegionsClient(**kw).get(project="test-project", region="us-central1")
        assert {q.metric: q.limit for q in region.quotas} == {"NVIDIA_H100_MEGA_GPUS": 64.0}
        migs = compute_v1.InstanceGroupManagersClient(**kw)
        assert [m.name for m in migs.list(project="test-project", zone="us-central1-b")] == ["c1-spot-b"]
        res = compute_v1.ReservationsClient(**kw).get(project="test-project", zone="us-central1-a", reservation="resv")
        assert res.specific_reservation.count == 4
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
