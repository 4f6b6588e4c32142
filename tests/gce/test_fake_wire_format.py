"""Every JSON document the fake serves parses as the Compute v1 message it stands for, with unknown
fields refused: a misspelt field would otherwise be dropped silently by the client."""

from __future__ import annotations

import uuid

import httpx
import pytest
from google.cloud import compute_v1

from tests.fakes.compute_api import FakeCompute

pytestmark = pytest.mark.gce

P, R, Z = "test-project", "us-central1", "us-central1-a"


def test_every_response_is_a_strict_compute_v1_message(fake_compute_factory) -> None:
    fake: FakeCompute = fake_compute_factory(P)
    fake.add_region(R, [Z], quotas={"NVIDIA_H100_MEGA_GPUS": 8})
    fake.add_mig(Z, "mig", "a3-megagpu-8g", accelerator="nvidia-h100-mega-80gb", gpu_count=8)
    fake.add_reservation(Z, "resv", "a3-megagpu-8g", count=2)
    base = f"{fake.url}/compute/v1/projects/{P}"
    igm = f"{base}/zones/{Z}/instanceGroupManagers/mig"
    http = httpx.Client(timeout=5)

    def rid() -> dict[str, str]:
        return {"requestId": str(uuid.uuid4())}

    create = {"instances": [{"name": "n-0", "preservedState": {"metadata": {"k": "v"}}}, {"name": "n-1"}]}
    op = http.post(f"{igm}/createInstances", params=rid(), json=create).json()  # n-1 fails: over quota
    fake.wait_idle()
    rr = {"name": "rr-1", "instances": [{"name": "n-2"}], "requestedRunDuration": {"seconds": "3600"}}
    http.post(f"{igm}/resizeRequests", params=rid(), json=rr)
    affinity = {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": ["resv"],
    }
    vm = {"name": "solo-0", "machineType": f"zones/{Z}/machineTypes/a3-megagpu-8g", "reservationAffinity": affinity}
    http.post(f"{base}/zones/{Z}/instances", params=rid(), json=vm)
    fake.stockout(Z, "a3-megagpu-8g")
    failed = http.post(f"{base}/zones/{Z}/instances", json={**vm, "name": "solo-1"}).json()
    fake.wait_idle()

    documents = {
        f"{base}/regions/{R}": compute_v1.Region,
        f"{base}/zones": compute_v1.ZoneList,
        f"{base}/zones/{Z}": compute_v1.Zone,
        f"{base}/zones/{Z}/instanceGroupManagers": compute_v1.InstanceGroupManagerList,
        igm: compute_v1.InstanceGroupManager,
        f"{igm}/listErrors": compute_v1.InstanceGroupManagersListErrorsResponse,
        f"{igm}/resizeRequests": compute_v1.InstanceGroupManagerResizeRequestsListResponse,
        f"{igm}/resizeRequests/rr-1": compute_v1.InstanceGroupManagerResizeRequest,
        f"{base}/zones/{Z}/instances": compute_v1.InstanceList,
        f"{base}/zones/{Z}/instances/n-0": compute_v1.Instance,
        f"{base}/zones/{Z}/instances/solo-0": compute_v1.Instance,
        f"{base}/zones/{Z}/operations/{op['name']}": compute_v1.Operation,
        f"{base}/zones/{Z}/reservations": compute_v1.ReservationList,
        f"{base}/zones/{Z}/reservations/resv": compute_v1.Reservation,
    }
    for url, message in documents.items():
        reply = http.get(url, params={"maxResults": 1})
        assert reply.status_code == 200, (url, reply.text)
        message.from_json(reply.text, ignore_unknown_fields=False)
    listing = http.post(f"{igm}/listManagedInstances")
    parsed = compute_v1.InstanceGroupManagersListManagedInstancesResponse.from_json(
        listing.text, ignore_unknown_fields=False
    )
    by_name = {m.name: m for m in parsed.managed_instances}
    assert by_name["n-0"].preserved_state_from_config.metadata["k"] == "v"
    assert by_name["n-1"].last_attempt.errors.errors[0].code == "QUOTA_EXCEEDED"
    assert compute_v1.Operation.from_json(httpx.Response(200, json=failed).text, ignore_unknown_fields=False).error
    error = http.get(f"{base}/zones/{Z}/instances/ghost")
    assert error.status_code == 404
    assert error.json()["error"]["errors"][0]["reason"] == "notFound"
