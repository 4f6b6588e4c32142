"""The Google Compute Engine actuator: `GceProvider` implements `autoscaler.cloud.Provider` over
zonal managed instance groups through the real google-cloud-compute client.

Only this package imports google.cloud; `google.cloud.compute_v1` itself is imported when a
`ComputeApi` is built, so `from autoscaler.gce import GceProvider` stays cheap.
"""

from autoscaler.gce.client import ComputeApi, RetryPolicy
from autoscaler.gce.provider import GceProvider

__all__ = ["ComputeApi", "GceProvider", "RetryPolicy"]
