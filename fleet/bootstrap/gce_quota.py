"""Read a region's quota (limit and usage per metric) through google-cloud-compute.

The only I/O of the bootstrap decisions.  `RegionsClient.get` needs `compute.regions.get`.
With `endpoint` (e.g. a local fake Compute REST server, `http://127.0.0.1:PORT`) the client
talks plain REST to it; an `http://` endpoint gets anonymous credentials, since no real Google
endpoint is plain HTTP.  Without it: the real API and Application Default Credentials.
`google.cloud.compute_v1` takes ~2 s to import, so it is imported here, lazily.
"""

from __future__ import annotations

from fleet.bootstrap.quotas import RegionQuota


class QuotaReadError(RuntimeError):
    """The region's quota could not be read (API error, permission, bad endpoint)."""


def read_region_quotas(project: str, region: str, endpoint: str | None = None) -> dict[str, RegionQuota]:
    from google.api_core import exceptions as gexc
    from google.api_core.client_options import ClientOptions
    from google.cloud import compute_v1

    kwargs: dict = {"transport": "rest"}
    if endpoint:
        kwargs["client_options"] = ClientOptions(api_endpoint=endpoint)
        if endpoint.startswith("http://"):
            from google.auth.credentials import AnonymousCredentials

            kwargs["credentials"] = AnonymousCredentials()
    try:
        client = compute_v1.RegionsClient(**kwargs)
        reply = client.get(project=project, region=region, timeout=30)
    except gexc.GoogleAPICallError as exc:
        raise QuotaReadError(f"reading quotas of {project}/{region}: {exc}") from exc
    except Exception as exc:  # transport errors (connection refused, DNS, credentials)
        raise QuotaReadError(f"reading quotas of {project}/{region}: {type(exc).__name__}: {exc}") from exc
    return {q.metric: RegionQuota(limit=float(q.limit), usage=float(q.usage)) for q in reply.quotas}
