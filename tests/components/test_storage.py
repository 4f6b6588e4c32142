"""SharedStorage: Filestore home, a private versioned checkpoint bucket, optional Managed Lustre."""

from __future__ import annotations

from components.gcp.storage import BucketArgs, FilestoreArgs, LustreArgs, SharedStorage, SharedStorageArgs

NET = "projects/my-proj/global/networks/sys"


def test_filestore_and_bucket(declare):
    d = declare(
        lambda: SharedStorage(
            "st",
            SharedStorageArgs(
                project="my-proj",
                zone="us-east4-a",
                network=NET,
                name="a3mega",
                home=FilestoreArgs("BASIC_SSD", 2560, "home"),
                checkpoints=BucketArgs("my-proj-a3mega-checkpoints", "us-east4", 7),
            ),
        )
    )
    fs = d.one("filestore/instance:Instance").inputs
    assert fs["tier"] == "BASIC_SSD" and fs["location"] == "us-east4-a"
    assert fs["fileShares"] == {"name": "home", "capacityGb": 2560}
    assert fs["networks"][0]["network"] == NET
    bucket = d.one("storage/bucket:Bucket").inputs
    assert bucket["uniformBucketLevelAccess"] is True
    assert bucket["versioning"] == {"enabled": True}
    # overwritten checkpoints: the newest noncurrent version kept, older ones deleted (were kept for good)
    (rule,) = bucket["lifecycleRules"]
    assert rule["action"] == {"type": "Delete"}
    assert rule["condition"] == {"numNewerVersions": 1, "withState": "ARCHIVED"}
    assert bucket["publicAccessPrevention"] == "enforced"
    assert bucket["softDeletePolicy"] == {"retentionDurationSeconds": 7 * 86400}
    assert d.of_type("lustre/instance:Instance") == []
    assert d.of_type("BucketIAMMember") == []  # access is granted per service account by the pools


def test_optional_lustre_and_no_home(declare):
    d = declare(
        lambda: SharedStorage(
            "st",
            SharedStorageArgs(
                project="my-proj", zone="us-central1-b", network=NET, name="ultra", home=None, scratch=LustreArgs()
            ),
        )
    )
    assert d.of_type("filestore/instance:Instance") == []
    lustre = d.one("lustre/instance:Instance").inputs
    assert lustre["capacityGib"] == "18000" and lustre["perUnitStorageThroughput"] == "500"
    assert lustre["location"] == "us-central1-b" and lustre["network"] == NET
    assert d.of_type("storage/bucket:Bucket") == []
    # Lustre needs private services access on the VPC: a peering range and the connection
    psa_range = d.one("compute/globalAddress:GlobalAddress").inputs
    assert (psa_range["purpose"], psa_range["network"]) == ("VPC_PEERING", NET)
    conn = d.one("servicenetworking/connection:Connection").inputs
    assert conn["reservedPeeringRanges"] == [psa_range["name"]]


def test_no_peering_without_lustre(declare):
    d = declare(
        lambda: SharedStorage("st", SharedStorageArgs(project="my-proj", zone="us-east4-a", network=NET, name="c"))
    )
    assert d.of_type("GlobalAddress") == [] and d.of_type("Connection") == []
    assert d.of_type("compute/firewall:Firewall") == []  # no Lustre, no hole in the firewall
    assert len(d.of_type("filestore/instance:Instance")) == 1


def test_lustre_servers_may_reach_their_clients_through_the_closed_firewall(declare):
    """The system VPC denies every ingress its own subnet does not send; Lustre's servers sit in the private
    services access range and connect back to their clients over LNet on TCP 988: one rule allows exactly that,
    saying why, and only on a stack with Lustre."""
    d = declare(
        lambda: SharedStorage(
            "st",
            SharedStorageArgs(project="my-proj", zone="us-central1-b", network=NET, name="u", scratch=LustreArgs()),
        )
    )
    psa = d.one("compute/globalAddress:GlobalAddress").inputs
    rule = d.one("compute/firewall:Firewall").inputs
    assert (rule["network"], rule["direction"], rule["priority"]) == (NET, "INGRESS", 1000)
    assert rule["allows"] == [{"protocol": "tcp", "ports": ["988"]}] and "denies" not in rule
    (source,) = rule["sourceRanges"]
    assert source.endswith(f"/{psa['prefixLength']}") and source != "0.0.0.0/0"
    assert "Lustre" in rule["description"] and "988" in rule["description"]


def test_home_and_scratch_are_protected_unless_the_spec_says_otherwise(declare):
    """Filestore's and Lustre's location is immutable: a moved zone would replace /home with an empty share.
    Protected (Pulumi `protect`, and Filestore's own deletion protection), `pulumi up` stops at it instead."""

    def storage(protect: bool):
        return lambda: SharedStorage(
            "st",
            SharedStorageArgs(
                project="my-proj", zone="us-east4-a", network=NET, name="c", scratch=LustreArgs(), protect=protect
            ),
        )

    d = declare(storage(True))
    fs, lustre = d.one("filestore/instance:Instance"), d.one("lustre/instance:Instance")
    assert fs.protect and lustre.protect
    assert (
        fs.inputs["deletionProtectionEnabled"] is True
        and "deletion_protection" in fs.inputs["deletionProtectionReason"]
    )
    d = declare(storage(False))
    fs, lustre = d.one("filestore/instance:Instance"), d.one("lustre/instance:Instance")
    assert not fs.protect and not lustre.protect and fs.inputs["deletionProtectionEnabled"] is False
