"""Run a Pulumi program in-process under the SDK's mocks and record what it declares.

No CLI, no plugins, no credentials: `pulumi.runtime.set_mocks` with a `MockMonitor` subclass that
sees every `RegisterResourceRequest` (type token, name, parent URN, inputs as the engine receives
them, `ignoreChanges`, `protect`), `SynthMocks` returning the computed outputs real providers would
(ids, self links, names, emails, addresses), and the root stack's exports read back after the
program ran.  Duplicate URNs, which the mock monitor silently overwrites, are an error here.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import hashlib
import logging
import re
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc, settings
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

SECRET = "[secret]"
STACK_TYPE = "pulumi:pulumi:Stack"


class SynthError(RuntimeError):
    """The program declared something a real engine would reject (e.g. two resources with one URN)."""


@dataclass
class RecordedResource:
    """One resource registration as the engine would receive it."""

    urn: str
    type: str
    name: str
    parent: str | None
    inputs: dict[str, Any]
    custom: bool
    ignore_changes: list[str] = field(default_factory=list)
    protect: bool = False
    delete_before_replace: bool = False
    retain_on_delete: bool = False
    #: URNs of the resources this one waits for (`depends_on`, explicit or through a parent's)
    dependencies: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "urn": self.urn,
            "type": self.type,
            "name": self.name,
            "parent": self.parent,
            "custom": self.custom,
            "inputs": self.inputs,
            "options": {
                "ignoreChanges": self.ignore_changes,
                "protect": self.protect,
                "retainOnDelete": self.retain_on_delete,
                "dependsOn": self.dependencies,
            },
        }


def redact(value: Any) -> Any:
    """Inputs/outputs with every secret replaced by "[secret]" (secrets arrive wrapped from the SDK)."""
    if rpc.is_rpc_secret(value):
        return SECRET
    if isinstance(value, Mapping):
        return {k: redact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    if value is rpc.UNKNOWN:
        return "[unknown]"
    if isinstance(value, float) and value.is_integer():
        return int(value)  # protobuf Struct numbers are doubles; 8896.0 reads better as 8896
    return value


def _plain(value: Any) -> Any:
    """Inputs with secrets unwrapped, for computing mock outputs (never printed)."""
    if rpc.is_rpc_secret(value):
        return _plain(rpc.unwrap_rpc_secret(value))
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


# gcp:compute/<kind> -> the collection name in its self link.
_COMPUTE_COLLECTIONS = {
    "Network": "networks",
    "Subnetwork": "subnetworks",
    "Firewall": "firewalls",
    "Router": "routers",
    "InstanceTemplate": "instanceTemplates",
    "RegionInstanceTemplate": "instanceTemplates",
    "InstanceGroupManager": "instanceGroupManagers",
    "RegionInstanceGroupManager": "instanceGroupManagers",
    "Instance": "instances",
    "ResourcePolicy": "resourcePolicies",
    "RegionNetworkFirewallPolicy": "firewallPolicies",
    "Address": "addresses",
    "GlobalAddress": "addresses",
    "Disk": "disks",
}


_GLOBAL_KINDS = {"Network", "Firewall", "InstanceTemplate", "GlobalAddress"}  # global even when given a region


def _autoname(logical: str) -> str:
    """What Pulumi's autonaming would give: the logical name plus a random-looking suffix (stable here)."""
    return f"{logical}-{hashlib.sha1(logical.encode()).hexdigest()[:7]}"


class SynthMocks(pulumi_mocks.Mocks):
    """Computed outputs for the resource types the stacks declare; everything else echoes its inputs."""

    def __init__(self, default_project: str = "mock-project") -> None:
        self.default_project = default_project

    def call(self, args: pulumi_mocks.MockCallArgs) -> tuple[dict, list[tuple[str, str]] | None]:
        return {}, None

    def new_resource(self, args: pulumi_mocks.MockResourceArgs) -> tuple[str | None, dict]:
        inputs = _plain(args.inputs)
        if not args.custom:
            return "", {}
        state = dict(inputs)
        name = inputs.get("name") or (
            f"{inputs['namePrefix']}{_autoname(args.name)[-7:]}" if inputs.get("namePrefix") else _autoname(args.name)
        )
        state.setdefault("name", name)
        project = inputs.get("project") or self.default_project
        state.setdefault("project", project)
        pkg, _, kind = args.typ.partition(":")[2].partition("/")
        kind = kind.split(":")[-1]
        resource_id = name
        if pkg == "compute" and kind in _COMPUTE_COLLECTIONS:
            if kind in _GLOBAL_KINDS:
                scope = "global"
            elif "zone" in inputs:
                scope = f"zones/{inputs['zone']}"
            elif "region" in inputs:
                scope = f"regions/{inputs['region']}"
            else:
                scope = "global"
            resource_id = f"projects/{project}/{scope}/{_COMPUTE_COLLECTIONS[kind]}/{name}"
            state["selfLink"] = f"https://www.googleapis.com/compute/v1/{resource_id}"
            if kind.endswith("InstanceTemplate"):
                state["selfLinkUnique"] = f"{state['selfLink']}?uniqueId=1234567890"
            if kind.endswith("InstanceGroupManager"):
                state["instanceGroup"] = state["selfLink"].replace("instanceGroupManagers", "instanceGroups")
            if kind == "GlobalAddress" and inputs.get("purpose") == "VPC_PEERING":
                state.setdefault("address", "10.99.0.0")  # the range Service Networking would pick
            if kind == "Instance":
                nics = [dict(n) for n in inputs.get("networkInterfaces", [])]
                for i, nic in enumerate(nics):
                    nic.setdefault("networkIp", f"10.0.0.{10 + i}")
                state["networkInterfaces"] = nics
        elif args.typ == "gcp:container/cluster:Cluster":
            resource_id = f"projects/{project}/locations/{inputs.get('location')}/clusters/{name}"
            state.update(
                endpoint="172.16.0.2",
                masterAuth={"clusterCaCertificate": base64.b64encode(b"mock-cluster-ca").decode()},
                selfLink=f"https://container.googleapis.com/v1/{resource_id}",
            )
        elif args.typ == "gcp:container/nodePool:NodePool":
            cluster = str(inputs.get("cluster", "cluster")).rsplit("/", 1)[-1]
            suffix = hashlib.sha1(f"{cluster}/{name}".encode()).hexdigest()[:8]
            base = f"https://www.googleapis.com/compute/v1/projects/{project}/zones"
            mig = f"gke-{cluster}-{name}-{suffix}-grp"
            zones = inputs.get("nodeLocations") or []
            resource_id = f"{inputs.get('location')}/{cluster}/{name}"
            state.update(
                managedInstanceGroupUrls=[f"{base}/{z}/instanceGroupManagers/{mig}" for z in zones],
                instanceGroupUrls=[f"{base}/{z}/instanceGroups/{mig}" for z in zones],
            )
        elif args.typ == "gcp:projects/iAMCustomRole:IAMCustomRole":
            resource_id = f"projects/{project}/roles/{inputs['roleId']}"
            state["name"] = resource_id
        elif args.typ == "gcp:serviceaccount/account:Account":
            email = f"{inputs['accountId']}@{project}.iam.gserviceaccount.com"
            state.update(
                email=email, member=f"serviceAccount:{email}", name=f"projects/{project}/serviceAccounts/{email}"
            )
            resource_id = state["name"]
        elif args.typ == "gcp:secretmanager/secret:Secret":
            resource_id = f"projects/{project}/secrets/{inputs['secretId']}"
            state["name"] = resource_id
        elif args.typ == "gcp:secretmanager/secretVersion:SecretVersion":
            resource_id = f"{inputs['secret']}/versions/1"
            state["name"] = resource_id
        elif args.typ == "gcp:filestore/instance:Instance":
            nets = [dict(n) for n in inputs.get("networks", [])]
            for n in nets:
                n.setdefault("ipAddresses", ["10.0.15.2"])
            state["networks"] = nets
        elif args.typ == "gcp:lustre/instance:Instance":
            state["mountPoint"] = f"10.0.15.3@tcp:/{inputs.get('filesystem', 'lustre')}"
        elif args.typ == "gcp:storage/bucket:Bucket":
            state["url"] = f"gs://{name}"
            state["selfLink"] = f"https://www.googleapis.com/storage/v1/b/{name}"
        elif args.typ == "random:index/randomBytes:RandomBytes":
            raw = hashlib.sha256(args.name.encode()).digest() * (int(inputs.get("length", 32)) // 32 + 1)
            raw = raw[: int(inputs.get("length", 32))]

            state.update(base64=base64.b64encode(raw).decode(), hex=raw.hex())
        elif args.typ == "random:index/randomPassword:RandomPassword":
            state["result"] = hashlib.sha256(args.name.encode()).hexdigest()[: int(inputs.get("length", 32))]
        return resource_id, state


#: the event loops the mock engine made its threads create (one per thread that registers a resource or runs the
#: program), closed at exit: left to the garbage collector at interpreter shutdown, a loop may outlive its own
#: self-pipe and print "Exception ignored in BaseEventLoop.__del__ ... Invalid file descriptor: -1" after a
#: successful command.  Not closed earlier: the threads are reused by the next run in the same process.
_LOOPS: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def _thread_loop() -> None:
    """This thread's event loop, created if it has none (what the SDK's mocks need), and remembered for exit."""
    _LOOPS.add(pulumi_mocks._ensure_event_loop())


@atexit.register
def _close_loops() -> None:
    for loop in list(_LOOPS):
        if not loop.is_running() and not loop.is_closed():
            loop.close()


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """The SDK's mock monitor, also recording each registration request and rejecting duplicate URNs."""

    def __init__(self, mocks: pulumi_mocks.Mocks) -> None:
        super().__init__(mocks)
        self.records: list[RecordedResource] = []
        self.duplicates: list[str] = []
        self._lock = threading.Lock()

    def RegisterResource(self, request):  # gRPC method name
        urn = self.make_urn(request.parent, request.type, request.name)
        if request.type != STACK_TYPE:
            _thread_loop()
            record = RecordedResource(
                urn=urn,
                type=request.type,
                name=request.name,
                parent=request.parent or None,
                inputs=redact(rpc.deserialize_properties(request.object)),
                custom=bool(request.custom),
                ignore_changes=list(request.ignoreChanges),
                protect=bool(request.protect),
                delete_before_replace=bool(request.deleteBeforeReplace),
                retain_on_delete=bool(request.retainOnDelete),
                dependencies=list(request.dependencies),
            )
            with self._lock:
                if any(r.urn == urn for r in self.records):
                    self.duplicates.append(urn)
                self.records.append(record)
        return super().RegisterResource(request)


@dataclass
class SynthResult:
    stack: str
    project: str
    resources: list[RecordedResource]
    outputs: dict[str, Any]
    #: what the program told the engine at warning level or above (`pulumi.log.warn` / `error`): what `pulumi up`
    #: would print as diagnostics
    warnings: list[str] = field(default_factory=list)

    def by_type(self, type_token: str) -> list[RecordedResource]:
        return [r for r in self.resources if r.type == type_token]

    def named(self, name: str) -> RecordedResource:
        matches = [r for r in self.resources if r.name == name]
        if len(matches) != 1:
            raise KeyError(f"{len(matches)} resources named {name!r}")
        return matches[0]

    def children_of(self, urn: str) -> list[RecordedResource]:
        return [r for r in self.resources if r.parent == urn]


_STACK_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def run_program(
    program: Callable[[], None],
    *,
    stack: str,
    config: Mapping[str, Any] | None = None,
    project: str = "gpu-fleet",
    default_gcp_project: str = "mock-project",
) -> SynthResult:
    """Run `program` (which declares resources and calls `pulumi.export`) under mocks.

    `config` maps full keys (`gpu-fleet:fleet`, `gcp:project`) to values; non-strings are JSON
    encoded, as the CLI passes structured config.  Exceptions from the program propagate unchanged
    (a SpecError raised before any resource is declared leaves `records` empty).
    """
    import json

    if not _STACK_NAME.match(stack):
        raise ValueError(f"stack: invalid stack name {stack!r}")
    # `{secure: <ciphertext>}` is how the CLI stores `pulumi config set --secret`: it would decrypt it and mark
    # the key secret.  Without the stack's key we cannot decrypt: the program sees "[secret]", still secret.
    config = dict(config or {})
    secret_keys = [k for k, v in config.items() if isinstance(v, Mapping) and set(v) == {"secure"}]
    pulumi.runtime.set_all_config(
        {k: SECRET if k in secret_keys else v if isinstance(v, str) else json.dumps(v) for k, v in config.items()},
        secret_keys=secret_keys,
    )
    mocks = SynthMocks(default_project=default_gcp_project)
    monitor = RecordingMonitor(mocks)
    diagnostics = _Diagnostics()
    settings.ROOT.set(None)  # a fresh root stack per run, so exports of an earlier run do not leak in
    pulumi.runtime.set_mocks(
        mocks, project=project, stack=stack, preview=False, monitor=monitor, logger=diagnostics.logger
    )
    settings.SETTINGS.rpc_manager.clear()
    settings.SETTINGS.outputs.clear()
    exports: dict[str, Any] = {}

    async def main() -> None:
        program()
        root = settings.get_root_resource()
        for key, value in dict(getattr(root, "outputs", {})).items():
            out = pulumi.Output.from_input(value)
            resolved = await out.future()
            exports[key] = SECRET if await out.is_secret() else resolved

    _thread_loop()
    _sync_await(run_pulumi_func(main))
    if monitor.duplicates:
        raise SynthError(
            "duplicate resource URNs (names must be unique per type and parent): " + ", ".join(monitor.duplicates)
        )
    # Registration order depends on when each resource's inputs resolved: sort so output is reproducible.
    resources = sorted(monitor.records, key=lambda r: r.urn)
    return SynthResult(
        stack=stack, project=project, resources=resources, outputs=exports, warnings=list(diagnostics.messages)
    )


class _Diagnostics(logging.Handler):
    """The mock engine's log (`pulumi.log.*` under mocks goes to a `logging.Logger`): warnings and errors kept in
    order, nothing printed (the CLI prints them)."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.messages: list[str] = []
        self.logger = logging.Logger("fleet.synth.diagnostics", level=logging.WARNING)
        self.logger.addHandler(self)
        self.logger.propagate = False

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
