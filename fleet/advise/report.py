"""The advisor's report: cost against reservation size per term, the recommended point marked and the
clairvoyant lower bound drawn, per window; one self-contained HTML page (figure inlined) or one PNG.

matplotlib runs headless (Agg) and is imported only here."""

from __future__ import annotations

import base64
import html
import io
from typing import Any

TERM_COLORS = {"none": "#dd8452", "1y": "#4c72b0", "3y": "#55a868"}


def figure_png(result: dict[str, Any]) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = result["points"]
    windows = [w for w in ("train", "test", "all") if any(p["window"] == w for p in points)]
    fig, axes = plt.subplots(1, len(windows), figsize=(6.5 * len(windows), 4.6), squeeze=False)
    rec = result["recommended"]
    base = next(p for p in points if p["reserved_nodes"] == 0 and p["window"] == windows[0])
    for ax, window in zip(axes[0], windows, strict=True):
        zero = next(p for p in points if p["window"] == window and p["reserved_nodes"] == 0)
        for term in result["scenario"]["terms"]:
            rest = [p for p in points if p["window"] == window and p["term"] == term and p["reserved_nodes"] > 0]
            pts = [zero, *sorted(rest, key=lambda p: p["reserved_nodes"])]
            x = [p["reserved_nodes"] for p in pts]
            color = TERM_COLORS.get(term, "#333333")
            ax.plot(x, [p["cost_usd_mean"] / 1e3 for p in pts], marker="o", ms=3, color=color, label=f"{term}: replay")
            ax.fill_between(
                x,
                [p["cost_usd_min"] / 1e3 for p in pts],
                [p["cost_usd_max"] / 1e3 for p in pts],
                color=color,
                alpha=0.15,
            )
            ax.plot(x, [p["lower_bound_usd"] / 1e3 for p in pts], linestyle="--", linewidth=0.9, color=color,
                    label=f"{term}: lower bound")  # fmt: skip
        mark = next(
            p
            for p in points
            if p["window"] == window and p["reserved_nodes"] == rec["reserved_nodes"]
            and (p["term"] == rec["term"] or rec["reserved_nodes"] == 0)
        )  # fmt: skip
        ax.plot([mark["reserved_nodes"]], [mark["cost_usd_mean"] / 1e3], marker="*", ms=16, color="#c44e52",
                linestyle="none", label=f"recommended: {rec['reserved_nodes']} nodes, {rec['term']}")  # fmt: skip
        ax.axhline(zero["cost_usd_mean"] / 1e3, color="#888888", linewidth=0.7, linestyle=":", label="all on demand")
        title = {"train": "train window (the choice)", "test": "test window (unseen demand)", "all": "whole trace"}
        ax.set_title(title[window])
        ax.set_xlabel("reserved nodes")
        ax.set_ylabel("cost, k$")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    del base
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def render_report(result: dict[str, Any], *, png: bool) -> str | bytes:
    """The report: the figure as PNG bytes with `png`, else the HTML page (figure inline) as text.  The CLI writes
    it (`fleet.input.outputs.write_atomic`: checked before the grid runs, never a partial file)."""
    figure = figure_png(result)
    if png:
        return figure
    sc = result["scenario"]
    rec = result["recommended"]
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(p[k]))}</td>" for k in _COLUMNS) + "</tr>" for p in result["points"]
    )
    head = "".join(f"<th>{html.escape(k)}</th>" for k in _COLUMNS)
    caveats = "".join(f"<li>{html.escape(c)}</li>" for c in result["caveats"]) or "<li>none</li>"
    test = result.get("test")
    test_html = (
        f"<p>On the unseen test window the recommendation costs ${test['recommended']['cost_usd']:,.0f}; "
        f"all on demand ${test['on_demand_cost_usd']:,.0f}; the best point chosen with hindsight "
        f"({test['hindsight_best']['reserved_nodes']} nodes, {test['hindsight_best']['term']}) "
        f"${test['hindsight_best']['cost_usd']:,.0f}: regret {test['regret_pct']:.2f} %.</p>"
        if test
        else ""
    )
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>gpu-fleet commitment advice</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}</style></head><body>
<h1>Commitment advice: {html.escape(sc["trace"])}</h1>
<p>{html.escape(sc["machine_family"])} in {html.escape(sc["region"])}, reserved machine
{html.escape(sc["reserved_machine_type"])}; replayed through the gpu-fleet policy, {sc["seeds"]} seed(s);
prices: {html.escape(sc["prices_source"])}.</p>
<p><b>Recommended: {rec["reserved_nodes"]} reserved nodes, term {html.escape(rec["term"])}</b>
(${rec["cost_usd"]:,.0f} on the {html.escape(result["choice_window"])} window, saving
{rec.get("saving_vs_on_demand_pct", 0):.1f} % against all on demand).</p>{test_html}
<p>Caveats:</p><ul>{caveats}</ul>
<img src="data:image/png;base64,{base64.b64encode(figure).decode()}" alt="cost against reservation size">
<table><tr>{head}</tr>{rows}</table></body></html>"""
    return page


_COLUMNS = (
    "window",
    "term",
    "reserved_nodes",
    "cost_usd_mean",
    "cost_usd_min",
    "cost_usd_max",
    "lower_bound_usd",
    "reservation_usd",
    "overflow_usd_mean",
    "reservation_fill",
    "wait_p50_s",
    "wait_p95_s",
)
