"""The same grid through a local Ray gives the same figures as the local process pool."""

from __future__ import annotations

import pytest

from fleet.advise.commitments import advise
from tests.advise.test_advise import request


@pytest.mark.slow
def test_local_ray_and_the_process_pool_give_identical_figures() -> None:
    ray = pytest.importorskip("ray", reason="Ray is the optional [ray] extra (CI installs it)")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        via_ray = advise(request(sizes=(0, 2), spot_fraction=0.3, stockout_rate=0.2, seeds=2, ray_address="auto"))
    finally:
        ray.shutdown()
    local = advise(request(sizes=(0, 2), spot_fraction=0.3, stockout_rate=0.2, seeds=2, workers=2))
    assert via_ray["runner"]["kind"] == "ray" and local["runner"]["kind"] == "process-pool"
    for doc in (via_ray, local):
        doc.pop("runner")
    assert via_ray == local
