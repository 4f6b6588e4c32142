"""NetworkFabric: the system VPC (subnet, Cloud Router + NAT, closed firewall) and the GPU data-plane VPCs.

The system VPC carries every VM's first NIC; egress goes through Cloud NAT, so no VM needs a public
IP.  Firewall: internal traffic from the fleet's own subnets only, an explicit logged deny-all ingress below
them, and SSH from Google's IAP TCP forwarding range only, to the VMs a stack names by service account
(`allow_iap_ssh`: a Slurm cluster's controller, login and GPU VMs; not GKE nodes or anything else on the VPC).
Each data plane is one VPC:
GPUDirect-TCPX(O) planes have one subnet each (a3-highgpu-8g: 4, a3-megagpu-8g: 8, MTU 8244/8896),
an extra gVNIC VPC has one subnet, an RDMA (RoCE) VPC has one subnet per RDMA NIC and a zonal
network profile.  Plain VPC firewall rules allow traffic among a plane's own subnets only.  RoCE VPCs
get no firewall at all, as in Google's `modules/network/gpu-rdma-vpc`: they take no VPC firewall
rules, an `RDMA_ROCE_POLICY` firewall policy accepts only 0.0.0.0/0 or secure tags as a source (a
rule on the RDMA subnets is refused), and a deny rule would block all RDMA.  Only MRDMA NICs can
attach to a RoCE VPC, it has no route, NAT or peering to anything else, so nothing outside the
fleet's own GPU VMs can send to it (docs/stacks.md "RoCE networks").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import pulumi
import pulumi_gcp as gcp

IAP_TCP_FORWARDING_RANGE = "35.235.240.0/20"  # Google's documented source range of IAP TCP forwarding
MAX_TARGET_ACCOUNTS = 10  # GCE: target service accounts one firewall rule may name

PlaneKind = Literal["gpudirect", "gvnic", "rdma"]


@dataclass(frozen=True)
class DataPlaneArgs:
    """One GPU data-plane VPC.

    name: the VPC's GCE name (subnets are named `<name>-sub-<i>`).
    kind: `gpudirect` (GPUDirect-TCPX/TCPXO NIC, one subnet), `gvnic` (an extra host NIC, one
        subnet) or `rdma` (a RoCE VPC, one subnet per RDMA NIC).
    cidrs: the subnet ranges, in NIC order.
    mtu: the VPC MTU (8896 for A3 Mega/Ultra and A4 planes, 8244 for A3 High).
    zone: for `rdma`, the zone whose `<zone>-vpc-roce` network profile the VPC uses (RoCE VPCs are zonal).
    """

    name: str
    kind: PlaneKind
    cidrs: list[str]
    mtu: int
    zone: str | None = None

    def __post_init__(self) -> None:
        if not self.cidrs:
            raise ValueError(f"data plane {self.name}: cidrs: at least one subnet is required")
        if self.kind == "rdma" and not self.zone:
            raise ValueError(f"data plane {self.name}: zone: a RoCE VPC needs the zone of its network profile")
        if self.kind != "rdma" and len(self.cidrs) != 1:
            raise ValueError(f"data plane {self.name}: cidrs: a {self.kind} VPC has exactly one subnet")


@dataclass(frozen=True)
class NetworkFabricArgs:
    """Inputs of a NetworkFabric.

    project, region: where everything lives.
    system_name: GCE name of the system VPC (its subnet is `<name>-sub`, router `<name>-router`).
    system_cidr: the system subnet's range (every VM's first NIC).
    system_mtu: the system VPC MTU (1460 default, 8244 for A3 Mega, 8896 for A3 Ultra / A4).
    planes: the GPU data-plane VPCs.
    ssh_source_ranges: where SSH may come from; IAP only by default (use `gcloud compute ssh --tunnel-through-iap`).
    nat_logging: log NAT translation errors.
    """

    project: str
    region: str
    system_name: str
    system_cidr: str
    system_mtu: int = 1460
    planes: list[DataPlaneArgs] = field(default_factory=list)
    ssh_source_ranges: list[str] = field(default_factory=lambda: [IAP_TCP_FORWARDING_RANGE])
    nat_logging: bool = True

    def __post_init__(self) -> None:
        if "0.0.0.0/0" in self.ssh_source_ranges:
            raise ValueError("ssh_source_ranges: 0.0.0.0/0 would open SSH to the internet; use IAP")
        names = [p.name for p in self.planes]
        if len(set(names)) != len(names) or self.system_name in names:
            raise ValueError(f"planes: VPC names must be unique, got {[self.system_name, *names]}")


@dataclass
class PlaneOutputs:
    network: gcp.compute.Network
    subnets: list[gcp.compute.Subnetwork]
    args: DataPlaneArgs


class NetworkFabric(pulumi.ComponentResource):
    """System VPC + NAT + firewall, and the GPU data-plane VPCs."""

    network: gcp.compute.Network
    subnet: gcp.compute.Subnetwork
    planes: dict[str, PlaneOutputs]

    def __init__(self, name: str, args: NetworkFabricArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:gcp:NetworkFabric", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.network = gcp.compute.Network(
            f"{name}-system",
            name=args.system_name,
            project=args.project,
            auto_create_subnetworks=False,
            routing_mode="REGIONAL",
            mtu=args.system_mtu,
            description="gpu-fleet system VPC (host NIC of every VM)",
            opts=child,
        )
        self.subnet = gcp.compute.Subnetwork(
            f"{name}-system-sub",
            name=f"{args.system_name}-sub",
            project=args.project,
            region=args.region,
            network=self.network.id,
            ip_cidr_range=args.system_cidr,
            private_ip_google_access=True,  # reach Google APIs without public IPs
            log_config={"aggregation_interval": "INTERVAL_5_MIN", "flow_sampling": 0.5},
            opts=child,
        )
        self.router = gcp.compute.Router(
            f"{name}-router",
            name=f"{args.system_name}-router",
            project=args.project,
            region=args.region,
            network=self.network.id,
            opts=child,
        )
        self.nat = gcp.compute.RouterNat(
            f"{name}-nat",
            name=f"{args.system_name}-nat",
            project=args.project,
            region=args.region,
            router=self.router.name,
            nat_ip_allocate_option="AUTO_ONLY",
            source_subnetwork_ip_ranges_to_nat="LIST_OF_SUBNETWORKS",
            subnetworks=[{"name": self.subnet.id, "source_ip_ranges_to_nats": ["ALL_IP_RANGES"]}],
            enable_dynamic_port_allocation=True,
            min_ports_per_vm=1024,
            log_config={"enable": args.nat_logging, "filter": "ERRORS_ONLY"},
            opts=child,
        )
        self._closed_firewall(f"{name}-system", args.project, args.system_name, self.network, [args.system_cidr], child)
        self._name, self._args, self._child = name, args, child

        self.planes = {}
        for plane in args.planes:
            self.planes[plane.name] = self._plane(name, args, plane, child)

        self.register_outputs(
            {
                "network": self.network.self_link,
                "subnet": self.subnet.self_link,
                "planes": {n: p.network.self_link for n, p in self.planes.items()},
            }
        )

    def allow_iap_ssh(self, owner: str, service_accounts: Sequence[pulumi.Input[str]]) -> list[gcp.compute.Firewall]:
        """SSH, through IAP TCP forwarding only, to the VMs of `owner` (a Slurm cluster) that run as
        `service_accounts`: no rule reaches another VM of the system VPC (GKE nodes, Filestore, Lustre).  One rule
        per ten accounts, GCE's cap of target service accounts per rule."""
        rules = []
        for i in range(0, len(service_accounts), MAX_TARGET_ACCOUNTS):
            part = "" if i == 0 else f"-{i // MAX_TARGET_ACCOUNTS}"
            rules.append(
                gcp.compute.Firewall(
                    f"{self._name}-{owner}-allow-iap-ssh{part}",
                    name=f"{self._args.system_name}-{owner}-iap-ssh{part}",
                    project=self._args.project,
                    network=self.network.id,
                    direction="INGRESS",
                    priority=1000,
                    description=f"SSH only through IAP TCP forwarding, to the {owner} cluster's VMs",
                    source_ranges=list(self._args.ssh_source_ranges),
                    target_service_accounts=list(service_accounts[i : i + MAX_TARGET_ACCOUNTS]),
                    allows=[{"protocol": "tcp", "ports": ["22"]}],
                    log_config={"metadata": "INCLUDE_ALL_METADATA"},
                    opts=self._child,
                )
            )
        return rules

    def _closed_firewall(
        self,
        prefix: str,
        project: str,
        vpc_name: str,
        network: gcp.compute.Network,
        internal_ranges: list[str],
        child: pulumi.ResourceOptions,
    ) -> None:
        """Allow all protocols among `internal_ranges`; deny (and log) every other ingress."""
        gcp.compute.Firewall(
            f"{prefix}-allow-internal",
            name=f"{vpc_name}-allow-internal",
            project=project,
            network=network.id,
            direction="INGRESS",
            priority=1000,
            description="traffic among this VPC's own subnets",
            source_ranges=internal_ranges,
            allows=[{"protocol": "all"}],
            opts=child,
        )
        gcp.compute.Firewall(
            f"{prefix}-deny-ingress",
            name=f"{vpc_name}-deny-ingress",
            project=project,
            network=network.id,
            direction="INGRESS",
            priority=65534,
            description="everything not allowed above (explicit, so denials are logged)",
            source_ranges=["0.0.0.0/0"],
            denies=[{"protocol": "all"}],
            log_config={"metadata": "EXCLUDE_ALL_METADATA"},
            opts=child,
        )

    def _plane(
        self, name: str, args: NetworkFabricArgs, plane: DataPlaneArgs, child: pulumi.ResourceOptions
    ) -> PlaneOutputs:
        profile = None
        if plane.kind == "rdma":
            profile = f"projects/{args.project}/global/networkProfiles/{plane.zone}-vpc-roce"
        network = gcp.compute.Network(
            f"{name}-{plane.name}",
            name=plane.name,
            project=args.project,
            auto_create_subnetworks=False,
            routing_mode="REGIONAL",
            mtu=plane.mtu,
            network_profile=profile,
            description=f"gpu-fleet {plane.kind} data plane",
            opts=child,
        )
        subnets = [
            gcp.compute.Subnetwork(
                f"{name}-{plane.name}-sub-{i}",
                name=f"{plane.name}-sub-{i}",
                project=args.project,
                region=args.region,
                network=network.id,
                ip_cidr_range=cidr,
                opts=child,
            )
            for i, cidr in enumerate(plane.cidrs)
        ]
        if plane.kind != "rdma":  # RoCE VPCs: no firewall (see the module docstring)
            self._closed_firewall(f"{name}-{plane.name}", args.project, plane.name, network, list(plane.cidrs), child)
        return PlaneOutputs(network, subnets, plane)
