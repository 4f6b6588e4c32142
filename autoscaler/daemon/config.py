"""The daemon's configuration: one YAML file, validated by pydantic before anything starts.

The file is read through the input gate (fleet.input: size limit, UTF-8, duplicate keys, bounded aliases,
finite numbers) and validated strictly (no "10" or true for a number).  Errors read
``FILE: field.path: reason`` (``autoscaler.yaml: slurm.mode: Input should be 'cli' or 'rest'``).  Relative
paths are resolved against the config file's directory.  See deploy/autoscaler.example.yaml.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from autoscaler.slurm.wake import DEPLOYED_STATE
from fleet.input import InputError, format_loc, load_yaml
from fleet.input.limits import MAX_CONFIG_BYTES
from fleet.input.policy import PolicyMapping
from fleet.input.types import STRICT, FilePath, text

HttpUrl = text(
    r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/%-]*)?", "must be an http(s)://HOST[:PORT] URL", 2048
)
Host = text(r"[A-Za-z0-9]([-A-Za-z0-9.]{0,251}[A-Za-z0-9])?|[0-9a-fA-F:]{2,39}", "must be a host name or an IP", 253)
SlurmName = text(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", "must be a Slurm name (letters, digits, '.', '_', '-')")
PoolRef = text(r"[a-z][-a-z0-9]{0,62}(/[a-z][-a-z0-9]{0,62})?", "must be a pool name or CLUSTER/POOL")
Seconds = Annotated[float, Field(gt=0, le=86_400)]
LOOPBACK_NAMES = ("localhost",)


class ConfigError(ValueError):
    """Invalid config; `errors` is a list of (field path, reason).  One line per error: `FILE: path: reason`."""

    def __init__(self, source: str, errors: list[tuple[str, str]]) -> None:
        self.source = str(source)
        self.errors = errors
        super().__init__(str(InputError(self.source, errors)))


class _Strict(BaseModel):
    model_config = ConfigDict(**STRICT, extra="forbid", frozen=True)  # no coercion, no NaN (fleet.input.types)


class SlurmConfig(_Strict):
    """How the daemon talks to Slurm."""

    mode: Literal["cli", "rest"] = "cli"
    bin_dir: FilePath | None = None  # where squeue/sinfo/scontrol live (PATH when unset)
    conf: FilePath | None = None  # SLURM_CONF for the CLI (the system default when unset)
    rest_url: HttpUrl | None = None  # slurmrestd, e.g. http://127.0.0.1:6820 (mode: rest)
    # "auto": the newest version gpu-fleet was checked against that slurmrestd serves (`RestSlurm`)
    rest_api: text(
        r"auto|v[0-9]+\.[0-9]+\.[0-9]+", "must be 'auto' or a slurmrestd API version such as v0.0.40", 16
    ) = "auto"
    rest_user: SlurmName = "slurm"
    # mode: rest, one of: the cluster's HS256 key, with which the daemon signs its own short-lived tokens (the
    # controller's AuthAltParameters=jwt_key file); a file holding a token someone renews (read again when it
    # changes); or SLURM_JWT in the environment (never renewed: `scontrol token` gives 30 minutes by default)
    jwt_key_file: FilePath | None = None
    jwt_file: FilePath | None = None
    jwt_lifespan_s: Annotated[int, Field(ge=60, le=86400)] = 3600  # of a token the daemon signs (jwt_key_file)
    timeout_s: Annotated[float, Field(gt=0, le=3600)] = 10.0
    partitions: list[SlurmName] | None = Field(None, max_length=256)  # partitions served (all the inventory's)

    @model_validator(mode="after")
    def _rest_needs_url(self) -> SlurmConfig:
        if self.mode == "rest" and not self.rest_url:
            raise ValueError("rest_url is required when mode is 'rest'")
        if self.jwt_key_file and self.jwt_file:
            raise ValueError("jwt_key_file and jwt_file exclude each other: the daemon signs its tokens, or reads one")
        return self


class ProviderConfig(_Strict):
    """The cloud: `gce` (google-cloud-compute, zonal MIGs from the inventory)."""

    kind: Literal["gce", "sim"] = "gce"  # sim: reserved for `fleet simulate` (the daemon refuses it)
    endpoint: HttpUrl | None = None  # Compute API endpoint override, e.g. a local fake: http://127.0.0.1:8089
    anonymous: bool = False  # AnonymousCredentials (only with a local endpoint)
    # call GCE as this service account (short-lived tokens minted with the VM's own credentials through the
    # IAM Credentials API; the VM's account needs roles/iam.serviceAccountTokenCreator on it, nothing else)
    impersonate_service_account: str | None = Field(None, pattern=r"^[a-z][a-z0-9-]{4,28}[a-z0-9]@[a-z0-9.-]+$")
    options: dict[str, Any] = Field(default_factory=dict)  # passed to the provider's constructor

    @model_validator(mode="after")
    def _anonymous_only_local(self) -> ProviderConfig:
        if self.anonymous and not (self.endpoint or "").startswith(("http://127.", "http://localhost")):
            raise ValueError("anonymous credentials are allowed only with a local endpoint (http://127.x)")
        if self.anonymous and self.impersonate_service_account:
            raise ValueError("anonymous and impersonate_service_account exclude each other")
        return self


class MetricsConfig(_Strict):
    """/metrics and /healthz: on loopback unless `allow_remote: true` says the exposure is meant."""

    enabled: bool = True
    host: Host = "127.0.0.1"
    port: int = Field(9464, ge=0, le=65535)  # 0: pick a free port (tests)
    healthy_after_s: Seconds = 120.0  # /healthz is 200 while the last good tick is younger
    allow_remote: bool = False  # serve on a non-loopback host (0.0.0.0, a NIC address): an explicit opt-in

    @model_validator(mode="after")
    def _loopback_unless_allowed(self) -> MetricsConfig:
        if self.enabled and not self.allow_remote and not _is_loopback(self.host):
            raise ValueError(
                f"host {self.host!r} is not a loopback address: the metrics endpoint has no authentication; "
                "set metrics.allow_remote: true to serve it beyond this machine (and firewall the port)"
            )
        return self


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class LoopConfig(_Strict):
    interval_s: Seconds = 10.0
    orphan_grace_s: Annotated[float, Field(ge=0, le=86_400 * 7)] = 600.0  # unwanted instance deleted after this
    resume_fail_backoff_s: Annotated[float, Field(ge=0, le=86_400 * 7)] = 1800.0  # ResumeTimeout: avoid offering
    launch_timeout_s: Seconds = 900.0  # an intent with no instance after this long is given up
    # a name Slurm powers up with no resume row, intent or instance this long: its hook call was lost, resume it;
    # one Slurm has powered down whose instance runs on with no suspend row: delete it; one DOWN for ResumeTimeout
    # with no resume-fail row: treat it as ResumeFailProgram's (autoscaler.daemon.lost_calls)
    lost_resume_grace_s: Annotated[float, Field(ge=1, le=86_400)] = 60.0
    lost_suspend_grace_s: Annotated[float, Field(ge=1, le=86_400)] = 60.0
    lost_resume_fail_grace_s: Annotated[float, Field(ge=1, le=86_400)] = 60.0
    prewarm: bool = False  # launch for PENDING jobs Slurm could not place (needs free CLOUD node names)


class DaemonConfig(_Strict):
    inventory: FilePath  # `pulumi stack output autoscaler_inventory --json` or `fleet synth --json` output
    pools: list[PoolRef] | None = Field(None, max_length=1024)  # pool names (or cluster/pool); all when unset
    state_path: FilePath = DEPLOYED_STATE
    policy: PolicyMapping = Field(default_factory=dict)  # planner Policy fields (autoscaler.model)
    slurm: SlurmConfig = Field(default_factory=SlurmConfig)
    provider: ProviderConfig = Field(default_factory=ProviderConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    loop: LoopConfig = Field(default_factory=LoopConfig)
    _source: str = PrivateAttr("config")  # the file it was read from: what the checks after parsing name

    @property
    def source(self) -> str:
        """The config file (`load_config`), or what `parse_config` was told; errors found later name it."""
        return self._source

    @field_validator("pools")
    @classmethod
    def _pools_nonempty(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and not v:
            raise ValueError("must list at least one pool, or be left out to manage all")
        return v

    @field_validator("state_path")
    @classmethod
    def _state_path_is_a_file(cls, v: Path) -> Path:
        if v.is_dir():
            raise ValueError(f"{v} is a directory; give the path of the state file (e.g. {v / 'autoscaler.db'})")
        parent = next((p for p in v.parents if p.exists()), None)
        if parent is not None and not parent.is_dir():
            raise ValueError(f"{parent} is not a directory, so {v} cannot be created")
        return v


def _resolve(cfg: dict[str, Any], base: Path) -> dict[str, Any]:
    def rel(v: Any) -> Any:
        if isinstance(v, str) and v and not Path(v).is_absolute():
            return str(base / v)
        return v

    out = dict(cfg)
    for key in ("inventory", "state_path"):
        if key in out:
            out[key] = rel(out[key])
    slurm = out.get("slurm")
    if isinstance(slurm, dict):
        out["slurm"] = {k: rel(v) if k in ("jwt_file", "conf", "bin_dir") else v for k, v in slurm.items()}
    return out


def _errors(exc: ValidationError) -> list[tuple[str, str]]:
    out = []
    for e in exc.errors(include_url=False):
        loc = e["loc"]
        reason = str(e["msg"]).removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            reason = (
                "unknown policy field (see docs/planner.md)" if "policy" in loc[:-1] else f"{reason} (unknown field)"
            )
        out.append((format_loc(loc) or "(root)", reason))
    return out


def parse_config(data: Any, *, source: str = "config", base: Path | None = None) -> DaemonConfig:
    if not isinstance(data, dict):
        raise ConfigError(source, [("(root)", "must be a mapping of settings")])
    try:
        cfg = DaemonConfig.model_validate(_resolve(data, base) if base else data)
    except ValidationError as exc:
        raise ConfigError(source, _errors(exc)) from None
    cfg._source = source
    return cfg


def load_config(path: Path | str) -> DaemonConfig:
    p = Path(path)
    try:
        data = load_yaml(p, what="autoscaler config", max_bytes=MAX_CONFIG_BYTES)
    except InputError as exc:
        raise ConfigError(exc.source, exc.errors) from None
    return parse_config(data, source=str(p), base=p.resolve().parent)
