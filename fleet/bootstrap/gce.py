"""Read what `--check-quota` needs from Compute Engine: a region's quota, a reservation's zone and size.

The only I/O of the bootstrap decisions (google-cloud-compute, REST transport).  Permissions:
`compute.regions.get` (quota and usage per metric) and `compute.reservations.get`.  With
`endpoint` (e.g. a local fake Compute REST server, `http://127.0.0.1:PORT`) the clients talk to
it; an `http://` endpoint gets anonymous credentials, since no real Google endpoint is plain HTTP.
Without it: the real API and Application Default Credentials.  `google.cloud.compute_v1` takes
~2 s to import, so it is imported here, lazily.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fleet.bootstrap.errors import ComputeReadError
from fleet.bootstrap.quotas import RegionQuota, ReservationInfo


def _client_kwargs(endpoint: str | None) -> dict[str, Any]:
    from google.api_core.client_options import ClientOptions

    kwargs: dict[str, Any] = {"transport": "rest"}
    if endpoint:
        kwargs["client_options"] = ClientOptions(api_endpoint=endpoint)
        if endpoint.startswith("http://"):
            from google.auth.credentials import AnonymousCredentials

            kwargs["credentials"] = AnonymousCredentials()
    return kwargs


def read_region_quotas(project: str, region: str, endpoint: str | None = None) -> dict[str, RegionQuota]:
    """metric -> (limit, usage) of one region."""
    from google.cloud import compute_v1

    what = f"reading quotas of {project}/{region}"
    try:
        reply = compute_v1.RegionsClient(**_client_kwargs(endpoint)).get(project=project, region=region, timeout=30)
    except Exception as exc:  # API errors, connection refused, DNS, missing credentials
        raise ComputeReadError(f"{what}: {type(exc).__name__}: {exc}") from exc
    return {q.metric: RegionQuota(limit=float(q.limit), usage=float(q.usage)) for q in reply.quotas}


def find_reservation(
    project: str, zones: Sequence[str], name: str, endpoint: str | None = None
) -> ReservationInfo | None:
    """The reservation `name` in the first of `zones` that has it; None when none does."""
    from google.api_core import exceptions as gexc
    from google.cloud import compute_v1

    client = compute_v1.ReservationsClient(**_client_kwargs(endpoint))
    for zone in zones:
        try:
            res = client.get(project=project, zone=zone, reservation=name, timeout=30)
        except gexc.NotFound:
            continue
        except Exception as exc:
            what = f"reading reservation {name} in {project}/{zone}"
            raise ComputeReadError(f"{what}: {type(exc).__name__}: {exc}") from exc
        spec = res.specific_reservation
        machine = spec.instance_properties.machine_type.rsplit("/", 1)[-1]
        return ReservationInfo(name, zone, machine, int(spec.count), int(spec.in_use_count))
    return None
