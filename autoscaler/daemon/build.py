"""Wire a `Daemon` from a `DaemonConfig`: inventory -> pools, policy, Slurm client, provider, store, metrics.

Heavy imports (google-cloud-compute) happen here, only for the provider the config names.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autoscaler.cloud import Provider
from autoscaler.core.settings import DEFAULT_BOOT_S, SettingsTracker
from autoscaler.daemon.config import ConfigError, DaemonConfig, SlurmConfig
from autoscaler.daemon.metrics import Metrics
from autoscaler.daemon.state import StateStore
from autoscaler.daemon.tick import Daemon
from autoscaler.model import Policy, PolicyError, Pool, policy_from_mapping
from autoscaler.slurm.client import CliSlurm, RestSlurm, SlurmClient
from autoscaler.slurm.errors import SlurmUnavailable
from autoscaler.slurm.tokens import SigningKey, StaticToken, TokenFile, TokenSource
from fleet.input import InputError
from fleet.inventory import InventoryPool, load_inventory


@dataclass(frozen=True)
class CheckedConfig:
    """A config `check_config` accepted: the pools the daemon manages (inventory entries and planner pools) and the
    policy it plans with."""

    inventory: list[InventoryPool]
    pools: list[Pool]
    policy: Policy


def check_config(cfg: DaemonConfig) -> CheckedConfig:
    """Every check of the config and its inventory that needs no cloud, Slurm or state store: the one validation
    `fleet autoscaler run` and `fleet autoscaler init` share, run before either creates anything.  ConfigError
    names the config (or inventory) file and the field."""
    inv, pools = load_pools(cfg)
    policy = build_policy(cfg.policy, source=cfg.source)
    errors = policy_pool_problems(policy, pools)
    if why := policy.share_nodes_refusal(p.capacity_type for p in pools):
        errors.append(("policy.share_nodes", why))
    if cfg.provider.kind == "sim":
        errors.append(("provider.kind", "'sim' runs through `fleet simulate`, not the daemon"))
    if errors:
        raise ConfigError(cfg.source, errors)
    return CheckedConfig(inv, pools, policy)


def load_pools(cfg: DaemonConfig) -> tuple[list[InventoryPool], list[Pool]]:
    """The inventory's pools the config selects (`pools`, all when unset), checked whole (`load_inventory`)."""
    try:
        inv = load_inventory(cfg.inventory)
    except InputError as exc:
        raise ConfigError(exc.source, exc.errors) from None
    except OSError as exc:
        raise ConfigError(cfg.source, [("inventory", f"cannot read {cfg.inventory}: {exc.strerror or exc}")]) from None
    names = [p.name for p in inv]
    qualified = len(set(names)) != len(names)
    if cfg.pools is not None:
        known = {p.name for p in inv} | {f"{p.cluster}/{p.name}" for p in inv}
        unknown = [p for p in cfg.pools if p not in known]
        if unknown:
            raise ConfigError(cfg.source, [("pools", f"not in the inventory: {unknown} (known: {sorted(known)})")])
        inv = [p for p in inv if p.name in cfg.pools or f"{p.cluster}/{p.name}" in cfg.pools]
    if kueue := [f"{p.cluster}/{p.name}" for p in inv if p.scheduler != "slurm"]:
        which = "selects" if cfg.pools is not None else "is unset, so it takes every pool of the inventory, including"
        why = "kueue pools are the Kubernetes daemon's (a config with a kubernetes: section): list Slurm pools"
        raise ConfigError(cfg.source, [("pools", f"{which} {', '.join(kueue)}: {why}")])
    try:
        return inv, [Pool.from_inventory(p, qualified=qualified) for p in inv]
    except ValueError as exc:  # load_inventory checked what Pool requires: a gap there, reported as input still
        raise ConfigError(str(cfg.inventory), [("", str(exc))]) from None


def policy_pool_problems(policy: Policy, pools: Sequence[Pool]) -> list[tuple[str, str]]:
    """`policy.pool_max_nodes` / `pool_max_gpus` keys that name no managed pool: their cap would never apply."""
    names = sorted(p.name for p in pools)
    return [
        (f"policy.{field}", f"{key!r} is not a pool the daemon manages (its pools: {', '.join(names)})")
        for field, key in policy.caps_on_unknown_pools(names)
    ]


def build_policy(raw: dict[str, Any], *, source: str = "config") -> Policy:
    try:
        return policy_from_mapping(raw)
    except PolicyError as exc:
        raise ConfigError(source, [(f"policy.{f}", r) for f, r in exc.errors]) from None


def build_settings(raw: dict[str, Any], policy: Policy) -> SettingsTracker:
    """The settings rule over the jobs the daemon sees, on top of the config's `policy`; the fields the config
    sets (`raw`) stay as set.  Boot time: the config's `expected_boot_s`, else `DEFAULT_BOOT_S`."""
    boot = policy.expected_boot_s if "expected_boot_s" in raw else DEFAULT_BOOT_S
    return SettingsTracker(base=policy, boot_s=boot, explicit=frozenset(raw))


def rest_tokens(s: SlurmConfig, *, config: str = "config") -> TokenSource:
    """Where `mode: rest` gets its slurmrestd tokens (`autoscaler.slurm.tokens`): the key it signs with, the file it
    re-reads, or SLURM_JWT; a key or file that cannot be used now is a config error, before any tick."""
    if s.jwt_key_file or s.jwt_file:
        field = "slurm.jwt_key_file" if s.jwt_key_file else "slurm.jwt_file"
        source: TokenSource = (
            SigningKey(s.jwt_key_file, s.rest_user, lifespan_s=s.jwt_lifespan_s)
            if s.jwt_key_file
            else TokenFile(s.jwt_file)  # type: ignore[arg-type]
        )
        try:
            source.token()
        except SlurmUnavailable as exc:
            raise ConfigError(config, [(field, str(exc).removeprefix(f"{field} "))]) from None
        return source
    if token := os.environ.get("SLURM_JWT", "").strip():
        return StaticToken(token)
    why = "mode 'rest' needs a token: jwt_key_file, jwt_file or SLURM_JWT"
    raise ConfigError(config, [("slurm.jwt_key_file", why)])


def build_slurm(cfg: DaemonConfig) -> SlurmClient:
    s = cfg.slurm
    if s.mode == "rest":
        cli = CliSlurm(bin_dir=s.bin_dir, conf=s.conf, timeout_s=s.timeout_s)  # node updates on 22.05
        token = rest_tokens(s, config=cfg.source)
        return RestSlurm(
            s.rest_url or "", token=token, user=s.rest_user, api=s.rest_api, timeout_s=s.timeout_s, cli=cli
        )
    return CliSlurm(bin_dir=s.bin_dir, conf=s.conf, timeout_s=s.timeout_s)


CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"


class CredentialsUnavailable(RuntimeError):
    """No Application Default Credentials to mint the autoscaler account's tokens from: on a GCE VM the metadata
    server did not answer (a boot still bringing up the network, a guard not yet letting SlurmUser through).  Not a
    config error: the same config works once it answers, so the daemon exits 1 and systemd starts it again
    (`Restart=on-failure`), where exit 2 would leave it stopped."""


def impersonated(target: str, source: Any = None) -> Any:
    """Credentials for `target` minted from `source` (default: Application Default Credentials, i.e. the
    VM's own account through the metadata server), refreshed before they expire (1 h tokens)."""
    from google.auth import impersonated_credentials

    if source is None:
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError

        try:
            source, _ = google.auth.default(scopes=[CLOUD_PLATFORM])
        except DefaultCredentialsError as exc:
            raise CredentialsUnavailable(
                f"provider.impersonate_service_account: no source credentials to impersonate {target} with (on a GCE"
                f" VM: the metadata server did not answer this user): {exc}"
            ) from None
    return impersonated_credentials.Credentials(
        source_credentials=source, target_principal=target, target_scopes=[CLOUD_PLATFORM], lifetime=3600
    )


def build_provider(cfg: DaemonConfig, inv: Sequence[InventoryPool]) -> Provider:
    """The GCE provider (`provider.options` go to `GceProvider`; `options.retry` is a `RetryPolicy` mapping)."""
    p = cfg.provider
    if p.kind == "sim":
        raise ConfigError(cfg.source, [("provider.kind", "'sim' runs through `fleet simulate`, not the daemon")])
    from autoscaler.gce import GceProvider, RetryPolicy

    kw: dict[str, Any] = dict(p.options)
    if isinstance(kw.get("retry"), dict):
        try:
            kw["retry"] = RetryPolicy(**kw["retry"])
        except (TypeError, ValueError) as exc:
            raise ConfigError(cfg.source, [("provider.options.retry", str(exc))]) from None
    if p.endpoint:
        kw["endpoint"] = p.endpoint
    if p.anonymous:
        from google.auth.credentials import AnonymousCredentials

        kw["credentials"] = AnonymousCredentials()
    if p.impersonate_service_account:
        kw["credentials"] = impersonated(p.impersonate_service_account)
    try:
        return GceProvider(list(inv), **kw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(cfg.source, [("provider.options", str(exc))]) from None


def managed_name_spaces(pools: Sequence[Pool]) -> list[tuple[str, str, int]]:
    """(pool, node name prefix, max_nodes) of each pool: what the hooks accept."""
    return [(p.name, p.node_name_prefix, p.max_nodes) for p in pools]


def open_store(cfg: DaemonConfig, pools: Sequence[Pool], *, dry_run: bool = False) -> StateStore:
    """The daemon's store, checked (StateError when damaged or foreign); with `dry_run` an in-memory copy, so
    nothing is written, not even a new file.  Otherwise the managed name spaces are recorded for the hooks."""
    if dry_run:
        return StateStore.read_only_copy(cfg.state_path)
    store = StateStore(cfg.state_path, created_by="daemon")
    store.set_managed_pools(managed_name_spaces(pools))
    return store


def build_daemon(cfg: DaemonConfig, *, dry_run: bool = False, provider: Provider | None = None) -> Daemon:
    """Raises ConfigError (bad config / inventory) or StateError (damaged or foreign state store)."""
    checked = check_config(cfg)
    inv, pools, policy = checked.inventory, checked.pools, checked.policy
    store = open_store(cfg, pools, dry_run=dry_run)  # before the provider: a bad store fails fast
    metrics = Metrics()
    metrics.healthy_after_s = cfg.metrics.healthy_after_s
    return Daemon(
        pools=pools,
        provider=provider or build_provider(cfg, inv),
        slurm=build_slurm(cfg),
        store=store,
        policy=policy,
        loop=cfg.loop,
        metrics=metrics,
        dry_run=dry_run,
        settings=build_settings(cfg.policy, policy),
    )
