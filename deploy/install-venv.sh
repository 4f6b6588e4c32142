#!/bin/sh
# Build the venv gpu-fleet's daemon runs from, in a checkout of this repository:
#   install-venv.sh CHECKOUT            build it (or keep it, when it was built from this very lock)
#   install-venv.sh --current CHECKOUT  exit 0 if CHECKOUT/.venv was built from the lock it has now, else 1
# Run by the Slurm controller's first boot (components/gcp/startup.py `autoscaler_install`, which writes this file
# from the stack's checkout) and by the autoscaler image's build (deploy/autoscaler.Dockerfile): one install for both.
#
# - The venv holds deploy/controller-requirements.txt alone (`pip install --require-hashes --no-deps`: every file
#   checked against the lock's hashes; deploy/controller.in says what is in it: the daemon's dependencies, not
#   Pulumi or matplotlib).  It is rebuilt from scratch when the lock changes (the lock's sha256 is kept in the venv),
#   so a package a later lock dropped does not linger.
# - gpu-fleet itself is not installed: the checkout goes on the venv's path (gpu-fleet.pth) and is byte-compiled
#   here, by whoever owns it (root), so the daemon, running as another user, never writes bytecode; `pip check`
#   then checks the lock alone (an installed gpu-fleet would declare the stacks' dependencies).
# - CHECKOUT/.venv/bin/fleet runs the checkout's CLI (`python -P`: never the working directory on the path).
# - The venv's Python is `python3` on PATH, or $PYTHON.
set -eu

current=false
if [ "${1:-}" = "--current" ]; then
  current=true
  shift
fi
[ "$#" -eq 1 ] || { echo "usage: $0 [--current] CHECKOUT" >&2; exit 2; }
home=${1%/}
case "$home" in /*) ;; *) echo "$0: CHECKOUT must be an absolute path, got '$home'" >&2; exit 2;; esac
lock=$home/deploy/controller-requirements.txt
[ -f "$lock" ] || { echo "$0: $lock missing: $home is not a gpu-fleet checkout" >&2; exit 1; }
venv=$home/.venv
recorded=$venv/.gpu-fleet-lock.sha256

lock_sum=$(sha256sum "$lock" | cut -d' ' -f1)
if [ "$(cat "$recorded" 2>/dev/null || true)" = "$lock_sum" ]; then
  built=true
else
  built=false
fi
if [ "$current" = true ]; then
  [ "$built" = true ]
  exit
fi

if [ "$built" = false ]; then
  rm -rf "$venv"
  "${PYTHON:-python3}" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --require-hashes --no-deps -r "$lock"
  # --no-deps installs what the lock lists: check that it is all the lock's packages require
  broken=$("$venv/bin/pip" check --disable-pip-version-check) || { echo "$0: $lock: $broken" >&2; exit 1; }
  echo "$lock_sum" > "$recorded"
fi
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
echo "$home" > "$site/gpu-fleet.pth"
"$venv/bin/python" -m compileall -q "$home/autoscaler" "$home/fleet" > /dev/null
cat > "$venv/bin/fleet" <<EOF
#!/bin/sh
# gpu-fleet's CLI: the checkout $home, on this venv's path (gpu-fleet.pth; written by deploy/install-venv.sh)
exec $venv/bin/python -P -m fleet.cli.main "\$@"
EOF
chmod 0755 "$venv/bin/fleet"
