"""`fleet autoscaler run` as a user runs it: config errors exit 2 naming the field; `--once --dry-run
--log-json` prints the tick as JSON and touches nothing (real GceProvider against the fake Compute API)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.e2e.env import PROJECT, inventory, pool
from tests.fakes.compute_api import FakeCompute

FLEET = Path(sys.executable).with_name("fleet")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(FLEET), *args], capture_output=True, text=True, timeout=120)


def test_invalid_config_exits_2_and_names_the_field(tmp_path: Path) -> None:
    cfg = tmp_path / "a.yaml"
    cfg.write_text("inventory: inv.json\nslurm: {mode: ssh}\nloop: {interval_s: -1}\n")
    cp = run("autoscaler", "run", "--config", str(cfg), "--once")
    assert cp.returncode == 2
    assert "slurm.mode" in cp.stderr and "loop.interval_s" in cp.stderr


def test_shared_nodes_without_strict_late_binding_exit_2_before_any_call(tmp_path: Path) -> None:
    """`policy.share_nodes` with a reservation pool (so no strict late binding): Slurm would bind each job at submit
    and never to a larger node's free GPUs; the daemon refuses to start, naming the field, and writes no state."""
    pools = [*inventory(), pool("resv", "reservation", "gpu", False, reservation="r1")]
    (tmp_path / "inv.json").write_text(json.dumps({"autoscaler_inventory": [p.model_dump(mode="json") for p in pools]}))
    cfg = {"inventory": "inv.json", "state_path": "state.db", "policy": {"share_nodes": True}}
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(cfg))
    cp = run("autoscaler", "run", "--config", str(tmp_path / "a.yaml"), "--once")
    assert cp.returncode == 2, cp.stderr
    assert "policy.share_nodes" in cp.stderr and "late binding" in cp.stderr and "Traceback" not in cp.stderr
    assert not list(tmp_path.glob("state.db*"))


def test_no_credentials_to_impersonate_with_exits_1_so_systemd_starts_it_again(tmp_path: Path) -> None:
    """A metadata server that does not answer (a boot bringing the network up) is not a bad config: the daemon says
    which account it could not act as and exits 1, which the unit restarts (Restart=on-failure; exit 2 it leaves
    stopped: RestartPreventExitStatus=2).  The first-boot test met this with a metadata server that did not answer
    google-auth's ping."""
    (tmp_path / "inv.json").write_text(json.dumps([p.model_dump(mode="json") for p in inventory()]))
    email = "c1-autoscaler@my-proj.iam.gserviceaccount.com"
    cfg = {"inventory": "inv.json", "state_path": "state.db", "provider": {"impersonate_service_account": email}}
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(cfg))
    # no Application Default Credentials here: no key file, no gcloud login, and no GCE metadata server
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"),
           "NO_GCE_CHECK": "True"}  # fmt: skip
    cp = subprocess.run([str(FLEET), "autoscaler", "run", "--config", str(tmp_path / "a.yaml"), "--once"],
                        capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert cp.returncode == 1, cp.stderr
    assert f"no source credentials to impersonate {email} with" in cp.stderr and "Traceback" not in cp.stderr
    unit = (Path(__file__).resolve().parents[2] / "deploy/systemd/gpu-fleet-autoscaler.service").read_text()
    assert "Restart=on-failure" in unit and "RestartPreventExitStatus=2\n" in unit


@pytest.mark.gce
def test_once_dry_run_prints_the_plan_as_json_and_touches_nothing(tmp_path: Path) -> None:
    pools = inventory()
    (tmp_path / "inv.json").write_text(json.dumps({"autoscaler_inventory": [p.model_dump(mode="json") for p in pools]}))
    state = tmp_path / "state.db"
    from autoscaler.daemon.state import StateStore

    store = StateStore(state)
    store.enqueue_power("resume", ["e2e-od-0", "e2e-od-1"], 1.0, {"e2e-od-0": (5,), "e2e-od-1": (5,)})
    store.close()
    before = {p.name: p.read_bytes() for p in tmp_path.glob("state.db*")}
    # no slurmctld here: the tick goes on without Slurm (no scale-down) and still plans the resume
    (tmp_path / "slurm.conf").write_text("ClusterName=x\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=1\n")
    with FakeCompute(PROJECT) as fake:
        fake.add_inventory(pools)
        cfg = {
            "inventory": "inv.json",
            "state_path": "state.db",
            "slurm": {"conf": "slurm.conf", "timeout_s": 3},
            "provider": {"endpoint": fake.url, "anonymous": True},
        }
        (tmp_path / "a.yaml").write_text(yaml.safe_dump(cfg))
        cp = run("autoscaler", "run", "--config", str(tmp_path / "a.yaml"), "--once", "--dry-run", "--log-json")
        assert cp.returncode == 0, cp.stderr
        res = json.loads(cp.stdout)
        assert res["ok"] and not res["slurm_ok"]
        (launch,) = [c for c in res["commands"] if c["command"] == "launch"]
        assert launch["outcome"] == "dry-run" and launch["names"] == ["e2e-od-0", "e2e-od-1"]
        assert launch["pool"] == "od" and ":on-demand" in launch["offering"]
        assert fake.events_of("create") == []
        assert fake.events == []  # no mutating Compute call at all (the fake records every mutation)
        for line in cp.stderr.strip().splitlines():  # --log-json: one JSON object per line
            assert isinstance(json.loads(line), dict)
    # no state write: the files are byte for byte as they were, no -wal/-shm/lock file appeared
    assert {p.name: p.read_bytes() for p in tmp_path.glob("state.db*")} == before
    assert len(StateStore(state).open_power()) == 2 and StateStore(state).requests() == []


def test_status_prints_the_state_store(tmp_path: Path) -> None:
    from autoscaler.daemon.state import StateStore

    s = StateStore(tmp_path / "s.db")
    s.enqueue_power("resume", ["a-0"], 1.0, {})
    s.enqueue_job_end(17, ["a-2"], 1.5)
    s.record_intent("r1", "spot", {"zone": "z"}, ["a-1"], 2.0)
    s.mark_unavailable("gcp:z:m:spot", {"zone": "z"}, 4e9, "stockout")
    s.close()
    cp = run("autoscaler", "status", "--state", str(tmp_path / "s.db"))
    assert cp.returncode == 0, cp.stderr
    out = json.loads(cp.stdout)
    assert [r["name"] for r in out["power_queue"]] == ["a-0"]
    assert [(r["job_id"], r["names"]) for r in out["job_end_wakes"]] == [(17, ["a-2"])]
    assert [(r["request_id"], r["state"]) for r in out["open_requests"]] == [("r1", "intent")]
    assert [u["key"] for u in out["unavailable"]] == ["gcp:z:m:spot"]
