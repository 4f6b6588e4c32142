"""Run the pack over a `fleet synth --json` output through pulumi_policy's own analyzer, as the engine does.

    policies/.venv/bin/python policies/analyze.py SYNTH.json

The Pulumi engine calls the pack's gRPC Analyze (one resource) and AnalyzeStack (all of them) methods; this
script calls the same servicer methods with the same request messages, without the CLI (which cannot be
installed here), and prints one JSON list of {policy, level, urn, message}.  Tests use it to show that the
pack and `fleet policy check` report the same violations.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from google.protobuf import json_format, struct_pb2
from pulumi.runtime.proto import analyzer_pb2
from pulumi_policy import EnforcementLevel
from pulumi_policy.policy import _PolicyAnalyzerServicer

from policies.pack import PACK_NAME, build_policies

LEVELS = {analyzer_pb2.ADVISORY: "advisory", analyzer_pb2.MANDATORY: "mandatory"}


def _struct(props: dict[str, Any]) -> struct_pb2.Struct:
    return json_format.ParseDict(props, struct_pb2.Struct())


def analyze(recorded: list[dict[str, Any]]) -> list[dict[str, str]]:
    servicer = _PolicyAnalyzerServicer(PACK_NAME, "0.1.0", build_policies(), EnforcementLevel.MANDATORY)
    custom = [r for r in recorded if r.get("custom", True)]
    out: list[dict[str, str]] = []

    def collect(response: Any, urn: str) -> None:
        for d in response.diagnostics:
            _description, _, message = d.message.partition("\n")
            out.append(
                {"policy": d.policyName, "level": LEVELS[d.enforcementLevel], "urn": d.urn or urn, "message": message}
            )

    for r in custom:
        req = analyzer_pb2.AnalyzeRequest(type=r["type"], properties=_struct(r["inputs"]), urn=r["urn"], name=r["name"])
        collect(servicer.Analyze(req, None), r["urn"])
    stack = analyzer_pb2.AnalyzeStackRequest(
        resources=[
            analyzer_pb2.AnalyzerResource(type=r["type"], properties=_struct(r["inputs"]), urn=r["urn"], name=r["name"])
            for r in custom
        ]
    )
    collect(servicer.AnalyzeStack(stack, None), "")
    return out


if __name__ == "__main__":
    doc = json.loads(Path(sys.argv[1]).read_text())
    print(json.dumps(analyze(doc["resources"])))
