"""The generated startup scripts: valid bash, steps in the order a first boot needs, keys only where needed.

(The first-boot test in tests/firstboot/ runs them in Debian roots against fake metadata and Secret
Manager; these tests pin the order and the arguments of what they run.)
"""

from __future__ import annotations

import re
import shlex
import socket
import subprocess
from pathlib import Path

import pytest

from components.gcp.startup import (
    _PRELUDE,
    ACCOUNTING_PACKAGES,
    APT_LOCK_WAIT_S,
    AR_APT_KEY,
    AUTOSCALER_LOCK,
    AUTOSCALER_STATE_DIR,
    CHECKPOINTS_MOTD,
    GCSFUSE_CONFIG,
    GCSFUSE_UNIT,
    GCSFUSE_VERSION,
    GUARD,
    INSTALL_VENV,
    INSTALL_VENV_SOURCE,
    JWT_KEY_PATH,
    MARIADB_CONF,
    MARIADB_DATA_DIR,
    MUNGE_KEY_PATH,
    NVIDIA_CONTAINER_TOOLKIT_KEY,
    NVIDIA_CONTAINER_TOOLKIT_PACKAGES,
    NVIDIA_CONTAINER_TOOLKIT_REPO,
    NVIDIA_CONTAINER_TOOLKIT_VERSION,
    PROLOG,
    SCRATCH_MOTD,
    SECRET_WAIT_S,
    SLURMCTLD_STATE_DIR,
    SLURMD_SPOOL_DIR,
    WAIT_DEVICES,
    SlurmHostConfig,
    _checkpoint_lines,
    _container_toolkit_lines,
    _dkms_source_build_lines,
    _scratch_call,
    _scratch_lines,
    autoscaler_install,
    guard_script,
    innodb_pool_lines,
    rxdm_flags,
    startup_script,
)
from fleet.catalog import load_catalog
from tests.fakes.metadata import FakeMetadata, VmMetadata
from tests.fakes.metadata_secrets import FakeSecretManager

SHA = "8c0eeb8229cfef2fdf8412660f68b6092404c7c7"
BUCKET = "p-c-checkpoints"
CAT = load_catalog()


def script(role: str, **kw) -> str:
    base = {"role": role, "munge_secret": "c-slurm-munge-key", "home": "10.0.0.2:/home"}
    if role == "controller":
        base |= {"jwt_secret": "c-slurm-jwt-key", "autoscaler_source": "https://example.com/gpu-fleet.git",
                 "autoscaler_ref": SHA}  # fmt: skip
    return startup_script(SlurmHostConfig(**(base | kw)))


def gpu(machine: str, **kw) -> str:
    m = CAT.machine(machine)
    fab = CAT.fabric_software(m.software.fabric)
    return script("compute", gpu_count=m.gpu_count, fabric=fab, local_ssd_gib=m.local_ssd_gib, **kw)


ALL = {
    "controller": script("controller", scratch="10.1.0.5@tcp:/a3ultra"),
    "login": script("login"),
    "a3-megagpu-8g": gpu("a3-megagpu-8g", checkpoints=BUCKET),
    "a3-ultragpu-8g": gpu("a3-ultragpu-8g", scratch="10.1.0.5@tcp:/a3ultra"),
    "g2-standard-8": gpu("g2-standard-8"),
}


def written_file(script: str, path: str) -> str:
    """The text a startup script writes to `path` (components/gcp/startup.py `_file`: a quoted heredoc)."""
    head = f"cat > {shlex.quote(path)} <<'GPU_FLEET_EOF'\n"
    assert script.count(head) == 1, f"the script writes {path} {script.count(head)} times"
    return script.split(head, 1)[1].split("\nGPU_FLEET_EOF\n", 1)[0] + "\n"


def pos(text: str, needle: str) -> int:
    assert needle in text, needle
    return text.index(needle)


@pytest.mark.parametrize("name", sorted(ALL))
def test_every_script_is_valid_bash_that_stops_on_the_first_error(name: str) -> None:
    text = ALL[name]
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    assert text.startswith("#!/bin/bash\n") and "set -Eeuo pipefail" in text.splitlines()[2]
    assert "|| true\nmount" not in text and not re.search(r"mount[^\n]*\|\| true", text)  # mounts fail loudly


#: a pipe into a reader that may exit before its writer is done (`grep -q`, `grep -m N`, `head`)
EARLY_EXIT_PIPE = re.compile(r"\|\s*(grep\s+(-\w*[qm]|--quiet|--silent|--max-count)|head\b)")


@pytest.mark.parametrize("name", sorted(ALL))
def test_no_pipe_ends_in_a_reader_that_stops_before_its_writer(name: str) -> None:
    """Under `set -o pipefail` (every script here, and the prolog), a reader that exits early makes the writer's
    next write a SIGPIPE, and the pipeline fails although the reader found what it looked for: the TCPXO prolog's
    RxDM check failed so on every try (tests/firstboot/test_tcpxo_prolog.py).  Readers take their whole input."""
    assert [m.group(0) for m in EARLY_EXIT_PIPE.finditer(ALL[name])] == []


@pytest.mark.parametrize("name", sorted(ALL))
def test_the_metadata_guard_comes_before_any_key_or_metadata_read(name: str) -> None:
    text = ALL[name]
    body = text[pos(text, "# --- 1. metadata guard") :]
    guard = pos(body, f"\n{GUARD}\n")
    assert guard < pos(body, "put_key ") and guard < pos(body, "attr slurm-conf")
    assert "systemctl enable gpu-fleet-metadata-guard.service" in body  # and again on every boot


def test_guard_rules_let_only_root_and_the_exempt_users_reach_the_metadata_server() -> None:
    node, ctl = guard_script(), guard_script(("slurm",))
    for text in (node, ctl):
        subprocess.run(["sh", "-n"], input=text, text=True, check=True)
        assert "-d 169.254.169.254 -p tcp ! --dport 53 -j GPU_FLEET_METADATA" in text  # DNS stays open
        assert "-m owner --uid-owner 0 -j RETURN" in text and "-p tcp -j REJECT --reject-with tcp-reset" in text
    assert "--uid-owner slurm" not in node and "--uid-owner slurm" in ctl
    assert f"{GUARD}\n" in ALL["controller"].split("# --- 3.")[0].split("# --- 2. packages ---")[1]  # re-run


def test_keys_land_in_root_only_files_and_the_jwt_key_only_on_the_controller() -> None:
    for name, text in ALL.items():
        assert f"put_key c-slurm-munge-key {MUNGE_KEY_PATH} munge" in text
        assert ("c-slurm-jwt-key" in text) == (name == "controller"), name
        assert "umask 077" in text and 'chmod 0400 "$tmp"' in text
        assert "gcloud" not in text  # tokens stay off command lines: curl reads the header from stdin
    assert f"put_key c-slurm-jwt-key {JWT_KEY_PATH} slurm" in ALL["controller"]
    with pytest.raises(ValueError, match="jwt_secret"):
        SlurmHostConfig(role="compute", munge_secret="m", jwt_secret="j")


def test_the_controller_is_pinned_in_etc_hosts_from_slurm_conf() -> None:
    text = ALL["login"]
    line = next(ln for ln in text.splitlines() if ln.startswith("ctl=$("))
    conf = "ClusterName=c\nSlurmctldHost=c-controller(10.0.15.253)\n"
    out = subprocess.run(["bash", "-c", line.replace("/etc/slurm/slurm.conf", "/dev/stdin") + '; echo "$ctl"'],
                         input=conf, text=True, capture_output=True, check=True)  # fmt: skip
    assert out.stdout.strip() == "10.0.15.253 c-controller"
    assert 'echo "$ctl # gpu-fleet controller" >> /etc/hosts' in text


def test_mounts_are_checked_and_lustre_gets_its_client() -> None:
    text = ALL["a3-ultragpu-8g"]
    assert 'mountpoint -q /home || die "Filestore 10.0.0.2:/home is not mounted on /home"' in text
    assert pos(text, 'modinfo -k "$(uname -r)" lustre') < pos(text, "modprobe lustre") < pos(text, "mount -t lustre")
    assert 'apt_install "lustre-client-modules-$(uname -r)" lustre-client-utils' in text
    assert 'mount_scratch || die "Lustre 10.1.0.5@tcp:/a3ultra is not mounted on /scratch"' in text


def test_local_ssds_are_raid0_and_mounted() -> None:
    a3m = ALL["a3-megagpu-8g"]
    assert '[ "${#ssds[@]}" -ge 16 ] || die "expected 16 local SSDs' in a3m  # 6000 GiB = 16 x 375 GiB
    assert (
        pos(a3m, "mdadm --create") < pos(a3m, "mkfs.ext4") < pos(a3m, 'mount -o discard,defaults "$dev" /mnt/localssd')
    )
    assert "google-local-nvme-ssd" not in ALL["g2-standard-8"]  # g2-standard-8 has no local SSD


def test_slurmd_starts_only_after_the_devices() -> None:
    for name in ("a3-megagpu-8g", "a3-ultragpu-8g", "g2-standard-8"):
        text = ALL[name]
        assert pos(text, f"\n{WAIT_DEVICES}\n") < pos(text, "systemctl restart slurmd"), name
        assert f"ExecStartPre={WAIT_DEVICES}" in text  # also on every later start of slurmd
        assert pos(text, "command -v nvidia-smi") < pos(text, "systemctl restart slurmd")
    a3m, a3u, g2 = ALL["a3-megagpu-8g"], ALL["a3-ultragpu-8g"], ALL["g2-standard-8"]
    assert "nvidia-smi --list-gpus" in a3m and "-ge 8 ]" in a3m and "/dev/aperture_devices 2>/dev/null" in a3m
    assert (
        "ibv_devices" in a3u and "aperture" not in a3u.split("gpu-fleet-wait-devices <<")[1].split("GPU_FLEET_EOF")[0]
    )
    assert "-ge 1 ]" in g2 and "ibv_devices" not in g2


def test_tcpxo_steps_on_a3_mega() -> None:
    text = ALL["a3-megagpu-8g"]
    order = [
        "modinfo import-helper",
        "gpudirect-tcpxo-apt",
        'apt_install dkms "linux-headers-$(uname -r)"',
        "dkms_source_build dmabuf-import-helper ||",
        "load_module import-helper",
        'ATTR{vendor}=="0x1ae0", ATTR{device}=="0x0084"',
        "udevadm control --reload-rules",
        "udevadm trigger --action=add --subsystem-match=pci --attr-match=vendor=0x1ae0 --attr-match=device=0x0084",
        "nvidia-ctk runtime configure --runtime=docker",
        "systemctl restart slurmd",
    ]
    assert [pos(text, step) for step in order] == sorted(pos(text, step) for step in order)
    prolog = written_file(text, PROLOG)
    assert "tcpgpudmarxd-dev:v1.0.23" in prolog and "nccl-plugin-gpudirecttcpx-dev:v1.0.17" in prolog
    assert '[ "${SLURM_JOB_NUM_NODES:-1}" -gt 1 ] || exit 0' in prolog
    assert "echo tcpxo > /etc/gpu-fleet/fabric" in text


def test_rxdm_gets_the_flags_of_its_pinned_release() -> None:
    """The open-source RxDM (tcpgpudmarxd-dev v1.0.18 on) obsoletes `--uid=` and `--alsologtostderr` (Google's
    GPUDirect-TCPXO release notes): the v1.0.23 pinned now runs with the notes' two flags, a pin at v1.0.17 or
    before with slurm-gcp's four, and a pin that is not a vX.Y.Z tag is refused."""
    image = "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/tcpgpudmarxd-dev"
    old, new = "--num_hops=2 --num_nics=8 --uid= --alsologtostderr", "--num_hops=2 --num_nics=8"
    assert [rxdm_flags(f"{image}:{tag}") for tag in ("v1.0.16", "v1.0.17", "v1.0.18", "v1.0.20", "v2.0.0")] == [
        old, old, new, new, new]  # fmt: skip
    prolog = written_file(ALL["a3-megagpu-8g"], PROLOG)
    assert f"tcpgpudmarxd-dev:v1.0.23 {new} >/dev/null\n" in prolog  # the release notes' RxDM flags
    with pytest.raises(ValueError, match=re.escape("pinned by a vX.Y.Z tag")):
        rxdm_flags(f"{image}:latest")


#: where a script's apt repository steps write, moved under tmp_path by `_run_rooted`
REPO_DIRS = ("/etc/apt/sources.list.d/", "/usr/share/keyrings/")


@pytest.mark.parametrize("image_has", [None, "1.17.4-1", NVIDIA_CONTAINER_TOOLKIT_VERSION])
def test_the_container_toolkit_is_the_pinned_version_of_its_four_packages_held(tmp_path, image_has: str | None) -> None:
    """docker runs RxDM as root through the NVIDIA Container Toolkit, whose advisories are container escapes: every
    TCPXO node runs NVIDIA_CONTAINER_TOOLKIT_VERSION of its four packages, installed where the image has another
    version (an older one with a known escape, here) or none, left as it is where it has that one; held either way."""
    log = tmp_path / "calls.log"
    rec = f'echo "$(basename "$0") $*" >> {log}'
    run = _run_rooted(
        tmp_path,
        "\n".join(_container_toolkit_lines()),
        REPO_DIRS,
        {
            "curl": f"{rec}; echo key",
            "gpg": "cat > /dev/null",
            "apt_get": f"{rec}; exit 0",
            "apt_mark": f"{rec}; exit 0",
            "dpkg_query": f"printf %s {image_has}; exit 0" if image_has else "exit 1",
        },
        "echo boot-goes-on",
    )
    assert run.returncode == 0 and "boot-goes-on" in run.stdout, run.stderr
    calls = log.read_text().splitlines()
    held = "apt-mark hold " + " ".join(NVIDIA_CONTAINER_TOOLKIT_PACKAGES)
    assert calls[-1] == held
    installs = [c for c in calls if c.startswith("apt-get") and " install " in c]
    if image_has == NVIDIA_CONTAINER_TOOLKIT_VERSION:
        assert calls == [held]
    else:  # the repository of NVIDIA's install guide, signed by its key, then the four packages at the pin
        assert calls[0] == f"curl -sSf {NVIDIA_CONTAINER_TOOLKIT_KEY}"
        listed = (tmp_path / "etc/apt/sources.list.d/nvidia-container-toolkit.list").read_text()
        ring = f"{tmp_path}/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
        assert listed.split() == ["deb", f"[signed-by={ring}]", *NVIDIA_CONTAINER_TOOLKIT_REPO.split()[1:]]
        (install,) = installs
        asked = install.split("--allow-downgrades ")[1].split()
        assert asked == [f"{name}={NVIDIA_CONTAINER_TOOLKIT_VERSION}" for name in NVIDIA_CONTAINER_TOOLKIT_PACKAGES]


def test_a_container_toolkit_that_does_not_install_stops_the_boot_naming_the_version(tmp_path) -> None:
    """The pinned version missing from NVIDIA's repository stops the boot saying which version and where it is set,
    instead of a node whose multi-node jobs fail later in the RxDM prolog."""
    run = _run_rooted(
        tmp_path,
        "\n".join(_container_toolkit_lines()),
        REPO_DIRS,
        {
            "curl": "echo key",
            "gpg": "cat > /dev/null",
            "apt_get": 'case " $* " in *" install "*) exit 100;; esac',
            "apt_mark": "exit 0",
            "dpkg_query": "exit 1",
        },
        "echo boot-goes-on",
    )
    assert run.returncode == 1 and "boot-goes-on" not in run.stdout
    assert (
        f"nvidia-container-toolkit={NVIDIA_CONTAINER_TOOLKIT_VERSION} (NVIDIA_CONTAINER_TOOLKIT_VERSION,"
        " components/gcp/startup.py) did not install" in run.stderr
    )


def test_gib_steps_on_a3_ultra_and_nothing_on_g2() -> None:
    a3u, g2 = ALL["a3-ultragpu-8g"], ALL["g2-standard-8"]
    assert "apt_install ibverbs-utils" in a3u and "gpudirect-gib-apt" in a3u
    assert "apt_install --allow-change-held-packages nccl-gib=v1.1.0" in a3u and "apt-mark hold nccl-gib" in a3u
    assert '. "/usr/local/gib/scripts/set_nccl_env.sh"' in a3u and "/usr/local/gib/lib64" in a3u
    for step in ("import-helper", "udevadm", "docker", "nccl-gib", "ibverbs"):
        assert step not in g2, step
    assert "echo none > /etc/gpu-fleet/fabric" in g2


def test_nodes_publish_their_physical_host() -> None:
    text = ALL["a3-megagpu-8g"]
    assert pos(text, "systemctl restart slurmd") < pos(text, "attr physical_host")
    assert 'scontrol update NodeName="$(hostname -s)" Comment="physical_host=$host"' in text
    assert "gpu-fleet-topology.timer" in ALL["controller"]


def test_the_autoscaler_is_installed_at_a_pinned_commit_with_hash_checked_dependencies() -> None:
    lines = "\n".join(autoscaler_install("https://example.com/f.git", f"v1.2.0@{SHA}"))
    assert "fetch --quiet --depth 1 origin -- refs/tags/v1.2.0" in lines
    assert f'[ "$(git -C /opt/gpu-fleet rev-parse FETCH_HEAD^{{commit}})" = {SHA} ]' in lines
    # the venv step is deploy/install-venv.sh as the stack has it, written and run (the image's build runs it too)
    assert INSTALL_VENV_SOURCE.read_text().rstrip("\n") in lines
    assert f"{INSTALL_VENV} /opt/gpu-fleet || die" in lines
    assert not re.search(r"(fetch|checkout)[^\n]*\bmain\b", lines)  # never a branch
    for bad in ("main", "v1.2.0", "a" * 39, f"-x@{SHA}", f"{SHA}\n"):
        with pytest.raises(ValueError, match="pinned"):
            autoscaler_install("https://example.com/f.git", bad)


def _fake_python(tmp_path: Path, log: Path) -> dict[str, str]:
    """`python3` for deploy/install-venv.sh: `-m venv DIR` makes a venv whose pip and python log their calls."""
    venv_python = (
        f'#!/bin/bash\ncase "$*" in *sysconfig*) echo "$(dirname "$0")/../site";; esac\necho "python $*" >> {log}\n'
    )
    python3 = (
        f'[ "$1 $2" = "-m venv" ] || exit 1\nmkdir -p "$3/bin" "$3/site"\necho "venv" >> {log}\n'
        f'printf \'#!/bin/bash\\necho "pip $*" >> {log}\\n\' > "$3/bin/pip"\n'
        f'cat > "$3/bin/python" <<\'EOF\'\n{venv_python}EOF\nchmod +x "$3/bin/pip" "$3/bin/python"'
    )
    return {"python3": python3}


def test_the_controllers_venv_is_rebuilt_from_scratch_when_the_lock_changes_and_left_when_it_does_not(tmp_path):
    """The install's venv step, as the controller's script runs it (deploy/install-venv.sh, written and run), twice
    with one lock and once with another: pip runs for the first and the changed lock only, each time into a new
    venv (a package the new lock dropped does not linger), with the daemon stopped first; the checkout goes on the
    venv's path and `fleet` runs its CLI every time."""
    home = tmp_path / "opt/gpu-fleet"
    (home / "deploy").mkdir(parents=True)
    lock = home / AUTOSCALER_LOCK
    lock.write_text("apscheduler==3.11.0 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    log = tmp_path / "calls.log"
    lines = autoscaler_install(None, None)
    first_line = next(i for i, ln in enumerate(lines) if INSTALL_VENV in ln)
    step = "\n".join(lines[first_line : first_line + 3])
    assert step.endswith(f'{INSTALL_VENV} /opt/gpu-fleet || die "gpu-fleet: the venv of /opt/gpu-fleet could not '
                         f'be built from {AUTOSCALER_LOCK}"'), step  # fmt: skip
    stubs = {**_fake_python(tmp_path, log), "systemctl": f'echo "systemctl $*" >> {log}'}

    def run() -> list[str]:
        log.write_text("")
        done = _run_rooted(tmp_path, step, ("/opt/gpu-fleet", "/usr/local/sbin/"), stubs, "")
        assert done.returncode == 0, done.stderr
        return log.read_text().splitlines()

    first = run()
    assert first[:3] == [
        "systemctl stop gpu-fleet-autoscaler",
        "venv",
        f"pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r {lock}",
    ]
    assert (home / ".venv/site/gpu-fleet.pth").read_text().strip() == str(home)
    assert "python -m compileall" in first[-1]
    wrapper = home / ".venv/bin/fleet"
    assert wrapper.stat().st_mode & 0o111
    assert f'exec {home}/.venv/bin/python -P -m fleet.cli.main "$@"' in wrapper.read_text()
    (home / ".venv/site/stale-package").write_text("")
    assert not [c for c in run() if c.startswith(("pip", "venv", "systemctl"))]  # the same lock: nothing rebuilt
    lock.write_text(lock.read_text().replace("3.11.0", "3.11.1"))
    again = run()
    assert again[:3] == first[:3] and not (home / ".venv/site/stale-package").exists()


@pytest.mark.parametrize(
    ("args", "rc", "says"),
    [
        (["relative/path"], 2, "CHECKOUT must be an absolute path"),
        ([], 2, "usage:"),
        (["{tmp}/empty"], 1, "deploy/controller-requirements.txt missing: {tmp}/empty is not a gpu-fleet checkout"),
    ],
)
def test_install_venv_refuses_what_is_not_a_checkout_and_builds_nothing(tmp_path, args, rc, says) -> None:
    (tmp_path / "empty").mkdir()
    argv = [a.format(tmp=tmp_path) for a in args]
    done = subprocess.run(["sh", str(INSTALL_VENV_SOURCE), *argv], capture_output=True, text=True, check=False)
    assert done.returncode == rc and says.format(tmp=tmp_path) in done.stderr, done.stderr
    assert list((tmp_path / "empty").iterdir()) == []


@pytest.mark.parametrize(
    ("modprobe", "secure_boot", "rc", "says"),
    [
        (0, "1", 0, ""),
        (1, "1", 1, "kernel module import-helper refused: Secure Boot is on"),
        (1, "0", 1, "kernel module import-helper did not load"),
    ],
)
def test_a_module_a_secure_boot_kernel_refuses_stops_the_boot_saying_why(
    tmp_path, modprobe: int, secure_boot: str, rc: int, says: str
) -> None:
    """The script's own `load_module`, run by bash with `modprobe` and the EFI variable read (`od`) stubbed: a
    module a Secure Boot kernel refuses is a FATAL line naming the module and the setting that avoids it."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for name, body in (("modprobe", f"exit {modprobe}"), ("od", f"echo '  {secure_boot}'")):
        (bin_ / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_ / name).chmod(0o755)
    run = subprocess.run(
        ["bash", "-c", _PRELUDE + "\nload_module import-helper\necho loaded\n"],
        env={"PATH": f"{bin_}:/usr/bin:/bin"}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == rc, run.stderr
    assert says in run.stderr and ("loaded" in run.stdout) is (rc == 0)
    if secure_boot == "1" and rc:
        assert "pools[].secure_boot: false" in run.stderr


def test_gpu_nodes_keep_their_gpus_in_persistence_mode_and_slurmd_an_unlimited_memlock() -> None:
    """Ubuntu's nvidia-persistenced unit passes --no-persistence-mode; the drop-in (as the Toolkit's blueprints
    write it) starts the daemon without it, before the unit is started.  slurmd runs with LimitMEMLOCK=infinity,
    which jobs keep (PropagateResourceLimitsExcept=MEMLOCK: tests/slurm/test_conf.py)."""
    for name in ("a3-megagpu-8g", "a3-ultragpu-8g", "g2-standard-8"):
        text = ALL[name]
        dropin = "/etc/systemd/system/nvidia-persistenced.service.d/persistence_mode.conf"
        reload = text.index("systemctl daemon-reload", pos(text, dropin))
        assert reload < pos(text, "enable --now nvidia-persistenced"), name
        assert "--user nvidia-persistenced --verbose" in text and "--no-persistence-mode" not in text
        slurmd = text.split("slurmd.service.d/gpu-fleet.conf <<'GPU_FLEET_EOF'\n")[1].split("GPU_FLEET_EOF")[0]
        assert "LimitMEMLOCK=infinity" in slurmd, name


def _stub_bin(tmp_path, **scripts: str):
    """Executable stubs (`apt_get=` is apt-get) in tmp_path/bin, for the script's functions run by bash."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    for name, body in scripts.items():
        (bin_ / name.replace("_", "-")).write_text(f"#!/bin/bash\n{body}\n")
        (bin_ / name.replace("_", "-")).chmod(0o755)
    return bin_


@pytest.mark.parametrize("name", sorted(ALL))
def test_every_apt_call_waits_for_the_locks_of_another_apt(name: str) -> None:
    """unattended-upgrades may hold apt's locks at first boot: no script runs apt-get or apt-mark but through the
    prelude's wrappers, which wait for them."""
    body = ALL[name][len(_PRELUDE) :]
    assert not re.search(r"(?<![\w-])apt-get\b", body), [ln for ln in body.splitlines() if "apt-get" in ln]
    assert all(ln.split("apt-mark")[0].endswith("apt_locked ") for ln in body.splitlines() if "apt-mark" in ln)
    assert f"apt-get -o DPkg::Lock::Timeout={APT_LOCK_WAIT_S} " in _PRELUDE


@pytest.mark.parametrize(
    ("held", "error", "rc", "calls"),
    [
        (2, "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 1234 (apt-get)", 0, 3),
        (1, "E: Could not get lock /var/cache/apt/archives/lock. It is held by process 99 (unattended-upgr)", 0, 2),
        (9, "E: Unable to locate package nope", 100, 1),
    ],
)
def test_apt_waits_while_another_apt_holds_a_lock_and_fails_at_once_on_anything_else(
    tmp_path, held: int, error: str, rc: int, calls: int
) -> None:
    """The script's own apt_install, run by bash against an apt-get stub that finds a lock held `held` times: apt
    does not wait for its lists and archives locks itself, so the wrapper runs it again; any other error stops."""
    log = tmp_path / "apt.log"
    bin_ = _stub_bin(
        tmp_path,
        apt_get=f'echo "$*" >> {log}; [ "$(wc -l < {log})" -gt {held} ] && exit 0; echo {error!r} >&2; exit 100',
        sleep="exit 0",
    )
    run = subprocess.run(
        ["bash", "-c", _PRELUDE + "\napt_install slurmd\necho installed\n"],
        env={"PATH": f"{bin_}:/usr/bin:/bin"}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert (run.returncode, "installed" in run.stdout) == (rc, rc == 0), run.stderr
    assert (
        log.read_text().splitlines()
        == [f"-o DPkg::Lock::Timeout={APT_LOCK_WAIT_S} install -y -q --no-install-recommends slurmd"] * calls
    )
    assert error in run.stderr  # apt's own message still reaches the serial console


LUSTRE = "10.1.0.5@tcp:/a3ultra"


def _run_scratch(tmp_path, role: str, stubs: dict[str, str], then: str, call: bool) -> subprocess.CompletedProcess[str]:
    """The script's own /scratch step of `role` (its functions, and with `call` the step itself), run by bash with
    every command that would touch this machine stubbed (mount too) and the files it writes (apt source, keyring,
    fstab, motd, the mount point) under tmp_path."""
    cfg = SlurmHostConfig(role=role, munge_secret="m", scratch=LUSTRE, scratch_mount=f"{tmp_path}/scratch")
    text = "\n".join(_scratch_lines(cfg) if call else _scratch_lines(cfg)[: -len(_scratch_call(cfg))])
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/fstab").write_text("")
    safe = {"uname": "echo 6.8.0-1019-gcp", "sleep": "exit 0", "mount": "exit 32", "mountpoint": "exit 1"}
    dirs = ("/etc/apt/sources.list.d/", "/usr/share/keyrings/", SCRATCH_MOTD.rsplit("/", 1)[0] + "/")
    return _run_rooted(tmp_path, text.replace("/etc/fstab", f"{tmp_path}/etc/fstab"), dirs, {**safe, **stubs}, then)


def _run_rooted(
    tmp_path, text: str, dirs: tuple[str, ...], stubs: dict[str, str], then: str
) -> subprocess.CompletedProcess[str]:
    """`text` (lines of a startup script) and then `then`, run by bash after the prelude, with every absolute
    directory of `dirs` moved under tmp_path (and made there) and the commands of `stubs` stubbed first on PATH."""
    for path in dirs:
        text = text.replace(path, f"{tmp_path}{path}")
        (tmp_path / path.strip("/")).mkdir(parents=True, exist_ok=True)
    bin_ = _stub_bin(tmp_path, **stubs)
    return subprocess.run(
        ["bash", "-c", f"{_PRELUDE}\n{text}\n{then}\n"],
        env={"PATH": f"{bin_}:/usr/bin:/bin"}, capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_the_lustre_client_is_checked_for_the_running_kernel_and_the_kernel_is_then_held(tmp_path) -> None:
    """After unattended-upgrades boots a new kernel, `mount.lustre` (kernel-independent) is still there but no
    module is: the client is installed again for the running kernel, and the kernel packages are held so that the
    next kernel is not booted before Google publishes modules for it."""
    log = tmp_path / "calls.log"
    rec = f'echo "$(basename "$0") $*" >> {log}'
    installed = (
        "printf 'ii  linux-image-gcp\\nii  linux-image-6.8.0-1019-gcp\\nun  linux-image-6.8.0-9-gcp\\n"
        "ii  linux-headers-gcp\\n'"
    )
    run = _run_scratch(
        tmp_path,
        "compute",
        {
            "mount.lustre": "exit 0",  # the utilities of an earlier kernel's install
            "modinfo": f"{rec}; exit 1",
            "curl": "exit 0",
            "gpg": "exit 0",
            "apt_get": f"{rec}; exit 0",
            "apt_mark": f"{rec}; exit 0",
            "dpkg_query": f"{rec}; {installed}",
            "modprobe": f"{rec}; exit 0",
        },
        "lustre_client && echo client-ready",
        call=False,
    )
    assert "client-ready" in run.stdout, run.stderr
    calls = log.read_text().splitlines()
    assert calls[0] == "modinfo -k 6.8.0-1019-gcp lustre"
    assert (
        "apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends lustre-client-modules-6.8.0-1019-gcp"
        " lustre-client-utils"
    ) in calls
    held = [c for c in calls if c.startswith("apt-mark")]
    assert held == ["apt-mark hold linux-image-gcp linux-image-6.8.0-1019-gcp linux-headers-gcp"]
    assert calls.index(held[0]) < calls.index("modprobe lustre")
    assert "lustre-client-ubuntu-" in (tmp_path / "etc/apt/sources.list.d/lustre-client.list").read_text()


@pytest.mark.parametrize(("role", "rc"), [("compute", 1), ("controller", 0), ("login", 0)])
def test_a_missing_scratch_stops_a_gpu_node_but_not_the_controller_or_a_login_vm(tmp_path, role: str, rc: int) -> None:
    """slurmctld needs no /scratch: the controller (and a login VM) boot on without it, loudly; a GPU node, whose
    jobs expect it, stops before slurmd."""
    run = _run_scratch(tmp_path, role, {"modinfo": "exit 1", "curl": "exit 22"}, "echo boot-goes-on", call=True)
    assert (run.returncode, "boot-goes-on" in run.stdout) == (rc, rc == 0), run.stderr
    if rc:
        assert f"gpu-fleet: FATAL: Lustre {LUSTRE} is not mounted on {tmp_path}/scratch" in run.stderr
    else:
        assert f"gpu-fleet: WARNING: Lustre {LUSTRE} is not mounted on {tmp_path}/scratch" in run.stderr
        motd = (tmp_path / SCRATCH_MOTD.lstrip("/")).read_text()
        assert "scratch" in motd and "WARNING" in motd  # what a user logging in sees


CTL_SA = "c-ctl@p.iam.gserviceaccount.com"


@pytest.fixture
def google(tmp_path):
    """The fake metadata server (this machine is the VM) and Secret Manager, over HTTP on 127.0.0.1, and a run of the
    script's own `secret` against them (sleep stubbed: its waits take no time)."""
    md = FakeMetadata("p", "42")
    md.add_instance(VmMetadata("c-controller", "us-east4-a", "127.0.0.1", CTL_SA))
    sm = FakeSecretManager(md, "p", "42")
    servers = [md.serve(("127.0.0.1", 0)), sm.serve_http(socket.create_server(("127.0.0.1", 0)))]
    bin_ = _stub_bin(tmp_path, sleep="exit 0")

    def run(name: str, wait_s: int = SECRET_WAIT_S) -> subprocess.CompletedProcess[bytes]:
        env = {
            "PATH": f"{bin_}:/usr/bin:/bin",
            "GPU_FLEET_METADATA": f"http://127.0.0.1:{servers[0].server_address[1]}",
            "GPU_FLEET_SECRETMANAGER": f"http://127.0.0.1:{servers[1].server_address[1]}",
            "GPU_FLEET_SECRET_WAIT_S": str(wait_s),
        }
        return subprocess.run(["bash", "-c", f"{_PRELUDE}\nsecret {name}\n"], env=env, capture_output=True, check=False)

    yield sm, run
    for server in servers:
        server.shutdown()
        server.server_close()


def _after(sm: FakeSecretManager, answers: int, then) -> None:
    """Call `then` once Secret Manager has answered `answers` requests (a binding or a version arriving late)."""
    answer = sm.answer

    def counted(path, headers):
        if len(sm.accesses) == answers:
            then()
        return answer(path, headers)

    sm.answer = counted


def test_a_secret_is_asked_again_while_the_accessor_binding_propagates(google) -> None:
    """The VM may boot before IAM lets its account read the key (403 for minutes): the script asks again."""
    sm, run = google
    secret = sm.add_secret("c-slurm-munge-key", b"a2V5", accessors=set())
    _after(sm, 2, lambda: secret.accessors.add(f"serviceAccount:{CTL_SA}"))
    got = run("c-slurm-munge-key")
    assert (got.returncode, got.stdout) == (0, b"a2V5"), got.stderr.decode()
    assert [a.status for a in sm.accesses] == [403, 403, 200]
    assert b"answered 403" in got.stderr


def test_a_secret_is_asked_again_until_its_version_exists(google) -> None:
    sm, run = google
    secret = sm.add_secret("c-slurm-munge-key", b"a2V5", accessors={f"serviceAccount:{CTL_SA}"})
    secret.versions.clear()
    _after(sm, 1, lambda: secret.versions.append(b"a2V5"))
    got = run("c-slurm-munge-key")
    assert (got.returncode, got.stdout) == (0, b"a2V5"), got.stderr.decode()
    assert [a.status for a in sm.accesses] == [404, 200]


def test_a_secret_still_refused_at_the_deadline_fails_saying_what_secret_manager_answered(google) -> None:
    sm, run = google
    sm.add_secret("c-slurm-munge-key", b"a2V5", accessors=set())
    got = run("c-slurm-munge-key", wait_s=0)
    assert got.returncode != 0 and got.stdout == b""
    err = got.stderr.decode()
    assert "secret c-slurm-munge-key: Secret Manager answered 403:" in err and "PERMISSION_DENIED" in err, err


def test_the_controller_mounts_its_state_disk_before_anything_writes_its_state() -> None:
    """The state disk is mounted (and StateSaveLocation and /var/lib/gpu-fleet bound from it) after the packages
    (SlurmUser owns the directories) and before the JWT key, slurmctld and the daemon write there; it is formatted
    only when blank, and slurmctld and the daemon never start without the mounts."""
    text = script("controller", state_disk="gpu-fleet-state")
    dev = "/dev/disk/by-id/google-gpu-fleet-state"
    mount = pos(text, f"mountpoint -q {SLURMCTLD_STATE_DIR} || {{ systemctl stop slurmctld")
    assert pos(text, "# --- 2. packages") < pos(text, f"[ -b {dev} ]") < mount
    assert mount < pos(text, "put_key c-slurm-jwt-key") < pos(text, "systemctl restart slurmctld")
    assert pos(text, f"mountpoint -q {AUTOSCALER_STATE_DIR} || {{ systemctl stop") < pos(text, "fleet autoscaler init")
    blank = f"if [ \"$(head -c 1048576 {dev} | tr -d '\\0' | wc -c)\" = 0 ]; then"
    assert pos(text, blank) < pos(text, f"mkfs.ext4 -q -L gpu-fleet-state {dev}")
    assert text.count("mkfs.ext4") == 1
    assert (
        text.count(f"RequiresMountsFor={SLURMCTLD_STATE_DIR}\n")
        == text.count(f"RequiresMountsFor={AUTOSCALER_STATE_DIR}\n")
        == 1
    )
    assert pos(text, f"RequiresMountsFor={SLURMCTLD_STATE_DIR}") < pos(text, "systemctl restart slurmctld")
    assert "google-gpu-fleet-state" not in script("login") and "mkfs" not in script("login")
    with pytest.raises(ValueError, match="state_disk"):
        SlurmHostConfig(role="login", munge_secret="m", state_disk="gpu-fleet-state")


def test_the_controller_writes_slurms_hooks_before_slurmctld_first_starts() -> None:
    """slurmctld checks ResumeProgram, SuspendProgram, ResumeFailProgram and EpilogSlurmctld when it starts: with the
    programs missing 22.05 runs no power saving until a reconfigure (bench/probe_power_save_hooks.py) and 23.11 does
    not start at all ("fatal: failed to initialize prep plugin", tests/slurm_compat).  They were the gpu-fleet
    checkout's files, installed after slurmctld had started; the script now writes deploy/slurm's wrappers to the
    paths slurm.conf names before it starts slurmctld.  A re-run with a new ref stops the daemon before its
    checkout changes."""
    from components.gcp.startup import HOOK_LOG
    from fleet.slurm.conf import HOOKS

    script = startup_script(
        SlurmHostConfig(role="controller", munge_secret="k", jwt_secret="j", autoscaler_source="https://x/f.git",
                        autoscaler_ref=SHA, slurm_hooks=HOOKS)
    )  # fmt: skip
    lines = script.splitlines()

    def at(fragment: str) -> int:
        return next(i for i, line in enumerate(lines) if fragment in line)

    root = Path(__file__).resolve().parents[2]
    for name, path in HOOKS.items():
        assert at(path) < at("systemctl restart slurmctld"), path
        assert (root / "deploy" / "slurm" / f"{name}.sh").read_text() in script
        assert f"GPU_FLEET_HOOK_LOG:-{HOOK_LOG}" in (root / "deploy" / "slurm" / f"{name}.sh").read_text()
    assert at("/etc/logrotate.d/gpu-fleet-hooks") > 0 and f"{HOOK_LOG} {{" in script  # the hooks' log is rotated
    assert at("systemctl stop gpu-fleet-autoscaler") < at("checkout --quiet --force --detach")


def test_the_directories_the_scripts_make_are_the_ones_slurm_conf_names() -> None:
    """The scripts make StateSaveLocation (on the state disk) and SlurmdSpoolDir; slurm.conf, rendered elsewhere
    (components take no fleet.slurm import), must name the same paths."""
    from fleet.slurm.conf import render_slurm_conf
    from fleet.spec import load_stack_file

    spec = load_stack_file(Path(__file__).resolve().parents[2] / "Pulumi.gcp-a3mega-slurm.yaml")
    rendered = render_slurm_conf(spec, spec.clusters[0])
    conf = rendered.slurm_conf.splitlines()
    assert f"StateSaveLocation={SLURMCTLD_STATE_DIR}" in conf and f"SlurmdSpoolDir={SLURMD_SPOOL_DIR}" in conf
    # slurmdbd's pid file is in the RuntimeDirectory the controller's drop-in gives the unit
    pid = next(line for line in rendered.slurmdbd_conf.splitlines() if line.startswith("PidFile="))
    assert f"PIDFile={pid.split('=', 1)[1]}\n" in script("controller", accounting=True)
    assert f"RuntimeDirectory={Path(pid.split('=', 1)[1]).parent.name}\n" in script("controller", accounting=True)


def test_the_controller_runs_mariadb_and_slurmdbd_before_slurmctld() -> None:
    """slurm-gcp's order (scripts/setup.py `setup_controller`): the database, slurmdbd, `sacctmgr add cluster`,
    then slurmctld, whose first registration then finds its cluster.  The database is on the state disk, bound
    before MariaDB first starts and initialised only when empty; it has no TCP listener and its account no password
    (unix_socket: only the OS user slurm); slurmdbd.conf is SlurmUser's alone."""
    text = script("controller", state_disk="gpu-fleet-state", accounting=True)
    packages = next(line for line in text.splitlines() if line.startswith("apt_update && apt_install slurmctld"))
    assert packages.endswith(f" {ACCOUNTING_PACKAGES}") and ACCOUNTING_PACKAGES == "slurmdbd mariadb-server"
    bind = pos(text, f"mountpoint -q {MARIADB_DATA_DIR} || {{ systemctl stop mariadb")
    assert pos(text, "apt_install slurmctld") < bind < pos(text, "mariadb-install-db --user=mysql")
    assert pos(text, f"if [ ! -d {MARIADB_DATA_DIR}/mysql ]; then") < pos(text, "mariadb-install-db")
    order = ["systemctl restart mariadb", "IDENTIFIED VIA unix_socket", "systemctl restart slurmdbd",
             'sacctmgr -i add cluster "$cluster"', "sacctmgr -n -P show", "systemctl restart slurmctld"]  # fmt: skip
    assert [pos(text, step) for step in order] == sorted(pos(text, step) for step in order)
    assert pos(text, f"cat > {MARIADB_CONF}") < pos(text, "systemctl restart mariadb")
    assert "\nskip-networking\n" in text and "IDENTIFIED BY" not in text and "PASSWORD" not in text.upper()
    conf = "/etc/slurm/slurmdbd.conf"
    assert pos(text, f"chmod 0600 {conf}.new && mv -f {conf}.new {conf}") < pos(text, "systemctl restart slurmdbd")
    assert "chmod 0644 /etc/slurm/*.conf" not in text  # a re-run never makes slurmdbd.conf world-readable
    assert "RequiresMountsFor=/var/lib/mysql\n" in text and "User=slurm\n" in text
    assert "mariadb" not in script("controller", state_disk="gpu-fleet-state")
    assert "systemctl restart slurmdbd" not in script("login")
    for role in ("login", "compute"):
        with pytest.raises(ValueError, match="accounting: only the controller runs slurmdbd"):
            SlurmHostConfig(role=role, munge_secret="m", accounting=True)


def test_the_accounting_database_names_come_from_slurmdbd_conf_and_must_be_plain(tmp_path: Path) -> None:
    """The script grants the account and database slurmdbd.conf names, and refuses a name that could break out of
    the SQL it writes, before MariaDB is touched."""
    text = script("controller", accounting=True)
    start = text.index("db=$(sed -n")
    check = text[start : text.index(f"install -d -m 0755 {Path(MARIADB_CONF).parent}", start)]
    for loc, user, ok in (("slurm_acct_db", "slurm", True), ("x`; DROP", "slurm", False), ("", "slurm", False),
                          ("slurm_acct_db", "sl'urm", False)):  # fmt: skip
        conf = tmp_path / "slurmdbd.conf"
        conf.write_text(f"StorageLoc={loc}\nStorageUser={user}\n")
        body = 'die() { echo "FATAL: $*" >&2; exit 1; }\n' + check.replace("/etc/slurm/slurmdbd.conf", str(conf))
        got = subprocess.run(["bash", "-c", body], capture_output=True, text=True)
        assert (got.returncode == 0) is ok, (loc, user, got.stderr)
        assert ok or "must be plain names" in got.stderr


def test_gpu_nodes_mount_the_checkpoint_bucket_for_jobs_before_slurmd() -> None:
    """Jobs get no Google token (the metadata guard), so the checkpoint bucket reaches them as a root gcsfuse mount
    with allow_other, made before slurmd starts and staging writes on the local SSD (docs/stacks.md "Checkpoint
    bucket"); the controller and login VMs, and a node of a cluster without a bucket, mount none."""
    a3m = ALL["a3-megagpu-8g"]
    assert pos(a3m, "/mnt/localssd") < pos(a3m, "mount_checkpoints ||") < pos(a3m, "systemctl restart slurmd")
    unit = a3m[a3m.index(f"/etc/systemd/system/{GCSFUSE_UNIT} <<") :].split("GPU_FLEET_EOF")[1]
    assert f"ExecStart=gcsfuse --config-file {GCSFUSE_CONFIG} {BUCKET} /checkpoints" in unit
    assert "Before=slurmd.service" in unit and "After=network-online.target gpu-fleet-metadata-guard" in unit
    config = a3m[a3m.index(f"{GCSFUSE_CONFIG} <<") :].split("GPU_FLEET_EOF")[1]
    assert "fuse-options: allow_other" in config and "temp-dir: /mnt/localssd/gcsfuse" in config
    assert "install -d -o root -g root -m 0555 /checkpoints" in a3m  # unwritable while nothing is mounted
    for name in ("controller", "login", "g2-standard-8", "a3-ultragpu-8g"):
        assert "gcsfuse" not in ALL[name], name
    no_ssd = "\n".join(_checkpoint_lines(SlurmHostConfig(role="compute", munge_secret="m", checkpoints=BUCKET)))
    assert "temp-dir" not in no_ssd


def _run_checkpoints(tmp_path, stubs: dict[str, str], role: str = "compute") -> subprocess.CompletedProcess[str]:
    """The script's own checkpoint step of `role`, run by bash with every command that would touch this machine
    stubbed and the files it writes under tmp_path."""
    cfg = SlurmHostConfig(role=role, munge_secret="m", checkpoints=BUCKET, checkpoints_mount=f"{tmp_path}/ckpt")
    dirs = (
        "/etc/apt/sources.list.d/",
        "/usr/share/keyrings/",
        "/etc/gpu-fleet/",
        "/etc/systemd/system/",
        "/run/motd.d/",
    )
    safe = {"sleep": "exit 0", "install": 'mkdir -p "${@: -1}"', "curl": "exit 0", "gpg": "exit 0"}
    return _run_rooted(tmp_path, "\n".join(_checkpoint_lines(cfg)), dirs, {**safe, **stubs}, "echo boot-goes-on")


@pytest.mark.parametrize("image_has", [None, "2.4.0", GCSFUSE_VERSION])
def test_gcsfuse_is_the_pinned_version_from_googles_repository_held_and_its_unit_runs_before_the_boot_goes_on(
    tmp_path, image_has: str | None
) -> None:
    """Every node runs GCSFUSE_VERSION: installed from Google's repository where the image has no gcsfuse or another
    version (a newer one replaced), left as it is where the image has that version; held either way."""
    log = tmp_path / "calls.log"
    rec = f'echo "$(basename "$0") $*" >> {log}'
    started = tmp_path / "started"
    run = _run_checkpoints(
        tmp_path,
        {
            "apt_get": f"{rec}; exit 0",
            "apt_mark": f"{rec}; exit 0",
            "dpkg_query": f"printf %s {image_has}; exit 0" if image_has else "exit 1",
            "systemctl": f'{rec}; [ "$1" = restart ] && touch {started}; exit 0',
            "mountpoint": f"[ -e {started} ]",  # mounted once the unit started
        },
    )
    assert run.returncode == 0 and "boot-goes-on" in run.stdout, run.stderr
    calls = log.read_text().splitlines()
    install = (
        "apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends --allow-change-held-packages"
        f" --allow-downgrades gcsfuse={GCSFUSE_VERSION} fuse3"
    )
    restart = f"systemctl restart {GCSFUSE_UNIT}"
    assert calls.index("apt-mark hold gcsfuse") < calls.index(restart)
    listed = tmp_path / "etc/apt/sources.list.d/gcsfuse.list"
    if image_has == GCSFUSE_VERSION:
        assert not [c for c in calls if c.startswith("apt-get")] and not listed.exists()
    else:
        assert calls.index(install) < calls.index("apt-mark hold gcsfuse")
        assert "https://packages.cloud.google.com/apt gcsfuse-" in listed.read_text()
        assert "signed-by=" in listed.read_text()
    assert "allow_other" in (tmp_path / GCSFUSE_CONFIG.lstrip("/")).read_text()


def test_a_gcsfuse_that_does_not_install_stops_a_gpu_nodes_boot_naming_the_version(tmp_path) -> None:
    """The pinned version missing from Google's repository is a boot that stops saying which version it asked for
    and where that is set, not a node that runs without its checkpoint mount."""
    run = _run_checkpoints(
        tmp_path,
        {"apt_get": 'case " $* " in *" install "*) exit 100;; esac', "apt_mark": "exit 0", "dpkg_query": "exit 1"},
    )
    assert run.returncode == 1 and "boot-goes-on" not in run.stdout
    assert f"gcsfuse={GCSFUSE_VERSION} (GCSFUSE_VERSION, components/gcp/startup.py) did not install" in run.stderr


@pytest.mark.parametrize("role", ["compute", "login"])
def test_a_checkpoint_bucket_that_does_not_mount_stops_a_gpu_nodes_boot_and_warns_on_a_login_vm(tmp_path, role):
    """A job writing to /checkpoints on a node without the mount would write to the boot disk, and the checkpoint
    would vanish with the node: the boot stops before slurmd, saying where to look.  A login VM is still worth
    having without it: it says so on the serial console and in the login banner, and goes on."""
    installed = {
        "apt_get": "exit 0",
        "apt_mark": "exit 0",
        "dpkg_query": f"printf {GCSFUSE_VERSION}",
        "gcsfuse": "exit 0",
    }
    run = _run_checkpoints(tmp_path, {**installed, "systemctl": "exit 0", "mountpoint": "exit 1"}, role)
    missing = f"checkpoint bucket gs://{BUCKET} is not mounted on {tmp_path}/ckpt: see journalctl -u {GCSFUSE_UNIT}"
    if role == "compute":
        assert run.returncode == 1 and "boot-goes-on" not in run.stdout
        assert f"FATAL: {missing}" in run.stderr
    else:
        assert run.returncode == 0 and "boot-goes-on" in run.stdout, run.stderr
        assert f"WARNING: {missing}" in run.stderr
        assert "WARNING" in (tmp_path / CHECKPOINTS_MOTD.lstrip("/")).read_text()


@pytest.mark.parametrize(("mem_kib", "pool"), [(32 * 1024 * 1024, "4096M"), (8 * 1024 * 1024, "2048M")])
def test_the_accounting_databases_buffer_pool_fits_the_controller(tmp_path, mem_kib: int, pool: str) -> None:
    """slurmdbd's 4 GiB buffer pool, or a quarter of the controller's memory where that is less."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemTotal:       {mem_kib} kB\nMemFree:        1000 kB\n")
    cnf = tmp_path / "90-gpu-fleet.cnf"
    cnf.write_text("[mysqld]\ninnodb_buffer_pool_size=4096M\ninnodb_log_file_size=64M\n")
    text = "\n".join(innodb_pool_lines(str(meminfo))).replace(MARIADB_CONF, str(cnf))
    run = subprocess.run(["bash", "-c", f"{_PRELUDE}\n{text}\n"], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert cnf.read_text().splitlines()[1:] == [f"innodb_buffer_pool_size={pool}", "innodb_log_file_size=64M"]
    controller = script("controller", accounting=True)
    assert pos(controller, "90-gpu-fleet.cnf <<") < pos(controller, "innodb_buffer_pool_size=${pool}M")


#: the import helper's source as Google's package ships it: its namespace named bare, for the pre-6.13 macro
HELPER_SOURCE = '#include <linux/module.h>\nMODULE_IMPORT_NS(DMA_BUF);\nMODULE_LICENSE("GPL");\n'


def _helper_package(tmp_path, with_source: bool = True) -> Path:
    """A real .deb of dmabuf-import-helper 1.1 (dpkg-deb --build) carrying /usr/src/dmabuf-import-helper-1.1."""
    tree = tmp_path / "pkg"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN/control").write_text(
        "Package: dmabuf-import-helper\nVersion: 1.1\nArchitecture: all\nMaintainer: t <t@example.com>\n"
        "Description: stand-in\n"
    )
    src = tree / "usr/src/dmabuf-import-helper-1.1" if with_source else tree / "usr/share/doc/dmabuf-import-helper"
    src.mkdir(parents=True)
    if with_source:
        (src / "import-helper.c").write_text(HELPER_SOURCE)
        (src / "dkms.conf").write_text('PACKAGE_NAME="dmabuf-import-helper"\nPACKAGE_VERSION="1.1"\n')
    deb = tmp_path / "dmabuf-import-helper_1.1_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(tree), str(deb)], check=True, capture_output=True)
    return deb


@pytest.mark.parametrize(
    ("kernel", "namespace"),
    [("6.17.0-1008-gcp", 'MODULE_IMPORT_NS("DMA_BUF");'), ("6.8.0-1030-gcp", "MODULE_IMPORT_NS(DMA_BUF);")],
)
def test_the_import_helper_is_built_by_dkms_from_its_source_quoted_for_the_kernel_that_wants_it(
    tmp_path, kernel: str, namespace: str
) -> None:
    """The script's own `dkms_source_build`, run by bash with a real .deb behind `apt-get download` and the real
    dpkg-deb, find, grep and sed: the source lands in /usr/src at the package's version, its MODULE_IMPORT_NS is
    quoted on a 6.17 kernel (the 24.04 accelerator image's, where the package's own build fails) and left as it is
    on 6.8, and dkms adds, builds and installs that version."""
    deb = _helper_package(tmp_path)
    log = tmp_path / "calls.log"
    run = _run_rooted(
        tmp_path,
        "\n".join(_dkms_source_build_lines()),
        ("/usr/src/",),
        {
            "apt_get": f'echo "apt-get $*" >> {log}; [ "${{@: -2:1}}" = download ] && cp {deb} . || exit 100',
            "dkms": f'echo "dkms $*" >> {log}',
            "uname": f"echo {kernel}",
        },
        "dkms_source_build dmabuf-import-helper && echo built",
    )
    assert run.returncode == 0 and run.stdout.split() == ["built"], run.stderr
    source = tmp_path / "usr/src/dmabuf-import-helper-1.1/import-helper.c"
    assert source.read_text().splitlines()[1] == namespace
    calls = log.read_text().splitlines()
    assert calls[0].endswith(" download dmabuf-import-helper"), calls
    assert calls[2:] == [f"dkms {step} -m dmabuf-import-helper -v 1.1" for step in ("add", "build", "install")]


def test_a_package_without_dkms_source_stops_the_build_naming_it(tmp_path) -> None:
    """A package that carries no /usr/src/NAME-VERSION is a failure naming the package, with nothing given to dkms."""
    deb = _helper_package(tmp_path, with_source=False)
    log = tmp_path / "calls.log"
    run = _run_rooted(
        tmp_path,
        "\n".join(_dkms_source_build_lines()),
        ("/usr/src/",),
        {"apt_get": f"cp {deb} .", "dkms": f'echo "dkms $*" >> {log}', "uname": "echo 6.17.0-1008-gcp"},
        "dkms_source_build dmabuf-import-helper && echo built",
    )
    assert run.returncode != 0 and "built" not in run.stdout
    assert "dmabuf-import-helper: its package carries no DKMS source" in run.stderr
    assert not log.exists()


@pytest.mark.parametrize("name", sorted(ALL))
def test_every_apt_repository_a_script_adds_is_checked_against_a_named_key(name: str) -> None:
    """apt checks a repository's signature only against the keyring its line names: every repository a script adds
    (Google's, NVIDIA's, Artifact Registry's fabric repos, whose Toolkit form says `trusted=yes`) names the key the
    script just fetched, and none turns the check off."""
    text = ALL[name]
    added = re.findall(r'echo "(deb [^"]*)" > /etc/apt/sources\.list\.d/(\S+)\.list', text)
    fetched = set(re.findall(r"gpg --dearmor --yes -o (\S+)", text))
    for line, repo in added:
        options = line.split("[", 1)[1].split("]", 1)[0].split() if line.startswith("deb [") else []
        assert "trusted=yes" not in options, (repo, line)
        rings = [o.removeprefix("signed-by=") for o in options if o.startswith("signed-by=")]
        assert len(rings) == 1 and rings[0] in fetched, (repo, line)
    if name == "a3-megagpu-8g":  # the TCPXO repo, against Artifact Registry's key
        assert any(repo == "gpudirect-tcpxo" for _, repo in added), added
        assert f"curl -sSf {AR_APT_KEY} | gpg --dearmor" in text
