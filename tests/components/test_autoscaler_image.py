"""deploy/autoscaler.Dockerfile against what runs it: the Deployment of components/kubernetes/autoscaler.py (its
args, its user, its read-only root) and the controller's install (the same deploy/install-venv.sh).  The build
itself, with Docker, its push, and a run with Podman are in tests/firstboot/test_autoscaler_image_build.py."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from components.gcp.startup import AUTOSCALER_HOME, AUTOSCALER_LOCK, INSTALL_VENV_SOURCE
from components.kubernetes.autoscaler import AutoscalerDeployment, manifests
from fleet.cli.main import PROJECT_PACKAGES
from tests.harness.dockerfile import copy_paths, env_pairs, exec_form, ignored, instructions, the_one

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "autoscaler.Dockerfile"


def deployed_pod() -> tuple[dict, dict]:
    """(the autoscaler's container, its pod spec) as components/kubernetes/autoscaler.py's Deployment declares them
    (the first-boot image test runs the container's args too)."""
    deployment = AutoscalerDeployment(
        cluster="c", namespace="gpu-fleet-system", image="r/a@sha256:" + "1" * 64, replicas=2, metrics_port=9464,
        config="x: 1\n", inventory="[]",
    )  # fmt: skip
    pod = next(m for m in manifests(deployment) if m["kind"] == "Deployment")["spec"]["template"]["spec"]
    return pod["containers"][0], pod


def test_the_image_runs_the_deployments_command_as_its_user() -> None:
    """The pod gives args only, so the image's ENTRYPOINT must be `fleet`: the wrapper install-venv.sh writes into
    the venv.  The image's USER is the pod's runAsUser:runAsGroup, so the files the build wrote as root are read,
    never written, by the daemon (the pod's root filesystem is read-only)."""
    steps = instructions(DOCKERFILE)
    container, pod = deployed_pod()
    assert exec_form(the_one(steps, "ENTRYPOINT")) == [f"{AUTOSCALER_HOME}/.venv/bin/fleet"]
    assert container["args"][:2] == ["autoscaler", "run"] and "command" not in container
    security = pod["securityContext"]
    assert the_one(steps, "USER").text == f"{security['runAsUser']}:{security['runAsGroup']}"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    env = env_pairs(the_one(steps, "ENV"))
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"  # nothing to write to: compiled at build time


def test_the_image_holds_the_projects_packages_and_builds_its_venv_with_the_controllers_script() -> None:
    """Every top-level package of the project is copied (the daemon imports fleet and autoscaler; `fleet` loads
    every command group, and the stack commands name what they lack rather than a missing module of the project), with
    deploy/ (the lock and the install script), to the path the ENTRYPOINT names; the venv is built by the script the
    controller's first boot writes and runs, and after the copies."""
    steps = instructions(DOCKERFILE)
    copies = [copy_paths(step) for step in steps if step.keyword == "COPY"]
    sources = {src for src, _ in copies}
    assert set(PROJECT_PACKAGES) | {"deploy", "pyproject.toml"} <= sources, sources
    assert all(dest == f"{AUTOSCALER_HOME}/{src}" for src, dest in copies), copies
    assert (ROOT / AUTOSCALER_LOCK).exists() and INSTALL_VENV_SOURCE.parent == ROOT / "deploy"
    runs = [step for step in steps if step.keyword == "RUN"]
    install = [step for step in runs if INSTALL_VENV_SOURCE.name in step.text]
    assert len(install) == 1
    assert shlex.split(install[0].text)[-2:] == [f"{AUTOSCALER_HOME}/deploy/install-venv.sh", AUTOSCALER_HOME]
    assert install[0].line > max(step.line for step in steps if step.keyword == "COPY")
    assert {"__pycache__", "*.pyc"} <= set(ignored(DOCKERFILE))


def test_the_base_image_is_an_argument_checked_to_be_a_digest_before_anything_is_built() -> None:
    """FROM takes BASE_IMAGE, which has no default, and the first RUN refuses one that is not `@sha256:...`: a tag
    could move under a rebuild (the stack takes the image itself by digest only, for the same reason)."""
    steps = instructions(DOCKERFILE)
    assert [s.keyword for s in steps[:4]] == ["ARG", "FROM", "ARG", "RUN"]
    assert steps[0].text == "BASE_IMAGE" and steps[1].text == "${BASE_IMAGE}" and steps[2].text == "BASE_IMAGE"

    def check(base: str) -> subprocess.CompletedProcess[str]:  # the RUN as the builder runs it: /bin/sh -c
        env = {"PATH": "/usr/bin:/bin", "BASE_IMAGE": base}
        return subprocess.run(["/bin/sh", "-c", steps[3].text], env=env, capture_output=True, text=True, check=False)

    assert check("python:3.12-slim-bookworm@sha256:" + "0" * 64).returncode == 0
    for base in ("python:3.12-slim-bookworm", ""):
        refused = check(base)
        assert refused.returncode == 1, base
        assert f"BASE_IMAGE={base}: give the base image by digest" in refused.stderr, refused.stderr
