"""The harness's port leases: two test processes never give their clusters the same port, even one no daemon has
bound yet (a CLOUD node's slurmd binds only when its fake VM boots); a CI run once failed on exactly that."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.ports import PORTS, PortLeases

REPO = Path(__file__).resolve().parents[2]
HOLDER = """
import sys
from tests.harness.ports import PortLeases
leases = PortLeases()
print(leases.lease(4, start=int(sys.argv[1]), stop=int(sys.argv[1]) + 5), flush=True)
sys.stdin.read()  # hold the lease, binding nothing, until the test closes stdin
"""


def test_a_port_leased_by_another_process_is_not_handed_out_until_it_lets_go() -> None:
    window = PORTS.start - 10  # [window, window + 5): room for one range of four, where no other test leases
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(window)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=REPO)  # fmt: skip
    try:
        assert int(holder.stdout.readline()) == window  # type: ignore[union-attr]
        mine = PortLeases()
        with pytest.raises(RuntimeError, match="no 4 consecutive free, unleased ports"):
            mine.lease(4, start=window, stop=window + 5)
        assert mine.lease(1, start=window + 4, stop=window + 6) == window + 4  # the port outside its range is free
    finally:
        holder.communicate(input="", timeout=10)
    assert mine.lease(4, start=window, stop=window + 5) == window  # it exited: the kernel dropped its locks
    mine.release()
