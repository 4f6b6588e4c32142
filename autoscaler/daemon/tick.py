"""One tick of the daemon: read everything, reconcile, serve Slurm's power-save requests, plan, actuate.

Order within a tick (each step only acts on this tick's fresh reads):
1. reads: Slurm nodes + jobs (may be unavailable), the cloud's instances and offerings, async launch
   failures (-> backoff memory), the store's open intents and power-save queue;
2. reconcile intents / unknown instances (adopt, relaunch idempotently, orphans after a grace period);
3. SuspendProgram requests -> delete those instances by name; ResumeFailProgram requests -> back off the
   offering, delete the stuck instance, `scontrol update state=resume` to put the node back in service;
4. ResumeProgram requests -> one `plan()` per pool over the resumed nodes (offering and zone choice,
   gang atomicity, backoff, limits) -> launches named after the Slurm nodes;
5. queue depth: one `plan()` over PENDING jobs Slurm could not place + the whole inventory -> pre-warm
   (`scontrol ... state=power_up`, only with `loop.prewarm`) and idle scale-down (drain, then power down
   and delete by name, only nodes Slurm reports idle);
6. metrics.
A daemon that does not hold the leader lock runs steps 1 and 6 only.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from loguru import logger

from autoscaler.cloud import CloudNode, CloudNodeStatus, FailureKind, LaunchRequest, Offering, Provider, ProviderError
from autoscaler.daemon.actuate import Actuator, deletable
from autoscaler.daemon.config import LoopConfig
from autoscaler.daemon.lock import LeaderLock
from autoscaler.daemon.metrics import Metrics
from autoscaler.daemon.reconcile import Reconciliation, reconcile
from autoscaler.daemon.snapshot import (
    ResumeUnit,
    View,
    build_view,
    offering_from_dict,
    offering_to_dict,
    unavailable_from_rows,
)
from autoscaler.daemon.state import OPEN_REQUEST_STATES, PowerRow, RequestRow, StateStore
from autoscaler.daemon.unservable import UnservableJobs
from autoscaler.model import (
    LIVE_STATES,
    Inventory,
    NodeState,
    Plan,
    Policy,
    Pool,
    ScaleUp,
    UnavailableOffering,
    WorkUnit,
    record_failure,
    request_id_for,
)
from autoscaler.slurm.client import SlurmClient, SlurmUnavailable
from autoscaler.slurm.readers import SlurmJob, SlurmNode, waiting_on_power_up

Planner = Callable[..., Plan]
Memory = list[UnavailableOffering]
SlurmView = dict[str, SlurmNode] | None  # None: Slurm did not answer this tick


def default_planner() -> Planner:
    from autoscaler.planner import plan

    return plan


def call_planner(
    planner: Planner,
    demand: Sequence[WorkUnit],
    inventory: Inventory,
    offerings: Sequence[Offering],
    policy: Policy,
    now: float,
    memory: Sequence[UnavailableOffering],
) -> Plan:
    """`plan(demand, inventory, offerings, policy, now, unavailable=memory)`."""
    return planner(list(demand), inventory, list(offerings), policy, now, unavailable=tuple(memory))


@dataclass
class TickResult:
    at: float
    duration_s: float = 0.0
    leader: bool = False
    slurm_ok: bool = False
    ok: bool = False
    error: str | None = None
    commands: list[dict] = field(default_factory=list)
    unserved: list[dict] = field(default_factory=list)
    pending_units: int = 0
    resume_units: int = 0
    waiting_on_boot: int = 0  # jobs Slurm placed on CLOUD nodes still powering up

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Daemon:
    def __init__(
        self,
        *,
        pools: Sequence[Pool],
        provider: Provider,
        slurm: SlurmClient,
        store: StateStore,
        policy: Policy,
        loop: LoopConfig,
        metrics: Metrics | None = None,
        planner: Planner | None = None,
        lock: LeaderLock | None = None,
        clock: Callable[[], float] = time.time,
        dry_run: bool = False,
    ) -> None:
        self.pools = list(pools)
        self.pool_names = [p.name for p in self.pools]
        self.provider = provider
        self.slurm = slurm
        self.store = store
        self.policy = policy
        self.loop = loop
        self.metrics = metrics or Metrics()
        self.planner = planner or default_planner()
        self.lock = lock or LeaderLock(store.path)
        self.clock = clock
        self.dry_run = dry_run
        self.unservable = UnservableJobs()

    # --- the tick ------------------------------------------------------------------------------------------
    def tick(self) -> TickResult:
        t0 = time.perf_counter()
        now = self.clock()
        res = TickResult(at=now)
        act = Actuator(
            provider=self.provider,
            slurm=self.slurm,
            store=self.store,
            metrics=self.metrics,
            clock=self.clock,
            dry_run=self.dry_run,
        )
        try:
            res.leader = self.dry_run or self.lock.try_acquire()
            self.metrics.leader.set(1 if res.leader and not self.dry_run else 0)
            if res.leader and not self.dry_run:
                self.store.set_leader(f"{os.uname().nodename}:{os.getpid()}", os.getpid(), now)
            self._tick(now, res, act)
            res.ok = True
            self.metrics.ticks.labels(outcome="ok").inc()
            self.metrics.tick_succeeded(self.clock())
        except (ProviderError, SlurmUnavailable, OSError) as exc:  # the cloud or the disk: retried next tick
            res.error = f"{type(exc).__name__}: {exc}"
            logger.bind(error=res.error).error("tick failed: {}", res.error)
            self.metrics.ticks.labels(outcome="failed").inc()
        except Exception as exc:  # a bug or unexpected data: keep the daemon alive, say so loudly
            res.error = f"{type(exc).__name__}: {exc}"
            logger.bind(error=res.error).opt(exception=exc).error("tick failed unexpectedly: {}", res.error)
            self.metrics.ticks.labels(outcome="failed").inc()
        finally:
            res.commands = act.log.entries
            res.duration_s = time.perf_counter() - t0
            self.metrics.tick_seconds.observe(res.duration_s)
        return res

    def _read_slurm(self) -> tuple[dict[str, SlurmNode] | None, list[SlurmJob] | None]:
        try:
            nodes = {n.name: n for n in self.slurm.nodes()}
            jobs = self.slurm.jobs()
        except SlurmUnavailable as exc:
            logger.bind(error=str(exc)).warning("Slurm not answering: no scale-down this tick ({})", exc)
            return None, None
        return nodes, jobs

    def _tick(self, now: float, res: TickResult, act: Actuator) -> None:
        snodes, sjobs = self._read_slurm()
        res.slurm_ok = snodes is not None
        self.metrics.slurm_up.set(1 if res.slurm_ok else 0)
        if snodes is not None and sjobs is not None:
            res.waiting_on_boot = len(waiting_on_power_up(sjobs, snodes))
            self.metrics.waiting_on_boot.set(res.waiting_on_boot)
        memory = list(unavailable_from_rows(self.store.unavailable(now)))
        actuate = res.leader and not self.dry_run
        failed_names: set[str] = set()
        if actuate:  # before listing: a provider may cancel (delete) the failed instances while reporting them
            memory, failed_names = self._async_failures(memory, now, snodes)
        cloud = [c for c in self.provider.list_nodes(self.pool_names) if c.name not in failed_names]
        offerings = self.provider.offerings()
        power = self.store.open_power()
        requests = self.store.requests(OPEN_REQUEST_STATES)
        if res.leader:
            self._preempted(cloud, requests, snodes, act)

        # 2. reconcile
        if res.leader:
            resume_names = {r.name for r in power if r.action == "resume"}
            rec = reconcile(
                requests,
                cloud,
                snodes,
                resume_names,
                self.store.orphans(),
                now,
                launch_timeout_s=self.loop.launch_timeout_s,
                managed=None,
            )
            memory = self._apply_reconcile(rec, requests, snodes, now, act, memory, actuate)
            if actuate:
                requests = self.store.requests(OPEN_REQUEST_STATES)
                cloud = self.provider.list_nodes(self.pool_names) if rec.relaunch else cloud

        # 3. suspend / resume-fail, latest request per name wins
        if res.leader:
            memory = self._power_down_requests(power, cloud, snodes, requests, now, act, memory, actuate)
            power = self.store.open_power() if actuate else power
            requests = self.store.requests(OPEN_REQUEST_STATES) if actuate else requests

        prices = {o.key: o.hourly_usd for o in offerings}
        view = build_view(self.pools, cloud, snodes, sjobs, requests, power, now, prices=prices)
        res.pending_units = len(view.pending)
        self.unservable.update(view.pending, self.pools, self.metrics)  # logged once per job, gauge per tick
        res.resume_units = sum(len(v) for v in view.resume.values())

        if res.leader:
            # resume rows whose node is already live need nothing more
            live = {n.name for n in view.inventory.nodes if n.state is not NodeState.DELETING}
            done = [r.id for r in power if r.action == "resume" and r.name in live]
            unknown = [r.id for r in view.unknown_power_rows]
            for r in view.unknown_power_rows:
                logger.bind(name=r.name, action=r.action).error(
                    "Slurm asked to {} {}, which is in no managed pool: ignored", r.action, r.name
                )
            if actuate and (done or unknown):
                self.store.finish_power(done + unknown, now)
            # 4. Slurm's resume requests
            memory = self._serve_resumes(view, offerings, now, act, memory, res, actuate)

        # 5. queue depth + scale-down
        plan = call_planner(self.planner, view.pending, view.inventory, offerings, self.policy, now, memory)
        res.unserved.extend(
            {"unit": u.unit, "reason": str(u.reason), "detail": u.detail}
            for u in plan.unserved
            if u.unit.startswith("job/")
        )
        if res.leader:
            self._queue_depth(plan, view, snodes, now, act)

        if actuate:
            self._save_memory(memory, now)
        self._export(view, cloud, offerings, memory, res)

    # --- steps ---------------------------------------------------------------------------------------------
    def _record(
        self, memory: list[UnavailableOffering], key: Any, kind: FailureKind | str, now: float, message: str
    ) -> list[UnavailableOffering]:
        self.metrics.offering_failures.labels(kind=str(kind)).inc()
        return list(record_failure(memory, key, kind, now, self.policy, message))

    def _async_failures(
        self, memory: list[UnavailableOffering], now: float, snodes: dict[str, SlurmNode] | None
    ) -> tuple[list[UnavailableOffering], set[str]]:
        """Launch failures reported after acceptance -> backoff memory; the names are asked for again."""
        failed: set[str] = set()
        for f in self.provider.poll_errors():
            logger.bind(
                request_id=f.request_id, offering=str(f.offering), kind=str(f.kind), names=list(f.names)
            ).warning("launch failed after acceptance: {} {} ({})", f.offering, f.kind, f.message)
            memory = self._record(memory, f.offering, f.kind, now, f.message)
            names = list(f.names)
            if f.request_id:
                row = self.store.request(f.request_id)
                if row is not None:
                    names = names or list(row.names)
                    self.store.set_request_state(f.request_id, "failed", now, f"{f.kind}: {f.message}")
            self.store.release_names(names, now, f"launch failed: {f.kind}")
            failed.update(names)
            # Slurm still waits for these nodes: ask again, next plan picks another offering
            again = [n for n in names if snodes is None or (snodes.get(n) is not None and snodes[n].powering_up)]
            if again:  # with the jobs Slurm bound them to: independent jobs stay separate units, gangs keep priority
                self.store.enqueue_power("resume", again, now, self.store.resume_jobs_of(again))
        return memory, failed

    def _preempted(
        self, cloud: Sequence[CloudNode], requests: Sequence[RequestRow], snodes: SlurmView, act: Actuator
    ) -> None:
        """A held instance the cloud reports preempted: its jobs are lost.  Power the Slurm node down at once
        (Slurm requeues the jobs and calls SuspendProgram) instead of waiting out SlurmdTimeout."""
        if snodes is None:
            return
        held = {n for r in requests if r.state == "launched" for n in r.names}
        names = [
            c.name
            for c in cloud
            if c.status is CloudNodeStatus.GONE
            and c.preempted
            and c.name in held
            and c.name in snodes
            and not (snodes[c.name].powered_down or snodes[c.name].powering_down)
        ]
        if names:
            logger.bind(names=names).warning("instances preempted: powering their Slurm nodes down {}", names)
            act.scontrol(names, "power_down_force", "gpu-fleet: instance preempted")

    def _apply_reconcile(
        self,
        rec: Reconciliation,
        requests: Sequence[RequestRow],
        snodes: SlurmView,
        now: float,
        act: Actuator,
        memory: Memory,
        actuate: bool,
    ) -> Memory:
        by_id = {r.request_id: r for r in requests}
        for rid in rec.adopt_requests:
            r = by_id[rid]
            logger.bind(request_id=rid, names=list(r.names)).info("adopting instances of intent {}", rid)
            if actuate:
                self.store.set_request_state(rid, "launched", now, "adopted on reconcile")
                for n in r.names:
                    self.store.add_history(n, "adopted", now, rid)
            self.metrics.adopted.inc(len(r.names))
        for rid in rec.give_up:
            logger.bind(request_id=rid).warning("giving up intent {} after launch timeout", rid)
            if actuate:
                self.store.set_request_state(rid, "failed", now, "launch timeout")
        for r, missing in rec.relaunch:
            req = LaunchRequest(r.request_id, r.pool, offering_from_dict(r.offering), tuple(r.names))
            err = act.launch(req, f"retry of intent ({len(missing)} missing)", retry=True)
            if err is not None and err.kind in (FailureKind.STOCKOUT, FailureKind.QUOTA, FailureKind.INVALID):
                memory = self._record(memory, req.offering, err.kind, now, str(err))
                if actuate:
                    self.store.set_request_state(r.request_id, "failed", now, f"{err.kind}: {err}")
                    self.store.release_names(r.names, now, f"launch failed: {err.kind}")
        if rec.released and actuate:
            self.store.release_names(rec.released, now, "instance gone")
            for n in rec.released:
                self.store.add_history(n, "gone", now, "instance no longer listed by the cloud")
        for c in rec.adopt_instances:
            logger.bind(name=c.name, pool=c.pool).info("adopting unrecorded instance {} (Slurm uses it)", c.name)
            if actuate:
                rid = c.request_id or f"adopt-{c.name}"
                self.store.record_intent(rid, c.pool, offering_to_dict(c.offering), [c.name], now)
                self.store.set_request_state(rid, "launched", now, "adopted: instance Slurm uses")
                self.store.add_history(c.name, "adopted", now, "unrecorded instance")
                self.store.clear_orphans([c.name])
            self.metrics.adopted.inc()
        if actuate:
            self.store.clear_orphans(rec.not_orphans)
        by_pool: dict[str, list[str]] = defaultdict(list)
        for c in rec.orphans_seen:
            first = self.store.orphan_seen(c.name, c.pool, now) if actuate else now
            if now - first >= self.loop.orphan_grace_s:
                by_pool[c.pool].append(c.name)
            else:
                logger.bind(name=c.name).info(
                    "instance {} is wanted by nobody; deleting after {:.0f}s more",
                    c.name,
                    self.loop.orphan_grace_s - (now - first),
                )
        for pool, names in by_pool.items():
            deleted = act.delete(pool, names, "orphan: no request and Slurm has it powered down", snodes)
            if deleted:
                self.store.clear_orphans(deleted)
                self.metrics.orphans_deleted.inc(len(deleted))
        return memory

    def _power_down_requests(
        self,
        power: Sequence[PowerRow],
        cloud: Sequence[CloudNode],
        snodes: SlurmView,
        requests: Sequence[RequestRow],
        now: float,
        act: Actuator,
        memory: Memory,
        actuate: bool,
    ) -> Memory:
        latest: dict[str, Any] = {}
        for r in power:
            latest[r.name] = r
        superseded = [r.id for r in power if latest[r.name].id != r.id]
        if actuate and superseded:
            self.store.finish_power(superseded, now)
        live = {c.name: c for c in cloud if c.status is not CloudNodeStatus.GONE}
        intent_of = {n: r for r in requests for n in r.names}
        pool_of = {p.node_name_prefix: p.name for p in self.pools}

        def pool_name(n: str) -> str | None:
            return pool_of.get(n.rpartition("-")[0])

        suspend = [r for r in latest.values() if r.action == "suspend"]
        failed = [r for r in latest.values() if r.action == "resume_fail"]
        for r in suspend + failed:
            self.metrics.power_requests.labels(action=r.action).inc()
        if snodes is None:
            if suspend or failed:
                logger.warning(
                    "{} suspend / resume-fail requests wait: Slurm not answering", len(suspend) + len(failed)
                )
            return memory

        # ResumeTimeout: remember the offering as unavailable, then treat the node like a suspend
        for r in failed:
            c = live.get(r.name)
            key = c.offering if c else (offering_from_dict(intent_of[r.name].offering) if r.name in intent_of else None)
            if key is not None:
                why = "resume timeout (ResumeFailProgram)"
                memory = self._record(memory, key, FailureKind.STOCKOUT, now, why)
                hold = now + self.loop.resume_fail_backoff_s  # at least loop.resume_fail_backoff_s
                memory = [dataclasses.replace(u, until=max(u.until, hold)) if u.key == key else u for u in memory]
            logger.bind(name=r.name, offering=str(key)).warning("node {} failed to resume in time", r.name)

        by_pool: dict[str, list[str]] = defaultdict(list)
        for r in suspend + failed:
            p = pool_name(r.name)
            if p is None:
                continue
            if r.name in live or r.name in intent_of:
                by_pool[p].append(r.name)
        done_ids: list[int] = []
        for pool, names in by_pool.items():
            without_instance = [n for n in names if n not in live]
            if without_instance and actuate:
                self.store.release_names(without_instance, now, "suspended before the instance existed")
            with_instance = [n for n in names if n in live]
            deleted = (
                act.delete(pool, with_instance, "Slurm suspended it (SuspendProgram)", snodes) if with_instance else []
            )
            still = set(with_instance) - set(deleted)
            done_ids += [r.id for r in suspend + failed if r.name in names and r.name not in still]
        done_ids += [r.id for r in suspend + failed if not (r.name in live or r.name in intent_of)]
        back = [r.name for r in failed if r.id in done_ids and pool_name(r.name) is not None]  # never unmanaged names
        if back:
            act.scontrol(back, "resume", "gpu-fleet: resume failed; back in service")
        if actuate:
            self.store.finish_power(done_ids, now)
        return memory

    def _serve_resumes(
        self,
        view: View,
        offerings: Sequence[Offering],
        now: float,
        act: Actuator,
        memory: Memory,
        res: TickResult,
        actuate: bool,
    ) -> Memory:
        for pool_name, units in view.resume.items():
            pool = view.inventory.pool(pool_name)
            # Slurm bound these names to jobs: they must be created, so existing nodes may not absorb them
            # (the limits still count every live node, through the policy).
            inv = Inventory((pool,), ())
            offs = [o for o in offerings if pool.can_launch(o.key)]
            policy = self._pool_policy(view)
            p = call_planner(self.planner, [u.unit for u in units], inv, offs, policy, now, memory)
            by_unit = {u.unit.id: u for u in units}
            for u in p.unserved:
                res.unserved.append({"unit": u.unit, "reason": str(u.reason), "detail": u.detail})
                logger.bind(unit=u.unit, reason=str(u.reason)).warning(
                    "cannot launch Slurm-resumed nodes for {}: {} ({})", u.unit, u.reason, u.detail
                )
            for su in p.scale_ups:
                memory = self._launch_resume(su, by_unit, now, act, memory, actuate)
        return memory

    def _pool_policy(self, view: View) -> Policy:
        """The policy for one pool's resume plan: fleet-wide limits minus what live nodes already hold."""
        other = [n for n in view.inventory.nodes if n.state in LIVE_STATES]
        changes: dict[str, Any] = {}
        if self.policy.max_nodes is not None:
            changes["max_nodes"] = max(0, self.policy.max_nodes - len(other))
        if self.policy.max_gpus is not None:
            changes["max_gpus"] = max(0, self.policy.max_gpus - sum(n.gpus for n in other))
        if self.policy.budget_usd_per_hour is not None:
            spent = sum(n.hourly_usd or 0.0 for n in other if n.offering.capacity_type != "reservation")
            changes["budget_usd_per_hour"] = max(0.0, self.policy.budget_usd_per_hour - spent)
        return dataclasses.replace(self.policy, **changes) if changes else self.policy

    def _launch_resume(
        self,
        su: ScaleUp,
        by_unit: dict[str, ResumeUnit],
        now: float,
        act: Actuator,
        memory: Memory,
        actuate: bool,
    ) -> Memory:
        units = [by_unit[u] for u in su.units if u in by_unit]
        names = tuple(n for u in units for n in u.names)
        if not names:
            return memory
        if len(names) != su.count:
            logger.bind(pool=su.pool, planned=su.count, resumed=len(names)).info(
                "planner sized {} nodes, Slurm resumed {}: launching the resumed names", su.count, len(names)
            )
        first = min(u.unit.submit_time for u in units)
        rid = request_id_for(su.pool, su.offering, names, first)
        req = LaunchRequest(rid, su.pool, su.offering, names, su.placement_group)
        err = act.launch(req, f"Slurm resumed {len(names)} node(s): {su.reason}")
        rows = [i for u in units for i in u.row_ids]
        if err is None:
            if actuate:
                self.store.finish_power(rows, now)
            return memory
        if err.kind is FailureKind.TRANSIENT:
            return memory  # the intent stays; reconcile retries it with the same request id
        memory = self._record(memory, su.offering, err.kind, now, str(err))
        if actuate:
            self.store.set_request_state(rid, "failed", now, f"{err.kind}: {err}")
            self.store.release_names(names, now, f"launch failed: {err.kind}")
        return memory  # resume rows stay open: next tick plans another offering

    def _queue_depth(self, plan: Plan, view: View, snodes: SlurmView, now: float, act: Actuator) -> None:
        for su in plan.scale_ups:
            if not self.loop.prewarm:
                logger.bind(pool=su.pool, names=list(su.names), offering=str(su.offering)).debug(
                    "queue depth would pre-warm {} (loop.prewarm is off)", list(su.names)
                )
                continue
            act.scontrol(list(su.names), "power_up", f"gpu-fleet pre-warm: {su.reason}")
        if snodes is None:
            return  # no scale-down on a stale view
        for d in plan.drains:
            idle = [n for n in d.nodes if n in snodes and snodes[n].idle]
            act.scontrol(idle, "drain", f"gpu-fleet scale-down: {d.reason}")
        for dn in plan.deletes:
            ok = [
                n for n in dn.names if deletable(n, snodes) and (n not in snodes or snodes[n].drain or snodes[n].idle)
            ]
            if not ok:
                continue
            if act.scontrol(ok, "power_down", f"gpu-fleet scale-down: {dn.reason}"):
                deleted = act.delete(dn.pool, ok, f"scale-down: {dn.reason}", snodes)
                act.scontrol(deleted, "undrain", "gpu-fleet: powered down, back to the pool")

    def _save_memory(self, memory: Sequence[UnavailableOffering], now: float) -> None:
        for u in memory:
            if u.until > now:
                self.store.mark_unavailable(
                    str(u.key), offering_to_dict(u.key), u.until, str(u.reason), u.failures, u.message
                )

    def _export(
        self,
        view: View,
        cloud: Sequence[CloudNode],
        offerings: Sequence[Offering],
        memory: Memory,
        res: TickResult,
    ) -> None:
        m = self.metrics
        m.nodes.clear()
        counts: dict[tuple[str, str], int] = defaultdict(int)
        usd: dict[str, float] = defaultdict(float)
        prices = {o.key: o.hourly_usd for o in offerings}
        for n in view.inventory.nodes:
            counts[(n.pool, str(n.state))] += 1
            if n.state is not NodeState.GONE:
                usd[str(n.offering.capacity_type)] += (
                    n.hourly_usd if n.hourly_usd is not None else prices.get(n.offering, 0.0)
                )
        for (pool, st), c in counts.items():
            m.nodes.labels(pool=pool, state=st).set(c)
        m.hourly_usd.clear()
        for ct, v in usd.items():
            m.hourly_usd.labels(capacity_type=ct).set(v)
        m.pending_gpus.clear()
        pend: dict[str, int] = defaultdict(int)
        for pool, units in view.resume.items():
            pend[pool] += sum(u.unit.gpus for u in units)
        for u in view.pending:
            pool = next((p.name for p in self.pools if p.serves(u.queue)), "(none)")
            pend[pool] += u.gpus
        for pool in self.pool_names:
            m.pending_gpus.labels(pool=pool).set(pend.get(pool, 0))
        m.unserved_units.clear()
        reasons: dict[str, int] = defaultdict(int)
        for u in res.unserved:
            reasons[u["reason"]] += 1
        for r, c in reasons.items():
            m.unserved_units.labels(reason=r).set(c)
        m.backoffs.clear()
        active: dict[str, int] = defaultdict(int)
        for u in memory:
            if u.until > res.at:
                active[str(u.reason)] += 1
        for r, c in active.items():
            m.backoffs.labels(reason=r).set(c)
