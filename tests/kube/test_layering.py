"""Only autoscaler/kube imports the Kubernetes client (and `fleet synth`'s property check, which reads the client's
models as the schema of the built-in kinds and never talks to a cluster); the planner and models never do."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: modules that read the Kubernetes client's models as a schema only (no API calls)
SCHEMA_READERS = {"fleet/synth/properties.py"}


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_only_autoscaler_kube_imports_the_kubernetes_client() -> None:
    offenders = []
    for pkg in ("autoscaler", "fleet", "components", "stacks"):
        for f in (ROOT / pkg).rglob("*.py"):
            rel = f.relative_to(ROOT).as_posix()
            if rel.startswith("autoscaler/kube/") or rel in SCHEMA_READERS:
                continue
            if any(m == "kubernetes" or m.startswith("kubernetes.") for m in imports(f)):
                offenders.append(rel)
    assert offenders == []


def test_the_kubernetes_source_glue_stays_pure() -> None:
    for name in ("source.py",):
        mods = imports(ROOT / "autoscaler" / "kube" / name)
        assert not any(m.startswith(("kubernetes", "google", "autoscaler.gce", "autoscaler.daemon")) for m in mods)
