"""Recording stubs for the hardware-only steps of a node's startup script (no GPU, GPU NIC or local SSD here).

Each stub is a small bash script installed first on PATH (/usr/local/bin) in every VM.  It appends one
line `<epoch.ns> <name> <args...>` to /var/log/fb-stubs.log, then leaves behind what the real tool's
success leaves, so the script's own checks and waits see what they would see on a GPU VM:

- the NVIDIA driver is `nvidia-persistenced` (a unit of the accelerator image): when started it
  "loads the driver" 4 s later, creating /dev/nvidia0..7 and /dev/nvidiactl (195:N) — so a script that
  does not wait for the GPUs starts slurmd without them;
- `nvidia-smi --list-gpus` lists one GPU per /dev/nvidiaN that exists (none before the driver);
- `modinfo import-helper` succeeds (the dmabuf import helper baked into the image), `modprobe` records;
- `udevadm trigger ... --attr-match=vendor=V --attr-match=device=D` creates /dev/aperture_devices/<8 PCI
  addresses> 3 s later (what the aperture udev rule does for A3 Mega's 8 aperture PCI functions);
- `ibv_devices` lists 8 mlx5 RDMA devices (A3 Ultra's RDMA NICs are there from power-on);
- `docker` records; `docker run ... <nccl-plugin image> install` leaves /var/lib/tcpxo/lib64 with an
  NCCL environment profile that starts as the plugin's own does (it stops a shell without NCCL_LIB_DIR),
  `docker container logs NAME` says "Buffer manager initialization complete" (what RxDM prints once up) and
  `docker container inspect` that it runs;
- `nvidia-ctk` records; `dockerd` and `nvidia-persistenced` are
  daemons behind units the stubs bring along (docker.service, nvidia-persistenced.service);
- `gcsfuse ... BUCKET MOUNT` bind-mounts a world-writable directory standing for the bucket on MOUNT (what
  the checkpoint mount's dir-mode 777 gives jobs) and stays in the foreground until stopped;
- `mdadm --create DEV ...` records and points DEV at the VM's one emulated local SSD (a loop device,
  see `Vm.attach_disk`), which the script then formats and mounts for real.

`stub_packages()` are the third-party packages whose install the scripts skip when the image already has their
pinned version (gcsfuse, nccl-gib, the NVIDIA Container Toolkit's four): each VM's dpkg database lists them at
that version, as a baked image's would, since their repositories are out of reach here.

Everything else the script runs is Debian's own binary.
"""

from __future__ import annotations

from components.gcp.startup import GCSFUSE_VERSION, NVIDIA_CONTAINER_TOOLKIT_PACKAGES, NVIDIA_CONTAINER_TOOLKIT_VERSION
from fleet.catalog import load_catalog

LOG = "/var/log/fb-stubs.log"

_HEAD = "#!/bin/bash\n# first-boot test stub (tests/firstboot/stubs.py)\n"
_RECORD = f'echo "$(date +%s.%N) $(basename "$0") $*" >> {LOG}\n'


def _stub(body: str = "") -> str:
    return _HEAD + _RECORD + body


_DRIVER = """
( sleep 4
  for i in 0 1 2 3 4 5 6 7; do [ -e /dev/nvidia$i ] || mknod -m 0666 /dev/nvidia$i c 195 $i; done
  [ -e /dev/nvidiactl ] || mknod -m 0666 /dev/nvidiactl c 195 255
  echo "$(date +%s.%N) driver-loaded /dev/nvidia[0-7]" >> LOG ) &
exec sleep infinity
""".replace("LOG", LOG)

_NVIDIA_SMI = """
case " $* " in
  *" --list-gpus "*|*" -L "*)
    for d in /dev/nvidia[0-9]*; do
      [ -c "$d" ] && echo "GPU ${d#/dev/nvidia}: NVIDIA H100 80GB HBM3 (UUID: GPU-fb-${d#/dev/nvidia})"
    done
    exit 0 ;;
esac
ls /dev/nvidia[0-9]* >/dev/null 2>&1 || { echo "NVIDIA-SMI has failed: no devices" >&2; exit 9; }
"""

_UDEVADM = """
if [ "${1:-}" = trigger ]; then
  ( sleep 3; mkdir -p /dev/aperture_devices
    for i in 0 1 2 3 4 5 6 7; do mkdir -p /dev/aperture_devices/0000:0$i:00.1; done
    echo "$(date +%s.%N) aperture-devices /dev/aperture_devices/*" >> LOG ) &
fi
""".replace("LOG", LOG)

#: the head of the plugin's own nccl-env-profile.sh (google/nccl-plugin-gpudirect-tcpxo, tcpxo_scripts/): it stops a
#: shell that sourced it without NCCL_LIB_DIR, and builds paths from it
PLUGIN_PROFILE = """: "${NCCL_LIB_DIR:?Must set NCCL_LIB_DIR}"
export NCCL_NET=FasTrak
export NCCL_TUNER_CONFIG_PATH=${NCCL_LIB_DIR}/a3plus_tuner_config.textproto"""

_DOCKER = (
    """
PLUGIN_PROFILE=$(cat <<'PROFILE'
"""
    + PLUGIN_PROFILE
    + """
PROFILE
)
case " $* " in
  *" run "*nccl-plugin*" install "*)
    mkdir -p /var/lib/tcpxo/lib64; printf '%s\n' "$PLUGIN_PROFILE" > /var/lib/tcpxo/lib64/nccl-env-profile.sh ;;
  *" container logs "*) echo "Buffer manager initialization complete" ;;
  *" container inspect "*) echo true ;;
esac
"""
)

_MDADM = """
if [ "${1:-}" = --create ]; then mkdir -p "$(dirname "$2")"; ln -sfn /dev/fb-localssd "$2"; fi
"""

# gcsfuse --config-file CFG BUCKET MOUNT (foreground): the bucket is a directory of this VM, bind-mounted with the
# modes the config asks (dir-mode 777), until the unit is stopped
_GCSFUSE = """
cfg="$2"; bucket="${@: -2:1}"; mnt="${@: -1}"
grep -q "fuse-options: allow_other" "$cfg" || { echo "gcsfuse stub: $cfg lacks allow_other" >&2; exit 1; }
src=/var/lib/fb-gcs/$bucket; mkdir -p "$src"; chmod 0777 "$src"
mount --bind "$src" "$mnt" || exit 1
trap 'umount "$mnt"; exit 0' TERM
sleep infinity & wait
"""

_IBV_DEVICES = """
printf "    device                 node GUID\\n    ------              ----------------\\n"
for i in 0 1 2 3 4 5 6 7; do printf '    mlx5_%s              0c42a10300a1b2c%s\\n' $i $i; done
"""

_UNITS = {
    "nvidia-persistenced.service": "[Unit]\nDescription=NVIDIA Persistence Daemon (first-boot stub)\n"
    # as Ubuntu's package ships it: the daemon without persistence mode (the script's drop-in turns it on)
    "[Service]\nType=simple\nExecStart=/usr/local/bin/nvidia-persistenced --user nvidia-persistenced"
    " --no-persistence-mode --verbose\n",
    "docker.service": "[Unit]\nDescription=Docker (first-boot stub)\n[Service]\nType=simple\n"
    "ExecStart=/usr/local/bin/dockerd\n",
}


def gpu_stubs() -> dict[str, str]:
    """name -> script, for /usr/local/bin."""
    return {
        "nvidia-persistenced": _stub(_DRIVER),
        "nvidia-smi": _stub(_NVIDIA_SMI),
        "modinfo": _stub(
            '[ "${1:-}" = import-helper ] && { echo "filename: /lib/modules/import-helper.ko"; exit 0; }\nexit 1\n'
        ),
        "modprobe": _stub(),
        "udevadm": _stub(_UDEVADM),
        "docker": _stub(_DOCKER),
        "dockerd": _stub("exec sleep infinity\n"),
        "nvidia-ctk": _stub(),
        "ibv_devices": _stub(_IBV_DEVICES),
        "mdadm": _stub(_MDADM),
        "gcsfuse": _stub(_GCSFUSE),
    }


def stub_units() -> dict[str, str]:
    """Unit files (for /lib/systemd/system) of the stub daemons, as the image's packages would ship them."""
    return dict(_UNITS)


#: a package of the NVIDIA driver's user space the accelerator image carries, which a GPU node's script holds
DRIVER_PACKAGE = "nvidia-utils-580-server"


def stub_packages() -> dict[str, str]:
    """package -> the version a VM's dpkg database lists: the pinned versions the scripts check for."""
    gib = load_catalog("gcp").fabric_software("gib")
    assert gib and gib.nccl_package and gib.nccl_version
    # the script compares without the blueprint's leading "v": a Debian version starts with a digit
    toolkit = dict.fromkeys(NVIDIA_CONTAINER_TOOLKIT_PACKAGES, NVIDIA_CONTAINER_TOOLKIT_VERSION)
    return {
        "gcsfuse": GCSFUSE_VERSION,
        gib.nccl_package: gib.nccl_version.removeprefix("v"),
        **toolkit,
        # the accelerator image's driver user space (its version is the image's, not a pin)
        DRIVER_PACKAGE: "580.95.05-0ubuntu0.24.04.2",
    }


def stub_image() -> dict[str, dict[str, str]]:
    """`FirstBootCloud`'s stubs, units and packages: what a GPU image has that this machine stands in for."""
    return {"stubs": gpu_stubs(), "units": stub_units(), "packages": stub_packages()}
