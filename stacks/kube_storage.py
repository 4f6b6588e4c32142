"""The checkpoint bucket for a GKE cluster's pods: per team namespace a Kubernetes service account that may act as
the bucket's Google service account (components/gke/bucket_access.py), and a PersistentVolume of GKE's Cloud
Storage FUSE CSI driver bound to a claim `checkpoints` (pure data; the caller declares them).

A pod mounts it with `serviceAccountName: gpu-fleet-checkpoints`, the annotation `gke-gcsfuse/volumes: "true"`
(GKE then injects the gcsfuse sidecar) and a volume from the claim `checkpoints` (docs/kubernetes.md).
"""

from __future__ import annotations

from typing import Any

from fleet.spec.kube import team_namespace
from fleet.spec.model import ClusterSpec, FleetSpec

#: the Kubernetes service account of each team namespace that may mount the checkpoint bucket
CHECKPOINT_KSA = "gpu-fleet-checkpoints"
#: the claim each team namespace mounts the bucket from
CHECKPOINT_CLAIM = "checkpoints"
GCSFUSE_CSI_DRIVER = "gcsfuse.csi.storage.gke.io"
#: a PersistentVolume must state a capacity; GCS has none, and the driver ignores it (GKE's static provisioning)
NOMINAL_CAPACITY = "1Pi"


def checkpoint_members(spec: FleetSpec, cluster: ClusterSpec) -> list[str]:
    """The Workload Identity members of the teams' checkpoint service accounts."""
    assert cluster.kueue is not None
    return [
        f"serviceAccount:{spec.project}.svc.id.goog[{team_namespace(t)}/{CHECKPOINT_KSA}]" for t in cluster.kueue.teams
    ]


def checkpoint_objects(cluster: ClusterSpec, bucket: str, google_account: str) -> list[dict[str, Any]]:
    """Per team namespace: the service account (annotated with `google_account`), the PersistentVolume naming
    `bucket` and the claim bound to it.  The volume is Retain: deleting it never touches the bucket."""
    assert cluster.kueue is not None
    out: list[dict[str, Any]] = []
    labels = {"app.kubernetes.io/managed-by": "gpu-fleet"}
    for team in cluster.kueue.teams:
        ns = team_namespace(team)
        volume = f"{cluster.name}-{ns}-checkpoints"
        out += [
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {
                    "name": CHECKPOINT_KSA,
                    "namespace": ns,
                    "labels": labels,
                    "annotations": {"iam.gke.io/gcp-service-account": google_account},
                },
            },
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": volume, "labels": labels},
                "spec": {
                    "accessModes": ["ReadWriteMany"],
                    "capacity": {"storage": NOMINAL_CAPACITY},
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": "",
                    "claimRef": {"namespace": ns, "name": CHECKPOINT_CLAIM},
                    "mountOptions": ["implicit-dirs"],
                    "csi": {"driver": GCSFUSE_CSI_DRIVER, "volumeHandle": bucket},
                },
            },
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": CHECKPOINT_CLAIM, "namespace": ns, "labels": labels},
                "spec": {
                    "accessModes": ["ReadWriteMany"],
                    "resources": {"requests": {"storage": NOMINAL_CAPACITY}},
                    "storageClassName": "",
                    "volumeName": volume,
                },
            },
        ]
    return out
