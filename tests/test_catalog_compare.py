"""`fleet catalog compare` and the catalog's human views: price-performance a buyer can trust."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from fleet.catalog import load_catalog
from fleet.catalog.compare import CAPACITIES, ExtraOffering, compare, unpriced
from fleet.cli.main import app
from fleet.cli.tables import plain_table

runner = CliRunner()


def test_rows_are_sorted_cheapest_pflop_hour_first_and_the_arithmetic_holds() -> None:
    rows = compare(load_catalog(), gpus=("h100", "h200"))
    assert rows
    assert [r.usd_per_pflop_hour for r in rows] == sorted(r.usd_per_pflop_hour for r in rows)
    for r in rows:
        assert r.usd_per_gpu_hour == pytest.approx(r.usd_per_hour / r.gpus, abs=1e-3)
        assert r.usd_per_pflop_hour == pytest.approx(
            r.usd_per_gpu_hour / (r.bf16_dense_tflops_per_gpu / 1000), abs=1e-3
        )


def test_h100_selects_both_h100_models_and_every_offered_priced_region_appears() -> None:
    cat = load_catalog()
    rows = compare(cat, gpus=("h100", "h200"), capacities=("on-demand",))
    seen = {(r.machine_type, r.region) for r in rows}
    assert {r.gpu for r in rows} == {"h100", "h100-mega", "h200"}
    for m in cat.machines():
        if m.gpu.short.split("-")[0] not in ("h100", "h200"):
            continue
        for region, zones in m.zones.items():
            if zones and m.price(region):
                assert (m.name, region) in seen
    # a price without a zone is not an offering; a zone without a price is reported apart
    missing = unpriced(cat, gpus=("h100",))
    assert all((m, r) not in seen for m, r in missing)


def test_the_per_gpu_price_agrees_with_the_list_price() -> None:
    # list_prices_by_region.csv: a3-highgpu-8g,us-central1 hour=88.49 -> 11.06 $/GPU-h, 11.18 $/PFLOP-h at 989 TFLOPS
    (row,) = [
        r
        for r in compare(load_catalog(), gpus=("h100",), regions=("us-central1",), capacities=("on-demand",))
        if r.machine_type == "a3-highgpu-8g"
    ]
    assert row.usd_per_gpu_hour == pytest.approx(88.49 / 8, abs=0.01)
    assert row.usd_per_pflop_hour == pytest.approx(88.49 / 8 / 0.989, abs=0.01)


def test_offerings_priced_in_a_spec_sit_among_the_catalog_rows() -> None:
    cat = load_catalog()
    h100 = cat.machine("a3-highgpu-8g").gpu
    extra = ExtraOffering("neocloud", "h100-sxm-pool", "dc-1", h100, 8, "on-demand", 8 * 2.0)
    rows = compare(cat, gpus=("h100",), capacities=("on-demand",), extra=[extra])
    assert rows[0].provider == "neocloud" and rows[0].price_source == "fleet spec"
    assert rows[0].usd_per_gpu_hour == 2.0


def test_cli_off_a_terminal_prints_whole_names() -> None:
    res = runner.invoke(app, ["catalog", "compare", "--gpu", "h200", "--capacity", "on-demand,3y"])
    assert res.exit_code == 0, res.output
    assert "a3-ultragpu-8g" in res.output and "…" not in res.output
    lines = [ln for ln in res.output.splitlines() if ln.startswith("a3-ultragpu-8g")]
    assert lines and all("h200" in ln for ln in lines)


def test_cli_json_carries_sources_and_every_capacity() -> None:
    res = runner.invoke(app, ["catalog", "compare", "--gpu", "h100", "--json"])
    assert res.exit_code == 0
    doc = json.loads(res.output)
    assert set(doc["sources"]) >= {"prices", "bf16_dense_tflops"}
    assert {r["capacity"] for r in doc["rows"]} == set(CAPACITIES)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu", "x100"], "--gpu: unknown x100"),
        (["--capacity", "5y"], "--capacity: unknown 5y"),
        (["--region", "mars-north1"], "--region: no machine type"),
        (["--gpu", ","], "--gpu: give at least one value"),
    ],
)
def test_cli_bad_filters_exit_2_naming_the_option(args: list[str], message: str) -> None:
    res = runner.invoke(app, ["catalog", "compare", *args])
    assert res.exit_code == 2
    assert message in res.output
    assert "Traceback" not in res.output


def test_catalog_show_has_a_human_view_next_to_json() -> None:
    human = runner.invoke(app, ["catalog", "show", "a3-ultragpu-8g"])
    assert human.exit_code == 0
    assert "8 x nvidia-h200-141gb" in human.output and "us-central1" in human.output
    js = runner.invoke(app, ["catalog", "show", "a3-ultragpu-8g", "--json"])
    assert json.loads(js.output)["gpu_count"] == 8


def test_plain_table_never_cuts_a_cell() -> None:
    out = plain_table(["a", "b"], [["x" * 150, "y"], ["z", "w"]])
    assert "x" * 150 in out and len(out.splitlines()) == 3
