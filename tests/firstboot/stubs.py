"""Recording stubs for the GPU-only steps of a node's startup script (no GPU, no NVIDIA driver, no GPU NICs here).

Each stub is a small bash script installed first on PATH (/usr/local/bin) in every VM: it appends one
line `<epoch.ns> <name> <args...>` to /var/log/fb-stubs.log and then does the one visible thing the
real tool's success leaves behind, so the script's own checks and waits see what they would see on a
GPU VM:

- `nvidia-smi`: with no arguments lists 8 GPUs; it is also what loads the driver on an accelerator image
  (the first call creates /dev/nvidia0..7, /dev/nvidiactl, /dev/nvidia-uvm as character devices 195:N);
- `modprobe`: records; `modprobe nvidia` creates the GPU devices as above;
- `docker`: records (the TCPXO RxDM container and the NCCL plugin installer run through it);
- `ibv_devices`: lists 8 mlx5 devices (A3 Ultra's RDMA NICs).

Everything else the script runs is real (Debian's own binaries).
"""

from __future__ import annotations

LOG = "/var/log/fb-stubs.log"

_RECORD = f'echo "$(date +%s.%N) $(basename "$0") $*" >> {LOG}\n'
_GPU_DEVICES = (
    "for i in 0 1 2 3 4 5 6 7; do [ -e /dev/nvidia$i ] || mknod -m 0666 /dev/nvidia$i c 195 $i; done\n"
    "[ -e /dev/nvidiactl ] || mknod -m 0666 /dev/nvidiactl c 195 255\n"
)


def _stub(body: str) -> str:
    return "#!/bin/bash\n# first-boot test stub (tests/firstboot/stubs.py): records its arguments\n" + _RECORD + body


def gpu_stubs() -> dict[str, str]:
    return {
        "nvidia-smi": _stub(
            _GPU_DEVICES
            + 'if [ $# -eq 0 ] || [ "$1" = "-L" ]; then\n'
            + "  for i in 0 1 2 3 4 5 6 7; do echo \"GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-fb-$i)\"; done\nfi\n"
        ),
        "modprobe": _stub('case " $* " in *" nvidia "*) ' + _GPU_DEVICES.replace("\n", "; ") + ";; esac\n"),
        "docker": _stub(""),
        "ibv_devices": _stub(
            'printf "    device                 node GUID\\n    ------              ----------------\\n"\n'
            "for i in 0 1 2 3 4 5 6 7; do printf '    mlx5_%s             0000000000000%s\\n' $i $i; done\n"
        ),
    }
