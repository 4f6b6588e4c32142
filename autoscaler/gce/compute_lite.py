"""Load only the Compute services the actuator calls, with only the message types they use.

`google.cloud.compute_v1` keeps every message of the Compute API (2,000+ proto-plus classes) in one module,
`types/compute.py`, which every service imports: importing any client costs ~150 MB of RSS and ~4 s.  The
actuator needs five services.  `load()` builds the same package from the installed library's own files, but
executes `types/compute.py` cut down to the transitive closure of the messages those five services reference
(their request, response and nested types: a few hundred classes), then imports the five service modules
unchanged.  The clients, messages and REST wire format are the library's own code; only unused classes are
left out.

The trimmed package is registered under `google.cloud.compute_v1` only while the five service modules import,
then removed from `sys.modules` again, so a later `import google.cloud.compute_v1` elsewhere in the process
(tests, `fleet bootstrap`) gets the complete library.  When the complete library is already imported, it is
used as is.  `GPU_FLEET_COMPUTE_FULL=1` forces the complete library.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
import types
from pathlib import Path

PACKAGE = "google.cloud.compute_v1"
# service module -> the client classes the actuator uses from it (autoscaler/gce/client.py)
SERVICES: dict[str, tuple[str, ...]] = {
    "instance_group_managers": ("InstanceGroupManagersClient",),
    "instance_group_manager_resize_requests": ("InstanceGroupManagerResizeRequestsClient",),
    "zone_operations": ("ZoneOperationsClient",),
    "reservations": ("ReservationsClient",),
    "regions": ("RegionsClient",),
}
# messages the actuator builds or reads by name besides the services' own request types
EXTRA_MESSAGES = ("Operation", "PerInstanceConfig", "PreservedState", "InstanceGroupManagerResizeRequest")

ALIAS = "gpu_fleet_compute_lite"  # module name of the trimmed types (proto-plus names its .proto file after it)
PROTO_PACKAGE = "gpu_fleet.compute_lite.v1"
_CLASS = re.compile(r"^class (\w+)\(", re.M)
_REF = re.compile(r"""\b(?:message|enum)=["']?([A-Za-z_]\w*)""")
_USE = re.compile(r"\bcompute\.([A-Z]\w*)")


def _blocks(source: str) -> tuple[str, dict[str, str], str]:
    """(header up to the first class, {class name: its source}, footer from `__all__`)."""
    starts = [(m.start(), m.group(1)) for m in _CLASS.finditer(source)]
    footer_at = source.index("\n__all__ = ")
    header = source[: starts[0][0]]
    blocks = {}
    for i, (at, name) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else footer_at
        blocks[name] = source[at:end]
    return header, blocks, source[footer_at:]


def _service_refs(root: Path) -> set[str]:
    refs: set[str] = set()
    for svc in SERVICES:
        for f in (root / "services" / svc).rglob("*.py"):
            refs |= set(_USE.findall(f.read_text()))
    return refs


def _closure(blocks: dict[str, str], roots: set[str]) -> list[str]:
    keep: set[str] = set()
    todo = [r for r in roots if r in blocks]
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep.add(name)
        todo += [r for r in _REF.findall(blocks[name]) if r in blocks and r not in keep]
    return [n for n in blocks if n in keep]  # the file's order


def trimmed_source(root: Path) -> tuple[str, list[str]]:
    """types/compute.py keeping only the closure of what the five services use; (source, kept names)."""
    header, blocks, footer = _blocks((root / "types" / "compute.py").read_text())
    kept = _closure(blocks, _service_refs(root) | set(EXTRA_MESSAGES))
    manifest = "manifest={\n" + "".join(f'        "{n}",\n' for n in kept) + "    },"
    header = re.sub(r"manifest=\{.*?\n    \},", lambda _: manifest, header, count=1, flags=re.S)
    # its own proto package: the descriptor pool then never clashes with a complete import in the same process
    header = header.replace('package="google.cloud.compute.v1"', f'package="{PROTO_PACKAGE}"', 1)
    return header + "".join(blocks[n] for n in kept) + footer, kept


def _module(name: str, path: Path | None = None, package: bool = False) -> types.ModuleType:
    mod = types.ModuleType(name)
    if package and path is not None:
        mod.__path__ = [str(path)]
        mod.__package__ = name
    else:
        mod.__package__ = name.rpartition(".")[0]
    if path is not None:
        mod.__file__ = str(path / "__init__.py" if package else path)
    return mod


def load() -> types.ModuleType:
    """A module with the five clients and the message classes the actuator uses (`Operation`, ...)."""
    if PACKAGE in sys.modules or os.environ.get("GPU_FLEET_COMPUTE_FULL") == "1":
        return importlib.import_module(PACKAGE)
    spec = importlib.util.find_spec(PACKAGE)  # imports google.cloud, not compute_v1 itself
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"{PACKAGE} is not installed (pip install google-cloud-compute)")
    root = Path(next(iter(spec.submodule_search_locations)))
    source, kept = trimmed_source(root)

    pkg = _module(PACKAGE, root, package=True)
    types_pkg = _module(f"{PACKAGE}.types", root / "types", package=True)
    if ALIAS in sys.modules:  # loaded before in this process
        return sys.modules[ALIAS].__dict__["_lite_package"]
    compute = _module(ALIAS, root / "types" / "compute.py")
    sys.modules[ALIAS] = compute  # stays: proto-plus finds each class's manifest through sys.modules[__module__]
    before = set(sys.modules)
    sys.modules[PACKAGE] = pkg
    sys.modules[types_pkg.__name__] = types_pkg
    sys.modules[f"{PACKAGE}.types.compute"] = compute
    try:
        exec(compile(source, compute.__file__, "exec"), compute.__dict__)  # the library's own code, trimmed
        types_pkg.compute = compute  # type: ignore[attr-defined]
        for name in kept:
            setattr(types_pkg, name, getattr(compute, name))
        pkg.types = types_pkg  # type: ignore[attr-defined]
        out = types.ModuleType("gpu_fleet_compute_lite", __doc__)
        for svc, clients in SERVICES.items():
            mod = importlib.import_module(f"{PACKAGE}.services.{svc}")
            for c in clients:
                setattr(out, c, getattr(mod, c))
        for name in kept:
            setattr(out, name, getattr(compute, name))
        out.kept_messages = tuple(kept)  # type: ignore[attr-defined]
        compute._lite_package = out  # type: ignore[attr-defined]
        return out
    finally:
        for name in set(sys.modules) - before | {PACKAGE, types_pkg.__name__, f"{PACKAGE}.types.compute"}:
            if name == PACKAGE or name.startswith(PACKAGE + "."):
                sys.modules.pop(name, None)
