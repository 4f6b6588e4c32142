"""What the Slurm controller installs of gpu-fleet: the daemon's dependencies alone (deploy/controller.in, compiled
into the hash-pinned deploy/controller-requirements.txt), and the pinned checkout on the venv's path.

The lock once held every project dependency (Pulumi and its providers, matplotlib: 867 MB), since nothing checked
what the controller's programs import.  These tests check it both ways: statically, every third-party module the
controller's entry points import at any depth (function-level imports included) comes from a distribution the
lock pins; and by running those entry points in this venv with every other distribution made unimportable.  The
first-boot test (tests/firstboot/test_autoscaler_install.py) installs the lock on a booted controller and runs the
daemon from it."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from components.gcp.startup import AUTOSCALER_LOCK
from fleet.cli.main import PROJECT_PACKAGES
from tests.components.imports import imported_names

ROOT = Path(__file__).resolve().parents[2]
CONTROLLER_IN = ROOT / "deploy/controller.in"
#: what the controller runs: `fleet autoscaler` / `fleet slurm` (the systemd unit, the startup script), the
#: power-saving hooks (deploy/slurm/*.sh) and the topology timer (components/gcp/startup.py)
ENTRY_MODULES = ("fleet.cli.daemon", "autoscaler.slurm.hook", "fleet.slurm.topology")


def _requirements(path: Path) -> list[Requirement]:
    lines = (ln.split("#", 1)[0].strip() for ln in path.read_text().splitlines())
    return [Requirement(ln) for ln in lines if ln]


def _pins() -> dict[str, str]:
    lock = (ROOT / AUTOSCALER_LOCK).read_text()
    return {canonicalize_name(m[1]): m[2] for m in re.finditer(r"^([A-Za-z0-9_.-]+)==([^\s;]+) \\$", lock, re.M)}


def test_the_controllers_requirements_are_the_projects_with_its_ranges_and_the_lock_pins_them() -> None:
    """deploy/controller.in names pyproject dependencies only, each with pyproject's range (a range changed in one
    place only would let the controller run a version the project never allowed); the lock pins each, with
    hashes, inside that range."""
    project = {
        canonicalize_name(r.name): r
        for r in map(Requirement, tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])
    }
    wanted = _requirements(CONTROLLER_IN)
    pins = _pins()
    lock = (ROOT / AUTOSCALER_LOCK).read_text()
    hashed = re.findall(r"^[A-Za-z0-9_.-]+==\S+ \\\n\s+--hash=sha256:[0-9a-f]{64}", lock, re.M)
    assert len(hashed) == len(pins) > 0
    for req in wanted:
        name = canonicalize_name(req.name)
        assert name in project, f"deploy/controller.in: {req.name} is not a dependency in pyproject.toml"
        assert req.specifier == project[name].specifier, f"{req.name}: {req.specifier} here, {project[name]} there"
        version = pins.get(name)
        assert version is not None, f"{AUTOSCALER_LOCK}: {req.name} is not pinned; regenerate it (see its header)"
        assert req.specifier.contains(version, prereleases=True), f"{req.name}=={version} is outside {req.specifier}"
    for heavy in ("pulumi", "pulumi-gcp", "pulumi-kubernetes", "matplotlib", "jsonschema"):
        assert heavy not in pins, f"{AUTOSCALER_LOCK} pins {heavy}, which nothing the controller runs imports"


def _module_file(name: str) -> Path | None:
    """Where this project's module `name` is (None: not one of its modules)."""
    base = ROOT / Path(*name.split("."))
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.exists():
            return path
    return None


def import_closure(entries: tuple[str, ...]) -> dict[str, str]:
    """Third-party module name -> the project module that imports it, over every project module `entries` reach
    through any import statement (function-level ones included: a lazy import still runs on the controller)."""
    seen: set[str] = set()
    third_party: dict[str, str] = {}
    todo = list(entries)
    while todo:
        module = todo.pop()
        path = _module_file(module)
        if module in seen or path is None:
            continue
        seen.add(module)
        todo += [".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)]  # its packages
        for name in imported_names(path):
            top = name.split(".")[0]
            if top in PROJECT_PACKAGES:
                todo.append(name)
            elif top not in sys.stdlib_module_names and top != "__future__":
                third_party.setdefault(name, module)
    return third_party


@cache
def _files_of_distributions() -> dict[Path, str]:
    """Every file of every distribution in this venv -> its canonical distribution name."""
    owner: dict[Path, str] = {}
    for dist in importlib.metadata.distributions():
        for file in dist.files or ():
            owner[Path(dist.locate_file(file)).resolve()] = canonicalize_name(dist.metadata["Name"])
    return owner


def distribution_of(module: str) -> str | None:
    """The distribution this venv imports `module` from (its longest importable prefix; None: not installed)."""
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        try:
            spec = importlib.util.find_spec(".".join(parts[:i]))
        except (ImportError, ValueError):
            spec = None
        if spec and spec.origin and spec.origin not in ("built-in", "frozen"):
            return _files_of_distributions().get(Path(spec.origin).resolve())
    return None


def _lock_closure() -> set[str]:
    """The locked distributions (all of them: the lock is the closure of deploy/controller.in)."""
    return set(_pins())


def test_every_module_the_controller_imports_comes_from_the_lock() -> None:
    """Statically, at any depth: a module the daemon, the hooks or the topology timer import from a distribution
    the lock lacks would fail on the controller the first time that code path runs (a lazy import: maybe weeks
    after the boot the first-boot test checks)."""
    closure = import_closure(ENTRY_MODULES)
    assert {"apscheduler", "loguru", "httpx"} <= {name.split(".")[0] for name in closure}  # the walk sees them
    locked = _lock_closure()
    missing = {}
    for name, importer in sorted(closure.items()):
        dist = distribution_of(name)
        if dist is not None and dist not in locked:
            missing[name] = (dist, importer)
    assert not missing, f"imported on the controller but not in {AUTOSCALER_LOCK}: {missing}"


_BLOCKER = """
import importlib.abc, runpy, sys
blocked = set(sys.argv[1].split(","))
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (not on the controller)", name=name)
        return None
sys.meta_path.insert(0, Absent())
module, sys.argv = sys.argv[2], [sys.argv[2], *sys.argv[3:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


@cache
def _not_on_the_controller() -> str:
    """Top-level modules of every distribution in this venv that the lock does not pin (comma-separated)."""
    locked = _lock_closure()
    tops = importlib.metadata.packages_distributions()
    absent = {t for t, dists in tops.items() if not {canonicalize_name(d) for d in dists} & locked}
    return ",".join(sorted(absent - PROJECT_PACKAGES))  # gpu-fleet itself: the checkout, on the venv's path


def _run_as_on_the_controller(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m module args` in this venv with every module of a distribution the lock lacks unimportable."""
    return subprocess.run(
        [sys.executable, "-P", "-c", _BLOCKER, _not_on_the_controller(), module, *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    "argv",
    [
        ("fleet.cli.main", "autoscaler", "run", "--help"),
        ("fleet.cli.main", "autoscaler", "status", "--help"),
        ("fleet.cli.main", "slurm", "--help"),
        ("autoscaler.slurm.hook", "--help"),
        ("fleet.slurm.topology", "--help"),
    ],
    ids=" ".join,
)
def test_the_controllers_commands_start_with_the_lock_alone(argv: tuple[str, ...]) -> None:
    """The commands the controller runs start with only the lock's distributions importable (every other
    distribution of this venv, Pulumi and matplotlib among them, raises ModuleNotFoundError): `fleet` loads every
    command group at start, so a heavy import at the top of any of them would break the daemon's `fleet`."""
    assert "pulumi" in _not_on_the_controller().split(",") and "matplotlib" in _not_on_the_controller().split(",")
    run = _run_as_on_the_controller(*argv)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "usage" in run.stdout.lower()


def test_a_command_that_needs_what_the_controller_lacks_says_so() -> None:
    """`fleet synth` on the controller needs Pulumi: it says which package is missing and where to run it, exit 1,
    no traceback."""
    run = _run_as_on_the_controller("fleet.cli.main", "synth", "--stack", "gcp-l4-dev")
    assert run.returncode == 1, run.stderr
    assert "fleet: this command needs the Python package 'pulumi', which this environment does not have" in run.stderr
    assert "Traceback" not in run.stderr
