"""How a site's `slurm.extra_config` joins the rendered slurm.conf: plain keys are replaced, option lists are merged.

Several slurm.conf keys take a comma-separated list of independent options (slurm.conf(5)): SlurmctldParameters,
SchedulerParameters, PrivateData, GresTypes, ...  The stack renders some of these options because the cluster does
not work without them: `SlurmctldParameters=enable_configless,idle_on_node_suspend` (a CLOUD node fetches
slurm.conf from the controller and is powered down idle; for Slurm 22.05 also `cloud_reg_addrs`, `PrivateData=cloud`
and `CommunicationParameters=NoAddrCache`: `fleet.slurm.conf.release_settings`), `GresTypes=gpu` (no GPU is
schedulable without it),
`JobSubmitPlugins=lua` (the right-sizing `--prefer`, or under late binding the hard `--constraint`),
`SchedulerParameters=preempt_youngest_first` with preemption (`batch_sched_delay=0` under late binding),
`SuspendExcNodes=<reservation pools>` (reserved nodes are never powered down, so never deleted).
Replacing such a key with a site's value would silently drop them: a site adding
`SlurmctldParameters: reboot_from_controller` would get nodes that cannot find their configuration.  So for the
keys in `OPTION_LIST_KEYS` a site's options are *added* to the rendered ones; an option the site names again
(`bf_window=2880` where the render had `bf_window=...`) takes the site's value in place.  A site cannot remove a
rendered option through `extra_config`; `fleet render slurm-conf --set KEY=VALUE` (the render's `overrides`)
still replaces a key whole.

Keys whose options exclude each other are not merged and are replaced as before: `SelectTypeParameters`
(CR_Core_Memory and CR_CPU_Memory cannot both stand) and `TaskPlugin` (an ordered plugin stack a site may mean to
replace).  `replace_keys` is the one case-insensitive key replacement: the site's plain keys and the render's
`overrides` both go through it.  Pure."""

from __future__ import annotations

from collections.abc import Mapping

#: slurm.conf keys whose value is a comma-separated list of independent options (slurm.conf(5) of 22.05), lower-case
OPTION_LIST_KEYS = frozenset(
    k.lower()
    for k in (
        "SlurmctldParameters",
        "SlurmdParameters",
        "SchedulerParameters",
        "CommunicationParameters",
        "PrivateData",
        "GresTypes",
        "JobSubmitPlugins",
        "TopologyParam",
        "PreemptParameters",
        "PrologFlags",
        "LaunchParameters",
        "DebugFlags",
        "PriorityFlags",
        "JobAcctGatherParams",
        "AccountingStorageEnforce",
        # node, partition and state lists: the rendered reservation pools (and pool minimums) must stay out of
        # power saving whatever a site adds, or slurmctld suspends reserved nodes and the daemon deletes them
        "SuspendExcNodes",
        "SuspendExcParts",
        "SuspendExcStates",
    )
)


def _name(option: str) -> str:
    return option.split("=", 1)[0].strip().lower()


def split_options(value: str) -> list[str]:
    """The comma-separated items of `value`, commas inside a hostlist's brackets (`gpu-[1,3]`) kept, blanks dropped."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(value):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            items.append(value[start:i])
            start = i + 1
    items.append(value[start:])
    return [o.strip() for o in items if o.strip()]


def merge_options(rendered: str, site: str) -> str:
    """`rendered`'s options with `site`'s added: an option of the same name (before any `=`, case-insensitive)
    takes the site's spelling and value where the rendered one stood; new ones follow in the site's order."""
    merged = split_options(rendered)
    index = {_name(o): i for i, o in enumerate(merged)}
    for option in split_options(site):
        name = _name(option)
        if name in index:
            merged[index[name]] = option
        else:
            index[name] = len(merged)
            merged.append(option)
    return ",".join(merged)


def replace_keys(settings: Mapping[str, str], changes: Mapping[str, str]) -> dict[str, str]:
    """`settings` with `changes` applied case-insensitively, as Slurm reads keys (the file keeps the first
    spelling): a value adds or replaces its key whole, an empty value removes it."""
    out = dict(settings)
    by_lower = {k.lower(): k for k in out}
    for key, value in changes.items():
        existing = by_lower.setdefault(key.lower(), key)
        if value == "":
            out.pop(existing, None)
        else:
            out[existing] = value
    return out


def with_site_config(settings: Mapping[str, str], site: Mapping[str, str]) -> dict[str, str]:
    """`settings` with a site's keys applied (`replace_keys`), an option-list key the render set merged with the
    rendered options (`merge_options`) instead of replaced."""
    rendered = {k.lower(): v for k, v in settings.items()}
    merged = {
        key: merge_options(rendered[key.lower()], value)
        if key.lower() in OPTION_LIST_KEYS and key.lower() in rendered
        else value
        for key, value in site.items()
    }
    return replace_keys(settings, merged)
