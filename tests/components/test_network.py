"""NetworkFabric: VPCs, MTUs, subnets, NAT and a closed firewall, checked on the registered inputs."""

from __future__ import annotations

import pulumi
import pytest

from components.gcp.network import IAP_TCP_FORWARDING_RANGE, DataPlaneArgs, NetworkFabric, NetworkFabricArgs

GPU_CIDRS = [f"10.128.{i}.0/24" for i in range(8)]
RDMA_CIDRS = [f"10.129.{i}.0/24" for i in range(8)]


def a3mega_args() -> NetworkFabricArgs:
    return NetworkFabricArgs(
        project="my-proj",
        region="us-east4",
        system_name="fleet-net",
        system_cidr="10.0.0.0/20",
        system_mtu=8244,
        planes=[DataPlaneArgs(f"c-gpunet-{i}", "gpudirect", [c], 8896) for i, c in enumerate(GPU_CIDRS)],
    )


def ultra_args() -> NetworkFabricArgs:
    return NetworkFabricArgs(
        project="my-proj",
        region="us-central1",
        system_name="fleet-net",
        system_cidr="10.0.0.0/20",
        system_mtu=8896,
        planes=[
            DataPlaneArgs("c-net-1", "gvnic", ["10.130.0.0/24"], 8896),
            DataPlaneArgs("c-rdma", "rdma", RDMA_CIDRS, 8896, zone="us-central1-b"),
        ],
    )


def test_a3mega_fabric_has_system_vpc_and_eight_gpu_vpcs(declare):
    d = declare(lambda: NetworkFabric("fab", a3mega_args()))
    nets = {r.inputs["name"]: r for r in d.of_type("compute/network:Network")}
    assert len(nets) == 9
    assert nets["fleet-net"].inputs["mtu"] == 8244
    assert sorted(n for n, r in nets.items() if r.inputs["mtu"] == 8896) == [f"c-gpunet-{i}" for i in range(8)]
    assert all(r.inputs["autoCreateSubnetworks"] is False for r in nets.values())
    subnets = d.of_type("compute/subnetwork:Subnetwork")
    by_net = {}
    for s in subnets:
        by_net.setdefault(s.inputs["network"], []).append(s.inputs["ipCidrRange"])
    # one subnet per GPU VPC, with the given range; the system subnet on the system VPC
    assert sorted(cidr for cidrs in by_net.values() for cidr in cidrs) == sorted([*GPU_CIDRS, "10.0.0.0/20"])
    assert all(len(c) == 1 for c in by_net.values())
    # every child is parented to the component and prefixed by its name
    comp = d.one("gpufleet:gcp:NetworkFabric")
    assert all(r.parent == comp.urn and r.name.startswith("fab-") for r in d.resources if r is not comp)


def test_firewall_allows_internal_and_iap_ssh_only(declare):
    def program():
        fab = NetworkFabric("fab", a3mega_args())
        fab.allow_iap_ssh("c", ["c-ctl@p.iam.gserviceaccount.com"])

    d = declare(program)
    rules = d.of_type("compute/firewall:Firewall")
    allows = [r for r in rules if r.inputs.get("allows")]
    denies = [r for r in rules if r.inputs.get("denies")]
    assert allows and denies
    for rule in allows:
        assert "0.0.0.0/0" not in rule.inputs["sourceRanges"], rule.name
        assert rule.inputs["direction"] == "INGRESS"
    ssh = [r for r in allows if any("22" in a.get("ports", []) for a in r.inputs["allows"])]
    assert len(ssh) == 1 and ssh[0].inputs["sourceRanges"] == [IAP_TCP_FORWARDING_RANGE]
    assert ssh[0].inputs["targetServiceAccounts"] == ["c-ctl@p.iam.gserviceaccount.com"]  # not every VM of the VPC
    internal = {r.inputs["name"]: r.inputs["sourceRanges"] for r in allows if r not in ssh}
    assert internal["fleet-net-allow-internal"] == ["10.0.0.0/20"]
    for i, cidr in enumerate(GPU_CIDRS):  # a GPU VPC admits only its own subnet
        assert internal[f"c-gpunet-{i}-allow-internal"] == [cidr]
    # a deny-all below the allows on every VPC
    assert {r.inputs["priority"] for r in denies} == {65534}
    assert len(denies) == 9


def test_nat_gives_the_system_subnet_egress(declare):
    d = declare(lambda: NetworkFabric("fab", a3mega_args()))
    nat = d.one("compute/routerNat:RouterNat")
    router = d.one("compute/router:Router")
    assert nat.inputs["router"] == router.inputs["name"]
    assert nat.inputs["sourceSubnetworkIpRangesToNat"] == "LIST_OF_SUBNETWORKS"
    assert len(nat.inputs["subnetworks"]) == 1


def test_rdma_plane_uses_the_zonal_roce_profile_and_no_firewall_gcp_would_refuse(declare):
    d = declare(lambda: NetworkFabric("fab", ultra_args()))
    nets = {r.inputs["name"]: r for r in d.of_type("compute/network:Network")}
    assert len(nets) == 3
    assert {r.inputs["mtu"] for r in nets.values()} == {8896}
    assert nets["c-rdma"].inputs["networkProfile"] == "projects/my-proj/global/networkProfiles/us-central1-b-vpc-roce"
    assert "networkProfile" not in nets["c-net-1"].inputs
    rdma_id = "projects/my-proj/global/networks/c-rdma"
    rdma_subnets = [s for s in d.of_type("compute/subnetwork:Subnetwork") if s.inputs["network"] == rdma_id]
    assert sorted(s.inputs["ipCidrRange"] for s in rdma_subnets) == sorted(RDMA_CIDRS)
    # RoCE VPCs take no VPC firewall rules, and an RDMA_ROCE_POLICY rule may only match 0.0.0.0/0 or secure
    # tags (a rule on the RDMA subnets is refused; a deny-all blocks RDMA): like gpu-rdma-vpc, declare none
    assert not [r for r in d.of_type("compute/firewall:Firewall") if r.inputs["network"] == rdma_id]
    assert not d.of_type("RegionNetworkFirewallPolicyRule")
    assert not d.of_type("RegionNetworkFirewallPolicy")


@pulumi.runtime.test
def test_component_outputs_expose_networks_and_planes():
    from fleet.synth.engine import RecordingMonitor, SynthMocks

    mocks = SynthMocks("my-proj")
    pulumi.runtime.set_mocks(mocks, project="gpu-fleet", stack="t", preview=False, monitor=RecordingMonitor(mocks))
    fab = NetworkFabric("fab", ultra_args())

    def check(values):
        mtu, rdma_profile, nsub = values
        assert mtu == 8896
        assert rdma_profile.endswith("us-central1-b-vpc-roce")
        assert nsub == 8

    return pulumi.Output.all(
        fab.network.mtu, fab.planes["c-rdma"].network.network_profile, len(fab.planes["c-rdma"].subnets)
    ).apply(check)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"ssh_source_ranges": ["0.0.0.0/0"]}, "ssh_source_ranges"),
        ({"planes": [DataPlaneArgs("fleet-net", "gvnic", ["10.1.0.0/24"], 1460)]}, "planes"),
    ],
)
def test_bad_fabric_args_are_refused(kwargs, needle):
    base = {"project": "p", "region": "us-east4", "system_name": "fleet-net", "system_cidr": "10.0.0.0/20"}
    with pytest.raises(ValueError, match=needle):
        NetworkFabricArgs(**{**base, **kwargs})


def test_rdma_plane_needs_a_zone_and_gpudirect_plane_one_subnet():
    with pytest.raises(ValueError, match="zone"):
        DataPlaneArgs("r", "rdma", RDMA_CIDRS, 8896)
    with pytest.raises(ValueError, match="exactly one subnet"):
        DataPlaneArgs("g", "gpudirect", GPU_CIDRS[:2], 8896)


def test_no_ssh_reaches_the_vpc_until_a_stack_names_the_vms_and_ten_accounts_make_a_rule(declare):
    """The fabric alone admits no SSH; `allow_iap_ssh` admits it to the VMs of the accounts it is given, in rules of
    at most ten target accounts (GCE's cap per rule), each named for its cluster."""
    alone = declare(lambda: NetworkFabric("fab", a3mega_args()))
    assert not [
        r for r in alone.of_type("compute/firewall:Firewall")
        if any("22" in a.get("ports", []) for a in r.inputs.get("allows", []))
    ]  # fmt: skip
    accounts = [f"n{i}@p.iam.gserviceaccount.com" for i in range(23)]

    def program():
        NetworkFabric("fab", a3mega_args()).allow_iap_ssh("big", accounts)

    rules = [r for r in declare(program).of_type("compute/firewall:Firewall") if "iap-ssh" in r.inputs["name"]]
    assert [len(r.inputs["targetServiceAccounts"]) for r in rules] == [10, 10, 3]
    assert [a for r in rules for a in r.inputs["targetServiceAccounts"]] == accounts
    assert len({r.inputs["name"] for r in rules}) == 3 and all(len(r.inputs["name"]) <= 63 for r in rules)
