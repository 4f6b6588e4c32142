#!/usr/bin/env bash
# Set up a fresh Debian 12 machine for gpu-fleet development and tests (run as root or with sudo):
#   - Debian packages: Slurm 22.05 (slurmctld, slurmd, client, slurmrestd, JWT plugin), munge, gcc;
#     for the first-boot test (tests/firstboot/): debootstrap, iproute2, openssl (the test VMs' root and network),
#     and docker.io, docker-registry, podman, runc (the autoscaler's image built by Docker, pushed to a registry,
#     pulled by digest and run by Podman: tests/firstboot/test_autoscaler_image_build.py; no service is started)
#   - uv, a .venv in the repo, and the project installed editable with its test and ray extras.
#   - policies/.venv: the policy pack's virtualenv (pulumi-policy).
# Idempotent: re-running skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"

need_apt=()
for bin in slurmctld slurmd sinfo slurmrestd munged gcc; do command -v "$bin" >/dev/null || need_apt+=("$bin"); done
[ -e /usr/lib/x86_64-linux-gnu/slurm-wlm/auth_jwt.so ] || [ -e /usr/lib/aarch64-linux-gnu/slurm-wlm/auth_jwt.so ] || need_apt+=(jwt)
for bin in debootstrap ip openssl losetup nsenter; do command -v "$bin" >/dev/null || need_apt+=("$bin"); done
for bin in dockerd docker-registry podman runc; do command -v "$bin" >/dev/null || need_apt+=("$bin"); done
[ -x /usr/bin/docker ] || need_apt+=(docker)  # the client packaged with dockerd (tests/harness/docker.py)
docker_pkg=docker.io  # Debian's; a machine with docker-ce's dockerd and client keeps them (the two conflict)
if command -v dockerd >/dev/null && [ -x /usr/bin/docker ]; then docker_pkg=""; fi
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: apt-get install Slurm + munge + first-boot test tools (missing: ${need_apt[*]})"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client slurmrestd slurm-wlm-jwt-plugin munge gcc libc6-dev \
    debootstrap iproute2 openssl util-linux $docker_pkg docker-registry podman runc >/dev/null
fi

command -v uv >/dev/null || python3 -m pip install -q uv
[ -x .venv/bin/python ] || uv venv -q -p "$(command -v python3)" .venv
# --compile-bytecode: pulumi_gcp is ~290 MB of Python; with PYTHONDONTWRITEBYTECODE set (as on CI) every
# process would otherwise recompile what it imports (~3 s per fleet synth).
VIRTUAL_ENV="$PWD/.venv" uv pip install -q --compile-bytecode -e '.[test,ray]'
# The CrossGuard policy pack's own virtualenv (pulumi-policy pins protobuf 5, google-cloud-compute needs 6).
[ -x policies/.venv/bin/python ] || uv venv -q -p "$(command -v python3)" policies/.venv
VIRTUAL_ENV="$PWD/policies/.venv" uv pip install -q -r policies/requirements.txt
echo "setup: done ($(.venv/bin/python --version), $(slurmctld -V))"
