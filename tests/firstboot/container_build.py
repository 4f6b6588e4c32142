"""deploy/autoscaler.Dockerfile built on a booted first-boot VM, instruction by instruction, and its ENTRYPOINT run.

No container engine can run on this machine, so a booted VM (Ubuntu 24.04's Python 3.12, or Debian 12's 3.11 under
FLEET_FIRSTBOOT_OS=debian; its pip pointed at the lock's wheels: tests/firstboot/mirror.py) stands in for the base
image, and each instruction is done as Docker's builder does it (tests/harness/dockerfile.py reads them and refuses
any it does not know):

- COPY: the path of the build context (this checkout's working tree, as `docker build .` sends it, less the
  `.dockerignore` names) to the image's path, owned by root;
- RUN: `/bin/sh -c` with the ARG and ENV values of that point in its environment, as root;
- ENV, USER, ENTRYPOINT: kept for `Image.run`, which runs the ENTRYPOINT with the pod's arguments as USER.

The image's files are staged under STAGE in the VM and bind-mounted at their own path (one directory,
`app_dir`) in a private mount namespace for each RUN and each run, so the controller's own /opt/gpu-fleet, and the
daemon running from it, are never touched.  For `Image.run` that mount is read-only, as the pod's root filesystem
is.  Not covered: the base image itself (Debian's Python from python.org's build, not Ubuntu's), layers, and
Docker's own parsing beyond the instructions above."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.firstboot.vm import PATH, Vm
from tests.harness.dockerfile import copy_paths, env_pairs, exec_form, ignored, instructions

STAGE = "/var/tmp/fb-image"


@dataclass
class Image:
    vm: Vm
    app_dir: str  # where the image's COPYs all land (one directory)
    env: dict[str, str] = field(default_factory=dict)
    user: str = "0:0"
    entrypoint: list[str] = field(default_factory=list)

    def _in_image(
        self,
        argv: list[str],
        user: str,
        read_only: bool,
        args: dict[str, str] | None = None,
        volumes: dict[str, str] | None = None,
    ) -> list[str]:
        mounts = {f"{STAGE}{self.app_dir}": self.app_dir, **(volumes or {})}
        steps = []
        for source, target in mounts.items():
            steps += [f"mkdir -p {shlex.quote(target)}", f"mount --bind {shlex.quote(source)} {shlex.quote(target)}"]
        for target in [self.app_dir] if read_only else []:
            steps.append(f"mount -o remount,bind,ro {target}")
        for target in (volumes or {}).values():  # a pod's ConfigMap volume: read-only
            steps.append(f"mount -o remount,bind,ro {shlex.quote(target)}")
        mount = " && ".join(steps)
        values = {**(args or {}), **self.env}  # an ENV overrides an ARG of the same name, as in Docker
        env = ["env", "-i", f"PATH={PATH}", "HOME=/", *(f"{k}={v}" for k, v in values.items())]
        uid, _, gid = user.partition(":")
        drop = [] if uid == "0" else ["setpriv", f"--reuid={uid}", f"--regid={gid or uid}", "--clear-groups"]
        inner = shlex.join([*drop, *env, *argv])
        return ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", f"{mount} && exec {inner}"]

    def run(
        self, *args: str, volumes: dict[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """The ENTRYPOINT with `args` (a pod's `args`), as USER, the image's files read-only; `volumes`: a VM
        directory -> where the container sees it, read-only (a pod's ConfigMap volumeMounts)."""
        argv = self._in_image([*self.entrypoint, *args], self.user, read_only=True, volumes=volumes)
        return self.vm.run(argv, timeout=timeout)

    def shell(self, script: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """`script` by /bin/sh in the built image, as USER, read-only (what a user's `docker run --entrypoint sh`
        would do)."""
        return self.vm.run(self._in_image(["/bin/sh", "-c", script], self.user, read_only=True), timeout=timeout)


def build(vm: Vm, dockerfile: Path, context: Path, build_args: dict[str, str]) -> Image:
    """Build `dockerfile` with `context` on `vm`; a failing RUN raises, naming its line and its output."""
    steps = instructions(dockerfile)
    skip = shutil.ignore_patterns(*ignored(dockerfile))
    dests = {copy_paths(step)[1] for step in steps if step.keyword == "COPY"}
    app_dirs = {"/" + "/".join(dest.strip("/").split("/")[:2]) for dest in dests}
    if len(app_dirs) != 1:
        raise ValueError(f"{dockerfile}: the COPYs land in {sorted(app_dirs)}: the stand-in follows one directory")
    image = Image(vm, app_dirs.pop())
    args: dict[str, str] = {}
    shutil.rmtree(vm.path(STAGE), ignore_errors=True)
    vm.path(f"{STAGE}{image.app_dir}").mkdir(parents=True)  # empty until the COPYs: the base image has none of it
    for step in steps:
        if step.keyword == "ARG":
            if "=" in step.text:
                raise ValueError(f"{dockerfile}:{step.line}: ARG {step.text}: a default is not followed here")
            args[step.text] = build_args.get(step.text, "")
        elif step.keyword == "FROM":  # the base is the VM; an ARG before FROM is FROM's alone, as in Docker
            args = {}
        elif step.keyword == "COPY":
            src, dest = copy_paths(step)
            source, target = context / src, vm.path(f"{STAGE}{dest}")
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, target, ignore=skip, dirs_exist_ok=True)
            else:
                shutil.copy2(source, target)
        elif step.keyword == "RUN":
            done = vm.run(image._in_image(["/bin/sh", "-c", step.text], "0", False, args), timeout=900)
            if done.returncode != 0:
                raise BuildFailed(f"{dockerfile}:{step.line}: RUN exited {done.returncode}:\n{done.stderr[-3000:]}")
        elif step.keyword == "ENV":
            image.env.update(env_pairs(step))
        elif step.keyword == "USER":
            image.user = step.text
        elif step.keyword == "ENTRYPOINT":
            image.entrypoint = exec_form(step)
    return image


class BuildFailed(RuntimeError):
    """A RUN of the Dockerfile failed: the line, the exit code and the end of its output."""
