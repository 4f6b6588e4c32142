"""The generated job_submit.lua (fleet/slurm/job_submit.py): --prefer the right-sized machine type where a
partition has a choice, nothing where it has none; under strict late binding (`late_bind`, no reservation pools) a
hard --constraint for every GPU count (real slurmctld runs both: tests/e2e/test_weights.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.catalog import CapacityType
from fleet.slurm import render_slurm_conf
from fleet.slurm.job_submit import Prefer, constraints, preferences, render_job_submit, spot_pinned
from fleet.slurm.policy import late_binding_constrains
from fleet.slurm.weights import PoolShape
from fleet.spec import FleetSpec, load_spec, load_stack_file, read_stack_config

ROOT = Path(__file__).resolve().parents[2]
OD = CapacityType.ON_DEMAND


def shape(pool: str, machine: str, gpus: int, usd: float) -> PoolShape:
    return PoolShape(pool, OD, machine, gpus, usd)


def test_the_right_sized_machine_per_gpu_count_where_there_is_a_choice() -> None:
    shapes = [shape("h8", "m-8g", 8, 10.0), shape("h2", "m-2g", 2, 10.0), shape("h1", "m-1g", 1, 10.0)]
    cheap = [shape("big", "c-8g", 8, 5.0), shape("small", "m-1g", 1, 10.0)]  # the 8g is cheaper per GPU
    assert preferences({"gpu": shapes, "cheap": cheap, "one": shapes[:1]}) == {
        "gpu": {1: Prefer("m-1g"), 2: Prefer("m-2g")},  # 3..8 GPUs: only m-8g fits, nothing to prefer
        "cheap": {1: Prefer("c-8g")},
    }


def test_reserved_nodes_are_preferred_too_where_the_job_fits_them() -> None:
    """Paid-for reserved GPUs cost nothing more: a small job takes a free reserved node before it powers up a
    right-sized on-demand one (`reservation|<machine>`); the right-sized type once the reservation is full."""
    shapes = [shape("resv", "m-8g", 8, 10.0), shape("h1", "m-1g", 1, 10.0)]
    prefs = preferences({"gpu": shapes}, {"gpu": 8})
    assert prefs == {"gpu": {1: Prefer("m-1g", reservation=True)}}
    assert prefs["gpu"][1].expression == "reservation|m-1g"
    assert prefs["gpu"][1].allows("m-8g", CapacityType.RESERVATION) and not prefs["gpu"][1].allows("m-8g", OD)
    lua = render_job_submit({"gpu": shapes}, "gpu", {"gpu": 8})
    assert '["gpu"] = { [1] = "reservation|m-1g" },' in lua
    # a reservation of small nodes does not make a large job prefer them
    assert preferences({"gpu": [*shapes, shape("h2", "m-2g", 2, 10.0)]}, {"gpu": 1})["gpu"][2] == Prefer("m-2g")


def test_no_lua_without_a_choice_and_names_are_checked() -> None:
    assert render_job_submit({"gpu": [shape("h8", "m-8g", 8, 10.0)]}, "gpu") == ""
    lua = render_job_submit({"gpu": [shape("h8", "m-8g", 8, 1.0), shape("h1", "m-1g", 1, 1.0)]}, "gpu")
    assert '["gpu"] = { [1] = "m-1g" },' in lua and 'local default_partition = "gpu"' in lua
    assert "job_desc.prefer ~= nil or job_desc.features ~= nil" in lua  # a user's own constraint wins
    with pytest.raises(ValueError, match="not a Slurm partition or feature name"):
        render_job_submit({'gpu"; os.exit() --': [shape("a", "m-8g", 8, 1.0), shape("b", "m-1g", 1, 1.0)]}, None)


def test_the_rendered_cluster_names_the_plugin_only_with_a_lua() -> None:
    # nothing to prefer, no pool the daemon may hold, no gang gate
    one_type = _a3mega({"late_bind": False, "gang_gate": False}, reservation=False)
    conf = render_slurm_conf(one_type, one_type.clusters[0])
    assert conf.job_submit_lua == "" and "JobSubmitPlugins" not in conf.slurm_conf
    # the same with the gang gate (on by default wherever late binding is off): the wake-up and the gate alone
    gated = _a3mega({"late_bind": False}, reservation=False)
    conf = render_slurm_conf(gated, gated.clusters[0])
    assert "JobSubmitPlugins=lua" in conf.slurm_conf.splitlines()
    assert "  pcall(wake_daemon)\n  pcall(gate_gang, job_desc)\n  return slurm.SUCCESS" in conf.job_submit_lua
    two_types = _l4dev({"late_bind": False})  # g2-standard-8 and -48 in `dev`
    conf = render_slurm_conf(two_types, two_types.clusters[0])
    assert "JobSubmitPlugins=lua" in conf.slurm_conf.splitlines()
    assert '["dev"] = { [1] = "g2-standard-8" },' in conf.job_submit_lua


def test_the_prefer_render_sets_prefer_from_the_shared_gpu_reading_and_wakes_nobody() -> None:
    """The default render: a `--prefer` table only where a partition has a choice, the same GPU reading as constrain
    mode (tests/slurm/test_job_submit_gpus.py runs both on slurmctld), no wake-up file."""
    shapes = {"gpu": [shape("h8", "m-8g", 8, 1.0), shape("h1", "m-1g", 1, 1.0)]}
    shapes["b"] = [shape("h8", "m-8g", 8, 1.0), shape("h2", "m-2g", 2, 1.0)]
    lua = render_job_submit(shapes, "gpu", {"b": 8})
    assert lua == render_job_submit(shapes, "gpu", {"b": 8}, constrain=False)
    lines = lua.splitlines()
    assert '  ["b"] = { [1] = "reservation|m-2g", [2] = "reservation|m-2g" },' in lines
    assert '  ["gpu"] = { [1] = "m-1g" },' in lines
    assert '  ["b"] = 8,' in lines and '  ["gpu"] = 8,' in lines  # the largest node, for --gpus over nodes
    assert "  return gpus ~= nil and by_gpus[gpus] or nil" in lines and "    job_desc.prefer = chosen" in lines
    assert "job_desc.features =" not in lua and "wake" not in lua
    constrained = render_job_submit(shapes, "gpu", constrain=True)
    start = lua.index("local function gpus_in")
    assert lua[start : lua.index("local function choose")] in constrained  # one reading of GPUs per node


# --- strict late binding: a hard constraint -----------------------------------------------------------------
def test_constraints_name_the_right_sized_machine_for_every_gpu_count() -> None:
    """Every GPU count up to the partition's largest shape, one machine type or several, ranked as `preferences`
    ranks them (cheapest $/GPU-hour, then fewer GPUs)."""
    shapes = [shape("h8", "m-8g", 8, 10.0), shape("h2", "m-2g", 2, 10.0), shape("h1", "m-1g", 1, 10.0)]
    cheap = [shape("big", "c-8g", 8, 5.0), shape("small", "m-1g", 1, 10.0)]  # the 8g is cheaper per GPU
    assert constraints({"gpu": shapes, "cheap": cheap, "one": shapes[:1], "none": []}) == {
        "gpu": {1: "m-1g", 2: "m-2g", **dict.fromkeys(range(3, 9), "m-8g")},
        "cheap": dict.fromkeys(range(1, 9), "c-8g"),
        "one": dict.fromkeys(range(1, 9), "m-8g"),  # one machine type: constrained all the same
    }
    # where the partition has a choice, the machine type preferred is the one constrained to
    table = constraints({"gpu": shapes, "cheap": cheap})
    for part, prefs in preferences({"gpu": shapes, "cheap": cheap}).items():
        assert {g: p.machine_type for g, p in prefs.items()} == {g: table[part][g] for g in prefs}


def test_a_spot_tolerant_partition_pins_the_constraint_to_spot_where_it_has_another_capacity_type() -> None:
    """Under late binding the daemon boots a pending job a node of the capacity type the plan chose; a spot-tolerant
    job whose constraint named the machine type alone would take an on-demand node booted for work that may not use
    spot (tests/e2e/test_late_binding.py shows it on slurmctld).  Shapes are ranked at the on-demand price whatever
    their capacity type (`fleet.slurm.conf`), so the pin changes no machine type."""
    od1, od8 = shape("od1", "m-1g", 1, 10.0), shape("od8", "m-8g", 8, 10.0)
    sp1 = PoolShape("sp1", CapacityType.SPOT, "m-1g", 1, 10.0)
    assert spot_pinned([od1, od8, sp1]) == {"m-1g"} and spot_pinned([sp1]) == set() and spot_pinned([od1]) == set()
    assert constraints({"spotq": [od1, od8, sp1], "gpu": [od1, od8], "spot-only": [sp1]}) == {
        "spotq": {1: "m-1g&spot", **dict.fromkeys(range(2, 9), "m-8g")},  # no spot 8-GPU pool: not pinned
        "gpu": {1: "m-1g", **dict.fromkeys(range(2, 9), "m-8g")},
        "spot-only": {1: "m-1g"},  # spot is all it has: the machine type says it
    }
    lua = render_job_submit({"spotq": [od1, od8, sp1]}, "spotq", constrain=True)
    unknown = 2**53
    assert f'["spotq"] = {{ {{ "m-1g&spot", 1, {unknown}, {unknown}, "" }}, {{ "m-8g", 8, ' in lua
    assert "&" not in render_job_submit({"spotq": [od1, od8, sp1]}, "spotq")  # prefer mode: unchanged


def test_shared_nodes_let_a_job_take_every_shape_of_its_family_at_its_price() -> None:
    """`Policy.share_nodes`: the constraint ORs the shapes that fit in the right-sized one's family and price tier
    (a 1-GPU job may start at once on the free GPUs of a 2- or 8-GPU node of the family), not another family's nor a
    dearer shape; spot pins are kept, each alternative in parentheses (Slurm's reading of `&` beside `|`)."""
    shapes = [
        shape("h8", "m-8g", 8, 10.0),
        shape("h2", "m-2g", 2, 10.0),
        shape("h1", "m-1g", 1, 10.0),
        shape("x8", "x-8g", 8, 10.0),  # another family at the same price
        shape("d4", "m-4g", 4, 12.0),  # the family, dearer per GPU
    ]
    table = constraints({"gpu": shapes}, shared=True)["gpu"]
    assert table[1] == "m-1g|m-2g|m-8g" and table[2] == "m-2g|m-8g" and table[3] == table[8] == "m-8g"
    assert constraints({"gpu": shapes})["gpu"][1] == "m-1g"  # not shared: the right-sized shape alone
    od1, od8 = shape("od1", "m-1g", 1, 10.0), shape("od8", "m-8g", 8, 10.0)
    sp1, sp8 = (PoolShape(f"sp{g}", CapacityType.SPOT, f"m-{g}g", g, 10.0) for g in (1, 8))
    assert constraints({"q": [od1, od8, sp1, sp8]}, shared=True)["q"][1] == "(m-1g&spot)|(m-8g&spot)"
    lua = render_job_submit({"gpu": shapes}, "gpu", constrain=True, shared=True)
    unknown = 2**53
    assert f'{{ "m-1g", 1, {unknown}, {unknown}, "m/0" }}' in lua and 'table.concat(chosen, "|")' in lua
    assert f'{{ "m-1g", 1, {unknown}, {unknown}, "" }}' in render_job_submit({"gpu": shapes}, "gpu", constrain=True)


def test_constrain_mode_sets_the_jobs_features_even_without_a_choice() -> None:
    one = {"gpu": [shape("h2", "m-2g", 2, 1.0)]}
    assert render_job_submit(one, "gpu") == ""  # prefer: nothing to choose
    lua = render_job_submit(one, "gpu", constrain=True)
    unknown = 2**53  # a shape without CPU or memory figures rules out no job
    assert (
        f'["gpu"] = {{ {{ "m-2g", 2, {unknown}, {unknown}, "" }} }},' in lua
        and 'local default_partition = "gpu"' in lua
    )
    assert "local constraint = {" in lua and "local by_gpus = constraint[part]" in lua
    assert "    job_desc.features = chosen" in lua and "job_desc.prefer =" not in lua
    assert "job_desc.prefer ~= nil or job_desc.features ~= nil" in lua  # a user's own constraint wins
    assert 'string.find(part, ",")' in lua  # several partitions: left alone
    assert "--constraint (job_desc.features)" in lua.splitlines()[1]
    two = {"gpu": [shape("h8", "m-8g", 8, 1.0), shape("h1", "m-1g", 1, 1.0)]}
    lua = render_job_submit(two, None, {"gpu": 0}, constrain=True)  # conf.py passes 0 for no reservation pool
    assert (
        f'["gpu"] = {{ {{ "m-1g", 1, {unknown}, {unknown}, "" }}, {{ "m-8g", 8, ' in lua and "reservation|" not in lua
    )
    assert "local default_partition = nil" in lua
    # constrain mode is for clusters without reservation pools: a reserved GPU count is a mistake, said so
    with pytest.raises(ValueError, match=r"^reserved_gpus: \{'gpu': 8\}: constrain mode is for clusters without"):
        render_job_submit(two, "gpu", {"gpu": 8}, constrain=True)
    with pytest.raises(ValueError, match="not a Slurm partition or feature name"):
        render_job_submit({"gpu": [shape("h8", "m 8g", 8, 1.0)]}, "gpu", constrain=True)
    assert render_job_submit({}, "gpu", constrain=True, wake=False) == ""


def _l4dev(policy: dict[str, object]) -> FleetSpec:
    """gcp-l4-dev (two spot machine types in `dev`, no reservation) with `policy` as slurm.autoscaler.policy."""
    data = read_stack_config(ROOT / "Pulumi.gcp-l4-dev.yaml")
    data["clusters"][0]["slurm"]["autoscaler"] = {"policy": policy}
    return load_spec(data)


def _a3mega(policy: dict[str, object], *, reservation: bool = True) -> FleetSpec:
    """gcp-a3mega-slurm (one machine type; pool `resv` a reservation unless not `reservation`: then on-demand) with
    `policy` added to its slurm.autoscaler.policy."""
    data = read_stack_config(ROOT / "Pulumi.gcp-a3mega-slurm.yaml")
    cluster = data["clusters"][0]
    cluster["slurm"]["autoscaler"]["policy"].update(policy)
    if not reservation:
        cluster["pools"][0]["capacity"] = "on-demand"
        del cluster["pools"][0]["reservation"]
    return load_spec(data)


def test_late_binding_constrains_only_without_reservation_pools() -> None:
    assert late_binding_constrains(_l4dev({"late_bind": True}).clusters[0])
    assert not late_binding_constrains(_l4dev({"late_bind": False}).clusters[0])
    assert not late_binding_constrains(_a3mega({"late_bind": True}).clusters[0])  # it has a reservation pool
    assert late_binding_constrains(_a3mega({"late_bind": True}, reservation=False).clusters[0])
    assert not late_binding_constrains(_a3mega({"late_bind": False}, reservation=False).clusters[0])


def test_the_conf_render_constrains_with_late_binding_and_no_reservation_pool() -> None:
    spec = _l4dev({"late_bind": True})
    conf = render_slurm_conf(spec, spec.clusters[0])
    assert "JobSubmitPlugins=lua" in conf.slurm_conf.splitlines()
    # best first, with the CPUs and RealMemory the same render writes on the NodeName lines
    row = '["dev"] = { { "g2-standard-8", 1, 8, 30105, "" }, { "g2-standard-48", 4, 48, 185753, "" } },'
    assert row in conf.job_submit_lua and "job_desc.features = chosen" in conf.job_submit_lua
    assert "CPUs=8 " in conf.slurm_conf and "RealMemory=30105 " in conf.slurm_conf
    # with shared nodes each shape carries its share group: g2-standard-48 costs more per GPU than -8, so no sharing
    spec = _l4dev({"late_bind": True, "share_nodes": True})
    shared = render_slurm_conf(spec, spec.clusters[0]).job_submit_lua
    assert (
        '{ "g2-standard-8", 1, 8, 30105, "g2-standard/0" }, { "g2-standard-48", 4, 48, 185753, "g2-standard/1" }'
        in shared
    )
    # one machine type, no reservation: a lua all the same (prefer mode renders none for it)
    spec = _a3mega({"late_bind": True}, reservation=False)
    conf = render_slurm_conf(spec, spec.clusters[0])
    assert "JobSubmitPlugins=lua" in conf.slurm_conf.splitlines()
    assert '  ["a3mega"] = { { "a3-megagpu-8g", 8, 208, 1820057, "" } },' in conf.job_submit_lua.splitlines()
    # the spot-tolerant partition (its spot pool and the on-demand one): pinned to spot (`spot_pinned`)
    assert '  ["a3mega-spot"] = { { "a3-megagpu-8g&spot", 8, 208, 1820057, "" } },' in conf.job_submit_lua.splitlines()
    spec = _a3mega({"late_bind": False, "gang_gate": False}, reservation=False)
    assert render_slurm_conf(spec, spec.clusters[0]).job_submit_lua == ""
    assert "gate_gang" not in conf.job_submit_lua  # strict late binding holds every pool: no gang gate


def test_the_conf_render_prefers_with_a_reservation_pool_or_without_late_binding() -> None:
    with_resv = _a3mega({"late_bind": True})  # late binding is for clusters without reservations: no constraint
    lua = render_slurm_conf(with_resv, with_resv.clusters[0]).job_submit_lua
    assert "job_desc.features =" not in lua and "job_desc.prefer =" not in lua  # one machine type: nothing to set
    spec = _l4dev({"late_bind": False})
    lua = render_slurm_conf(spec, spec.clusters[0]).job_submit_lua
    assert '["dev"] = { [1] = "g2-standard-8" },' in lua and "job_desc.prefer = chosen" in lua
    assert "job_desc.features =" not in lua


def test_a_cluster_whose_daemon_may_hold_pools_wakes_it_at_every_submission() -> None:
    """With a reservation and another pool the daemon may hold the other (the reservation or preemption hold), so
    the lua rewrites the wake-up file at every submission even where it has nothing to prefer (gcp-a3mega-slurm:
    one machine type); without a pool it may hold, no wake-up (and no lua with nothing to set)."""
    from autoscaler.slurm.wake import submit_wake_path

    stack = load_stack_file(ROOT / "Pulumi.gcp-a3mega-slurm.yaml")
    conf = render_slurm_conf(stack, stack.clusters[0])
    lua = conf.job_submit_lua
    assert "JobSubmitPlugins=lua" in conf.slurm_conf.splitlines()
    assert f'local wake_path = "{submit_wake_path()}"' in lua
    # and the gang gate: with a reservation strict late binding is off, so the spot pool is not always held
    assert "  pcall(wake_daemon)\n  pcall(gate_gang, job_desc)\n  return slurm.SUCCESS" in lua
    prefer = render_job_submit({"gpu": [shape("h8", "m-8g", 8, 1.0), shape("h1", "m-1g", 1, 1.0)]}, "gpu", wake=True)
    assert "pcall(wake_daemon)" in prefer and "job_desc.prefer = chosen" in prefer
    data = read_stack_config(ROOT / "Pulumi.gcp-a3mega-slurm.yaml")
    spot = data["clusters"][0]["pools"][1]
    spot.update(capacity="reservation", reservation="a3mega-resv-2", zones=["us-east4-b"])  # every pool reserved
    only_resv = load_spec(data)
    assert "wake" not in render_slurm_conf(only_resv, only_resv.clusters[0]).job_submit_lua


def test_the_lua_wakes_the_daemon_the_stacks_deploy() -> None:
    """The constrain-mode lua writes the wake-up file beside the state store the stacks give the daemon, in the
    directory the controller's startup script hands to SlurmUser (slurmctld runs the lua as SlurmUser)."""
    import yaml

    from autoscaler.slurm.wake import DEPLOYED_STATE, submit_wake_path
    from components.gcp.startup import AUTOSCALER_STATE_DIR
    from fleet.spec import load_spec
    from stacks.plan import autoscaler_config

    root = Path(__file__).resolve().parents[2]
    doc = yaml.safe_load((root / "Pulumi.gcp-l4-dev.yaml").read_text())
    cluster = next(c for c in load_spec(doc["config"]["gpu-fleet:fleet"]).clusters if c.slurm is not None)
    assert yaml.safe_load(autoscaler_config(cluster))["state_path"] == str(DEPLOYED_STATE)
    assert str(submit_wake_path().parent) == AUTOSCALER_STATE_DIR
    lua = render_job_submit({"gpu": [shape("h8", "m-8g", 8, 1.0)]}, "gpu", constrain=True)
    assert f'local wake_path = "{submit_wake_path()}"' in lua and "pcall(wake_daemon)" in lua


def _scheduler_parameters(spec: FleetSpec) -> str | None:
    lines = render_slurm_conf(spec, spec.clusters[0]).slurm_conf.splitlines()
    return next((line.partition("=")[2] for line in lines if line.startswith("SchedulerParameters=")), None)


def test_late_binding_renders_no_batch_scheduling_delay_and_a_site_may_set_it_back() -> None:
    """A held node booted for a job starts it at slurmctld's next scheduling pass after the undrain, which 22.05
    defers by batch_sched_delay (3 s by default) unless it is 0 (fleet/slurm/policy.py, measured)."""
    assert _scheduler_parameters(_l4dev({"late_bind": True})) == "batch_sched_delay=0"
    # no late binding: the daemon releases gated gangs (the gang gate), which Slurm then allocates at its next pass
    assert _scheduler_parameters(_l4dev({"late_bind": False})) == "batch_sched_delay=0"
    assert _scheduler_parameters(_l4dev({"late_bind": False, "gang_gate": False})) is None
    # a reservation and spot: no late binding, but the daemon may hold the spot pool and release its names
    assert _scheduler_parameters(_a3mega({"late_bind": True})) == "preempt_youngest_first,batch_sched_delay=0"
    nothing = _a3mega({"late_bind": False, "preempt_spot": False, "gang_gate": False}, reservation=False)
    assert _scheduler_parameters(nothing) is None
    spec = _l4dev({"late_bind": True})
    spec.clusters[0].slurm.extra_config["SchedulerParameters"] = "batch_sched_delay=3,bf_window=2880"
    assert _scheduler_parameters(spec) == "batch_sched_delay=3,bf_window=2880"
