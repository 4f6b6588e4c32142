"""The slurm.conf the stack delivers (with slurmrestd's JWT auth) starts a real slurmctld 22.05 and issues tokens."""

from __future__ import annotations

import os

import pytest

from fleet.slurm.conf import render_slurm_conf, slurmrestd_auth
from fleet.spec.load import load_stack_file
from tests.harness.slurm import for_this_slurm
from tests.stacks.conftest import REPO

pytestmark = pytest.mark.slurm


def test_stack_slurm_conf_with_jwt_auth_starts_and_issues_tokens(slurm_factory):
    spec = for_this_slurm(load_stack_file(REPO / "Pulumi.gcp-a3mega-slurm.yaml"))
    harness = slurm_factory()
    key = harness.root / "state" / "ctld" / "jwt_hs256.key"
    key.write_bytes(os.urandom(32))  # SlurmCluster stores 32 random bytes; the VM writes them here
    key.chmod(0o400)
    # the stack's own keys, with only the host-specific ones (paths, ports, the key's location) replaced
    overrides = {**harness.overrides(cgroup=True), **slurmrestd_auth(str(key))}
    conf = render_slurm_conf(spec, spec.clusters[0], controller_host="a3mega-controller", overrides=overrides)
    assert "AuthAltTypes=auth/jwt" in conf.slurm_conf
    harness.start_rendered(conf, cgroup=True)
    try:
        token = harness.run("scontrol", "token", "lifespan=60", check=True).stdout
        assert token.startswith("SLURM_JWT=") and len(token.strip()) > len("SLURM_JWT=") + 20, harness.logs()
    finally:
        harness.stop()
