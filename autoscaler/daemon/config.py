"""The daemon's configuration: one YAML file, validated by pydantic before anything starts.

Errors name the field path and the reason (``slurm.mode: Input should be 'cli' or 'rest'``).  Relative paths
are resolved against the config file's directory.  See deploy/autoscaler.example.yaml.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class ConfigError(ValueError):
    """Invalid config; `errors` is a list of (field path, reason)."""

    def __init__(self, source: str, errors: list[tuple[str, str]]) -> None:
        self.errors = errors
        lines = "\n".join(f"  {path}: {reason}" for path, reason in errors)
        super().__init__(f"{source}: invalid autoscaler config\n{lines}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SlurmConfig(_Strict):
    """How the daemon talks to Slurm."""

    mode: Literal["cli", "rest"] = "cli"
    bin_dir: Path | None = None  # where squeue/sinfo/scontrol live (PATH when unset)
    conf: Path | None = None  # SLURM_CONF for the CLI (the system default when unset)
    rest_url: str | None = None  # slurmrestd, e.g. http://127.0.0.1:6820 (mode: rest)
    rest_api: str = "v0.0.38"
    rest_user: str = "slurm"
    jwt_file: Path | None = None  # a file holding SLURM_JWT (mode: rest); or set SLURM_JWT in the environment
    timeout_s: float = Field(10.0, gt=0)
    partitions: list[str] | None = None  # partitions the daemon serves (all the inventory's when unset)

    @model_validator(mode="after")
    def _rest_needs_url(self) -> SlurmConfig:
        if self.mode == "rest" and not self.rest_url:
            raise ValueError("rest_url is required when mode is 'rest'")
        return self


class ProviderConfig(_Strict):
    """The cloud: `gce` (google-cloud-compute, zonal MIGs from the inventory)."""

    kind: Literal["gce", "sim"] = "gce"  # sim: reserved for `fleet simulate` (the daemon refuses it)
    endpoint: str | None = None  # Compute API endpoint override, e.g. a local fake: http://127.0.0.1:8089
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
    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(9464, ge=0, le=65535)  # 0: pick a free port (tests)
    healthy_after_s: float = Field(120.0, gt=0)  # /healthz is 200 while the last good tick is younger


class LoopConfig(_Strict):
    interval_s: float = Field(10.0, gt=0)
    orphan_grace_s: float = Field(600.0, ge=0)  # an unwanted instance is deleted after this long
    resume_fail_backoff_s: float = Field(1800.0, ge=0)  # ResumeTimeout: avoid that offering this long
    launch_timeout_s: float = Field(900.0, gt=0)  # an intent with no instance after this long is given up
    prewarm: bool = False  # launch for PENDING jobs Slurm could not place (needs free CLOUD node names)


class DaemonConfig(_Strict):
    inventory: Path  # `pulumi stack output autoscaler_inventory --json` or `fleet synth --json` output
    pools: list[str] | None = None  # pool names (or cluster/pool) to manage; all when unset
    state_path: Path = Path("/var/lib/gpu-fleet/autoscaler.db")
    policy: dict[str, Any] = Field(default_factory=dict)  # planner Policy fields (autoscaler.model)
    slurm: SlurmConfig = Field(default_factory=SlurmConfig)
    provider: ProviderConfig = Field(default_factory=ProviderConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    loop: LoopConfig = Field(default_factory=LoopConfig)

    @field_validator("pools")
    @classmethod
    def _pools_nonempty(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and not v:
            raise ValueError("must list at least one pool, or be left out to manage all")
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
    return [(".".join(str(p) for p in e["loc"]) or "(root)", e["msg"]) for e in exc.errors()]


def parse_config(data: Any, *, source: str = "config", base: Path | None = None) -> DaemonConfig:
    if not isinstance(data, dict):
        raise ConfigError(source, [("(root)", "must be a mapping of settings")])
    try:
        return DaemonConfig.model_validate(_resolve(data, base) if base else data)
    except ValidationError as exc:
        raise ConfigError(source, _errors(exc)) from None


def load_config(path: Path | str) -> DaemonConfig:
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except OSError as exc:
        raise ConfigError(str(p), [("(file)", exc.strerror or str(exc))]) from None
    except yaml.YAMLError as exc:
        raise ConfigError(str(p), [("(file)", f"not valid YAML: {exc}")]) from None
    return parse_config(data, source=str(p), base=p.resolve().parent)
