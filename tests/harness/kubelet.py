"""A pod's container run as a kubelet runs it, by one `docker run` on a test's own dockerd (tests/harness/docker.py).

`run_as_kubelet(docker, pod, container, node)` translates what the GKE stack's DaemonSets use: hostPath volumes (at a
directory `node` standing for the node's file system; `DirectoryOrCreate` made 0755, as kubelet does), `command` /
`args` overriding the image's ENTRYPOINT / CMD as Kubernetes does, `env`, privileged, and the node's network and PID
namespaces (`hostNetwork`, `hostPID`): the machine's own, or those of a container standing for the node
(`namespaces_of`).  Also `emptyDir` volumes (a tmpfs), added capabilities, and native sidecars (`start_sidecar`:
an init container with `restartPolicy: Always` runs in the background next to the pod's containers).  Any other
pod or container field fails the call, so a field added to a manifest cannot be dropped here unnoticed: teach it
here first.  Pod metadata (annotations such as the NRI device injector's) is not the kubelet's and is not read."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.harness.docker import Docker, unavailable_reason
from tests.harness.minimal_root import minimal_root
from tests.harness.requirements import missing

#: the pod spec's fields `run_as_kubelet` translates, or that only place the pod (scheduling, priority)
POD_FIELDS = {"volumes", "hostNetwork", "hostPID", "initContainers", "containers"}
PLACEMENT = {"priorityClassName", "affinity", "tolerations", "nodeSelector"}
CONTAINER_FIELDS = {"name", "image", "command", "args", "env", "securityContext", "volumeMounts", "resources"}


def _options(pod: dict[str, Any], container: dict[str, Any], node: Path, namespaces_of: str | None) -> list[str]:
    """`docker run` options for `container` of `pod` (module doc); fails on any field it does not translate."""
    untranslated = (set(pod) - POD_FIELDS - PLACEMENT) | (set(container) - CONTAINER_FIELDS - {"restartPolicy"})
    security = container.get("securityContext", {})
    untranslated |= set(security) - {"privileged", "capabilities"}
    untranslated |= set(security.get("capabilities", {})) - {"add"}
    assert not untranslated, f"run_as_kubelet does not translate {sorted(untranslated)}: teach it, or the test lies"
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    options: list[str] = []
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        if "emptyDir" in volume:  # the pod's own scratch; `medium: Memory` is a tmpfs, as kubelet mounts it
            assert set(volume["emptyDir"]) <= {"medium"}, f"volume {mount['name']}: {volume['emptyDir']}"
            options += ["--tmpfs", mount["mountPath"]]
            continue
        assert set(volume) == {"name", "hostPath"}, f"volume {mount['name']}: only hostPath and emptyDir are translated"
        path = node / volume["hostPath"]["path"].lstrip("/")
        kind = volume["hostPath"].get("type", "")
        if kind == "DirectoryOrCreate":
            path.mkdir(mode=0o755, parents=True, exist_ok=True)  # kubelet: "created with permission set to 0755"
        else:
            assert kind == "Directory" and path.is_dir(), f"hostPath {volume['hostPath']}: not on the node"
        options += ["--volume", f"{path}:{mount['mountPath']}{':ro' if mount.get('readOnly') else ''}"]
    host = f"container:{namespaces_of}" if namespaces_of else "host"
    options += ["--privileged"] if security.get("privileged") else []
    # Kubernetes spells capabilities with or without the CAP_ prefix; docker takes the bare name
    options += [f"--cap-add={c.removeprefix('CAP_')}" for c in security.get("capabilities", {}).get("add", [])]
    options += ["--network", host] if pod.get("hostNetwork") else []
    options += ["--pid", host] if pod.get("hostPID") else []
    options += [arg for e in container.get("env", []) for arg in ("--env", f"{e['name']}={e['value']}")]
    if container.get("command"):  # `command` replaces the image's ENTRYPOINT, `args` its CMD
        options += ["--entrypoint", container["command"][0]]
    return options


def _argv(container: dict[str, Any]) -> list[str]:
    command, args = container.get("command"), container.get("args", [])
    return [*command[1:], *args] if command else list(args)


def run_as_kubelet(
    docker: Docker, pod: dict[str, Any], container: dict[str, Any], node: Path, namespaces_of: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`container` of `pod` run to its end as a kubelet on a node whose root is `node` runs it; `namespaces_of`: the
    container whose network and PID namespaces are the node's (default: this machine's)."""
    assert "restartPolicy" not in container, "a native sidecar does not run to its end: start_sidecar"
    return docker.run(_options(pod, container, node, namespaces_of), container["image"], _argv(container))


def start_sidecar(docker: Docker, pod: dict[str, Any], container: dict[str, Any], node: Path, name: str) -> str:
    """A native sidecar (an init container with `restartPolicy: Always`) started as kubelet starts one: in the
    background, before the pod's containers; returns the container's name (`name`)."""
    assert container.get("restartPolicy") == "Always", f"{container['name']}: not a native sidecar"
    options = ("--detach", "--name", name, *_options(pod, container, node, None))
    docker.run_detached_with(options, container["image"], _argv(container))
    return name


@contextmanager
def node_dockerd(work: Path, images: dict[str, Path]) -> Iterator[Docker]:
    """A dockerd of the test's own (no registry), holding each root directory of `images` (name -> root) as an
    image of that name, stopped on exit; the test is skipped where Docker cannot run as root (fails under CI:
    `tests.harness.requirements.missing`)."""
    if reason := unavailable_reason() or (None if os.geteuid() == 0 else "a dockerd of the test's own runs as root"):
        missing(reason)
    docker = Docker(work, registry=False)
    try:
        docker.start()
        for name, root in images.items():
            docker.import_image(root, name)
        yield docker
    finally:
        docker.close()


def stand_in(root: Path, programs: list[str], files: dict[str, tuple[str, int]]) -> Path:
    """`root` made a minimal root of `programs` (tests/harness/minimal_root.py) plus `files` (path -> (text, mode))."""
    minimal_root(root, programs)
    for path, (text, mode) in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        target.chmod(mode)
    return root
