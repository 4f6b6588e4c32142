"""The trimmed Compute library the daemon loads (autoscaler/gce/compute_lite.py): the five services, the
messages they reference, the real REST wire format against the fake Compute API, and no clash with a complete
`google.cloud.compute_v1` imported later in the same process."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.e2e.env import PROJECT, inventory
from tests.fakes.compute_api import FakeCompute

PROBE = r"""
import json, sys
from autoscaler.gce.client import ComputeApi
api = ComputeApi(endpoint=sys.argv[1], credentials="anonymous")
assert "google.cloud.compute_v1" not in sys.modules  # the trimmed package is not left registered
vms = api.list_managed_instances(sys.argv[2], sys.argv[3], sys.argv[4])
quotas = api.region_quotas(sys.argv[2], sys.argv[5])
# VmHWM (peak RSS of this process's own memory): ru_maxrss would include the forking pytest process's RSS
rss = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:")) / 1024
from google.cloud import compute_v1  # a complete import afterwards still works
assert compute_v1.InstancesClient and int(compute_v1.Operation.Status.DONE) == int(api._v1.Operation.Status.DONE)
print(json.dumps({"vms": len(vms), "quotas": len(quotas), "rss_mib": rss, "kept": len(api._v1.kept_messages)}))
"""


def test_trimmed_library_speaks_the_real_wire_format_and_coexists_with_the_full_one() -> None:
    pools = inventory()
    pool = pools[0]
    zone = pool.zones[0]
    with FakeCompute(PROJECT) as fake:
        fake.add_inventory(pools)
        mig = pool.instance_groups[zone]
        cp = subprocess.run(
            [sys.executable, "-c", PROBE, fake.url, PROJECT, zone, mig, pool.region],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert cp.returncode == 0, cp.stderr[-3000:]
    out = json.loads(cp.stdout)
    assert out["vms"] == 0 and out["quotas"] >= 0  # both calls went over the wire and parsed
    assert 50 < out["kept"] < 1000, out  # a few hundred of the library's 2,000+ messages
    assert out["rss_mib"] < 110, out  # the complete library alone is ~150 MB; measured ~70


def test_every_client_and_message_the_actuator_uses_is_kept() -> None:
    import re
    from pathlib import Path

    from autoscaler.gce import compute_lite

    source = (Path(compute_lite.__file__).parent / "client.py").read_text()
    used = set(re.findall(r"(?:compute_v1|self\._v1|v1)\.([A-Z]\w+)", source))
    clients = {c for cs in compute_lite.SERVICES.values() for c in cs}
    assert {u for u in used if u.endswith("Client")} == clients
    import importlib.util

    spec = importlib.util.find_spec(compute_lite.PACKAGE)
    root = Path(next(iter(spec.submodule_search_locations)))
    _, kept = compute_lite.trimmed_source(root)
    assert {u for u in used if not u.endswith("Client")} <= set(kept)
