"""slurmrestd beside a test slurmctld (tests/harness/slurm.py) with JWT auth on 127.0.0.1: the Slurm OpenAPI plugin
of the release the harness starts, as the controller's wrapper picks it (`components.gcp.startup`): openapi/v0.0.38
on 22.05, openapi/slurmctld (v0.0.39 and v0.0.40) on 23.11.

What running it here needed: slurmrestd refuses to run as root (it runs as nobody through setpriv; Ubuntu's, in the
noble root, drops privileges itself: `tests.slurm_compat.noble`), and slurmctld signs tokens with an HS256 key named
in slurm.conf (`jwt_key_line`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx

from tests.harness.cloud_nodes import cloud_nodes_unavailable_reason
from tests.harness.requirements import missing
from tests.harness.slurm import SlurmHarness, binary, poll_until, slurm_release

#: the mark of a slurmrestd wrapper that drops privileges itself (tests.slurm_compat.noble.DROPS_PRIVILEGES)
DROPS_PRIVILEGES = "# gpu-fleet: drops privileges itself"


def require_slurmrestd() -> None:
    """Skip (or fail, under FLEET_REQUIRE_SLURM) when the fake cloud nodes or slurmrestd cannot run here."""
    reason = cloud_nodes_unavailable_reason()
    if reason or (shutil.which("slurmrestd") is None and not os.path.exists("/usr/sbin/slurmrestd")):
        missing(reason or "slurmrestd is not installed (scripts/setup.sh installs it)")


def jwt_key_path(h: SlurmHarness) -> Path:
    """Where `jwt_key_line` puts the harness's HS256 key (the daemon signs its tokens with it: `slurm.jwt_key_file`)."""
    return h.root / "state" / "jwt_hs256.key"


def jwt_key_line(h: SlurmHarness) -> str:
    """A fresh HS256 key in the harness's state directory, as the slurm.conf lines that make slurmctld use it."""
    key = jwt_key_path(h)
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    return f"AuthAltTypes=auth/jwt\nAuthAltParameters=jwt_key={key}\n"


def openapi_plugin() -> str:
    """The Slurm OpenAPI plugin the controller's wrapper would load on the release the harness starts."""
    return "openapi/v0.0.38" if slurm_release() < (23, 2) else "openapi/slurmctld"


def _as_nobody(program: str) -> list[str]:
    """The argv prefix that runs `program` as nobody (none when its wrapper drops privileges itself)."""
    path = binary(program)
    try:
        marked = DROPS_PRIVILEGES in Path(path).read_text(errors="replace")[:200]
    except OSError:
        marked = False
    return [path] if marked else ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", path]


def start_slurmrestd(h: SlurmHarness) -> str:
    """slurmrestd for the running slurmctld of `h`; its URL once it answers."""
    port = h.ports.lease()
    h.spawn(
        "slurmrestd",
        [*_as_nobody("slurmrestd"), "-s", openapi_plugin(), "-a", "rest_auth/jwt", f"127.0.0.1:{port}"],
        env={**h.env, "SLURM_JWT": "daemon", "SLURM_BITSTR_LEN": "0"},  # as the stack's wrapper exports it
    )
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            httpx.get(url, timeout=1)
        except httpx.HTTPError:
            return False
        return True

    assert poll_until(answers, 20), f"slurmrestd did not answer\n{h.logs()}"
    return url
