"""A few refusals through the installed `fleet` entry point and the Slurm hook module, as separate processes:
exit 2, the file and place, no traceback (the in-process corpus covers the rest)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.inputs.daemon import VALID_CONFIG, VALID_INVENTORY
from tests.inputs.specs import VALID

FLEET = Path(sys.executable).with_name("fleet")


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=120)


def test_synth_duplicate_key(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.dup.yaml"
    path.write_text(VALID.replace("  gpu-fleet:fleet:\n", "  gpu-fleet:fleet:\n    region: us-west1\n", 1))
    cp = run(FLEET, "synth", "--config", path)
    assert cp.returncode == 2 and "Traceback" not in cp.stderr
    assert f"{path}:" in cp.stderr and "duplicate key 'region'" in cp.stderr


def test_render_slurm_conf_non_utf8(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_bytes(VALID.encode().replace(b"team: ml", b"team: m\xe9l", 1))
    cp = run(FLEET, "render", "slurm-conf", "--config", path, "--out", tmp_path / "out")
    line = next(i + 1 for i, ln in enumerate(VALID.splitlines()) if "team: ml" in ln)
    assert cp.returncode == 2 and "Traceback" not in cp.stderr
    assert f"{path}:{line}:" in cp.stderr and "not valid UTF-8" in cp.stderr
    assert not (tmp_path / "out").exists()


def test_daemon_nan_budget(tmp_path: Path) -> None:
    (tmp_path / "inv.json").write_text(VALID_INVENTORY)
    cfg = tmp_path / "autoscaler.yaml"
    cfg.write_text(VALID_CONFIG.replace("budget_usd_per_hour: 2000", "budget_usd_per_hour: .nan"))
    cp = run(FLEET, "autoscaler", "run", "--config", cfg, "--once", "--dry-run")
    assert cp.returncode == 2 and "Traceback" not in cp.stderr
    assert f"{cfg}:" in cp.stderr and "not a finite number" in cp.stderr
    assert not (tmp_path / "state").exists()


def test_simulate_long_field(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submission_time,duration,num_gpu\nj1,0,10,1\nj2," + "1" * 200_000 + ",10,1\n")
    cp = run(FLEET, "simulate", "--trace", trace)
    assert cp.returncode == 2 and "Traceback" not in cp.stderr
    assert f"{trace}:3:" in cp.stderr


def test_hook_module_refuses_a_hostlist_bomb(tmp_path: Path) -> None:
    state = tmp_path / "s.db"
    cp = run(sys.executable, "-m", "autoscaler.slurm.hook", "resume", "a[0-999]b[0-999]c[0-999]", "--state", state)
    assert cp.returncode == 2 and "Traceback" not in cp.stderr
    assert "expands to 1,000,000,000 names" in cp.stderr
    assert not state.exists()
