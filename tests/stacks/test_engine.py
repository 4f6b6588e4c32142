"""The mock synth engine: what it records, secrets, exports, duplicate URNs."""

from __future__ import annotations

import pulumi
import pytest

from fleet.synth.engine import SECRET, SynthError, redact, run_program


def test_records_parent_inputs_options_and_exports():
    def program() -> None:
        import pulumi_gcp as gcp

        class Box(pulumi.ComponentResource):
            def __init__(self, name: str) -> None:
                super().__init__("gpufleet:test:Box", name)
                self.net = gcp.compute.Network(f"{name}-net", mtu=8896, opts=pulumi.ResourceOptions(parent=self))
                self.register_outputs({})

        box = Box("box")
        pulumi.export("net", box.net.self_link)
        pulumi.export("token", pulumi.Output.secret("s3cr3t"))
        pulumi.export("cfg", pulumi.Config("gpu-fleet").require_object("fleet"))

    result = run_program(program, stack="t", config={"gpu-fleet:fleet": {"a": 1}}, default_gcp_project="p")
    box = result.named("box")
    net = result.named("box-net")
    assert net.parent == box.urn and net.custom and not box.custom
    assert net.type == "gcp:compute/network:Network" and net.inputs == {"mtu": 8896}
    assert isinstance(net.inputs["mtu"], int)
    assert result.outputs["net"].startswith("https://www.googleapis.com/compute/v1/projects/p/global/networks/box-net-")
    assert result.outputs["token"] == SECRET
    assert result.outputs["cfg"] == {"a": 1}
    assert "s3cr3t" not in repr(result)


def test_duplicate_urns_are_an_error():
    def program() -> None:
        import pulumi_gcp as gcp

        gcp.compute.Network("same")
        gcp.compute.Network("same")

    with pytest.raises(SynthError, match="duplicate resource URN"):
        run_program(program, stack="dup")


def test_same_name_under_different_parents_is_fine():
    def program() -> None:
        import pulumi_random as random

        a = pulumi.ComponentResource("gpufleet:test:A", "a")
        b = pulumi.ComponentResource("gpufleet:test:B", "b")
        random.RandomBytes("k", length=8, opts=pulumi.ResourceOptions(parent=a))
        random.RandomBytes("k", length=8, opts=pulumi.ResourceOptions(parent=b))

    assert len(run_program(program, stack="ok").resources) == 4


def test_redact_replaces_wrapped_secrets_anywhere():
    from pulumi.runtime import rpc

    secret = {rpc._special_sig_key: rpc._special_secret_sig, "value": "x"}
    assert redact({"a": [1.0, secret], "b": {"c": secret}}) == {"a": [1, SECRET], "b": {"c": SECRET}}


def test_bad_stack_name_is_refused():
    with pytest.raises(ValueError, match="stack"):
        run_program(lambda: None, stack="no spaces")
