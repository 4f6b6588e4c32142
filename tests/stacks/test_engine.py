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


def test_the_event_loops_the_engine_makes_are_closed_at_exit() -> None:
    """A CLI run ends with no "Exception ignored in BaseEventLoop.__del__" on stderr: every loop the mock engine
    made its threads create is remembered and closed by the engine's exit handler (the last thing a process runs:
    the threads are reused by later runs), before the interpreter's own teardown can finalize a loop after its
    self-pipe (seen on `fleet policy check`, about one run in ten)."""
    import subprocess
    import sys

    script = """
import pulumi, pulumi_gcp as gcp
from fleet.synth import engine
engine.run_program(lambda: [gcp.compute.Network(f"n{i}") for i in range(8)], stack="t", default_gcp_project="p")
loops = list(engine._LOOPS)
assert loops and not any(loop.is_closed() for loop in loops), loops
engine._close_loops()
assert all(loop.is_closed() for loop in loops)
print("ok", len(loops))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("ok"), done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr
