"""A real container runtime for the tests: Podman (with runc) pulls an image by digest and runs it as a kubelet would.

Debian 12's packages (`podman`, `runc`; scripts/setup.sh installs them) in a storage of the test's own
(`Engine(workdir)`: overlay layers under workdir, nothing in /var/lib/containers).  It pulls from the test's own
registry only (tests/harness/docker.py, where Docker builds and pushes the image) and runs with `--pull never`.

What this machine's sandbox needs, and sets in the engine's containers.conf (none of it changes what the image is or
how its process runs):

- runc with the cgroupfs manager: the host's cgroups are hybrid (v1 controllers and an empty v2), which crun
  refuses outright;
- RLIMIT_NOFILE / RLIMIT_NPROC set at or under the sandbox's hard limits (Podman's defaults raise them, which the
  sandbox refuses even as root);
- events to a file: no journald here.

`pod_flags` turns a Kubernetes container spec into `podman run` flags (the parts a kubelet would apply to one
container of the pod), refusing any field it does not map, so a Deployment that grows a field the test does not
honour fails the test instead of being half run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TOOLS = ("podman", "runc")


def unavailable_reason() -> str | None:
    """Why images cannot be built and run here (None: they can)."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    return f"not installed: {', '.join(missing)} (scripts/setup.sh installs them)" if missing else None


def unmount_under(directory: Path) -> None:
    """Lazily unmount every mount at or under `directory`, deepest first (what a container engine left mounted)."""
    mounts = Path("/proc/mounts").read_text().splitlines()
    for target in sorted((line.split()[1] for line in mounts), reverse=True):
        if target.startswith(str(directory)):
            subprocess.run(["umount", "-l", target], capture_output=True, check=False)


class EngineError(RuntimeError):
    """A pull or run failed: the command and the end of its output."""


class Engine:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        storage, conf = workdir / "storage.conf", workdir / "containers.conf"
        storage.write_text(f'[storage]\ndriver = "overlay"\nrunroot = "{workdir}/run"\ngraphroot = "{workdir}/graph"\n')
        conf.write_text(
            '[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n'
            '[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\n'
            f'tmp_dir = "{workdir}/tmp"\n'
        )
        self.env = {**os.environ, "CONTAINERS_STORAGE_CONF": str(storage), "CONTAINERS_CONF": str(conf)}

    def _call(self, argv: list[str], timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise EngineError(f"{' '.join(argv[:3])} ... exited {done.returncode}:\n{done.stderr[-3000:]}")
        return done

    def pull(self, reference: str) -> None:
        """`podman pull` of `reference` (`<registry>/<name>@sha256:<digest>`) from a loopback registry over plain
        HTTP, as a kubelet pulls a Deployment's image by digest."""
        self._call(["podman", "pull", "--quiet", "--tls-verify=false", reference])

    def config(self, image: str) -> dict[str, Any]:
        """The image's OCI config (`User`, `Env`, `Entrypoint`, ...)."""
        return json.loads(self._call(["podman", "image", "inspect", image, "--format", "{{json .Config}}"]).stdout)

    def exists(self, image: str) -> bool:
        return self._call(["podman", "image", "exists", image], check=False).returncode == 0

    def run(
        self, image: str, flags: list[str], args: list[str], timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """`podman run --rm --pull never FLAGS IMAGE ARGS`; the result, failed or not."""
        return self._call(["podman", "run", "--rm", "--pull", "never", *flags, image, *args], timeout, check=False)

    def start(self, image: str, flags: list[str], args: list[str]) -> str:
        """`podman run --detach`: the container's id (`stop` ends it, `logs` reads it)."""
        return self._call(["podman", "run", "--detach", "--pull", "never", *flags, image, *args]).stdout.strip()

    def stop(self, container: str, grace_s: int = 30) -> int:
        """SIGTERM, then SIGKILL after `grace_s` (what a kubelet does with terminationGracePeriodSeconds); the exit
        code.  The container is kept for `logs`."""
        self._call(["podman", "stop", "--time", str(grace_s), container], timeout=grace_s + 60)
        state = self._call(["podman", "inspect", container, "--format", "{{.State.ExitCode}}"]).stdout
        return int(state.strip())

    def logs(self, container: str) -> str:
        done = self._call(["podman", "logs", container])
        return done.stdout + done.stderr

    def close(self) -> None:
        """Remove every container and image, and unmount the storage's layers."""
        self._call(["podman", "rm", "--all", "--force"], check=False)
        self._call(["podman", "system", "reset", "--force"], check=False)
        unmount_under(self.workdir)


#: the container fields `pod_flags` honours; scheduling and probe fields have no meaning for one `podman run`
CONTAINER_FIELDS = {"name", "image", "args", "env", "ports", "readinessProbe", "livenessProbe", "resources",
                    "securityContext", "volumeMounts"}  # fmt: skip
SECURITY_FIELDS = {"allowPrivilegeEscalation", "readOnlyRootFilesystem", "runAsNonRoot", "capabilities"}
POD_SECURITY_FIELDS = {"runAsUser", "runAsGroup", "fsGroup", "seccompProfile"}
#: pod fields: the ones `pod_flags` applies, and the scheduler's, which have no meaning for one `podman run`
POD_FIELDS = {"containers", "volumes", "securityContext", "serviceAccountName", "automountServiceAccountToken",
              "affinity", "priorityClassName", "nodeSelector", "tolerations"}  # fmt: skip


#: where the kubelet mounts a pod's ServiceAccount token, CA and namespace (what `load_incluster_config` reads)
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True)
class InCluster:
    """What the kubelet gives every container of a pod for the API server: the service's host and port
    (KUBERNETES_SERVICE_HOST / _PORT) and the ServiceAccount's projected volume (`token`, `ca.crt`, `namespace`
    in `directory`)."""

    host: str
    port: int
    directory: Path


def pod_flags(
    pod: dict[str, Any],
    container: dict[str, Any],
    volumes: dict[str, Path],
    fields: dict[str, str],
    in_cluster: InCluster | None = None,
    network: str = "host",
    hosts: dict[str, str] | None = None,
) -> list[str]:
    """`podman run` flags that run `container` of `pod` as a kubelet would: its user, group and fsGroup, read-only
    root (no tmpfs added, as Kubernetes adds none), capabilities dropped, no privilege escalation, the runtime's
    default seccomp profile, the memory limit, its env (`fields`: the downward API's `metadata.*` values), and each
    volumeMount bound from `volumes` (volume name -> a directory here; an emptyDir's directory is made writable by
    the fsGroup, as the kubelet makes it), and with `in_cluster` the API server's service env and the
    ServiceAccount's token volume, read-only.  `network`: Podman's `--network` (this machine's by default, or
    `ns:/run/netns/NAME`, a pod network of the test's own); `hosts`: names the pod's DNS would resolve (name ->
    address).  Raises ValueError on a field it does not map."""
    unknown = (set(container) - CONTAINER_FIELDS) | (set(pod) - POD_FIELDS)
    security, pod_security = container.get("securityContext", {}), pod.get("securityContext", {})
    unknown |= (set(security) - SECURITY_FIELDS) | (set(pod_security) - POD_SECURITY_FIELDS)
    if unknown:
        raise ValueError(f"pod_flags does not map {sorted(unknown)}")
    flags = ["--network", network, "--user", f"{pod_security['runAsUser']}:{pod_security['runAsGroup']}"]
    flags += [f"--add-host={name}:{address}" for name, address in (hosts or {}).items()]
    if "fsGroup" in pod_security:
        flags += ["--group-add", str(pod_security["fsGroup"])]
    if pod_security.get("seccompProfile", {}).get("type", "RuntimeDefault") != "RuntimeDefault":
        raise ValueError(f"seccompProfile {pod_security['seccompProfile']}: only RuntimeDefault is mapped")
    if security.get("readOnlyRootFilesystem"):
        flags += ["--read-only", "--read-only-tmpfs=false"]
    if security.get("allowPrivilegeEscalation") is False:
        flags += ["--security-opt", "no-new-privileges"]
    flags += [f"--cap-drop={cap}" for cap in security.get("capabilities", {}).get("drop", [])]
    if security.get("runAsNonRoot") and pod_security.get("runAsUser", 0) == 0:
        raise ValueError("runAsNonRoot with runAsUser 0: the kubelet refuses to start it")
    memory = container.get("resources", {}).get("limits", {}).get("memory")
    if memory:
        flags += ["--memory", memory.removesuffix("i").lower()]
    for item in container.get("env", []):
        if "value" in item:
            flags += ["--env", f"{item['name']}={item['value']}"]
        else:
            flags += ["--env", f"{item['name']}={fields[item['valueFrom']['fieldRef']['fieldPath']]}"]
    kinds = {v["name"]: v for v in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        source, kind = volumes[mount["name"]], kinds[mount["name"]]
        if "emptyDir" in kind:
            os.chown(source, 0, pod_security.get("fsGroup", 0))
            source.chmod(0o2775)
        mode = "ro" if mount.get("readOnly") else "rw"
        flags += ["--volume", f"{source}:{mount['mountPath']}:{mode}"]
    if in_cluster is not None and pod.get("automountServiceAccountToken", True):
        flags += ["--env", f"KUBERNETES_SERVICE_HOST={in_cluster.host}", "--env",
                  f"KUBERNETES_SERVICE_PORT={in_cluster.port}",
                  "--volume", f"{in_cluster.directory}:{SERVICE_ACCOUNT_DIR}:ro"]  # fmt: skip
    return flags
