"""Declare one fleet: the network fabric, then per cluster its storage, Slurm control plane and GPU pools.

Takes a spec that already passed `fleet.spec.load.load_spec`; every mapping decision lives in
`stacks.plan` (pure).  Returns the stack outputs (the caller exports them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pulumi

from components.gcp import metadata as md
from components.gcp.network import NetworkFabric, NetworkFabricArgs
from components.gcp.node_pool import GpuNodePool, GpuNodePoolArgs, NicArgs, service_account_id
from components.gcp.slurm_cluster import SlurmCluster, SlurmClusterArgs, autoscaler_account_email
from components.gcp.snapshots import SnapshotSchedule
from components.gcp.startup import JWT_KEY_PATH, SlurmHostConfig, startup_script
from components.gcp.storage import BucketArgs, FilestoreArgs, LustreArgs, SharedStorage, SharedStorageArgs
from fleet.catalog import Catalog, load_catalog
from fleet.slurm.conf import HOOKS, node_name_prefix, render_slurm_conf, slurmrestd_auth
from fleet.spec.derive import cluster_zone, controller_address, on_gcp, pool_zones
from fleet.spec.load import SpecError
from fleet.spec.model import ClusterSpec, FleetSpec, StateSnapshotsSpec
from stacks import plan


def checkpoint_mount(spec: FleetSpec, cluster: ClusterSpec) -> dict[str, str]:
    """The `SlurmHostConfig` fields that mount the cluster's checkpoint bucket on its GPU nodes ({}: none)."""
    bucket = plan.checkpoint_bucket_name(spec, cluster)
    mount = cluster.storage.checkpoints.mount_point if cluster.storage.checkpoints else None
    return {"checkpoints": bucket, "checkpoints_mount": mount} if bucket and mount else {}


def _snapshot_schedule(spec: StateSnapshotsSpec | None) -> SnapshotSchedule | None:
    """`slurm.state_snapshots` as the component's argument (None: no snapshot schedule)."""
    return SnapshotSchedule(**spec.model_dump()) if spec else None


def _login_checkpoints(spec: FleetSpec, cluster: ClusterSpec, storage: SharedStorage) -> dict[str, object]:
    """The `SlurmClusterArgs` fields that mount the checkpoint bucket on the login VMs ({}: none): the bucket's
    name as an output of the bucket, so the login VMs' bucket role waits for it."""
    mount = checkpoint_mount(spec, cluster)
    if not mount or storage.bucket is None:
        return {}
    return {"checkpoint_bucket": storage.bucket.name, "checkpoints_mount": mount["checkpoints_mount"]}


def _storage(spec: FleetSpec, cluster: ClusterSpec, zone: str, fabric: NetworkFabric) -> SharedStorage:
    st = cluster.storage
    bucket = plan.checkpoint_bucket_name(spec, cluster)
    return SharedStorage(
        f"{cluster.name}-storage",
        SharedStorageArgs(
            project=spec.project,
            zone=zone,
            network=fabric.network.id,
            name=cluster.name,
            home=FilestoreArgs(st.home.tier, st.home.capacity_gb, st.home.share_name) if st.home else None,
            checkpoints=BucketArgs(
                bucket,
                plan.bucket_location(spec, cluster) or spec.region,
                st.checkpoints.soft_delete_days,
                st.checkpoints.keep_noncurrent_versions,
            )
            if st.checkpoints and bucket
            else None,
            scratch=LustreArgs(
                st.scratch.capacity_gib,
                st.scratch.per_unit_storage_throughput,
                st.scratch.mount_point,
                plan.lustre_filesystem_name(cluster.name),
            )
            if st.scratch
            else None,
            labels=plan.resource_labels(spec, cluster),
            protect=cluster.deletion_protection,
        ),
    )


def unpinned_zone_warning(spec: FleetSpec, cluster: ClusterSpec, zone: str) -> None:
    """A cluster without `zone` puts its controller and zonal storage where its first pool starts: say so, since
    a reorder of pools (or a catalog change) moves them, which protected storage then refuses at `pulumi up`."""
    if cluster.zone is None:
        ci = next(i for i, c in enumerate(spec.clusters) if c is cluster)
        pulumi.log.warn(
            f"clusters[{ci}] ({cluster.name}): zone is not set, so its controller, login VMs and zonal storage go to "
            f"{zone}, derived from its pools; reordering them would move those: pin it with `zone: {zone}`"
        )


def fabric_not_set_up_warning(spec: FleetSpec, cluster: ClusterSpec, catalog: Catalog) -> None:
    """Pools whose machines have GPU-fabric NICs the stack sets up no software for (A3 High's GPUDirect-TCPX:
    `MachineType.fabric_not_set_up`) deploy and run, but their multi-node jobs do not get the fabric they are
    priced for: say so at `pulumi up` rather than let the first all-reduce find out."""
    pools = [p for p in cluster.pools if catalog.machine(p.machine_type).fabric_not_set_up]
    if sum(p.max_nodes for p in pools) > 1:  # one node in all runs no multi-node job
        ci = next(i for i, c in enumerate(spec.clusters) if c is cluster)
        types = sorted({p.machine_type for p in pools})
        pulumi.log.warn(
            f"clusters[{ci}] ({cluster.name}): pools {', '.join(p.name for p in pools)} are {', '.join(types)}, whose "
            "GPUDirect-TCPX NICs the stack sets up no software for (its kernel needs access credentials from Google: "
            'docs/stacks.md "Known limits"), so multi-node NCCL on them runs over its sockets transport, not '
            "GPUDirect; single-node jobs are unaffected.  For multi-node training use a3-megagpu-8g (TCPXO, set up) "
            "where it is offered, or a GKE cluster (`platform: gke`), whose nodes get TCPX set up"
        )


def build_fleet(
    spec: FleetSpec, stack: str, catalog: Catalog | None = None, kubeconfigs: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Declare every resource of the fleet; return the stack outputs.

    `kubeconfigs`: secret Outputs by cluster name, for `platform: kubernetes` clusters (read by the program)."""
    cat = catalog or load_catalog(spec.provider)
    for ci, cluster in enumerate(spec.clusters):
        if cluster.scheduler == "slurm" and cluster.slurm is None:
            raise SpecError([(f"clusters[{ci}].slurm", "required with scheduler: slurm")])
    fabrics = plan.fabric_plans(spec, cat)  # may raise SpecError: before any resource is declared
    slurm_clusters = [c for c in spec.clusters if c.scheduler == "slurm"]
    confs = {
        c.name: render_slurm_conf(
            spec, c, controller_host=f"{c.name}-controller", overrides=slurmrestd_auth(JWT_KEY_PATH), catalog=cat
        )
        for c in slurm_clusters
    }
    prefix = plan.fleet_name(stack)
    if not any(on_gcp(c) for c in spec.clusters):  # only existing clusters: nothing on GCP at all
        from stacks.kube import build_kueue_clusters

        inventory, clusters, _ = build_kueue_clusters(spec, cat, None, fabrics, kubeconfigs or {})
        return {"autoscaler_inventory": inventory, "clusters": clusters}

    fabric = NetworkFabric(
        f"{prefix}-fabric",
        NetworkFabricArgs(
            project=spec.project,
            region=spec.region,
            system_name=f"{prefix}-net",
            system_cidr=str(spec.network.system_cidr),
            system_mtu=plan.system_mtu(spec, cat),
            planes=[p for f in fabrics.values() for p in f.planes],
        ),
    )

    inventory: list[dict[str, Any]] = []
    clusters: dict[str, Any] = {}
    for cluster in slurm_clusters:
        conf = confs[cluster.name]
        zone = cluster_zone(spec, cluster, cat)
        unpinned_zone_warning(spec, cluster, zone)
        fabric_not_set_up_warning(spec, cluster, cat)
        storage = _storage(spec, cluster, zone, fabric)
        home = storage.home_ip.apply(lambda ip, s=storage.home_share: f"{ip}:/{s}") if storage.home_ip else None
        scratch = storage.lustre.mount_point if storage.lustre else None
        slurm = cluster.slurm
        assert slurm is not None  # checked above
        entries = [plan.inventory_entry(spec, cluster, p, cat) for p in cluster.pools]
        control = SlurmCluster(
            f"{cluster.name}-slurm",
            SlurmClusterArgs(
                name=cluster.name,
                project=spec.project,
                zone=zone,
                network=fabric.network.self_link,
                subnetwork=fabric.subnet.self_link,
                slurm_conf=conf.slurm_conf,
                gres_conf=conf.gres_conf,
                cgroup_conf=conf.cgroup_conf or None,
                topology_conf=conf.topology_conf,
                controller_ip=controller_address(spec, cluster.name),
                image=cat.host_image,
                node_name_prefixes=[node_name_prefix(cluster.name, p.name) for p in cluster.pools],
                controller_machine_type=slurm.controller_machine_type,
                login_machine_type=slurm.login_machine_type,
                login_nodes=slurm.login_nodes,
                home=home,
                scratch=scratch,
                scratch_mount=cluster.storage.scratch.mount_point if cluster.storage.scratch else "/scratch",
                **_login_checkpoints(spec, cluster, storage),
                # the daemon on the controller reads its pools from here (same shape as the stack output)
                controller_metadata={
                    md.INVENTORY: json.dumps(entries),
                    md.AUTOSCALER_CONFIG: plan.autoscaler_config(
                        cluster, impersonate=autoscaler_account_email(cluster.name, spec.project)
                    ),
                    # slurmctld's right-sized --prefer (fleet/slurm/job_submit.py); it refuses to start without it
                    **({md.JOB_SUBMIT_LUA: conf.job_submit_lua} if conf.job_submit_lua else {}),
                },
                slurmdbd_conf=conf.slurmdbd_conf or None,  # slurm.accounting (fleet/slurm/accounting.py)
                autoscaler_source=slurm.autoscaler.source,
                slurm_hooks=dict(HOOKS),
                autoscaler_ref=slurm.autoscaler.ref,
                labels=plan.resource_labels(spec),
                boot_after=[fabric.nat],  # apt-get on first boot goes out through it
                protect_state=cluster.deletion_protection,
                state_snapshots=_snapshot_schedule(slurm.state_snapshots),
            ),
        )
        node_accounts: list[pulumi.Output[str]] = []
        for pool in cluster.pools:
            machine = cat.machine(pool.machine_type)
            fplan = fabrics[(cluster.name, pool.machine_type)]
            nics = []
            for nic in fplan.nics:
                if nic.plane == plan.SYSTEM:
                    nics.append(NicArgs(fabric.network.self_link, fabric.subnet.self_link, nic.nic_type))
                else:
                    p = fabric.planes[nic.plane]
                    nics.append(NicArgs(p.network.self_link, p.subnets[nic.subnet].self_link, nic.nic_type))
            zones = list(pool_zones(spec, pool, cat))
            image, secure_boot = plan.pool_image(pool, machine)
            node_script = pulumi.Output.all(control.munge_secret.secret_id, home, scratch).apply(
                lambda v, c=cluster, m=machine: startup_script(
                    SlurmHostConfig(
                        role="compute",
                        munge_secret=v[0],
                        home=v[1],
                        scratch=v[2],
                        scratch_mount=c.storage.scratch.mount_point if c.storage.scratch else "/scratch",
                        **checkpoint_mount(spec, c),
                        gpu_count=m.gpu_count,
                        fabric=cat.fabric_software(m.software.fabric) if m.software else None,
                        local_ssd_gib=m.local_ssd_gib,
                    )
                )
            )
            node_pool = GpuNodePool(
                f"{cluster.name}-{pool.name}",
                GpuNodePoolArgs(
                    project=spec.project,
                    region=spec.region,
                    zones=zones,
                    instance_group=plan.instance_group_stem(cluster.name, pool.name),
                    base_instance_name=node_name_prefix(cluster.name, pool.name),
                    machine_type=pool.machine_type,
                    accelerator_type=machine.gpu.accelerator_type,
                    accelerator_count=machine.gpu_count,
                    capacity=pool.capacity,
                    reservation=pool.reservation,
                    compact_placement=pool.compact_placement,
                    nics=nics,
                    account_id=service_account_id(cluster.name, pool.name, "node"),
                    boot_disk_gb=pool.boot_disk_gb,
                    boot_disk_type=plan.boot_disk_type(machine),
                    image=image,
                    secure_boot=secure_boot,
                    sa_users=[],  # the MIG's service agent creates the VMs: nobody needs actAs on the nodes' SA
                    secret_ids=[control.munge_secret.secret_id],
                    bucket_names=[storage.bucket.name] if storage.bucket else [],
                    metadata={
                        md.STARTUP_SCRIPT: node_script,
                        **md.slurm_metadata(conf.slurm_conf, conf.gres_conf, conf.cgroup_conf, conf.topology_conf),
                    },
                    labels=plan.resource_labels(spec, cluster, pool.labels),
                ),
            )
            inventory.append(plan.inventory_entry(spec, cluster, pool, cat, node_pool.template.name))
            node_accounts.append(node_pool.service_account.email)
        # SSH through IAP reaches this cluster's VMs, and nothing else of the system VPC
        fabric.allow_iap_ssh(cluster.name, [control.controller_sa.email, control.login_sa.email, *node_accounts])
        clusters[cluster.name] = {
            "zone": zone,
            "controller": control.controller.name,
            "controller_ip": control.controller_address.address,
            "logins": [vm.name for vm in control.logins],
            "controller_service_account": control.controller_sa.email,
            "autoscaler_service_account": control.autoscaler_sa.email,
            "munge_secret": control.munge_secret.id,
            "jwt_secret": control.jwt_secret.id,
            "home": home,
            "filestore_ip": storage.home_ip,
            "checkpoint_bucket": storage.bucket.name if storage.bucket else None,
            # where the GPU nodes and login VMs mount it for jobs and users (None: not mounted)
            "checkpoint_mount": checkpoint_mount(spec, cluster).get("checkpoints_mount"),
            "scratch": scratch,
            "partitions": [p.name for p in slurm.partitions],
            "nodesets": [
                {"name": n.name, "nodes": n.node_names, "gres": n.gres, "features": n.features} for n in conf.nodesets
            ],
        }
    extra: dict[str, Any] = {}
    if len(slurm_clusters) < len(spec.clusters):
        from stacks.kube import build_kueue_clusters  # pulumi_kubernetes only when a Kueue cluster is declared

        kube_inventory, kube_clusters, created = build_kueue_clusters(spec, cat, fabric, fabrics, kubeconfigs or {})
        inventory += kube_inventory
        clusters.update(kube_clusters)
        extra["kubeconfigs"] = created  # secret: `pulumi stack output kubeconfigs --show-secrets`
    return {
        **extra,
        "autoscaler_inventory": inventory,
        "clusters": clusters,
        "networks": {
            "system": fabric.network.self_link,
            "system_subnet": fabric.subnet.self_link,
            "planes": {name: p.network.self_link for name, p in fabric.planes.items()},
        },
    }
