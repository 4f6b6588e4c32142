"""Stack files in a stacks directory: the ranges they use, and writing a new one.

A stack file is `Pulumi.<stack>.yaml` next to `Pulumi.yaml`, where the Pulumi CLI looks for
it: `config: {gcp:project, gcp:region, gpu-fleet:fleet: <spec>}`.  Only specs of kind `fleet`
(the default) use address ranges; `project-bootstrap` stacks are skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Network
from pathlib import Path

import yaml

from fleet.bootstrap.addressing import UsedRange
from fleet.bootstrap.errors import BadArgument
from fleet.input import InputError, load_yaml
from fleet.input.limits import MAX_SPEC_BYTES
from fleet.spec.model import GkeSpec, NetworkSpec

FLEET_KEY = "gpu-fleet:fleet"
_DEFAULTS = NetworkSpec()
_GKE_DEFAULTS = GkeSpec()


def stack_files(stacks_dir: Path) -> list[Path]:
    return sorted(p for p in Path(stacks_dir).glob("Pulumi.*.yaml") if p.is_file())


def stack_path(stacks_dir: Path, stack: str) -> Path:
    return Path(stacks_dir) / f"Pulumi.{stack}.yaml"


def find_stacks_dir(start: Path) -> Path:
    """The nearest directory at or above `start` holding Pulumi.yaml; `start` itself if none."""
    start = start.resolve()
    for d in (start, *start.parents):
        if (d / "Pulumi.yaml").is_file():
            return d
    return start


def _cidr(value: object, where: str) -> IPv4Network:
    try:
        return IPv4Network(str(value))
    except ValueError as exc:
        raise BadArgument("--stacks-dir", f"{where}: {value!r} is not an IPv4 CIDR ({exc})") from None


@dataclass(frozen=True)
class StackFacts:
    """What the other stack files of a stacks directory already use."""

    ranges: list[UsedRange]
    clusters: dict[str, set[str]]  # project -> cluster names (GCE names derive from them: no reuse)
    project_bootstraps: dict[str, str]  # project -> stack name of its project-bootstrap stack


def _specs(stacks_dir: Path, exclude: Path | None) -> list[tuple[Path, dict]]:
    out = []
    for path in stack_files(stacks_dir):
        if exclude is not None and path.resolve() == exclude.resolve():
            continue
        try:
            doc = load_yaml(path, what="stack file", max_bytes=MAX_SPEC_BYTES) or {}
        except InputError as exc:
            raise BadArgument("--stacks-dir", str(exc)) from None
        spec = (doc.get("config") or {}).get(FLEET_KEY) if isinstance(doc, dict) else None
        if isinstance(spec, dict):
            out.append((path, spec))
    return out


def read_stacks(stacks_dir: Path, exclude: Path | None = None) -> StackFacts:
    """Ranges, cluster names and project-bootstrap stacks of every stack file but `exclude`."""
    clusters: dict[str, set[str]] = {}
    boots: dict[str, str] = {}
    for path, spec in _specs(stacks_dir, exclude):
        project = str(spec.get("project", ""))
        if spec.get("kind", "fleet") == "project-bootstrap":
            boots[project] = path.name[len("Pulumi.") : -len(".yaml")]
        elif spec.get("kind", "fleet") == "fleet":
            for c in spec.get("clusters") or []:
                if isinstance(c, dict) and c.get("name"):
                    clusters.setdefault(project, set()).add(str(c["name"]))
    return StackFacts(used_ranges(stacks_dir, exclude), clusters, boots)


def used_ranges(stacks_dir: Path, exclude: Path | None = None) -> list[UsedRange]:
    """Every range the fleet stacks in `stacks_dir` use (defaults included where a file omits them).

    A file that cannot be read fails: an address plan that skips a stack could overlap it."""
    used: list[UsedRange] = []
    for path, spec in _specs(stacks_dir, exclude):
        if spec.get("kind", "fleet") != "fleet":
            continue
        net = spec.get("network") or {}
        if not isinstance(net, dict):
            raise BadArgument("--stacks-dir", f"{path.name}: {FLEET_KEY}.network is not a mapping")
        for field, default in (("system_cidr", _DEFAULTS.system_cidr), ("gpu_cidr", _DEFAULTS.gpu_cidr)):
            where = f"{path.name}: network.{field}"
            used.append(UsedRange(_cidr(net.get(field, default), where), where))
        for i, cidr in enumerate(net.get("reserved_cidrs") or []):
            where = f"{path.name}: network.reserved_cidrs[{i}]"
            used.append(UsedRange(_cidr(cidr, where), where))
        used += _gke_ranges(path, spec)
    return used


def _gke_ranges(path: Path, spec: dict) -> list[UsedRange]:
    """The pod, service and control-plane ranges of the file's GKE clusters (the spec's defaults where omitted)."""
    used = []
    clusters = spec.get("clusters") or []
    for i, cluster in enumerate(clusters if isinstance(clusters, list) else []):
        if not isinstance(cluster, dict) or cluster.get("platform") != "gke":
            continue
        gke = cluster.get("gke") or {}
        for field in ("pods_cidr", "services_cidr", "master_cidr"):
            where = f"{path.name}: clusters[{i}].gke.{field}"
            used.append(UsedRange(_cidr(gke.get(field, str(getattr(_GKE_DEFAULTS, field))), where), where))
    return used


def render_stack_file(project: str, region: str, spec: dict, header: list[str]) -> str:
    doc = {"config": {"gcp:project": project, "gcp:region": region, FLEET_KEY: spec}}
    comments = "".join(f"# {line}\n" for line in header)
    return comments + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=120)


def write_stack_file(path: Path, text: str, force: bool) -> None:
    """Write the stack file atomically (`fleet.input.outputs`: a temporary file beside it, then moved into place);
    refuse to replace an existing one unless `force`."""
    from fleet.input.outputs import write_atomic

    if path.exists() and not force:
        raise BadArgument("--name", f"{path} exists; pass --force to overwrite it, or choose another --name")
    try:
        write_atomic(path, text, option="--name", force=force)
    except InputError as exc:
        raise BadArgument("--name", f"{path}: " + "; ".join(reason for _, reason in exc.errors)) from None
