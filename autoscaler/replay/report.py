"""The replay report: demand vs provisioned GPUs over time and cost by capacity type, per policy,
with the summary table — one self-contained HTML page (figures inlined as base64 PNG) or one PNG.

matplotlib runs headless (Agg) and is imported only here."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from autoscaler.replay.run import RunResult

CAPACITY_COLORS = {"reservation": "#4c72b0", "on-demand": "#dd8452", "spot": "#55a868", "flex-start": "#8172b3"}
DEMAND_COLOR = "#222222"
PROVISIONED_COLOR = "#c44e52"


def resample(t: list[float], values: list[int], grid: np.ndarray) -> np.ndarray:
    """Value of a step function (changes at `t`) at each grid time."""
    if not t:
        return np.zeros_like(grid)
    idx = np.searchsorted(np.asarray(t), grid, side="right") - 1
    v = np.asarray(values, dtype=float)
    out = np.where(idx >= 0, v[np.clip(idx, 0, None)], 0.0)
    return out


def _figures(result: RunResult) -> list[tuple[str, bytes]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result.metrics)
    t0 = min(e.t_start for e in result.engines.values())
    t1 = max((e.t_end or e.now) for e in result.engines.values())
    grid = np.linspace(t0, t1, 2000)
    days = (grid - t0) / 86400.0
    figs: list[tuple[str, bytes]] = []

    fig, axes = plt.subplots(len(names), 1, figsize=(11, 1.9 * len(names) + 0.6), sharex=True, squeeze=False)
    ymax = 0.0
    for ax, name in zip(axes[:, 0], names, strict=True):
        tl = result.engines[name].timeline
        demand = resample(tl.t, tl.demand, grid)
        prov = resample(tl.t, tl.provisioned, grid)
        ymax = max(ymax, float(prov.max(initial=0)), float(demand.max(initial=0)))
        ax.fill_between(days, 0, prov, step="post", color=PROVISIONED_COLOR, alpha=0.25, linewidth=0)
        ax.step(days, prov, where="post", color=PROVISIONED_COLOR, linewidth=0.8, label="billed GPUs")
        reserved = result.engines[name].reserved_gpus
        if reserved:
            ax.axhline(reserved, color=CAPACITY_COLORS["reservation"], linestyle=":", linewidth=1, label="reservation")
        ax.step(
            days, demand, where="post", color=DEMAND_COLOR, linewidth=0.7, label="demanded GPUs (running + pending)"
        )
        m = result.metrics[name]
        ax.set_title(
            f"{name}   ${m['cost_usd']:,.0f}  ({m['cost_ratio']:.3f}x bound)   wait p95 {m['wait_p95_s']:.0f} s",
            loc="left",
            fontsize=9.5,
        )
        ax.grid(alpha=0.25)
        ax.set_ylabel("GPUs", fontsize=8)
        ax.tick_params(labelsize=8)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylim(0, ymax * 1.05 or 1)
    axes[0, 0].legend(loc="upper right", fontsize=8, frameon=False, ncol=3)
    axes[-1, 0].set_xlabel("days since the first submission")
    fig.suptitle(
        "Demanded vs billed GPUs (the reservation is billed whole)", x=0.01, ha="left", fontsize=12, fontweight="bold"
    )
    fig.tight_layout()
    figs.append(("Demand vs provisioned GPUs over time", _png(fig)))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(11, 0.55 * len(names) + 1.4))
    caps = sorted({c for m in result.metrics.values() for c in m["cost_by_capacity_usd"]}, key=_cap_order)
    left = np.zeros(len(names))
    y = np.arange(len(names))[::-1]
    for cap in caps:
        vals = np.array([result.metrics[n]["cost_by_capacity_usd"].get(cap, 0.0) for n in names]) / 1e6
        ax.barh(y, vals, left=left, color=CAPACITY_COLORS.get(cap, "#999999"), label=cap, height=0.6)
        left += vals
    lb = result.bound.usd / 1e6
    ax.axvline(lb, color="#222222", linestyle="--", linewidth=1)
    ax.text(lb, -0.75, f" lower bound ${lb:,.2f}M", fontsize=8, va="bottom")
    for yi, n, total in zip(y, names, left, strict=True):
        ax.text(total, yi, f"  ${total:,.2f}M ({result.metrics[n]['cost_ratio']:.3f}x)", va="center", fontsize=8)
    ax.set_yticks(y, names)
    ax.set_ylim(-0.8, len(names) - 0.4)
    ax.set_xlabel("cost, million USD")
    ax.set_xlim(0, left.max() * 1.22)
    ax.legend(loc="lower right", fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.25)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.set_title("Cost by capacity type", loc="left", fontsize=12, fontweight="bold")
    fig.tight_layout()
    figs.append(("Cost by capacity type", _png(fig)))
    plt.close(fig)
    figs.append(("Cost against wait", _cost_vs_wait(result, plt)))
    return figs


#: gpu-fleet's frontier lines: (warm cap, shared nodes) -> legend suffix and line style
FRONTIER_FAMILIES = (
    ((True, False), "", "--o"),
    ((False, False), ", no warm cap", ":s"),
    ((True, True), ", shared nodes", "-.^"),
    ((False, True), ", no warm cap, shared nodes", ":v"),
)
POINT_COLORS = ("#c44e52", "#4c72b0", "#dd8452", "#55a868", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")


def _cost_vs_wait(result: RunResult, plt: Any) -> bytes:
    """Cost (x bound) against p50 and p95 wait, one point per policy, gpu-fleet's frontier as a line."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    for ax, key, label in zip(axes, ("wait_p50_s", "wait_p95_s"), ("p50", "p95"), strict=True):
        for i, (name, m) in enumerate(result.metrics.items()):
            color = POINT_COLORS[i % len(POINT_COLORS)]
            marker = "o*sDv^P<>X"[i % 10]
            ax.scatter([m[key]], [m["cost_ratio"]], color=color, s=46, marker=marker, zorder=3, label=name, alpha=0.85)
        for (capped, shared), suffix, style in FRONTIER_FAMILIES:
            family = [
                p
                for p in result.frontier
                if p.get("warm_cap", True) is capped and p.get("share_nodes", False) is shared
            ]
            if not family:
                continue
            pts = sorted(family, key=lambda p: p[key])
            ax.plot(
                [p[key] for p in pts],
                [p["cost_ratio"] for p in pts],
                style,
                color=POINT_COLORS[0],
                markersize=3.5,
                linewidth=1,
                label=f"gpu-fleet by --wait-value{suffix}",
            )
            for p in pts:
                ax.annotate(
                    f"${p['wait_value_usd_per_gpu_hour']:g}",
                    (p[key], p["cost_ratio"]),
                    textcoords="offset points",
                    xytext=(4, -10),
                    fontsize=7,
                    color="#666666",
                )
        ratios = [m["cost_ratio"] for m in result.metrics.values()] + [p["cost_ratio"] for p in result.frontier]
        if max(ratios) > 3 * min(ratios):
            ax.set_yscale("log")  # static-peak would squash the rest
        ax.set_xlabel(f"wait {label}, seconds (submission to first start)")
        ax.grid(alpha=0.25)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    axes[0].set_ylabel(f"cost / lower bound (${result.bound.usd:,.0f})")
    axes[1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    fig.suptitle("Cost against wait (lower left is better)", x=0.01, ha="left", fontsize=12, fontweight="bold")
    fig.tight_layout()
    png = _png(fig)
    plt.close(fig)
    return png


def _cap_order(c: str) -> int:
    return list(CAPACITY_COLORS).index(c) if c in CAPACITY_COLORS else 99


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


TABLE_COLUMNS = (
    ("cost_usd", "cost $", "{:,.0f}"),
    ("cost_ratio", "x bound", "{:.3f}"),
    ("overflow_cost_usd", "overflow $", "{:,.0f}"),
    ("overflow_ratio", "x overflow bound", "{:.3f}"),
    ("gpu_hours_used", "GPU-h used", "{:,.0f}"),
    ("gpu_hours_billed", "GPU-h billed", "{:,.0f}"),
    ("partial_gang_gpu_hours", "partial-gang GPU-h", "{:,.1f}"),
    ("wait_p50_s", "wait p50 s", "{:,.0f}"),
    ("wait_p95_s", "wait p95 s", "{:,.0f}"),
    ("wait_max_s", "wait max s", "{:,.0f}"),
    ("preempted_jobs", "preempted jobs", "{:,}"),
    ("jobs", "jobs", "{:,}"),
)


def render_html(result: RunResult) -> str:
    figs = _figures(result)
    sc = result.as_json()["scenario"]
    best = min(result.metrics, key=lambda n: result.metrics[n]["cost_usd"])
    rows = []
    for name, m in result.metrics.items():
        cells = "".join(f"<td>{'-' if m.get(k) is None else fmt.format(m[k])}</td>" for k, _, fmt in TABLE_COLUMNS)
        cls = ' class="best"' if name == best else ""
        rows.append(f"<tr{cls}><th>{html.escape(name)}</th>{cells}</tr>")
    denominators = {
        "cost_ratio": f"${result.bound.usd:,.0f}",
        "overflow_ratio": f"${result.bound.overflow_usd:,.0f}",
    }
    head = "".join(
        f"<th>{html.escape(label)}" + (f"<br>{html.escape(denominators[k])}" if k in denominators else "") + "</th>"
        for k, label, _ in TABLE_COLUMNS
    )
    settings = ", ".join(
        f"{k}={html.escape(str(sc[k]))}"
        for k in (
            "machine_family",
            "region",
            "reserved_nodes",
            "spot_fraction",
            "boot_seconds",
            "stockout_rate",
            "preemption_rate_per_hour",
            "seed",
        )
    )
    imgs = "".join(
        f'<figure><img alt="{html.escape(title)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'
        f"</figure>"
        for title, png in figs
    )
    descriptions = "".join(
        f"<li><b>{html.escape(n)}</b>: {html.escape(result.engines[n].policy.description)}{_settings(m)}</li>"
        for n, m in result.metrics.items()
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gpu-fleet replay: {html.escape(Path(sc["trace"]).name)}</title>
<style>
body {{ font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1180px;
       color: #222; padding: 0 1em; }}
h1 {{ font-size: 1.4em; margin-bottom: .2em; }}
.sub {{ color: #666; margin-top: 0; }}
table {{ border-collapse: collapse; margin: 1em 0 1.5em; font-variant-numeric: tabular-nums; }}
th, td {{ padding: .35em .7em; border-bottom: 1px solid #e3e3e3; text-align: right; }}
thead th {{ font-size: .85em; color: #555; border-bottom: 2px solid #bbb; }}
tbody th {{ text-align: left; }}
tr.best {{ background: #eef6ee; }}
figure {{ margin: 1em 0; }} img {{ max-width: 100%; }}
ul {{ color: #444; }} code {{ background: #f4f4f4; padding: 0 .25em; }}
</style></head><body>
<h1>Trace replay: {html.escape(Path(sc["trace"]).name)}</h1>
<p class="sub">{sc["jobs"]:,} jobs, {sc["demand_gpu_hours"]:,.0f} GPU-hours demanded,
peak {sc["peak_demand_gpus"]:,} GPUs;
{settings}. One lower bound for every policy: ${result.bound.usd:,.0f}
(clairvoyant, over the demand span: reservation ${result.bound.reservation_usd:,.0f} for the whole span plus
demand beyond it at the cheapest per-GPU rate, ${result.bound.overflow_usd:,.0f}). <i>x overflow bound</i> sets
each policy's spend beyond the reservation against that second figure. Boots alone put the bound out of reach:
paying {result.boot_floor_usd / result.bound.usd if result.bound.usd else 0:.4f}x it at least for a policy that starts
every job at submission (each GPU added boots, or was kept idle since demand last fell when that is shorter).</p>
<table><thead><tr><th>policy</th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>
{imgs}
<h2>Policies</h2><ul>{descriptions}</ul>
<p class="sub">Prices: {html.escape(str(sc["prices"]))}. Reservation: {html.escape(str(sc["reservation_rate"]))} rate,
billed over the demand span for every policy, used or not. Wait = submission to first start.
Generated by <code>fleet simulate</code>.</p>
</body></html>
"""


def _settings(m: dict[str, Any]) -> str:
    settings = m.get("settings")
    if not settings:
        return ""
    return " <code>" + html.escape(", ".join(f"{k}={v}" for k, v in settings.items())) + "</code>"


def render_png(result: RunResult) -> bytes:
    """Both figures stacked in one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image as mpimg
    import matplotlib.pyplot as plt

    images = [mpimg.imread(io.BytesIO(png), format="png") for _, png in _figures(result)]
    heights = [im.shape[0] for im in images]
    width = max(im.shape[1] for im in images)
    fig = plt.figure(figsize=(width / 110, sum(heights) / 110), dpi=110)
    y = 1.0
    for im in images:
        h = im.shape[0] / sum(heights)
        ax = fig.add_axes((0, y - h, im.shape[1] / width, h))
        ax.imshow(im)
        ax.axis("off")
        y -= h
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def render_report(result: RunResult, *, png: bool) -> str | bytes:
    """The report: the figures as PNG bytes with `png`, else the HTML page as text (as `fleet.advise.report` renders
    its own).  The CLI writes it (`fleet.input.outputs.write_atomic`: checked before the replay runs)."""
    return render_png(result) if png else render_html(result)
