"""What-ifs for the reservation runs and the short-job regime: gpu-fleet with one scheduler or rule behaviour
changed, to size a mechanism before building it (docs/simulate.md, "The reservation runs").  Not the policy.

    nice -n 10 .venv/bin/python bench/reserve_whatif.py --trace 07 --reserved-nodes 40 --spot-fraction 0.3 \\
        --stockout-rate 0.2 --what best-fit
    nice -n 10 .venv/bin/python bench/reserve_whatif.py --trace synth:short --what up-first

`--what`:
- `none`: gpu-fleet as it is;
- `hold=S`: the settings rule with a hold budget of S seconds (`FleetFacts.reservation_hold_max_s`);
- `best-fit`: the simulated Slurm gives a job the reserved node with the fewest free GPUs that fits (instead
  of the lowest index), as node Weights that rank partly used reserved nodes first would;
- `protect-empty=N`: best fit, and a job smaller than a node may take an empty reserved node only while more
  than N are empty;
- `up-first` / `up-first-best-fit`: within a Weight tier, a powered-up (or powering-up) node with room of any
  shape before any powered-down name (best fit among them with the second form), as dynamic Weights that rank
  powered-up nodes first would;
- `oracle-hold`: an upper bound on any "hold only when it pays" rule: a job that does not fit the reservation
  is held (up to one boot) only if, knowing every running job's end, a reserved node frees enough GPUs for it
  within one boot of its submission (competition for that node ignored); every other job is released at the
  daemon's next tick;
- `spot-protect=G`: a spot-tolerant job may use the reservation only if G reserved GPUs stay free after it (a
  protection level for on-demand-only work, as a daemon moving reserved nodes out of the spot partition would);
- `pack=MACHINE`: a job smaller than MACHINE's GPUs prefers MACHINE instead of its right-sized shape (the
  rendered `--prefer` changed): small jobs boot large nodes and pack onto them, including ones powering up;
- `no-warm-cap`: the settings rule's idle keep without its warm-node cap (every idle node of a kept shape is
  kept for the break-even time).
- `preempt-spot`: a single-node job that may not use spot and would overflow the reservation requeues running
  spot-tolerant jobs off a reserved node instead (the fewest lost GPU-seconds since their last checkpoint; they
  resume from it), as Slurm's partition-priority preemption (`PreemptType=preempt/partition_prio`,
  `PreemptMode=REQUEUE`, spot-tolerant work in a lower PriorityTier) would with the overflow held back.  Built
  since (`Policy.preempt_spot`, on by default): this what-if now stacks on top of the real thing; compare
  against `none` with `--no-preempt` to see what it sized.
- `slurm-default-order`: Slurm's preemption victims in 22.05's default order (the earliest submitted first,
  bench/probe_preempt_order.py) instead of the rendered `preempt_youngest_first` (the latest started first);
- `late-bind` / `late-bind=any`: a job allocated nodes that are still powering up takes registered nodes that
  gain room before its own register instead (at Slurm's next scheduling pass, with no daemon latency), nodes of
  its `--prefer` only (`late-bind`: an upper bound that keeps right-sizing strict, which Slurm does not), or
  those first and then any node with room (`=any`: what `--prefer` does when the preferred nodes are not
  available, as with every overflow pool held; bench/probe_late_bind.py, docs/simulate.md "Late binding");
- `migrate-spot` / `migrate-spot=T`: at every daemon tick with nothing pending, a spot-tolerant job alone on a spot
  node is requeued (`scontrol requeue`) when a registered reserved node has room for it (most GPUs first, then the
  latest started); it resumes from its checkpoint after the requeue hold, on the reservation if the room is still
  there.  With `=T`, only when Slurm has preempted nothing off the reservation for T seconds (the reservation is
  not contended by work that may not use spot).  Sizes moving spot work back onto idle reserved GPUs (it stops
  running jobs on purpose: not built).

- `gang-fresh`: a gang takes nodes that are already up only when they hold it whole; otherwise every one of its
  nodes is a powered-down name of the pool (`_pick_gang`), so no up node waits, allocated and idle, for the
  gang's boots (partial-gang waste).  On real Slurm the daemon would set the pending gang's `ExcNodeList` to the
  pool's idle up nodes before it releases names, and keep reserved nodes up (not built: docs/simulate.md "A gang
  stays in one pool").

`--what A+B` applies several what-ifs together (e.g. `pack=a3-highgpu-8g+no-warm-cap`).

`--wait-value W` replays gpu-fleet at that wait value (the knob of the frontier) instead of its default.

The simulated Slurm is patched in this process only (bench instrumentation)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _patch(what: str) -> None:
    import autoscaler.planner.rule as rule
    from autoscaler.replay import simslurm
    from fleet.catalog import CapacityType

    S = simslurm.SimSlurm
    name, _, arg = what.partition("=")
    if name == "none":
        return
    if name == "no-warm-cap":
        orig_policy = rule.policy_for
        rule.policy_for = lambda f, base=None: replace(orig_policy(f, base), idle_keep_max_by_machine={})
        import autoscaler.core.settings as settings

        settings.policy_for = rule.policy_for
        return
    if name == "pack":
        from fleet.catalog import load_catalog
        from fleet.slurm.job_submit import Prefer

        big = load_catalog().machine(arg).gpu_count
        orig_init = S.__init__

        def init_pack(self: Any, *a: Any, **kw: Any) -> None:
            orig_init(self, *a, **kw)
            self.prefer = {g: Prefer(arg, p.reservation) if g < big else p for g, p in self.prefer.items()}

        S.__init__ = init_pack
        return
    if name == "hold":
        orig_hold = rule.reservation_hold_s
        rule.reservation_hold_s = lambda f: orig_hold(replace(f, reservation_hold_max_s=float(arg)))
        return
    if name == "oracle-hold":
        import autoscaler.replay.gpu_fleet as gf

        orig_hold = rule.reservation_hold_s
        rule.reservation_hold_s = lambda f: orig_hold(replace(f, reservation_hold_max_s=f.boot_s))
        sims: list[Any] = []
        orig_init = S.__init__

        def init(self: Any, *a: Any, **kw: Any) -> None:
            orig_init(self, *a, **kw)
            sims.append(self)

        S.__init__ = init
        orig_qd = gf.queue_depth

        def frees_in_time(sim: Any, idx: int) -> bool:
            job = sim.state.jobs[idx]
            by = job.submit + sim.scenario.ready_s
            ok = 0
            for nm in sim.names.values():
                if nm.pool.capacity_type is not CapacityType.RESERVATION:
                    continue
                node = nm.node
                freed = node.free + sum(
                    g
                    for i, g in node.jobs.items()
                    if (j := sim.state.jobs[i]).start is not None and j.start + j.remaining_s <= by
                )
                ok += freed >= job.gpus_per_node
            return ok >= job.nodes

        def queue_depth(pending: Any, inventory: Any, offerings: Any, policy: Any, now: float, *a: Any) -> Any:
            sim = sims[-1]
            keep = [u for u in pending if not frees_in_time(sim, int(u.id.rsplit("/", 1)[1]) - 1)]
            wait = [u for u in pending if u not in keep]
            soon = [replace(u, submit_time=now - policy.batch_window_s) for u in keep]
            return orig_qd([*soon, *wait], inventory, offerings, policy, now, *a)

        gf.queue_depth = queue_depth
        return
    if name == "spot-protect":
        keep = int(arg)
        orig_elig = S._eligible_pools

        def eligible(self: Any, job: Any, tier: list[Any]) -> list[Any]:
            out = []
            for p in orig_elig(self, job, tier):
                if job.spot_ok and p.capacity_type is CapacityType.RESERVATION:
                    up = [nm.node for nm in self.names.values() if nm.pool.name == p.name]
                    free = sum(n.free for n in up) + p.gpus_per_node * (p.max_nodes - len(up))
                    if free - job.gpus < keep:
                        continue
                out.append(p)
            return out

        S._eligible_pools = eligible
        return
    if name == "preempt-spot":
        from autoscaler.replay.state import JobState

        orig_select = S._select

        def select_preempt(self: Any, job: Any, now: float) -> Any:
            picked = orig_select(self, job, now)
            res = CapacityType.RESERVATION
            if job.spot_ok or job.nodes != 1 or picked is None or all(p.capacity_type is res for p, _ in picked):
                return picked
            g, every, best = job.gpus_per_node, self.state.checkpoint_interval_s, None
            for nm in self.names.values():
                if nm.pool.capacity_type is not res or nm.down or not nm.node.registered or nm.node.free >= g:
                    continue
                spot = []
                for i in nm.node.jobs:
                    j = self.state.jobs[i]
                    if j.spot_ok and j.state is JobState.RUNNING:
                        ran = now - (j.start or now)
                        spot.append(((ran % every if every > 0 else ran) * j.gpus, j))
                free, victims, lost = nm.node.free, [], 0.0
                for lost_j, j in sorted(spot, key=lambda c: c[0]):
                    if free >= g:
                        break
                    victims.append(j)
                    free, lost = free + j.gpus, lost + lost_j
                if free >= g and (best is None or lost < best[0]):
                    best = (lost, victims)
            if best is None:
                return picked
            for j in best[1]:
                self._requeue(j, now)
            return orig_select(self, job, now)

        S._select = select_preempt
        return
    if name in ("best-fit", "protect-empty"):
        spare = int(arg) if name == "protect-empty" else None

        def select_res(self: Any, job: Any, now: float) -> Any:
            need, g, picked = job.nodes, job.gpus_per_node, []
            for tier in self.tiers:
                for pool in self._eligible_pools(job, tier):
                    want = need - len(picked)
                    room = [(nm.node.free, nm.index, nm) for nm in self._room[pool.name].values() if nm.node.free >= g]
                    cands = room + [(pool.gpus_per_node, i, i) for i in self._free_indices(pool, want)]
                    if pool.capacity_type is CapacityType.RESERVATION:
                        cands.sort(key=lambda c: (c[0], c[1]))
                        if spare is not None and g < pool.gpus_per_node:
                            empty = [c for c in cands if c[0] == pool.gpus_per_node]
                            cands = [c for c in cands if c[0] < pool.gpus_per_node] + empty[
                                : max(0, len(empty) - spare)
                            ]
                    else:
                        cands.sort(key=lambda c: c[1])
                    for c in cands[:want]:
                        picked.append((pool, c[2]))
                    if len(picked) >= need:
                        return picked
            return None

        S._select = select_res
        return
    if name in ("up-first", "up-first-best-fit"):
        best = name == "up-first-best-fit"

        def select_up(self: Any, job: Any, now: float) -> Any:
            need, g, picked = job.nodes, job.gpus_per_node, []
            for tier in self.tiers:
                pools = self._eligible_pools(job, tier)
                room = [
                    (nm.node.free if best else 0, pool.gpus_per_node, nm.index, pool, nm)
                    for pool in pools
                    for nm in self._room[pool.name].values()
                    if nm.node.free >= g
                ]
                room.sort(key=lambda c: c[:3])
                picked += [(c[3], c[4]) for c in room[: need - len(picked)]]
                if len(picked) >= need:
                    return picked
                for pool in pools:
                    picked += [(pool, i) for i in self._free_indices(pool, need - len(picked))]
                    if len(picked) >= need:
                        return picked
            return None

        S._select = select_up
        return
    if name == "migrate-spot":
        from autoscaler.replay import gpu_fleet
        from autoscaler.replay.state import JobState

        orig_tick = gpu_fleet.GpuFleetPolicy.tick
        quiet_s = float(arg) if arg else 0.0
        seen = {"count": 0, "at": -float("inf")}  # Slurm preemptions seen, and when the last one happened

        def tick_migrate(self: Any, sim: Any) -> Any:
            res, spot = CapacityType.RESERVATION, CapacityType.SPOT
            now = sim.now
            if sim.slurm_counters["preempt_requeues"] != seen["count"]:
                seen["count"], seen["at"] = sim.slurm_counters["preempt_requeues"], now
            room = sorted((nm.node.free for nm in sim.registered() if nm.pool.capacity_type is res), reverse=True)
            if now - seen["at"] >= quiet_s and room and room[0] > 0 and not sim.pending_jobs():
                cands = []
                for nm in sim.registered():
                    if nm.pool.capacity_type is spot and len(nm.node.jobs) == 1:
                        j = sim.state.jobs[next(iter(nm.node.jobs))]
                        if j.state is JobState.RUNNING and j.nodes == 1:
                            cands.append(j)
                for j in sorted(cands, key=lambda j: (-j.gpus_per_node, -(j.start or 0.0))):
                    if room and room[0] >= j.gpus_per_node:
                        room[0] -= j.gpus_per_node
                        room.sort(reverse=True)
                        sim._requeue(j, now)
            return orig_tick(self, sim)

        gpu_fleet.GpuFleetPolicy.tick = tick_migrate
        return
    if name == "gang-fresh":
        orig_gang = S._pick_gang

        def pick_fresh(self: Any, job: Any, pools: Any) -> Any:
            got = orig_gang(self, job, pools)
            if not got or all(not isinstance(c, int) for _, c in got) or all(isinstance(c, int) for _, c in got):
                return got  # all up, all to power up, or no room
            pool = got[0][0]
            fresh = self._free_indices(pool, job.nodes)
            return [(pool, i) for i in fresh] if len(fresh) >= job.nodes else None

        S._pick_gang = pick_fresh
        return
    if name == "slurm-default-order":
        S.victim_order = lambda self, candidates: sorted(candidates)  # the earliest submitted first
        return
    if name == "late-bind":
        from autoscaler.replay.state import JobState

        waiting: set[int] = set()  # CONFIGURING jobs with a node still powering up
        orig_alloc, orig_sched = S._allocate, S.schedule

        def alloc_lb(self: Any, job: Any, picked: Any, now: float) -> None:
            orig_alloc(self, job, picked, now)
            if job.state is JobState.CONFIGURING:
                waiting.add(job.idx)

        def registered_room(self: Any, job: Any) -> list[Any] | None:
            want = self.prefer.get(job.gpus_per_node)
            for strict in (True, False) if arg == "any" else (True,):
                rows = []
                for pool in self._eligible_pools(job, self.by_weight):
                    if strict and want is not None and not want.allows(pool.machine_type, pool.capacity_type):
                        continue
                    for nm in self._room[pool.name].values():
                        node = nm.node
                        if node.registered and node.free >= job.gpus_per_node and job.idx not in node.jobs:
                            rows.append((self._node_weight(nm), self._order[pool.name], nm.index, nm))
                if len(rows) >= job.nodes:
                    rows.sort(key=lambda r: r[:3])
                    return [(r[3].pool, r[3]) for r in rows[: job.nodes]]
            return None

        def sched_lb(self: Any, now: float) -> None:
            for idx in sorted(waiting):
                job = self.state.jobs[idx]
                if job.state is not JobState.CONFIGURING or all(n.registered for n in job.placed_on):
                    waiting.discard(idx)
                    continue
                picked = registered_room(self, job)
                if picked is None:
                    continue
                waiting.discard(idx)
                self._release_job(job, now)
                job.state = JobState.PENDING
                self.slurm_counters["late_binds"] = self.slurm_counters.get("late_binds", 0) + 1
                orig_alloc(self, job, picked, now)  # all registered: starts now
            orig_sched(self, now)

        S._allocate, S.schedule = alloc_lb, sched_lb
        return
    raise SystemExit(f"--what: unknown what-if {what!r} (see --help)")


def main() -> int:
    from autoscaler.replay.run import PolicyOptions, run_scenario
    from autoscaler.replay.scenario import Scenario
    from autoscaler.replay.synth import load_source

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--trace", required=True, help="ITP cluster number (04) or synth:REGIME")
    ap.add_argument("--what", default="none")
    ap.add_argument("--reserved-nodes", type=int, default=0)
    ap.add_argument("--spot-fraction", type=float, default=0.0)
    ap.add_argument("--stockout-rate", type=float, default=0.0)
    ap.add_argument("--wait-value", type=float, default=None, help="gpu-fleet's wait value ($/GPU-h; default: its own)")
    ap.add_argument("--no-preempt", action="store_true", help="gpu-fleet without Policy.preempt_spot")
    a = ap.parse_args()
    itp = ROOT.parent / "shared" / "data" / "traces" / "itp" / f"cluster{a.trace}.csv"
    _, jobs = load_source(a.trace if a.trace.startswith("synth:") else str(itp))  # synth:REGIME[:SEED], or NN
    for w in a.what.split("+"):
        _patch(w)
    sc = Scenario(trace=a.trace, reserved_nodes=a.reserved_nodes, spot_fraction=a.spot_fraction,
                  stockout_rate=a.stockout_rate)  # fmt: skip
    options = PolicyOptions(wait_value_usd_per_gpu_hour=a.wait_value, preempt_spot=not a.no_preempt)
    m = run_scenario(jobs, sc, ["gpu-fleet"], options=options).metrics["gpu-fleet"]
    keys = ("cost_usd", "cost_ratio", "overflow_ratio", "unused_node_gpu_hours", "wait_p50_s", "wait_p95_s")
    keys += ("wait_mean_s", "nodes_launched")
    keys += ("preempted_jobs", "scheduler_preemptions", "gpu_hours_lost_to_preemption", "partial_gang_gpu_hours")
    print(json.dumps({"trace": a.trace, "what": a.what, "wait_value": a.wait_value, **{k: m[k] for k in keys}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
