"""First boot of the generated Slurm VMs: the startup scripts the stack declares, run in namespace "VMs".

The stack (tests/firstboot/Pulumi.firstboot.yaml) is synthesizedd under Pulumi mocks exactly as
`fleet synth` does; each VM gets the metadata its instance or template declares from a fake GCE
metadata server, and the keys from a fake Secret Manager that only the declared accessors may read.
A controller, two A3 Mega nodes and one A3 Ultra node boot from one baked Debian 12 root, each in its
own network/mount/UTS/PID namespaces; GPU tools are recording stubs (tests/firstboot/stubs.py).
"""

from __future__ import annotations

import base64
import re

import pytest

from components.gcp.startup import JWT_KEY_PATH
from tests.firstboot.conftest import CLUSTER, MOUNT_STACK, Booted, boot, synthesized
from tests.firstboot.stubs import LOG as STUB_LOG

pytestmark = pytest.mark.slow

MUNGE_KEY = "/etc/munge/munge.key"


def _ok(cluster: Booted, name: str) -> None:
    result = cluster.results[name]
    assert result.returncode == 0, f"{name}: startup script exited {result.returncode}\n{cluster.explain(name)}"


def _controller(cluster: Booted):
    return cluster.vm(cluster.declared.controller(CLUSTER).name)


def _nodes(cluster: Booted, pool: str | None = None) -> list[str]:
    pools = [pool] if pool else ["mega", "ultra"]
    return [vm.name for p in pools for vm in cluster.declared.nodes(CLUSTER, p)]


def _secret(cluster: Booted, kind: str) -> bytes:
    """The key bytes the stack stores in Secret Manager (the secret holds their base64 text)."""
    [secret_id] = [s for s in cluster.cloud.secret_values if s.endswith(f"-{kind}")]
    return base64.b64decode(cluster.cloud.secret_values[secret_id])


def _slurmctld_host(conf: str) -> tuple[str, str | None]:
    m = re.search(r"^SlurmctldHost=([^(\s]+)(?:\(([^)]+)\))?\s*$", conf, re.M)
    assert m, "slurm.conf has no SlurmctldHost line"
    return m.group(1), m.group(2)


def test_controller_runs_slurmctld_with_the_rendered_config_and_the_keys_from_secret_manager(cluster):
    ctl = _controller(cluster)
    _ok(cluster, ctl.name)
    declared_md = cluster.declared.controller(CLUSTER).metadata
    assert ctl.read("/etc/slurm/slurm.conf") == declared_md["slurm-conf"]
    assert ctl.read("/etc/slurm/gres.conf") == declared_md["gres-conf"]
    assert (ctl.upper / MUNGE_KEY.lstrip("/")).read_bytes() == _secret(cluster, "munge-key")
    assert (ctl.upper / JWT_KEY_PATH.lstrip("/")).read_bytes() == _secret(cluster, "jwt-key")
    ping = ctl.run(["scontrol", "ping"])
    assert "is UP" in ping.stdout, f"{ping.stdout}{ping.stderr}\n{cluster.explain(ctl.name)}"
    # the keys came from Secret Manager, read with the controller's own service account
    sa = cluster.declared.controller(CLUSTER).service_account
    got = {(a.secret_id, a.status) for a in cluster.cloud.secret_manager.accesses if a.service_account == sa}
    assert {(s, 200) for s in cluster.cloud.secret_values} <= got


def test_every_node_registers_with_the_controller_at_the_address_in_slurm_conf(cluster):
    ctl = _controller(cluster)
    conf = ctl.read("/etc/slurm/slurm.conf")
    name, address = _slurmctld_host(conf)
    assert name == ctl.name
    assert address == cluster.cloud.address_of(ctl.name), "SlurmctldHost must carry the controller's address"
    for node in _nodes(cluster):
        _ok(cluster, node)
        assert cluster.vm(node).read("/etc/slurm/slurm.conf") == conf
        assert cluster.vm(node).read_bytes(MUNGE_KEY) == ctl.read_bytes(MUNGE_KEY)
    states = ctl.run(["sinfo", "-N", "-h", "-o", "%N %T"], check=True).stdout.split("\n")
    state = dict(line.split() for line in states if line.strip())
    for node in _nodes(cluster):
        assert state.get(node) == "idle", f"{node}: {state.get(node)}\n{cluster.explain(node)}"
        shown = ctl.run(["scontrol", "show", "node", node], check=True).stdout
        assert f"NodeAddr={cluster.cloud.address_of(node)} " in shown, shown


def test_a_two_node_job_runs(cluster):
    ctl = _controller(cluster)
    job = ctl.run(["srun", "-N2", "-p", "mega", "--time=1", "hostname"], timeout=120)
    assert job.returncode == 0, f"{job.stdout}{job.stderr}\n" + "\n".join(cluster.explain(n) for n in _nodes(cluster))
    assert sorted(job.stdout.split()) == sorted(_nodes(cluster, "mega"))


def test_gpu_steps_run_in_order_and_slurmd_waits_for_the_devices(cluster):
    for node in _nodes(cluster):
        _ok(cluster, node)
        vm = cluster.vm(node)
        calls = [line.split(" ", 1) for line in (vm.upper / STUB_LOG.lstrip("/")).read_text().splitlines()]
        units = [line.split(" ", 1) for line in (vm.upper / "var/log/fb-units/calls.log").read_text().splitlines()]
        slurmd_start = min(float(t) for t, c in units if re.search(r"\b(start|restart|enable)\b.*\bslurmd\b", c))
        assert calls, f"{node}: no GPU step ran"
        assert max(float(t) for t, _ in calls) < slurmd_start, f"{node}: a GPU step ran after slurmd started"
        assert vm.run(["test", "-c", "/dev/nvidia7"]).returncode == 0


def test_a_non_root_user_on_a_node_gets_no_token_and_cannot_read_the_munge_key(cluster):
    node = _nodes(cluster, "mega")[0]
    vm = cluster.vm(node)
    vm.run(["useradd", "-m", "alice"], check=True)
    token = "http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token"
    before = len(cluster.cloud.metadata.token_requests(node))
    as_alice = vm.run(["curl", "-sS", "-m", "5", "-H", "Metadata-Flavor: Google", token], user="alice")
    assert as_alice.returncode != 0 and "access_token" not in as_alice.stdout, as_alice
    assert len(cluster.cloud.metadata.token_requests(node)) == before, "the request reached the metadata server"
    as_root = vm.run(["curl", "-sS", "-m", "5", "-H", "Metadata-Flavor: Google", token])
    assert "access_token" in as_root.stdout, "root (the startup script, the guest agent) must still get one"
    key = vm.run(["cat", MUNGE_KEY], user="alice")
    assert key.returncode != 0 and "Permission denied" in key.stderr
    munge = vm.run(["stat", "-c", "%U %a", MUNGE_KEY], check=True).stdout.split()
    assert munge == ["munge", "400"]


@pytest.fixture(scope="module")
def mount_boot(root_image, tmp_path_factory):
    """One A3 Mega node of the stack with a Managed Lustre /scratch, booted where that Lustre does not exist."""
    from tests.firstboot.cloud import FirstBootCloud
    from tests.firstboot.stubs import gpu_stubs, stub_units

    decl = synthesized(MOUNT_STACK)
    with FirstBootCloud(decl, root_image, tmp_path_factory.mktemp("mount"), stubs=gpu_stubs(), units=stub_units(), prefix="fbm") as cloud:
        booted = Booted(cloud, decl)
        node = decl.nodes(CLUSTER, "mega")[0].name
        boot(cloud, booted, [node])
        yield booted, node


def test_a_missing_mount_fails_the_boot_loudly(mount_boot):
    booted, node = mount_boot
    result = booted.results[node]
    scratch = booted.declared.outputs["clusters"][CLUSTER]["scratch"]
    assert result.returncode != 0, f"boot succeeded without {scratch}:\n{booted.explain(node)}"
    assert "/scratch" in result.stderr and scratch in result.stderr, result.stderr
    assert booted.vm(node).run(["pgrep", "-x", "slurmd"]).returncode != 0, "slurmd started without /scratch"
