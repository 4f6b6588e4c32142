"""Startup scripts of the Slurm VMs (pure text builders, so they can be tested and run without Pulumi).

One bash script per role (controller, login, compute), re-run on every boot and idempotent.  It runs
on the accelerator image (Ubuntu 24.04) and on Debian 12 alike.  In order:

1. the metadata guard: non-root processes cannot reach the metadata server, so no user can take the
   VM's service-account token (on the controller SlurmUser may: the autoscaler runs as it); installed
   before any key is fetched and persistent across reboots (`gpu-fleet-metadata-guard.service`);
2. packages (Slurm, munge, NFS; mdadm on GPU nodes);
3. the munge key (and, on the controller only, the slurmrestd JWT key) fetched by root from Secret
   Manager into root-only files; `/etc/slurm/*` from metadata; the controller pinned in /etc/hosts
   from `SlurmctldHost=name(ip)`;
4. mounts that fail the boot loudly: Filestore /home, Managed Lustre /scratch (client installed for the running
   kernel, which is then held); on the controller and login VMs a missing /scratch is a warning only;
5. GPU nodes: local SSDs (RAID0, /mnt/localssd), the checkpoint bucket for jobs (gcsfuse as root, allow_other,
   before slurmd), the NVIDIA driver check, the fabric set-up of the
   machine type (TCPXO: dmabuf import helper, aperture-device udev rule, docker + RxDM prolog; gIB:
   ibverbs-utils, the NCCL gIB plugin and its environment), then slurmd, which waits for the GPUs (and
   the GPU NICs) through a systemd drop-in; the node publishes its physical host for topology.conf;
6. controller: slurmctld, slurmrestd, the topology timer and the pinned gpu-fleet autoscaler.

GPU-only steps call plain, named commands (nvidia-smi, modprobe, udevadm, docker, ibv_devices,
mdadm, apt-get ...) that a first-boot test can stub and record.  Metadata keys: components/gcp/metadata.py.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from components.gcp import metadata as md
from fleet.catalog import FabricSoftware

# Kept for importers: the metadata keys live in components.gcp.metadata.
METADATA_SLURM_CONF = md.SLURM_CONF
METADATA_GRES_CONF = md.GRES_CONF
METADATA_CGROUP_CONF = md.CGROUP_CONF
METADATA_TOPOLOGY_CONF = md.TOPOLOGY_CONF
METADATA_AUTOSCALER_CONFIG = md.AUTOSCALER_CONFIG
METADATA_INVENTORY = md.INVENTORY
JWT_KEY_PATH = "/var/spool/slurmctld/jwt_hs256.key"  # slurm.conf AuthAltParameters=jwt_key=<this>
MUNGE_KEY_PATH = "/etc/munge/munge.key"
AUTOSCALER_HOME = "/opt/gpu-fleet"  # the repo + .venv; slurm.conf's Resume/SuspendProgram live in deploy/slurm/
AUTOSCALER_STATE_DIR = "/var/lib/gpu-fleet"  # written by the daemon and by the hooks slurmctld runs
SLURMCTLD_STATE_DIR = "/var/spool/slurmctld"  # == slurm.conf StateSaveLocation (fleet.slurm.conf)
SLURMD_SPOOL_DIR = "/var/spool/slurmd"  # == slurm.conf SlurmdSpoolDir (fleet.slurm.conf)
MARIADB_DATA_DIR = "/var/lib/mysql"  # the accounting database (MariaDB's datadir on Debian and Ubuntu)
# The controller's state disk (its own persistent disk, not the boot disk): mounted here by its device name, with
# StateSaveLocation, the autoscaler's state directory and (with accounting) the accounting database bind-mounted
# from it, so they outlive the controller VM.
STATE_DISK_DEVICE = "gpu-fleet-state"  # /dev/disk/by-id/google-<this>
STATE_DISK_MOUNT = "/var/lib/gpu-fleet-state"


@dataclass(frozen=True)
class StateBind:
    """A directory of the controller bind-mounted from its state disk (`<STATE_DISK_MOUNT>/<sub>`)."""

    sub: str
    target: str
    mode: str
    owner: str
    unit: str  # the service that uses it: stopped before the bind (a package may have started it), required after


STATE_BINDS = (
    StateBind("slurmctld", SLURMCTLD_STATE_DIR, "0700", "slurm", "slurmctld"),
    StateBind("gpu-fleet", AUTOSCALER_STATE_DIR, "0750", "slurm", "gpu-fleet-autoscaler"),
)
ACCOUNTING_BIND = StateBind("mysql", MARIADB_DATA_DIR, "0700", "mysql", "mariadb")
AUTOSCALER_LOCK = "deploy/controller-requirements.txt"  # hash-pinned dependencies, in the repo at the commit
VENV_LOCK_SUM = ".venv/.gpu-fleet-lock.sha256"  # where deploy/install-venv.sh keeps the sha256 of the venv's lock
#: the daemon's venv in a checkout, built the same way on the controller and in the autoscaler image
#: (deploy/autoscaler.Dockerfile); the controller's copy is the stack's, written by `autoscaler_install`
INSTALL_VENV_SOURCE = Path(__file__).resolve().parents[2] / "deploy" / "install-venv.sh"
INSTALL_VENV = "/usr/local/sbin/gpu-fleet-install-venv"
GUARD = "/usr/local/sbin/gpu-fleet-metadata-guard"
WAIT_DEVICES = "/usr/local/sbin/gpu-fleet-wait-devices"
PROLOG = "/etc/slurm/gpu-fleet-prolog.sh"  # == fleet.slurm.conf.PROLOG
RXDM_CONTAINER = "receive-datapath-manager-"  # + the job's id: the prolog's RxDM container
RXDM_READY = "Buffer manager initialization complete"  # what RxDM logs once it serves
EPILOG = "/etc/slurm/gpu-fleet-epilog.sh"
LOCAL_SSD_MOUNT = "/mnt/localssd"
LOCAL_SSD_GIB = 375  # one GCE local NVMe SSD
# Artifact Registry apt transport (needed for the ar+https:// repos of TCPXO and gIB).
AR_TRANSPORT_REPO = "deb https://packages.cloud.google.com/apt apt-transport-artifact-registry-stable main"
GOOGLE_APT_KEY = "https://packages.cloud.google.com/apt/doc/apt-key.gpg"
# The key Artifact Registry signs its apt repositories with (cloud.google.com/artifact-registry/docs/os-packages/
# debian/configure, "Configure apt"): every us-apt.pkg.dev repository a script adds is checked against it
# (`_signed_repo`), the fabric repos of the catalog included (the Toolkit's TCPXO blueprint turns the check off with
# `trusted=yes`; the catalog does not).
AR_APT_KEY = "https://us-apt.pkg.dev/doc/repo-signing-key.gpg"
# Managed Lustre client (Google's packages for the running kernel); SOURCE: cloud.google.com/managed-lustre/docs/
# connect-from-compute-engine ("Install the Lustre client"), read 2026-12.
LUSTRE_REPO = "deb https://us-apt.pkg.dev/projects/lustre-client-binaries lustre-client-ubuntu-{codename} main"
# Cloud Storage FUSE: Google's apt repository, signed with GOOGLE_APT_KEY
# (cloud.google.com/storage/docs/cloud-storage-fuse)
GCSFUSE_REPO = "deb https://packages.cloud.google.com/apt gcsfuse-{codename} main"
# The gcsfuse every node runs: installed at exactly this version (a baked image's other version is replaced) and
# held.  SOURCE: github.com/GoogleCloudPlatform/gcsfuse/releases (v3.11.2); the repository's packages carry the
# release's version (`apt-get install gcsfuse=3.11.2`).
GCSFUSE_VERSION = "3.11.2"
# The NVIDIA Container Toolkit on GPUDirect-TCPXO nodes (docker runs RxDM with it, privileged): its four packages
# at exactly this version, held (`_container_toolkit_lines`).  Its advisories are container escapes to root on the
# host (CVE-2024-0132, fixed in 1.16.2; CVE-2025-23266, fixed in 1.17.8), so the version is a reviewed constant,
# not whatever the repository has that day.  SOURCE: NVIDIA's install guide (docs.nvidia.com/datacenter/
# cloud-native/container-toolkit/latest/install-guide.html, "With apt": NVIDIA_CONTAINER_TOOLKIT_VERSION=1.19.0-1,
# the four packages at one version), read 2026-12.
NVIDIA_CONTAINER_TOOLKIT_VERSION = "1.19.0-1"
# ... from the repository that guide adds ("Configure the production repository"): NVIDIA's key and its stable list
# (the guide's `$(ARCH)` is amd64 on every GPU machine here).  Not the accelerator images' `add-nvidia-repositories`,
# which the Toolkit's blueprints stopped calling when they moved to the 24.04 / driver 580 images.
NVIDIA_CONTAINER_TOOLKIT_KEY = "https://nvidia.github.io/libnvidia-container/gpgkey"
NVIDIA_CONTAINER_TOOLKIT_REPO = "deb https://nvidia.github.io/libnvidia-container/stable/deb/amd64 /"
NVIDIA_CONTAINER_TOOLKIT_PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)
GCSFUSE_CONFIG = "/etc/gpu-fleet/gcsfuse-checkpoints.yaml"
GCSFUSE_UNIT = "gpu-fleet-checkpoints.service"
# How long apt waits for another apt (unattended-upgrades runs at first boot) to let go of its locks; the Toolkit's
# scripts give apt-get `-o DPkg::Lock::Timeout=600`.
APT_LOCK_WAIT_S = 600
# How long a VM asks Secret Manager again while it answers 403/404: IAM bindings take minutes to propagate
SECRET_WAIT_S = 600
# What apt and dpkg print when a lock is held (the lists and archives locks apt does not wait for, dpkg's own)
APT_LOCK_ERRORS = (
    "could not get lock|unable to lock|unable to acquire the dpkg frontend lock|frontend lock (was|is) locked"
)
# 40-hex commit, or `<tag>@<40-hex commit>` (the tag is fetched, then checked against the commit)
PINNED_REF = re.compile(r"^(?:(?P<tag>[A-Za-z0-9][A-Za-z0-9._/-]*)@)?(?P<sha>[0-9a-f]{40})$")

ROLES = ("controller", "login", "compute")


@dataclass(frozen=True)
class SlurmHostConfig:
    """What every Slurm VM needs to join the cluster.

    role: controller | login | compute.
    munge_secret: Secret Manager secret id of the munge key (base64).
    jwt_secret: secret id of the slurmrestd JWT HS256 key (controller only).
    home: "IP:/share" of the Filestore export mounted on /home, or None.
    scratch: Lustre mount source ("IP@tcp:/fs"), or None; scratch_mount: where.
    checkpoints: on GPU nodes and login VMs, the checkpoint bucket mounted with gcsfuse (`_checkpoint_lines`), or None;
      checkpoints_mount: where.
    autoscaler_source, autoscaler_ref: git URL and pinned ref (40-hex commit or `tag@commit`) of
      gpu-fleet, installed on the controller at /opt/gpu-fleet; with no source the image must carry it.
    gpu_count: GPUs slurmd waits for (compute).
    fabric: the machine type's fabric software (TCPXO or gIB), None for none.
    local_ssd_gib: local SSD capacity the machine type comes with (RAID0 on /mnt/localssd).
    state_disk: on the controller, the device name of its state disk (formatted when blank, mounted on
      /var/lib/gpu-fleet-state, StateSaveLocation, /var/lib/gpu-fleet and the accounting database bind-mounted from
      it); None: none.
    accounting: on the controller, run slurmdbd and its MariaDB before slurmctld (`accounting_lines`; the
      slurmdbd.conf comes as the `slurmdbd-conf` metadata key).
    metadata_guard: block the metadata server for non-root processes (every role; on the controller
      SlurmUser too may reach it: the autoscaler daemon runs as that user and calls the Compute API).
    """

    role: str
    munge_secret: str
    jwt_secret: str | None = None
    home: str | None = None
    scratch: str | None = None
    scratch_mount: str = "/scratch"
    checkpoints: str | None = None
    checkpoints_mount: str = "/checkpoints"
    autoscaler_source: str | None = None
    autoscaler_ref: str | None = None
    gpu_count: int = 0
    fabric: FabricSoftware | None = None
    local_ssd_gib: int = 0
    metadata_guard: bool = True
    state_disk: str | None = None
    accounting: bool = False
    #: on the controller, where slurm.conf names each of deploy/slurm's hooks (name -> absolute path: the stack's
    #: `fleet.slurm.conf.HOOKS`); written before slurmctld first starts (`hook_lines`)
    slurm_hooks: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role: expected controller, login or compute, got {self.role!r}")
        if self.jwt_secret and self.role != "controller":
            raise ValueError(f"jwt_secret: only the controller holds the JWT key, not a {self.role} VM")
        if self.state_disk and self.role != "controller":
            raise ValueError(f"state_disk: only the controller has a state disk, not a {self.role} VM")
        if self.accounting and self.role != "controller":
            raise ValueError(f"accounting: only the controller runs slurmdbd, not a {self.role} VM")
        if self.autoscaler_source and not PINNED_REF.fullmatch(self.autoscaler_ref or ""):
            raise ValueError(
                f"autoscaler_ref: {self.autoscaler_ref!r} is not pinned: give a 40-hex commit or <tag>@<40-hex commit>"
            )

    @property
    def guard_exempt(self) -> tuple[str, ...]:
        return ("slurm",) if self.role == "controller" else ()


_PRELUDE = f"""#!/bin/bash
# Generated by gpu-fleet (components/gcp/startup.py); re-run on every boot, idempotent.
set -Eeuo pipefail
umask 022
export DEBIAN_FRONTEND=noninteractive
{md.METADATA_ENV}="${{{md.METADATA_ENV}:-{md.METADATA_DEFAULT}}}"
{md.SECRETMANAGER_ENV}="${{{md.SECRETMANAGER_ENV}:-{md.SECRETMANAGER_DEFAULT}}}"
log() {{ echo "gpu-fleet: $*" >&2; }}
die() {{ echo "gpu-fleet: FATAL: $*" >&2; exit 1; }}
trap 'echo "gpu-fleet: FATAL: line $LINENO: $BASH_COMMAND failed" >&2' ERR
md() {{
  curl -sSf --retry 5 --retry-connrefused -H 'Metadata-Flavor: Google' "${md.METADATA_ENV}/computeMetadata/v1/$1"
}}
attr() {{ md "instance/attributes/$1"; }}
# apt_get ARGS: apt-get that waits for the locks another apt holds (unattended-upgrades at first boot): the dpkg
# lock through apt's own DPkg::Lock::Timeout (as the Toolkit's scripts), the lists and archives locks, which apt
# does not wait for, by running it again while it says a lock is held (bounded: then the boot fails)
apt_get() {{ apt_locked apt-get -o DPkg::Lock::Timeout={APT_LOCK_WAIT_S} "$@"; }}
apt_locked() {{
  local err rc deadline=$((SECONDS + {APT_LOCK_WAIT_S}))
  err=$(mktemp)
  while :; do
    rc=0; "$@" 2> "$err" || rc=$?
    cat "$err" >&2
    if [ "$rc" -eq 0 ]; then rm -f "$err"; return 0; fi
    if ! grep -qiE '{APT_LOCK_ERRORS}' "$err" || [ "$SECONDS" -ge "$deadline" ]; then
      rm -f "$err"; return "$rc"
    fi
    log "another apt holds a lock; again in 10 s: $*"; sleep 10
  done
}}
apt_update() {{ apt_get update -q; }}
apt_install() {{ apt_get install -y -q --no-install-recommends "$@"; }}
# load_module NAME: modprobe a module that does not come with the kernel; one a Secure Boot kernel refuses (not
# signed by a key this VM trusts) stops the boot saying so, not only that modprobe failed
load_module() {{ modprobe "$1" || die "$(module_refused "$1")"; }}
# module_refused NAME: why modprobe NAME failed, naming Secure Boot when that is why
module_refused() {{
  local sb=/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c
  if [ "$(od -An -t u1 -j 4 -N 1 "$sb" 2>/dev/null | tr -d ' ')" = 1 ]; then
    echo "kernel module $1 refused: Secure Boot is on and $1 is not signed by a key this VM trusts;" \
      "boot this pool without it (pools[].secure_boot: false, docs/stacks.md) or from an image whose $1 is signed"
  else
    echo "kernel module $1 did not load (modprobe $1)"
  fi
}}
# secret NAME: the latest version of a Secret Manager secret, fetched by root with this VM's token (the
# token goes to curl on stdin, never on a command line other users could read).  A 403 or 404 is asked again
# every 10 s for up to {SECRET_WAIT_S} s (curl --retry retries neither): the VM may boot before its account's
# accessor binding has propagated (IAM takes minutes) or before the version exists.
secret() {{
  local token project resp code deadline=$((SECONDS + ${{GPU_FLEET_SECRET_WAIT_S:-{SECRET_WAIT_S}}}))
  project=$(md project/project-id) || return 1
  while :; do
    token=$(md instance/service-accounts/default/token \\
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])') || return 1
    resp=$(printf 'header = "Authorization: Bearer %s"\\n' "$token" \\
      | curl -sS --retry 5 -w '\\n%{{http_code}}' -K - \\
        "${md.SECRETMANAGER_ENV}/v1/projects/$project/secrets/$1/versions/latest:access") || :
    code=${{resp##*$'\\n'}}; resp=${{resp%$'\\n'*}}
    if [ "$code" = 200 ]; then
      printf '%s' "$resp" \\
        | python3 -c 'import base64,json,sys; sys.stdout.buffer.write(base64.b64decode(json.load(sys.stdin)["payload"]
["data"]))'
      return
    fi
    if [ "$code" != 403 ] && [ "$code" != 404 ] || [ "$SECONDS" -ge "$deadline" ]; then
      log "secret $1: Secret Manager answered ${{code:-nothing}}:" "$(printf '%s' "$resp" | tr -s '\\n ' ' ')"
      return 1
    fi
    log "secret $1: Secret Manager answered $code (the accessor binding or the version not there yet?); again in 10 s"
    sleep 10
  done
}}
# put_key SECRET PATH OWNER: a root-only key file (0400, OWNER) from a secret holding base64 bytes
put_key() {{
  local tmp
  tmp=$(mktemp "$(dirname "$2")/.key.XXXXXX")
  if ! (umask 077; secret "$1" | base64 -d > "$tmp"); then
    rm -f "$tmp"; die "secret $1: cannot read it from Secret Manager (IAM binding? API enabled?)"
  fi
  [ -s "$tmp" ] || {{ rm -f "$tmp"; die "secret $1 is empty"; }}
  chown "$3:$3" "$tmp" && chmod 0400 "$tmp" && mv -f "$tmp" "$2"
}}
"""


GUARD_CHAIN = "GPU_FLEET_METADATA"
RESTD = "/usr/local/sbin/gpu-fleet-slurmrestd"
# Slurm 22.05 loads every OpenAPI plugin by default, and the slurmdbd ones are fatal without slurmdbd: pick the
# Slurm one of the installed version (openapi/v0.0.38 on 22.05, openapi/slurmctld from 23.11).
_RESTD_WRAPPER = r"""#!/bin/sh
# gpu-fleet: slurmrestd with JWT auth and the Slurm OpenAPI plugin installed{db_comment}
set -e
for jwt in /usr/lib/*/slurm-wlm/auth_jwt.so /usr/lib64/slurm/auth_jwt.so; do [ -e "$jwt" ] && break; done
dir=$(dirname "$jwt")
if [ -e "$dir/openapi_slurmctld.so" ]; then
  plugin=openapi/slurmctld
else
  newest=$(ls "$dir"/openapi_v0_0_*.so | sort -V | tail -n 1)
  plugin=$(echo "$newest" | sed 's#.*/openapi_\(v[0-9_]*\)\.so$#openapi/\1#; s#_#.#g')
fi
{db_lines}# a pending job array's task list whole (libslurm cuts it at 64 characters by default): the autoscaler plans
# one node per task it reads (autoscaler/slurm/job_array.py)
export SLURM_BITSTR_LEN=0
exec /usr/sbin/slurmrestd -a rest_auth/jwt -s "$plugin" "$@"
"""

# the accounting plugin beside it: openapi/slurmdbd (23.02+), else the newest openapi/dbvX.Y.Z (22.05's)
_RESTD_DB_LINES = r"""if [ -e "$dir/openapi_slurmdbd.so" ]; then
  plugin="$plugin,openapi/slurmdbd"
else
  newest=$(ls "$dir"/openapi_dbv0_0_*.so | sort -V | tail -n 1)
  plugin="$plugin,$(echo "$newest" | sed 's#.*/openapi_\(dbv[0-9_]*\)\.so$#openapi/\1#; s#_#.#g')"
fi
"""


def restd_wrapper(accounting: bool) -> str:
    """The controller's slurmrestd wrapper: the Slurm OpenAPI plugin, and with `accounting` (a slurmdbd to talk to)
    the slurmdbd one too (`/slurmdb/...`: jobs, accounts, associations); without slurmdbd that plugin is fatal."""
    if accounting:
        return _RESTD_WRAPPER.format(db_comment=", and slurmdbd's (accounting is on)", db_lines=_RESTD_DB_LINES)
    return _RESTD_WRAPPER.format(db_comment=" (not slurmdbd's: there is none)", db_lines="")


def guard_script(exempt: tuple[str, ...] = ()) -> str:
    """iptables rules: TCP to the metadata server (DNS on port 53 stays open) only from root and the `exempt`
    users (the controller's SlurmUser runs the autoscaler, which needs the token); everyone else is refused."""
    chain = GUARD_CHAIN
    out = [
        "#!/bin/sh",
        "# gpu-fleet: only root may talk to the GCE metadata server (its tokens act as this VM's service account).",
        "set -e",
    ]
    for tool, ip in (("iptables", md.METADATA_IP), ("ip6tables", md.METADATA_IPV6)):
        body = [
            f"{tool} -w -N {chain} 2>/dev/null || {tool} -w -F {chain}",
            f"{tool} -w -A {chain} -m owner --uid-owner 0 -j RETURN",
            # a user that does not exist yet (first boot, before the packages) is added on the re-run
            *(
                f"if id -u {user} >/dev/null 2>&1; then {tool} -w -A {chain} -m owner --uid-owner {user} -j RETURN; fi"
                for user in exempt
            ),
            f"{tool} -w -A {chain} -p tcp -j REJECT --reject-with tcp-reset",
            f"{tool} -w -C OUTPUT -d {ip} -p tcp ! --dport 53 -j {chain} 2>/dev/null"
            f" || {tool} -w -I OUTPUT 1 -d {ip} -p tcp ! --dport 53 -j {chain}",
        ]
        if tool == "ip6tables":
            out += ["if command -v ip6tables >/dev/null 2>&1; then", *(f"  {line}" for line in body), "fi"]
        else:
            out += body
    return "\n".join(out) + "\n"


def _guard_lines(exempt: tuple[str, ...]) -> list[str]:
    """Installed first, before any key is fetched; a oneshot unit re-installs the rules on every boot before the
    network, the guest agent and the startup script (docs/stacks.md "Metadata guard")."""
    unit = f"""[Unit]
Description=gpu-fleet: block the metadata server for non-root processes
DefaultDependencies=no
Before=network-pre.target google-guest-agent.service google-startup-scripts.service slurmd.service
Wants=network-pre.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart={GUARD}

[Install]
WantedBy=sysinit.target
"""
    return [
        "# --- 1. metadata guard: first, before any key is fetched ---",
        "command -v iptables >/dev/null || { apt_update && apt_install iptables; }",
        _file(GUARD, guard_script(exempt), mode="0755"),
        _file("/etc/systemd/system/gpu-fleet-metadata-guard.service", unit),
        f"{GUARD}",
        "systemctl daemon-reload",
        "systemctl enable gpu-fleet-metadata-guard.service",
    ]


# libpmix2 (PMIx, Ubuntu 24.04's libpmix2t64 provides it): Slurm's mpi/pmix plugins load it at every start, and
# slurmctld 23.11 passes the errno that failed load leaves (ENOENT) to its association manager as the accounting
# database's state ("Association database appears down"): with no slurmdbd it then holds every job PENDING with
# Reason=InvalidAccount.  Measured on Ubuntu 24.04's slurmctld 23.11.4 (tests/slurm_compat); srun --mpi=pmix needs
# it too, as the Toolkit's Slurm images carry it.
_PACKAGES = {
    "controller": "slurmctld slurm-client slurmrestd slurm-wlm-jwt-plugin libpmix2 munge nfs-common curl python3 "
    "ca-certificates",
    "login": "slurm-client slurm-wlm-jwt-plugin libpmix2 munge nfs-common curl python3 ca-certificates",
    "compute": "slurmd slurm-client slurm-wlm-jwt-plugin libpmix2 munge nfs-common curl python3 ca-certificates mdadm",
}


def _file(path: str, text: str, mode: str = "0644") -> str:
    """Write `text` to `path` (a quoted heredoc: nothing in it is expanded)."""
    assert "GPU_FLEET_EOF" not in text
    where, body = shlex.quote(path), text.rstrip("\n")
    directory = shlex.quote(path.rsplit("/", 1)[0])
    return (
        f"install -d -m 0755 {directory}\ncat > {where} <<'GPU_FLEET_EOF'\n{body}\nGPU_FLEET_EOF\nchmod {mode} {where}"
    )


def _state_disk_lines(device: str, binds: tuple[StateBind, ...]) -> list[str]:
    """The controller's state disk, before anything writes StateSaveLocation, the autoscaler's store or the
    accounting database: waited for by its device name, formatted only when blank (its first MiB all zeros, as a new
    disk reads: a disk with anything on it is never formatted), mounted, and `binds` bind-mounted from it (fstab,
    `nofail`: a VM whose disk is missing still boots for repair, but the services that use them require the mounts,
    so none starts on an empty directory).  A service a package started on the boot disk's directory (MariaDB) is
    stopped before its directory is bound over."""
    dev, mnt = f"/dev/disk/by-id/google-{device}", STATE_DISK_MOUNT
    lines = [
        "# --- 2b. the controller's state disk: StateSaveLocation and the autoscaler's store outlive this VM ---",
        f"for _ in $(seq 60); do [ -b {dev} ] && break; sleep 2; done",
        f'[ -b {dev} ] || die "state disk {dev} is not attached"',
        f"if ! mountpoint -q {mnt}; then",
        f"  if [ \"$(head -c 1048576 {dev} | tr -d '\\0' | wc -c)\" = 0 ]; then",
        f'    log "state disk {dev} is blank: formatting it"',
        f"    mkfs.ext4 -q -L {device[:16]} {dev}",
        "  fi",
        f"  grep -q ' {mnt} ext4 ' /etc/fstab || echo '{dev} {mnt} ext4 defaults,nofail 0 2' >> /etc/fstab",
        f"  install -d {mnt}",
        f'  mount {mnt} || die "state disk {dev}: cannot mount it on {mnt} (not formatted by gpu-fleet?)"',
        "fi",
    ]
    for b in binds:
        src = f"{mnt}/{b.sub}"
        lines += [
            f"install -d -o {b.owner} -g {b.owner} -m {b.mode} {src}",
            f"grep -q ' {b.target} none bind' /etc/fstab"
            f" || echo '{src} {b.target} none bind,nofail,x-systemd.requires-mounts-for={mnt} 0 0' >> /etc/fstab",
            f"install -d {b.target}",
            f"mountpoint -q {b.target} || {{ systemctl stop {b.unit} 2>/dev/null || true; mount {b.target}; }}",
        ]
    for b in binds:
        requires = f"[Unit]\nRequiresMountsFor={b.target}\n"
        lines.append(_file(f"/etc/systemd/system/{b.unit}.service.d/gpu-fleet-state.conf", requires))
    return [*lines, "systemctl daemon-reload"]


#: MariaDB as slurmdbd's database (fleet/slurm/accounting.py says why: no TCP listener, no password)
MARIADB_CONF = "/etc/mysql/mariadb.conf.d/90-gpu-fleet.cnf"
_MARIADB_CNF = """# gpu-fleet: the accounting database of slurmdbd (fleet/slurm/accounting.py)
[mysqld]
# no TCP listener at all: slurmdbd connects through the unix socket, as the OS user slurm (unix_socket auth)
skip-networking
# what slurmdbd 23.11 checks at every start, logging "error: Database settings not recommended values" below half
# of it (accounting_storage_mysql.c `_check_database_variables`: a 4 GiB buffer pool, a 64 MiB log, a 900 s lock
# wait, 16 MiB packets; slurm-gcp's 1024M buffer pool is under it).  InnoDB commits the pool as it fills.  The pool
# is a quarter of the controller's memory where that is less (the script sets it: `innodb_pool_lines`).
innodb_buffer_pool_size=4096M
innodb_log_file_size=64M
innodb_lock_wait_timeout=900
max_allowed_packet=16M
"""
_SLURMDBD_DROPIN = """[Unit]
After=mariadb.service munge.service
Requires=mariadb.service
[Service]
# as SlurmUser on every release (Debian 12's unit runs it as root): MariaDB lets only the OS user slurm in
User=slurm
Group=slurm
RuntimeDirectory=slurmdbd
RuntimeDirectoryMode=0755
PIDFile=/run/slurmdbd/slurmdbd.pid
"""
ACCOUNTING_PACKAGES = "slurmdbd mariadb-server"


#: the buffer pool slurmdbd asks for, and the share of the controller's memory it may take at most
INNODB_POOL_MIB, INNODB_POOL_SHARE = 4096, 4


def innodb_pool_lines(meminfo: str = "/proc/meminfo") -> list[str]:
    """Size MariaDB's buffer pool to the controller: slurmdbd's 4 GiB, or a quarter of the memory where that is less
    (a 4 GiB pool on an 8 GiB controller beside slurmctld, slurmdbd, slurmrestd and the autoscaler could be
    OOM-killed once the database fills it; slurmdbd then logs that the pool is below what it recommends)."""
    share, most = f"int($2 / 1024 / {INNODB_POOL_SHARE})", INNODB_POOL_MIB
    return [
        f"pool=$(awk '/^MemTotal:/ {{ m = {share}; print (m < {most} ? m : {most}) }}' {meminfo})",
        '[ -n "$pool" ] && [ "$pool" -ge 128 ] || die "cannot size the MariaDB buffer pool from ' + meminfo + '"',
        f'sed -i "s/^innodb_buffer_pool_size=.*/innodb_buffer_pool_size=${{pool}}M/" {MARIADB_CONF}',
    ]


def accounting_lines() -> list[str]:
    """slurmdbd and its MariaDB on the controller, before slurmctld first starts (slurm-gcp's order: the database,
    slurmdbd, `sacctmgr add cluster`, then slurmctld).  The database account and name are the ones slurmdbd.conf
    (metadata `slurmdbd-conf`) names; the account is ``IDENTIFIED VIA unix_socket``: no password is made or stored.
    A blank data directory (a new state disk) is initialised; one with data is kept.  Idempotent."""
    dbd = "/etc/slurm/slurmdbd.conf"
    return [
        "# --- 5e. accounting: MariaDB (socket only) and slurmdbd, before slurmctld ---",
        f"attr {md.SLURMDBD_CONF} > {dbd}.new",
        f"chown slurm:slurm {dbd}.new && chmod 0600 {dbd}.new && mv -f {dbd}.new {dbd}",
        f"db=$(sed -n 's/^StorageLoc=//p' {dbd}); dbuser=$(sed -n 's/^StorageUser=//p' {dbd})",
        'for v in "$db" "$dbuser"; do case "$v" in ""|*[!A-Za-z0-9_]*)',
        "  die \"slurmdbd.conf: StorageLoc, StorageUser must be plain names: '$db', '$dbuser'\";; esac; done",
        _file(MARIADB_CONF, _MARIADB_CNF),
        *innodb_pool_lines(),
        f"if [ ! -d {MARIADB_DATA_DIR}/mysql ]; then",
        f'  log "accounting database {MARIADB_DATA_DIR} is empty: initialising it"',
        f"  mariadb-install-db --user=mysql --datadir={MARIADB_DATA_DIR} --skip-test-db >/dev/null"
        ' || die "mariadb-install-db failed"',
        "fi",
        "systemctl enable mariadb",
        "systemctl restart mariadb",
        "mariadb -e \"CREATE USER IF NOT EXISTS '$dbuser'@'localhost' IDENTIFIED VIA unix_socket;"
        " ALTER USER '$dbuser'@'localhost' IDENTIFIED VIA unix_socket;"
        " GRANT ALL ON \\`$db\\`.* TO '$dbuser'@'localhost';\" || die \"MariaDB: cannot create the account $dbuser\"",
        _file("/etc/systemd/system/slurmdbd.service.d/gpu-fleet.conf", _SLURMDBD_DROPIN),
        "systemctl daemon-reload",
        "systemctl enable slurmdbd",
        "systemctl restart slurmdbd",
        # slurmdbd answers once it has made its tables: add the cluster (sacctmgr exits 1 when it already exists)
        "cluster=$(sed -n 's/^ClusterName=//p' /etc/slurm/slurm.conf)",
        "for _ in $(seq 90); do",
        '  out=$(sacctmgr -i add cluster "$cluster" 2>&1) && break',
        '  case "$out" in *"already exists"*) break;; esac',
        "  sleep 2",
        "done",
        # grep reads all of sacctmgr's output (`-q` stops early, and under pipefail sacctmgr's SIGPIPE fails the check)
        'sacctmgr -n -P show cluster format=cluster | grep -Fx "$cluster" >/dev/null'
        ' || die "slurmdbd: cluster $cluster is not in the accounting database: $out"',
    ]


#: deploy/slurm/, the hooks' wrappers (they exec the checkout's venv python: `hook_lines`)
HOOK_SOURCES = Path(__file__).resolve().parents[2] / "deploy" / "slurm"


def hook_lines(hooks: Mapping[str, str]) -> list[str]:
    """The controller's Slurm hooks (`hooks`: name -> the path slurm.conf names), written before slurmctld first
    starts: slurmctld checks them when it starts, and 23.11 does not start over a missing EpilogSlurmctld.  Each is
    deploy/slurm's wrapper of that name, which runs the pinned checkout's `autoscaler.slurm.hook` (installed later
    in the same boot: until then a hook call fails, and no job runs yet)."""
    lines = [_file(path, (HOOK_SOURCES / f"{name}.sh").read_text(), mode="0755") for name, path in hooks.items()]
    return [*lines, _file("/etc/logrotate.d/gpu-fleet-hooks", HOOK_LOGROTATE)] if lines else []


#: the hooks append what they say to HOOK_LOG (slurmctld keeps none of it); weekly, four weeks kept, like the Slurm
#: packages' own logs.  `su slurm slurm`: the directory is the Slurm user's (logrotate refuses it otherwise).
HOOK_LOG = "/var/log/slurm/gpu-fleet-hooks.log"
HOOK_LOGROTATE = f"""{HOOK_LOG} {{
    su slurm slurm
    weekly
    rotate 4
    compress
    delaycompress
    missingok
    notifempty
    create 0640 slurm slurm
}}
"""


def _config_lines(cfg: SlurmHostConfig) -> list[str]:
    lines = ["# --- 3. keys (root only) and config ---", "install -d -o munge -g munge -m 0700 /etc/munge"]
    lines.append(f"put_key {shlex.quote(cfg.munge_secret)} {MUNGE_KEY_PATH} munge")
    if cfg.role == "controller" and cfg.jwt_secret:
        lines += [
            f"install -d -o slurm -g slurm -m 0700 {SLURMCTLD_STATE_DIR}",
            f"put_key {shlex.quote(cfg.jwt_secret)} {JWT_KEY_PATH} slurm",
        ]
    lines += ["systemctl enable munge", "systemctl restart munge", "install -d -m 0755 /etc/slurm /var/log/slurm"]
    for name, key in md.SLURM_FILES.items():
        optional = key in (md.CGROUP_CONF, md.JOB_SUBMIT_LUA)
        fetch = f"attr {key} > /etc/slurm/{name}.new"
        if optional:
            lines.append(
                f"if {fetch}; then mv -f /etc/slurm/{name}.new /etc/slurm/{name}; else rm -f /etc/slurm/{name}.new; fi"
            )
        else:
            lines.append(f"{fetch} && mv -f /etc/slurm/{name}.new /etc/slurm/{name}")
    lines += [
        # world-readable, as Slurm's clients need them; slurmdbd.conf (the controller's) stays SlurmUser's alone
        'for f in /etc/slurm/*.conf; do [ "$f" = /etc/slurm/slurmdbd.conf ] || chmod 0644 "$f"; done',
        "[ ! -f /etc/slurm/job_submit.lua ] || chmod 0644 /etc/slurm/job_submit.lua",
        "chown slurm:slurm /var/log/slurm",
        # the controller by its reserved address, whatever DNS says (zonal DNS hides it from other zones)
        # the first SlurmctldHost (a backup's follows it); sed quits there: no `| head`, whose early exit would make
        # sed's write a SIGPIPE that pipefail turns into the script's death
        "ctl=$(sed -n '/^SlurmctldHost=/{s/^SlurmctldHost=\\([^(]*\\)(\\([^)]*\\)).*/\\2 \\1/p;q}'"
        " /etc/slurm/slurm.conf)",
        '[ -n "$ctl" ] || die "slurm.conf: SlurmctldHost carries no address"',
        "sed -i '/# gpu-fleet controller$/d' /etc/hosts",
        'echo "$ctl # gpu-fleet controller" >> /etc/hosts',
    ]
    if cfg.role == "controller":
        lines += hook_lines(cfg.slurm_hooks)
    return lines


def _mount_lines(cfg: SlurmHostConfig) -> list[str]:
    lines = ["# --- 4. shared storage: a missing mount fails the boot (a missing Lustre only a GPU node's) ---"]
    if cfg.home:
        home = shlex.quote(cfg.home)
        lines += [
            f"grep -q ' /home nfs ' /etc/fstab || echo {home} /home nfs defaults,hard,_netdev 0 0 >> /etc/fstab",
            "for i in 1 2 3 4 5 6; do",
            '  mountpoint -q /home && break; mount /home && break; log "mount /home: retry $i"; sleep 10',
            "done",
            f'mountpoint -q /home || die "Filestore {cfg.home} is not mounted on /home"',
        ]
    if cfg.scratch:
        lines += _scratch_lines(cfg)
    if cfg.checkpoints and cfg.role == "login":  # a GPU node's comes after its local SSD (`_compute_lines`)
        lines += _checkpoint_lines(cfg)
    return lines


KERNEL_PACKAGES = ("linux-image-*", "linux-headers-*", "linux-modules-*", "linux-gcp*", "linux-cloud-*")
#: the NVIDIA driver's user space on the accelerator images, as the Toolkit's A3 blueprints hold it
#: (hold-nvidia-packages.yml), and the firmware and common files the loaded kernel module was built with
NVIDIA_DRIVER_PACKAGES = (
    "libnvidia-cfg1-*-server",
    "libnvidia-compute-*-server",
    "libnvidia-nscq-*",
    "nvidia-compute-utils-*-server",
    "nvidia-fabricmanager-*",
    "nvidia-utils-*-server",
    "nvidia-imex-*",
    "nvidia-kernel-common-*",
    "nvidia-firmware-*",
)


def _hold_installed(patterns: tuple[str, ...]) -> str:
    """One shell command: `apt-mark hold` the installed packages matching `patterns` (dpkg-query globs; a pattern
    nothing matches is no error), so unattended-upgrades leaves them at their version.  Fails when the hold does."""
    quoted = " ".join(f"'{p}'" for p in patterns)
    return (
        f"held=$({{ dpkg-query -W -f='${{db:Status-Abbrev}} ${{Package}}\\n' {quoted} 2>/dev/null || :; }}"
        " | awk '$1 == \"ii\" { print $2 }'); "
        '{ [ -z "$held" ] || apt_locked apt-mark hold $held >/dev/null; }'
    )


SCRATCH_MOTD = "/run/motd.d/gpu-fleet-scratch"
CHECKPOINTS_MOTD = "/run/motd.d/gpu-fleet-checkpoints"


def _scratch_lines(cfg: SlurmHostConfig) -> list[str]:
    """Managed Lustre on /scratch.  The client's kernel modules are Google's build for one kernel release: installed
    when the running kernel has none (`modinfo -k`, not the kernel-independent `mount.lustre`), then the kernel
    packages are held, so unattended-upgrades does not boot a kernel Google may have no modules for (slurm-gcp
    holds its kernel package too).  A GPU node without /scratch stops its boot; the controller and login VMs, whose
    Slurm needs no /scratch, say so loudly (serial console, login banner) and go on."""
    mount, src = shlex.quote(cfg.scratch_mount), shlex.quote(cfg.scratch)
    lines = [
        "# lustre_client: the Managed Lustre client modules of the running kernel, and that kernel held",
        "lustre_client() {",
        '  if ! modinfo -k "$(uname -r)" lustre >/dev/null 2>&1; then',
        *(
            f"    {cmd} || return 1"
            for cmd in _signed_repo(AR_APT_KEY, "artifact-registry-apt", LUSTRE_REPO, "lustre-client")
        ),
        '    apt_update && apt_install "lustre-client-modules-$(uname -r)" lustre-client-utils || return 1',
        "  fi",
        f"  {_hold_installed(KERNEL_PACKAGES)} || return 1",
        '  modprobe lustre || { log "$(module_refused lustre)"; return 1; }',
        "}",
        "mount_scratch() {",
        "  lustre_client || return 1",
        f"  install -d {mount} || return 1",
        f"  grep -q ' {cfg.scratch_mount} lustre ' /etc/fstab"
        f" || echo {src} {mount} lustre defaults,_netdev 0 0 >> /etc/fstab || return 1",
        f"  mountpoint -q {mount} || mount -t lustre {src} {mount} || return 1",
        f"  mountpoint -q {mount}",
        "}",
    ]
    return [*lines, *_scratch_call(cfg)]


def _scratch_call(cfg: SlurmHostConfig) -> list[str]:
    missing = f"Lustre {cfg.scratch} is not mounted on {cfg.scratch_mount}"
    # the controller's and login VMs' Slurm needs no /scratch: a dead control plane would be worse than none
    return _mount_call(cfg.role, "mount_scratch", missing, SCRATCH_MOTD)


def _mount_call(role: str, function: str, missing: str, motd: str) -> list[str]:
    """Run the mount `function`: on a GPU node its failure stops the boot (jobs expect the mount); on the controller
    and login VMs it is a WARNING on the serial console and in the login banner (`motd`), and the boot goes on."""
    if role == "compute":
        return [f'{function} || die "{missing}"']
    return [
        f"if {function}; then",
        f"  rm -f {motd}",
        "else",
        f'  log "WARNING: {missing}: this {role} VM goes on without it;'
        ' fix it, then sudo google_metadata_script_runner startup"',
        f"  install -d {motd.rsplit('/', 1)[0]}",
        f"  echo 'gpu-fleet: WARNING: {missing} on this VM (see the serial console)' > {motd}",
        "fi",
    ]


def _local_ssd_lines(cfg: SlurmHostConfig) -> list[str]:
    want = cfg.local_ssd_gib // LOCAL_SSD_GIB
    if not want:
        return []
    mnt = LOCAL_SSD_MOUNT
    return [
        f"# --- 5a. {want} local NVMe SSDs: RAID0, ext4, {mnt} (rebuilt after a stop: local SSD data is lost) ---",
        "mapfile -t ssds < <(ls /dev/disk/by-id/google-local-nvme-ssd-* 2>/dev/null | grep -v -- -part | sort -V)",
        f'[ "${{#ssds[@]}}" -ge {want} ] || die "expected {want} local SSDs, found ${{#ssds[@]}}"',
        f"if ! mountpoint -q {mnt}; then",
        '  if [ "${#ssds[@]}" -gt 1 ]; then',
        "    # after a reboot the array exists (maybe as /dev/md/<host>:localssd); after a stop it is gone",
        '    md_localssd() { local d; for d in /dev/md/*localssd; do [ -e "$d" ] && echo "$d"; done; return 0; }',
        "    dev=$(md_localssd)",
        '    [ -n "$dev" ] || { mdadm --assemble --scan >/dev/null 2>&1 || log "no local SSD array to assemble"; }',
        '    [ -n "$dev" ] || dev=$(md_localssd)',
        '    if [ -z "$dev" ]; then',
        "      dev=/dev/md/localssd",
        '      mdadm --create "$dev" --name=localssd --level=0 --raid-devices="${#ssds[@]}" --force --run "${ssds[@]}"',
        "    fi",
        "  else",
        '    dev="${ssds[0]}"',
        "  fi",
        '  blkid "$dev" >/dev/null 2>&1 || mkfs.ext4 -q -F -m 0 -E lazy_itable_init=1,lazy_journal_init=1 "$dev"',
        f'  install -d {mnt} && mount -o discard,defaults "$dev" {mnt}',
        "fi",
        f"chmod 1777 {mnt}",
    ]


def _wait_devices_script(cfg: SlurmHostConfig) -> str:
    fab = cfg.fabric
    lines = [
        "#!/bin/bash",
        "# gpu-fleet: slurmd starts only once this node's GPUs (and GPU NICs) are there (slurmd ExecStartPre).",
        "set -euo pipefail",
        'timeout="${GPU_FLEET_DEVICE_TIMEOUT:-600}"; deadline=$((SECONDS + timeout))',
        "wait_for() {",
        '  until eval "$2"; do',
        '    [ "$SECONDS" -lt "$deadline" ] || { echo "gpu-fleet: $1 not ready after ${timeout}s" >&2; exit 1; }',
        "    sleep 5",
        "  done",
        "}",
        f'wait_for "{cfg.gpu_count} GPUs" '
        f'\'[ "$(nvidia-smi --list-gpus 2>/dev/null | grep -c "^GPU ")" -ge {cfg.gpu_count} ]\'',
    ]
    if fab and fab.kind == "tcpxo":
        lines.append(
            f'wait_for "{fab.devices} TCPXO aperture devices" '
            f"'[ \"$(ls /dev/aperture_devices 2>/dev/null | wc -l)\" -ge {fab.devices} ]'"
        )
    if fab and fab.kind == "gib":
        lines.append(
            f'wait_for "{fab.devices} RDMA devices" '
            f"'[ \"$(ibv_devices 2>/dev/null | tail -n +3 | grep -c .)\" -ge {fab.devices} ]'"
        )
    return "\n".join(lines) + "\n"


def _signed_repo(key: str, keyring: str, repo: str, name: str) -> list[str]:
    """The two commands that add the apt repository `repo` (a ``deb URL SUITE main`` line; ``{codename}`` stands for
    the OS's) as /etc/apt/sources.list.d/<name>.list, signed by `key`, dearmored into /usr/share/keyrings/<keyring>.gpg
    (the caller indents them and decides what a failure does)."""
    ring = f"/usr/share/keyrings/{keyring}.gpg"
    repo = repo.replace("{codename}", '$(. /etc/os-release; echo "$VERSION_CODENAME")')
    listed = _with_option(repo, f"signed-by={ring}")
    return [
        f"curl -sSf {key} | gpg --dearmor --yes -o {ring}",
        f'echo "{listed}" > /etc/apt/sources.list.d/{name}.list',
    ]


def _with_option(line: str, option: str) -> str:
    """A ``deb [OPTIONS] URL SUITE COMPONENT`` line with `option` among its options (added to an existing
    ``[...]``: apt reads one option list per line)."""
    kind, _, rest = line.partition(" ")
    if rest.startswith("["):
        opts, _, tail = rest[1:].partition("]")
        kept = [o for o in opts.split() if o.split("=", 1)[0] != option.split("=", 1)[0]]
        return f"{kind} [{' '.join([*kept, option])}]{tail}"
    return f"{kind} [{option}] {rest}"


def _ar_repo(repo: str, name: str) -> list[str]:
    """An Artifact Registry apt repo (ar+https), signed by Artifact Registry's key, and its transport."""
    return [
        "  if ! dpkg -s apt-transport-artifact-registry >/dev/null 2>&1; then",
        *(f"    {cmd}" for cmd in _signed_repo(GOOGLE_APT_KEY, "cloud.google", AR_TRANSPORT_REPO, "artifact-registry")),
        "    apt_update && apt_install apt-transport-artifact-registry",
        "  fi",
        *(f"  {cmd}" for cmd in _signed_repo(AR_APT_KEY, "artifact-registry-apt", repo, name)),
        "  apt_update",
    ]


#: where the NCCL TCPXO plugin installer puts its libraries and environment profile (`-v /var/lib:/var/lib`)
TCPXO_LIB_DIR = "/var/lib/tcpxo/lib64"


def _tcpxo_lines(fab: FabricSoftware) -> list[str]:
    vendor, device = fab.aperture_pci or ("", "")
    udev = (
        f'ACTION=="add", SUBSYSTEM=="pci", ATTR{{vendor}}=="{vendor}", ATTR{{device}}=="{device}", TAG+="systemd", \\\n'
        '    RUN+="/usr/bin/mkdir --mode=0755 -p /dev/aperture_devices", \\\n'
        '    RUN+="/usr/bin/systemd-mount --type=none --options=bind --collect %S/%p /dev/aperture_devices/%k", \\\n'
        "    RUN+=\"/usr/bin/bash -c '/usr/bin/chmod 0666 /dev/aperture_devices/%k/resource*'\""
    )
    env = "\n".join(
        [
            "# gpu-fleet: NCCL over GPUDirect-TCPXO (the RxDM prolog installs the plugin for multi-node jobs)",
            "# the plugin's profile stops a shell that has no NCCL_LIB_DIR (`: ${NCCL_LIB_DIR:?...}`), as Google's",
            "# scripts source it: a login shell (`#!/bin/bash -l` batch scripts) would exit here without it",
            f"if [ -f {TCPXO_LIB_DIR}/nccl-env-profile.sh ]; then",
            f'  NCCL_LIB_DIR="${{NCCL_LIB_DIR:-{TCPXO_LIB_DIR}}}"',
            f"  . {TCPXO_LIB_DIR}/nccl-env-profile.sh",
            "fi",
        ]
    )
    return [
        "# --- 5c. GPUDirect-TCPXO: dmabuf import helper, aperture devices, docker for RxDM ---",
        *_dkms_source_build_lines(),
        f"if ! modinfo {fab.kernel_module} >/dev/null 2>&1; then",
        *_ar_repo(fab.apt_repo, "gpudirect-tcpxo"),
        '  apt_install dkms "linux-headers-$(uname -r)"',
        *(f'  dkms_source_build {pkg} || die "{pkg}: its DKMS module did not build"' for pkg in fab.packages),
        "fi",
        f"load_module {fab.kernel_module}",
        _file("/etc/udev/rules.d/00-a3-megagpu.rules", udev),
        "udevadm control --reload-rules",
        f"udevadm trigger --action=add --subsystem-match=pci --attr-match=vendor={vendor} --attr-match=device={device}",
        "command -v docker >/dev/null || apt_install docker.io",
        *_container_toolkit_lines(),
        "nvidia-ctk runtime configure --runtime=docker",
        "systemctl restart docker",
        _file("/etc/profile.d/nccl-tcpxo.sh", env),
    ]


#: the kernel release from which MODULE_IMPORT_NS takes a string literal (Linux 6.13); the import helper's source
#: names its namespace bare, for the older macro
STRING_IMPORT_NS_KERNEL = "6.13"


def _dkms_source_build_lines() -> list[str]:
    """`dkms_source_build PKG`: the DKMS source a package of the fabric's repository carries, built and installed for
    the running kernel without the package's own maintainer scripts.  Installing dmabuf-import-helper lets its
    postinst build the source unchanged, which fails on the kernels of the 24.04 accelerator images (6.17: a
    string MODULE_IMPORT_NS): the source is downloaded, unpacked into /usr/src, its namespace quoted where the
    kernel wants it (the Toolkit's A3 Mega blueprint, install_dmabuf.yml, does the same), then added, built and
    installed by dkms at the version the package ships."""
    return [
        "dkms_source_build() {",
        "  local pkg=$1 work src version",
        "  work=$(mktemp -d) || return 1",
        '  (cd "$work" && apt_get download "$pkg") || return 1',
        '  dpkg-deb -x "$work"/"$pkg"_*.deb "$work/root" || return 1',
        '  src=$(find "$work/root/usr/src" -mindepth 1 -maxdepth 1 -type d -name "$pkg-*" -print -quit 2>/dev/null)',
        '  [ -n "$src" ] || { log "$pkg: its package carries no DKMS source (usr/src/$pkg-VERSION)"; return 1; }',
        '  version=${src##*/"$pkg"-}',
        '  rm -rf "/usr/src/$pkg-$version" && mv "$src" /usr/src/ && rm -rf "$work" || return 1',
        f'  if dpkg --compare-versions "$(uname -r | cut -d- -f1)" ge {STRING_IMPORT_NS_KERNEL}; then',
        "    grep -rlZ --include='*.c' 'MODULE_IMPORT_NS([A-Z_]*)' \"/usr/src/$pkg-$version\" |",
        "      xargs -0r sed -i -E 's/MODULE_IMPORT_NS\\(([A-Z_]+)\\)/MODULE_IMPORT_NS(\"\\1\")/' || return 1",
        "  fi",
        '  dkms remove -m "$pkg" -v "$version" --all >/dev/null 2>&1 || :',
        "  local step",
        '  for step in add build install; do dkms "$step" -m "$pkg" -v "$version" || return 1; done',
        "}",
    ]


def _container_toolkit_lines() -> list[str]:
    """The NVIDIA Container Toolkit docker runs RxDM through (`--privileged --gpus all`, as root): its four packages at
    NVIDIA_CONTAINER_TOOLKIT_VERSION, installed where the image has another version or none (from the repository
    NVIDIA's install guide adds, signed by its key), then held, so every node of a
    cluster runs the one version this commit names and unattended upgrades do not change it under a running job.
    A version the repository lacks stops the boot naming it, not a node whose TCPXO jobs fail in their prolog."""
    version, names = NVIDIA_CONTAINER_TOOLKIT_VERSION, " ".join(NVIDIA_CONTAINER_TOOLKIT_PACKAGES)
    pinned = " ".join(f"{name}={version}" for name in NVIDIA_CONTAINER_TOOLKIT_PACKAGES)
    return [
        "have=$(dpkg-query -W -f='${Version}' nvidia-container-toolkit 2>/dev/null || true)",
        f'if [ "$have" != {version} ]; then',
        *(
            f'  {cmd} || die "NVIDIA\'s container toolkit repository not added"'
            for cmd in _signed_repo(
                NVIDIA_CONTAINER_TOOLKIT_KEY,
                "nvidia-container-toolkit-keyring",
                NVIDIA_CONTAINER_TOOLKIT_REPO,
                "nvidia-container-toolkit",
            )
        ),
        "  apt_update",
        f"  apt_install --allow-change-held-packages --allow-downgrades {pinned}"
        f' || die "nvidia-container-toolkit={version} (NVIDIA_CONTAINER_TOOLKIT_VERSION, components/gcp/startup.py)'
        " did not install from NVIDIA's repository\"",
        "fi",
        f"apt_locked apt-mark hold {names} >/dev/null",
    ]


def _gib_lines(fab: FabricSoftware) -> list[str]:
    env = "\n".join(
        [
            "# gpu-fleet: NCCL over RDMA with Google's gIB plugin",
            f'if [ -f "{fab.env_script}" ]; then . "{fab.env_script}"; fi',
            f'if [ -d "{fab.lib_dir}" ]; then',
            f'  export LD_LIBRARY_PATH="{fab.lib_dir}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"',
            "fi",
        ]
    )
    pkg = f"{fab.nccl_package}={fab.nccl_version}"
    return [
        "# --- 5c. RDMA (gIB): RDMA user space, the NCCL gIB plugin (pinned) and its environment ---",
        f"apt_install {' '.join(fab.packages)}",
        f"have=$(dpkg-query -W -f='${{Version}}' {fab.nccl_package} 2>/dev/null || true)",
        # the blueprint pins nccl-gib=v1.1.0; a package versioned 1.1.0 (Debian versions start with a digit) is the same
        f"want={shlex.quote(fab.nccl_version or '')}",
        'if [ "${have#v}" != "${want#v}" ]; then',
        *_ar_repo(fab.apt_repo, "gpudirect-gib"),
        f"  apt_install --allow-change-held-packages {shlex.quote(pkg)}",
        f"  apt_locked apt-mark hold {fab.nccl_package}",
        "fi",
        _file("/etc/profile.d/nccl-gib.sh", env),
    ]


#: the first open-source RxDM image, which obsoletes `--uid=` and `--alsologtostderr` (Google's GPUDirect-TCPXO
#: release notes, "Aug 21, 2025": tcpgpudmarxd-dev:v1.0.18, "Current: --num_hops=2 --num_nics=8"; slurm-gcp's
#: prolog still passes them to v1.0.23, which takes them, so dropping them is the notes' form, not a necessity)
RXDM_OPEN_SOURCE = (1, 0, 18)


def rxdm_flags(image: str) -> str:
    """The receive-datapath manager's flags for the tag of `image`: slurm-gcp's set up to v1.0.17, the release notes'
    open-source set from v1.0.18 on."""
    tag = image.rsplit(":", 1)[-1]
    match = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)", tag)
    if match is None:
        raise ValueError(f"RxDM image {image}: pinned by a vX.Y.Z tag, got {tag!r}")
    if tuple(int(part) for part in match.groups()) >= RXDM_OPEN_SOURCE:
        return "--num_hops=2 --num_nics=8"
    return "--num_hops=2 --num_nics=8 --uid= --alsologtostderr"


def _prolog_scripts(fab: FabricSoftware | None) -> list[str]:
    """Every compute node carries the prolog/epilog slurm.conf may name; they act on TCPXO nodes only."""
    if not (fab and fab.kind == "tcpxo"):
        noop = "#!/bin/sh\n# gpu-fleet Slurm {}: nothing to do on this machine type (no GPUDirect-TCPXO).\nexit 0\n"
        return [_file(PROLOG, noop.format("Prolog"), mode="0755"), _file(EPILOG, noop.format("Epilog"), mode="0755")]
    rxdm, plugin = fab.rxdm_image, fab.nccl_plugin_image
    # Slurm keeps no prolog or epilog output (slurm.conf(5), "Prolog and Epilog Scripts"): a failure goes to the journal
    # too (`journalctl -t gpu-fleet-prolog`), where the admin of the node slurmd drains ("Prolog error") looks
    head = """set -Eeuo pipefail
fail() {{
  logger -t gpu-fleet-{script} -p user.err -- "job ${{SLURM_JOB_ID:-?}}: $*" 2>/dev/null || :
  echo "gpu-fleet: $*" >&2
  exit 1
}}
trap 'rc=$?; fail "line $LINENO: $BASH_COMMAND exited $rc"' ERR
[ "$(cat /etc/gpu-fleet/fabric 2>/dev/null)" = tcpxo ] || exit 0"""
    running_rxdm = f'docker container list --filter "name={RXDM_CONTAINER}" --quiet'
    # no `--rm` on RxDM: a crash leaves its log for the failure message and for `docker logs`, until the next prolog
    # removes every RxDM container, running or not
    prolog = f"""#!/bin/bash
# gpu-fleet Slurm Prolog (root): the GPUDirect-TCPXO receive-datapath manager for multi-node jobs on A3 Mega.
{head.format(script="prolog")}
[ "${{SLURM_JOB_NUM_NODES:-1}}" -gt 1 ] || exit 0
modprobe import-helper
{running_rxdm} --all | xargs --no-run-if-empty docker container rm --force >/dev/null
# an installer left by a prolog slurmd killed (PrologEpilogTimeout) would hold the name the next one needs
docker container rm --force nccl-installer >/dev/null 2>&1 || :
rm -rf {TCPXO_LIB_DIR}
docker run --rm --name nccl-installer --network=host -v /var/lib:/var/lib {plugin} install --install-nccl
cat >> {TCPXO_LIB_DIR}/nccl-env-profile.sh <<'EOF'
export NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY=/dev/aperture_devices
export LD_LIBRARY_PATH={TCPXO_LIB_DIR}:${{LD_LIBRARY_PATH:-}}
EOF
name="{RXDM_CONTAINER}${{SLURM_JOB_ID}}"
docker run --detach --name "$name" --cap-add=NET_ADMIN --network=host --privileged --gpus all \\
  --volume /var/lib/nvidia/lib64:/usr/local/nvidia/lib64 --volume /dev/dmabuf_import_helper:/dev/dmabuf_import_helper \\
  --env LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu {rxdm} {rxdm_flags(rxdm)} >/dev/null
rxdm_log() {{ docker container logs --tail 20 "$name" 2>&1 | tr '\\n' ' ' || :; }}
# grep reads the whole log: `grep -q` would stop at the line, and under pipefail the SIGPIPE docker then gets as
# RxDM logs on would fail the check every time (tests/firstboot/test_tcpxo_prolog.py)
for _ in $(seq 60); do
  docker container logs "$name" 2>&1 | grep -F "{RXDM_READY}" >/dev/null && exit 0
  [ "$(docker container inspect --format '{{{{.State.Running}}}}' "$name" 2>/dev/null || :)" = true ] \\
    || fail "RxDM ({rxdm}) exited before initialising: $(rxdm_log)"
  sleep 2
done
fail "RxDM ({rxdm}) did not initialise in 120 s: $(rxdm_log)"
"""
    epilog = f"""#!/bin/bash
# gpu-fleet Slurm Epilog (root): stop the job's RxDM container on TCPXO nodes (the next prolog removes it).
{head.format(script="epilog")}
{running_rxdm} | xargs --no-run-if-empty docker container stop >/dev/null
"""
    return [_file(PROLOG, prolog, mode="0755"), _file(EPILOG, epilog, mode="0755")]


PERSISTENCED_DROPIN = "/etc/systemd/system/nvidia-persistenced.service.d/persistence_mode.conf"


def _checkpoint_lines(cfg: SlurmHostConfig) -> list[str]:
    """The checkpoint bucket on `checkpoints_mount`: on GPU nodes for jobs, before slurmd starts, and on login VMs
    for their users.  Jobs get no Google token (the metadata guard), so the bucket reaches a job only through a
    mount made by root: gcsfuse with ``allow_other``, as the Toolkit's A3 Mega blueprint mounts its bucket on /gcs
    (directories 777: GCS has no POSIX owners, so every user of the cluster reads and writes every checkpoint).
    Writes stage on the local SSD where the machine has one (the boot disk otherwise).  The mount point is root's
    and 0555 underneath, so a job writing there while the bucket is not mounted fails instead of filling the boot
    disk; a GPU node whose mount fails stops its boot, a login VM says so and goes on.  gcsfuse is GCSFUSE_VERSION
    from Google's repository (an image's other version is replaced), then held (apt-mark), so unattended upgrades do
    not restart it under running jobs and every node of a cluster runs the same one."""
    bucket, mount = cfg.checkpoints, cfg.checkpoints_mount
    assert bucket and re.fullmatch(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]", bucket), bucket
    temp = f"{LOCAL_SSD_MOUNT}/gcsfuse" if cfg.local_ssd_gib else None
    config = "\n".join(
        [
            "# gpu-fleet: the checkpoint bucket for jobs (components/gcp/startup.py `_checkpoint_lines`)",
            "file-system:",
            '  dir-mode: "777"',
            '  file-mode: "666"',
            "  fuse-options: allow_other",
            "  rename-dir-limit: 0",
            *([f"  temp-dir: {temp}"] if temp else []),
            "foreground: true",
        ]
    )
    unit = f"""[Unit]
Description=gpu-fleet: the checkpoint bucket gs://{bucket} on {mount} (gcsfuse)
Wants=network-online.target
After=network-online.target gpu-fleet-metadata-guard.service
Before=slurmd.service

[Service]
Type=simple
# a bare name: systemd finds it on its own search path (/usr/bin for Google's package)
ExecStart=gcsfuse --config-file {GCSFUSE_CONFIG} {bucket} {mount}
Restart=on-failure
RestartSec=5

[Install]
WantedBy=multi-user.target slurmd.service
"""
    return [
        f"# --- 5a2. the checkpoint bucket gs://{bucket} on {mount} (gcsfuse as root, allow_other) ---",
        "mount_checkpoints() {",
        f"  if [ \"$(dpkg-query -W -f='${{Version}}' gcsfuse 2>/dev/null)\" != {GCSFUSE_VERSION} ]; then",
        # Google's packages key, the one the Artifact Registry transport's repository is signed with too
        *(f"    {line} || return 1" for line in _signed_repo(GOOGLE_APT_KEY, "cloud.google", GCSFUSE_REPO, "gcsfuse")),
        "    apt_update || return 1",
        f"    apt_install --allow-change-held-packages --allow-downgrades gcsfuse={GCSFUSE_VERSION} fuse3 || {{",
        f'      log "gcsfuse={GCSFUSE_VERSION} (GCSFUSE_VERSION, components/gcp/startup.py) did not install'
        " from Google's repository\"; return 1; }",
        "  fi",
        "  apt_locked apt-mark hold gcsfuse >/dev/null || return 1",
        *([f"  install -d -m 0700 {temp} || return 1"] if temp else []),
        _file(GCSFUSE_CONFIG, config),
        _file(f"/etc/systemd/system/{GCSFUSE_UNIT}", unit),
        # root's and unwritable underneath: a job writing there while the bucket is not mounted fails
        f"  mountpoint -q {mount} || install -d -o root -g root -m 0555 {mount} || return 1",
        f"  systemctl daemon-reload && systemctl enable {GCSFUSE_UNIT} && systemctl restart {GCSFUSE_UNIT} || return 1",
        f"  for _ in $(seq 60); do mountpoint -q {mount} && return 0; sleep 1; done",
        "  return 1",
        "}",
        *_mount_call(
            cfg.role,
            "mount_checkpoints",
            f"checkpoint bucket gs://{bucket} is not mounted on {mount}: see journalctl -u {GCSFUSE_UNIT}",
            CHECKPOINTS_MOTD,
        ),
    ]


def _compute_lines(cfg: SlurmHostConfig) -> list[str]:
    fab = cfg.fabric
    lines = _local_ssd_lines(cfg)
    if cfg.checkpoints:
        lines += _checkpoint_lines(cfg)
    lines += [
        "# --- 5b. NVIDIA driver: from the image (accelerator image or a baked one) ---",
        "command -v nvidia-smi >/dev/null"
        ' || die "no NVIDIA driver on this image: boot the catalog\'s accelerator image or a baked one"',
        # held with the kernel it has modules for: an unattended upgrade of the user space under the loaded module
        # ("Failed to initialize NVML: Driver/library version mismatch") fails every GPU job until a reboot, and a
        # new kernel may boot with no module of this driver; upgrade by rolling the image
        f"{_hold_installed(NVIDIA_DRIVER_PACKAGES + KERNEL_PACKAGES)}"
        ' || die "apt-mark hold of the NVIDIA driver and kernel packages failed"',
        # Ubuntu's unit runs the daemon with --no-persistence-mode: the GPUs would drop their state between jobs
        # (the Toolkit's blueprints override it the same way: nvidia-persistenced.service.d/persistence_mode.conf)
        f"install -d -m 0755 {PERSISTENCED_DROPIN.rsplit('/', 1)[0]}",
        "printf '[Service]\\nExecStart=\\nExecStart=%s --user nvidia-persistenced --verbose\\n'"
        f' "$(command -v nvidia-persistenced)" > {PERSISTENCED_DROPIN}',
        "systemctl daemon-reload",
        "systemctl enable --now nvidia-persistenced",
        "install -d -m 0755 /etc/gpu-fleet",
        f"echo {fab.kind if fab else 'none'} > /etc/gpu-fleet/fabric",
    ]
    if fab and fab.kind == "tcpxo":
        lines += _tcpxo_lines(fab)
    elif fab and fab.kind == "gib":
        lines += _gib_lines(fab)
    dropin = f"""[Unit]
After=nvidia-persistenced.service gpu-fleet-metadata-guard.service

[Service]
ExecStartPre={WAIT_DEVICES}
TimeoutStartSec=900
# jobs keep slurmd's locked-memory limit (slurm.conf PropagateResourceLimitsExcept=MEMLOCK): RDMA registers
# its buffers against it
LimitMEMLOCK=infinity
"""
    lines += [
        *_prolog_scripts(fab),
        "# --- 5d. slurmd: only once the devices are there ---",
        _file(WAIT_DEVICES, _wait_devices_script(cfg), mode="0755"),
        _file("/etc/systemd/system/slurmd.service.d/gpu-fleet.conf", dropin),
        # a cloud node's Slurm name is its GCE instance name (the daemon creates it by that name)
        'echo "SLURMD_OPTIONS=-N $(hostname -s)" > /etc/default/slurmd',
        # slurmd makes its spool itself, but only after logging "error: Domain socket directory ...: No such file or
        # directory" at its first start (both OSes' packages leave it out; seen in tests/firstboot)
        f"install -d -m 0755 {SLURMD_SPOOL_DIR}",
        WAIT_DEVICES,
        "systemctl daemon-reload",
        "systemctl enable slurmd",
        "systemctl restart slurmd",
        "# where GCE placed this VM, for the controller's topology.conf (A3/A4 only have it)",
        f"if host=$(attr {md.PHYSICAL_HOST} 2>/dev/null); then",
        '  scontrol update NodeName="$(hostname -s)" Comment="physical_host=$host"'
        ' || log "could not publish physical_host"',
        "fi",
    ]
    return lines


def _topology_timer_lines() -> list[str]:
    service = f"""[Unit]
Description=gpu-fleet: rebuild topology.conf from the nodes' physical hosts
After=slurmctld.service

[Service]
Type=oneshot
ExecStart={AUTOSCALER_HOME}/.venv/bin/python -m fleet.slurm.topology --out /etc/slurm/topology.conf
"""
    timer = """[Unit]
Description=gpu-fleet: keep topology.conf current as nodes resume

[Timer]
OnBootSec=60
OnUnitActiveSec=30

[Install]
WantedBy=timers.target
"""
    return [
        _file("/etc/systemd/system/gpu-fleet-topology.service", service),
        _file("/etc/systemd/system/gpu-fleet-topology.timer", timer),
        "systemctl daemon-reload",
        "systemctl enable --now gpu-fleet-topology.timer",
    ]


def startup_script(cfg: SlurmHostConfig) -> str:
    """The bash startup script of one Slurm VM role."""
    binds = (*STATE_BINDS, ACCOUNTING_BIND) if cfg.accounting else STATE_BINDS
    lines = [_PRELUDE]
    if cfg.metadata_guard:
        lines += _guard_lines(cfg.guard_exempt)
    lines += [
        "# --- 2. packages ---",
        f"apt_update && apt_install {_PACKAGES[cfg.role]}" + (f" {ACCOUNTING_PACKAGES}" if cfg.accounting else ""),
        *([GUARD] if cfg.metadata_guard and cfg.guard_exempt else []),  # now SlurmUser exists: exempt it
        *(_state_disk_lines(cfg.state_disk, binds) if cfg.state_disk else []),
        *_config_lines(cfg),
        *_mount_lines(cfg),
    ]
    if cfg.role == "compute":
        lines += _compute_lines(cfg)
    if cfg.role == "controller":
        restd = f"""[Service]
# slurmrestd refuses to run as root: its own system user, JWT auth, loopback only
User=slurmrestd
Group=slurmrestd
Environment=SLURM_JWT=daemon
ExecStart=
ExecStart={RESTD} 127.0.0.1:6820
"""
        lines += [
            "# --- 6. controller ---",
            "id -u slurmrestd >/dev/null 2>&1"
            " || useradd --system --no-create-home --shell /usr/sbin/nologin slurmrestd",
            _file(RESTD, restd_wrapper(cfg.accounting), mode="0755"),
            _file("/etc/systemd/system/slurmrestd.service.d/gpu-fleet.conf", restd),
            "systemctl daemon-reload",
            *(accounting_lines() if cfg.accounting else []),
            "systemctl enable slurmctld slurmrestd",
            "systemctl restart slurmctld",
            # up before the script goes on: 22.05's unit returns at once (Type=simple), and with slurmdbd slurmctld
            # first registers there (a second or so: seen in tests/firstboot, whose ping came too soon)
            'for _ in $(seq 60); do case "$(scontrol ping 2>&1)" in *"is UP"*) break;; esac; sleep 1; done',
            'case "$(scontrol ping 2>&1)" in *"is UP"*) ;;',
            '  *) die "slurmctld is not up after 60 s: see /var/log/slurm/slurmctld.log";; esac',
            "systemctl restart slurmrestd",
        ]
        lines += autoscaler_install(cfg.autoscaler_source, cfg.autoscaler_ref)
        lines += _topology_timer_lines()
    lines.append('log "boot complete"')
    return "\n".join(lines) + "\n"


def autoscaler_install(source: str | None, ref: str | None) -> list[str]:
    """Install and start the gpu-fleet autoscaler on the controller, at a pinned commit.

    The commit is fetched by its hash (or the tag, then checked against the hash), checked out
    detached and verified.  The venv holds the daemon's dependencies alone, from the repository's hash-pinned lock
    (`pip install --require-hashes`; deploy/controller.in: no Pulumi, no matplotlib), rebuilt from scratch whenever
    the lock changes, with the daemon stopped first.  gpu-fleet itself is not installed into it: the verified
    checkout is on the venv's path, compiled once by root, and `.venv/bin/fleet` runs its CLI.  That step is
    deploy/install-venv.sh (written from the stack's copy), which the autoscaler image's build runs too.
    slurm.conf's ResumeProgram/SuspendProgram are deploy/slurm's wrappers (`hook_lines`, written before slurmctld
    starts), which run this checkout's hook; they and the
    daemon share the SQLite state in /var/lib/gpu-fleet, so that directory belongs to SlurmUser."""
    home, state = AUTOSCALER_HOME, AUTOSCALER_STATE_DIR
    lines = ["apt_install git python3-venv"]
    if source:
        pinned = PINNED_REF.fullmatch(ref or "")
        if not pinned:
            raise ValueError(f"autoscaler ref {ref!r} is not pinned: give a 40-hex commit or <tag>@<40-hex commit>")
        sha, tag = pinned["sha"], pinned["tag"]
        want = f"refs/tags/{tag}" if tag else sha
        lines += [
            f'if [ "$(git -C {home} rev-parse -q --verify HEAD 2>/dev/null || true)" != {sha} ]; then',
            # a re-run with a new ref: the daemon (enabled, started at boot) stops before its code changes under it
            "  systemctl stop gpu-fleet-autoscaler 2>/dev/null || true",
            f"  [ -d {home}/.git ] || git clone --quiet --no-checkout -- {shlex.quote(source)} {home}",
            f"  git -C {home} fetch --quiet --depth 1 origin -- {shlex.quote(want)}",
            f'  [ "$(git -C {home} rev-parse FETCH_HEAD^{{commit}})" = {sha} ]'
            f' || die "gpu-fleet {shlex.quote(ref or "")}: fetched commit is not {sha}"',
            f"  git -C {home} -c advice.detachedHead=false checkout --quiet --force --detach {sha}",
            "fi",
            f'[ "$(git -C {home} rev-parse HEAD)" = {sha} ] || die "gpu-fleet: {home} is not at {sha}"',
        ]
    lines += [
        f"[ -f {home}/pyproject.toml ]"
        f' || die "{home} missing: set clusters[].slurm.autoscaler.source or bake it into the image"',
        _file(INSTALL_VENV, INSTALL_VENV_SOURCE.read_text(), mode="0755"),
        # a venv about to be rebuilt (a new lock) is not one the daemon may be running from
        f"{INSTALL_VENV} --current {home} || systemctl stop gpu-fleet-autoscaler 2>/dev/null || true",
        f'{INSTALL_VENV} {home} || die "gpu-fleet: the venv of {home} could not be built from {AUTOSCALER_LOCK}"',
        f"install -d -o slurm -g slurm -m 0750 {state}",
        "install -d -m 0755 /etc/gpu-fleet",
        f"attr {md.INVENTORY} > /etc/gpu-fleet/inventory.json",
        f"attr {md.AUTOSCALER_CONFIG} > /etc/gpu-fleet/autoscaler.yaml",
        "chmod 0644 /etc/gpu-fleet/inventory.json /etc/gpu-fleet/autoscaler.yaml",
        # the state store with its pools, created by SlurmUser before the daemon starts, so that Slurm's
        # power-save hooks can queue requests at once (the hooks never create a store themselves)
        f"runuser -u slurm -- {home}/.venv/bin/fleet autoscaler init --config /etc/gpu-fleet/autoscaler.yaml",
        f"install -m 0644 {home}/deploy/systemd/gpu-fleet-autoscaler.service /etc/systemd/system/",
        "systemctl daemon-reload",
        "systemctl enable gpu-fleet-autoscaler",
        "systemctl restart gpu-fleet-autoscaler",
    ]
    return lines
