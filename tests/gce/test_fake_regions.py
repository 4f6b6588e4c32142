"""The fake server's regions and zones endpoints, read through the real google-cloud-compute client."""

from __future__ import annotations

import pytest
from google.api_core import exceptions
from google.cloud import compute_v1

from tests.fakes.compute_api import FakeCompute
from tests.fakes.fixtures import compute_client_kwargs

pytestmark = pytest.mark.gce


def test_region_quotas_are_configurable_per_test(fake_compute: FakeCompute) -> None:
    fake_compute.add_region("us-central1", ["us-central1-a", "us-central1-b"], quotas={"NVIDIA_H100_MEGA_GPUS": 16})
    fake_compute.set_quota("us-central1", "CPUS", 2400, usage=208)
    region = compute_v1.RegionsClient(**compute_client_kwargs(fake_compute)).get(
        project=fake_compute.project, region="us-central1"
    )
    quotas = {q.metric: (q.limit, q.usage) for q in region.quotas}
    assert quotas == {"NVIDIA_H100_MEGA_GPUS": (16.0, 0.0), "CPUS": (2400.0, 208.0)}
    assert region.name == "us-central1"
    assert [z.rsplit("/", 1)[-1] for z in region.zones] == ["us-central1-a", "us-central1-b"]


def test_unknown_region_is_404(fake_compute: FakeCompute) -> None:
    with pytest.raises(exceptions.NotFound, match="regions/europe-west4"):
        compute_v1.RegionsClient(**compute_client_kwargs(fake_compute)).get(
            project=fake_compute.project, region="europe-west4"
        )


def test_zones_list_and_get(fake_compute: FakeCompute) -> None:
    fake_compute.add_region("us-central1", ["us-central1-a"])
    fake_compute.add_region("europe-west4", ["europe-west4-b"])
    client = compute_v1.ZonesClient(**compute_client_kwargs(fake_compute))
    zones = {z.name: z.region.rsplit("/", 1)[-1] for z in client.list(project=fake_compute.project)}
    assert zones == {"europe-west4-b": "europe-west4", "us-central1-a": "us-central1"}
    assert client.get(project=fake_compute.project, zone="us-central1-a").status == "UP"
