"""Fixtures of the first-boot test: the baked root, the synthesized test stack, and the booted cluster.

Runs as root with debootstrap, ip, unshare and nsenter (scripts/setup.sh installs debootstrap).  Where
they are missing the tests are skipped with the reason, except in CI (CI=true or FLEET_REQUIRE_SLURM=1),
where that is a failure: the first-boot test never silently drops out of the suite CI runs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.firstboot import os_image
from tests.firstboot.cloud import FirstBootCloud
from tests.firstboot.declared import Declared, declared
from tests.firstboot.image import image_packages
from tests.firstboot.rootfs import RootfsError
from tests.firstboot.stubs import stub_image
from tests.firstboot.vm import Vm
from tests.slurm_compat.noble import NobleUnavailable

HERE = Path(__file__).parent
STACK = HERE / "Pulumi.firstboot.yaml"
MOUNT_STACK = HERE / "Pulumi.firstboot-mount.yaml"
CLUSTER = "fb"
TOOLS = ("debootstrap", "ip", "unshare", "nsenter", "openssl")


def unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "the first-boot test makes namespaces and mounts: run as root (CI does)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"first-boot test needs {', '.join(missing)} (scripts/setup.sh installs them)"
    return None


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true" or os.environ.get("FLEET_REQUIRE_SLURM") == "1"


def must_run(reason: str | None, what: str) -> None:
    """Skip for `reason` (None: nothing is missing), or fail in CI, where `what` must run."""
    if reason:
        if in_ci():
            pytest.fail(f"in CI {what} must run, but {reason}")
        pytest.skip(reason)


def require() -> None:
    must_run(unavailable_reason(), "the first-boot test")


def pytest_report_header() -> str | None:
    if unavailable_reason() is not None:
        return None
    try:
        image = os_image.chosen()
    except os_image.NoSuchImage as exc:
        return f"first-boot VMs: {exc}"
    return f"first-boot VMs boot {image.name}, Slurm {image.slurm_release}: {image.why}"


@pytest.fixture(scope="session")
def root_image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The baked root of the chosen OS (os_image.py), with every package the scripts of both test stacks install."""
    require()
    try:
        image = os_image.chosen()
    except os_image.NoSuchImage as exc:
        pytest.fail(str(exc))
    log = tmp_path_factory.mktemp("rootfs") / "bake.log"
    vms = [vm for stack in (STACK, MOUNT_STACK) for vm in synthesized(stack).vms.values()]
    scripts = [vm.metadata["startup-script"] for vm in vms]
    try:
        return image.bake(image_packages(scripts), log)
    except (RootfsError, NobleUnavailable) as exc:
        pytest.fail(f"{image.name}: {exc}")


_synth: dict[Path, Declared] = {}
_variants: dict[tuple[Path, str], Path] = {}


def slurm_variant(stack: Path, **slurm: object) -> Path:
    """`stack` with these keys set in every cluster's `slurm` section, written once per session (the same stack
    name, in a directory of its own)."""
    key = (stack, repr(sorted(slurm.items())))
    if key not in _variants:
        doc = yaml.safe_load(stack.read_text())
        for cluster in doc["config"]["gpu-fleet:fleet"]["clusters"]:
            cluster.setdefault("slurm", {}).update(slurm)
        path = Path(tempfile.mkdtemp(prefix="fb-variant-")) / stack.name
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        _variants[key] = path
    return _variants[key]


def with_accounting(stack: Path, accounting: str) -> Path:
    """`stack` as deployed with `slurm.accounting` set (before accounting existed: "none")."""
    return slurm_variant(stack, accounting=accounting)


def synthesized(stack: Path) -> Declared:
    """`fleet synth` of a test stack for the chosen OS's Slurm (in-process, under Pulumi mocks), once per session."""
    from fleet.synth.run import synth_file

    if stack not in _synth:
        derived = os_image.stack_for(stack, os_image.chosen(), Path(tempfile.mkdtemp(prefix="fb-stacks-")))
        _synth[stack] = declared(synth_file(derived))
        shutil.rmtree(derived.parent, ignore_errors=True)
    return _synth[stack]


@dataclass
class Booted:
    cloud: FirstBootCloud
    declared: Declared
    results: dict[str, object] = field(default_factory=dict)  # vm -> CompletedProcess of its startup script
    seconds: dict[str, float] = field(default_factory=dict)

    def vm(self, name: str):
        return self.cloud.vms[name]

    def explain(self, name: str) -> str:
        """The startup script's output and the daemon logs of a VM, for assertion messages."""
        vm = self.vm(name)
        parts = [f"(booted {os_image.chosen().name})"]
        parts.append((vm.workdir / "startup.log").read_text() if (vm.workdir / "startup.log").exists() else "")
        for log in ("var/log/slurm/slurmctld.log", "var/log/slurm/slurmd.log"):
            path = vm.upper / log
            if path.exists():
                parts.append(f"--- {log} (tail)\n" + "\n".join(path.read_text().splitlines()[-25:]))
        for unit_log in sorted((vm.upper / "var/log/fb-units").glob("*.log")):
            parts.append(f"--- {unit_log.name}\n" + unit_log.read_text()[-1500:])
        return "\n".join(parts)


def held_job(vm: Vm) -> int:
    """Submit a held one-node job to the test stack's `mega` partition from `vm` (a controller); its job ID."""
    out = vm.run(["sbatch", "--hold", "-p", "mega", "-D", "/tmp", "-o", "/dev/null", "--wrap", "true"], check=True)
    return int(out.stdout.split()[-1])


def boot(cloud: FirstBootCloud, booted: Booted, names: list[str]) -> None:
    """Create the VMs, then run their startup scripts concurrently (as VMs booting together do)."""
    for name in names:
        cloud.create(name)

    def run(name: str) -> None:
        t0 = time.monotonic()
        booted.results[name] = cloud.vms[name].startup()
        booted.seconds[name] = time.monotonic() - t0

    with ThreadPoolExecutor(len(names)) as pool:
        list(pool.map(run, names))


@pytest.fixture(scope="session")
def cluster(root_image: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Booted]:
    """The test stack's controller, then its login VM, both A3 Mega nodes and the A3 Ultra node, from their scripts."""
    decl = synthesized(STACK)
    work = tmp_path_factory.mktemp("firstboot")
    with FirstBootCloud(decl, root_image, work, **stub_image(), prefix="fbc") as cloud:
        booted = Booted(cloud, decl)
        boot(cloud, booted, [decl.controller(CLUSTER).name])
        nodes = [vm.name for pool in ("mega", "ultra") for vm in decl.nodes(CLUSTER, pool)]
        boot(cloud, booted, nodes + decl.outputs["clusters"][CLUSTER]["logins"])
        yield booted
