"""The controller's slurmrestd wrapper (components/gcp/startup.py) starts a real slurmrestd as a non-root user
with JWT auth and, without accounting, only the Slurm OpenAPI plugin (22.05's default set includes slurmdbd plugins,
fatal without a slurmdbd), and lists a pending job array's tasks whole.  With accounting, the slurmdbd plugin beside
it: tests/firstboot."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request

import pytest

from autoscaler.slurm.client import RestSlurm
from components.gcp.startup import restd_wrapper
from fleet.slurm.conf import render_slurm_conf, slurmrestd_auth
from fleet.spec import load_stack_file
from tests.harness.slurm import for_this_slurm
from tests.stacks.conftest import REPO

pytestmark = pytest.mark.slurm


def test_wrapper_serves_the_rest_api_with_jwt_as_nobody(slurm_factory, tmp_path) -> None:
    spec = for_this_slurm(load_stack_file(REPO / "Pulumi.gcp-l4-dev.yaml"))
    harness = slurm_factory()
    key = harness.root / "state" / "ctld" / "jwt_hs256.key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o400)
    conf = render_slurm_conf(spec, spec.clusters[0], overrides={**harness.overrides(), **slurmrestd_auth(str(key))})
    harness.start_rendered(conf)
    wrapper = harness.root / "bin" / "gpu-fleet-slurmrestd"
    wrapper.write_text(restd_wrapper(accounting=False))  # the harness runs no slurmdbd
    wrapper.chmod(0o755)
    port = harness.ports.lease()
    env = {**harness.env, "SLURM_JWT": "daemon"}  # as the drop-in sets it
    argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(wrapper), f"127.0.0.1:{port}"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        token = harness.run("scontrol", "token", "lifespan=60", check=True).stdout.strip().split("=", 1)[1]
        headers = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": token}
        deadline, body = time.monotonic() + 15, None
        while body is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/slurm/v0.0.38/ping", headers=headers)
                body = json.loads(urllib.request.urlopen(req, timeout=2).read())
            except OSError:
                time.sleep(0.2)
        assert body is not None, proc.communicate(timeout=5)[0].decode() if proc.poll() is not None else "no answer"
        assert body["pings"][0]["ping"] == "UP"

        # a pending array of 300 irregular task ids: the wrapper's slurmrestd lists every task (at libslurm's default
        # it cut the list at 64 characters), so the autoscaler plans a node for each (`SlurmJob.unit_ids`)
        tasks = sorted(set(range(0, 1000, 7)) | set(range(1, 1000, 13)))
        array = harness.run("sbatch", "--parsable", "-H", "--gres=gpu:1", f"--array={','.join(map(str, tasks))}",
                            "--wrap", "true", check=True).stdout.strip()  # fmt: skip
        rest = RestSlurm(f"http://127.0.0.1:{port}", token=token, user="root")
        (job,) = [j for j in rest.jobs() if j.job_id == int(array)]
        assert job.array_tasks.whole and job.unit_ids() == tuple(f"job/{array}_{t}" for t in tasks)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        harness.stop()
