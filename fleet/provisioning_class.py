"""The ProvisioningRequest class the gpu-fleet daemon serves, and the classes other autoscalers serve.

A ProvisioningRequest (`autoscaling.x-k8s.io/v1`) is answered by whichever autoscaler serves its
`spec.provisioningClassName`; nothing stops two from answering the same one.  The Cluster Autoscaler serves
`check-capacity.autoscaling.x-k8s.io` and `best-effort-atomic-scale-up.autoscaling.x-k8s.io` (its
`provisioningrequest/besteffortatomic` and `checkcapacity` classes, since 1.30.2), and GKE's managed Cluster
Autoscaler, which runs on every GKE cluster whatever its node pools' autoscaling, serves both plus
`queued-provisioning.gke.io` (kubernetes/autoscaler issue #9805 shows it answering best-effort-atomic requests
for a Kueue admission check).  For a request of its class the Cluster Autoscaler writes `Provisioned=True`
as soon as the request's pods fit on nodes already in the cluster (`CapacityIsFound`), Ready nodes the
gpu-fleet daemon booked for another request whose pods are not there yet included, and `Provisioned=False`
(`CapacityIsNotFound`) otherwise.

So the fleet's Kueue admission check and its daemon use a class of their own, under the project's domain
(the CRD allows any DNS-subdomain name; "potential other classes that are specific to the cloud providers"),
with best-effort-atomic semantics: all of a request's nodes or none, `Provisioned` once they are launched,
`Failed` after `ValidUntilSeconds` (or the daemon's own retry window).  A class another autoscaler serves is
refused in the daemon's config (`fleet.inventory.KubernetesSection`)."""

from __future__ import annotations

#: the class the stack's ProvisioningRequestConfig names and the daemon serves
GPU_FLEET_CLASS = "best-effort-atomic-scale-up.gpu-fleet.dev"

#: classes the upstream Cluster Autoscaler or GKE's managed one answers (see the module docstring)
CLUSTER_AUTOSCALER_CLASSES = frozenset(
    {
        "check-capacity.autoscaling.x-k8s.io",
        "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
        "queued-provisioning.gke.io",
    }
)


def served_elsewhere(provisioning_class: str) -> str | None:
    """Why `provisioning_class` must not be the daemon's class, or None when no other autoscaler serves it."""
    if provisioning_class in CLUSTER_AUTOSCALER_CLASSES:
        return (
            f"{provisioning_class} is served by the Cluster Autoscaler (and by GKE's managed one on every GKE "
            f"cluster): two autoscalers would answer the same requests; use {GPU_FLEET_CLASS}"
        )
    return None
