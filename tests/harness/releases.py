"""Which Slurm release a test's harnesses start: this machine's, or the one the stacks' images install.

- "22.05": Debian 12's Slurm, the one `scripts/setup.sh` installs on this machine.
- "23.11": Ubuntu 24.04's Slurm, what the stacks' controller and GPU images run (`slurm.release`'s default), from
  the noble root of `tests/slurm_compat/noble.py`, its programs put first on PATH.

`release_harnesses(release, request)` is the body of a module-scoped `slurm_factory` fixture: every real-Slurm
suite (tests/e2e, tests/slurm, tests/slurm_source: the root conftest's) runs on `e2e_release()` (`FLEET_E2E_SLURM`,
default the shipped 23.11), and `tests/e2e_22_05` re-runs a part of them on the other one.  A release that cannot
be started here skips the test saying why, or fails it under CI's FLEET_REQUIRE_SLURM=1, never silently runs
another release."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

import pytest

from fleet.spec.model import SlurmSpec
from tests.harness.requirements import missing
from tests.harness.slurm import SlurmHarness, harnesses, slurm_unavailable_reason, spec_release

#: the release the stacks' images install (Ubuntu 24.04): what `clusters[].slurm.release` defaults to
SHIPPED = str(SlurmSpec.model_fields["release"].default)
#: the release this machine installs (Debian 12)
HOST = "22.05"
RELEASES = (HOST, SHIPPED)
#: FLEET_E2E_SLURM=22.05 runs the real-Slurm suites on this machine's Slurm instead of the shipped release
E2E_VARIABLE = "FLEET_E2E_SLURM"


def e2e_release() -> str:
    """The release the real-Slurm suites run on: FLEET_E2E_SLURM, else the shipped one (a bad value: usage error)."""
    release = os.environ.get(E2E_VARIABLE, SHIPPED)
    if release not in RELEASES:
        raise pytest.UsageError(f"{E2E_VARIABLE}={release!r}: expected one of {', '.join(RELEASES)}")
    return release


@contextlib.contextmanager
def release_harnesses(release: str, request: pytest.FixtureRequest) -> Iterator[Callable[..., SlurmHarness]]:
    """A harness factory (`tests.harness.slurm.harnesses`) whose programs are `release`'s: for the shipped release
    the root conftest's `noble_bin` (the wrappers' directory, built only then) goes first on PATH until the factory
    is closed."""
    if reason := slurm_unavailable_reason():
        missing(reason)
    with pytest.MonkeyPatch.context() as patch:
        if release != HOST:
            patch.setenv("PATH", f"{request.getfixturevalue('noble_bin')}:{os.environ['PATH']}")
        if (found := spec_release()) != release:
            missing(f"the tests ask for Slurm {release} and the slurmd on PATH is {found}")
        with harnesses() as make:
            yield make
