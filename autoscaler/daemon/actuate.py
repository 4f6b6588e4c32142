"""Execute decisions: launches, drains, power-state and Weight updates and deletes, each logged and counted.

Every call to the cloud or to scontrol goes through `Actuator`, which
- in dry-run mode logs what it would do and touches nothing (store included);
- writes a launch intent to the store *before* calling `provider.launch` (crash-safe, see `state`);
- deletes only names that Slurm, in this tick's fresh view, reports without work (`deletable`), so no path
  (scale-down, suspend, orphan clean-up, resume failure) can delete a busy node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from loguru import logger

from autoscaler.cloud import LaunchRequest, Provider, ProviderError
from autoscaler.daemon.metrics import Metrics
from autoscaler.daemon.snapshot import offering_to_dict
from autoscaler.daemon.state import StateStore
from autoscaler.slurm.client import SlurmClient, SlurmUnavailable
from autoscaler.slurm.gang_gate import lease_mark
from autoscaler.slurm.readers import SlurmNode


@dataclass
class CommandLog:
    """What the actuator did this tick (the `--once` output and the test oracle)."""

    entries: list[dict] = field(default_factory=list)

    def add(self, **entry: object) -> None:
        self.entries.append(dict(entry))


class Actuator:
    def __init__(
        self,
        *,
        provider: Provider,
        slurm: SlurmClient,
        store: StateStore,
        metrics: Metrics,
        clock: Callable[[], float],
        dry_run: bool = False,
    ) -> None:
        self.provider = provider
        self.slurm = slurm
        self.store = store
        self.metrics = metrics
        self.clock = clock
        self.dry_run = dry_run
        self.log = CommandLog()

    def _count(self, command: str, outcome: str) -> None:
        self.metrics.commands.labels(command=command, outcome=outcome).inc()

    # --- cloud ---------------------------------------------------------------------------------------------
    def launch(self, request: LaunchRequest, reason: str, *, retry: bool = False) -> ProviderError | None:
        """Record the intent, then launch.  Returns the provider error (already logged), None on success."""
        entry = {
            "command": "launch",
            "request_id": request.request_id,
            "pool": request.pool,
            "offering": str(request.offering),
            "names": list(request.names),
            "reason": reason,
            "retry": retry,
        }
        if self.dry_run:
            logger.bind(**entry).info("dry-run: would launch {} in {}", list(request.names), request.offering)
            self.log.add(**entry, outcome="dry-run")
            self._count("launch", "dry-run")
            return None
        now = self.clock()
        if not retry:
            self.store.record_intent(
                request.request_id, request.pool, offering_to_dict(request.offering), request.names, now
            )
        try:
            result = self.provider.launch(request)
        except ProviderError as exc:
            logger.bind(**entry, error=str(exc), kind=str(exc.kind)).warning(
                "launch {} failed ({}): {}", request.request_id, exc.kind, exc
            )
            self.log.add(**entry, outcome="failed", error=str(exc), kind=str(exc.kind))
            self._count("launch", "failed")
            return exc
        self.store.set_request_state(request.request_id, "launched", self.clock(), reason)
        for n in request.names:
            self.store.add_history(n, "requested", now, f"{request.request_id} {request.offering}")
        logger.bind(**entry, accepted=list(result.accepted)).info(
            "launched {} in {} ({})", list(request.names), request.offering, reason
        )
        self.log.add(**entry, outcome="ok", already_existed=list(result.already_existed))
        self._count("launch", "ok")
        return None

    def delete(
        self, pool: str, names: Sequence[str], reason: str, slurm_nodes: Mapping[str, SlurmNode] | None
    ) -> list[str]:
        """Delete by name the subset Slurm reports without work; returns the names deleted."""
        ok = [n for n in names if deletable(n, slurm_nodes)]
        refused = [n for n in names if n not in ok]
        if refused:
            logger.bind(command="delete", pool=pool, names=refused).error(
                "refusing to delete {}: Slurm reports work on them or did not answer", refused
            )
            self.log.add(command="delete", pool=pool, names=refused, reason=reason, outcome="refused")
            self._count("delete", "refused")
        if not ok:
            return []
        entry = {"command": "delete", "pool": pool, "names": ok, "reason": reason}
        if self.dry_run:
            logger.bind(**entry).info("dry-run: would delete {} ({})", ok, reason)
            self.log.add(**entry, outcome="dry-run")
            self._count("delete", "dry-run")
            return []
        try:
            self.provider.delete(pool, ok)
        except ProviderError as exc:
            logger.bind(**entry, error=str(exc)).warning("delete {} failed: {}", ok, exc)
            self.log.add(**entry, outcome="failed", error=str(exc))
            self._count("delete", "failed")
            return []
        now = self.clock()
        self.store.release_names(ok, now, reason)
        for n in ok:
            self.store.add_history(n, "deleting", now, reason)
        logger.bind(**entry).info("deleted {} ({})", ok, reason)
        self.log.add(**entry, outcome="ok")
        self._count("delete", "ok")
        return ok

    # --- Slurm -------------------------------------------------------------------------------------------
    def scontrol(self, names: Sequence[str], state: str, reason: str) -> bool:
        if not names:
            return True
        entry = {"command": f"scontrol-{state}", "names": list(names), "reason": reason}

        def history() -> None:
            now = self.clock()
            for n in names:
                self.store.add_history(n, state, now, reason)

        return self._slurm_update(
            entry, f"state={state}", reason, lambda: self.slurm.update_nodes(names, state, reason), history
        )

    def set_weight(self, names: Sequence[str], weight: int, reason: str) -> bool:
        """``scontrol update nodename=... weight=...`` (the best fit on the reservation, `autoscaler.core.weights`).
        Logged and counted as ``scontrol-weight``; not written to the node history, which records state changes
        (a Weight follows every job start and end on a reserved node).  False when Slurm refused or did not
        answer (already logged): the next tick, reading the Weights back, tries again."""
        if not names:
            return True
        entry = {"command": "scontrol-weight", "names": list(names), "weight": weight, "reason": reason}
        return self._slurm_update(entry, f"weight={weight}", reason, lambda: self.slurm.update_weight(names, weight))

    def widen_job(self, job_id: int, features: str, reason: str) -> bool:
        """``scontrol update jobid=<id> features=<expr>``: a pending job's hard constraint widened to a machine type
        the plan falls back to (late binding, `autoscaler.core.hold.held_launches`).  Logged and counted as
        ``scontrol-features``.  False when Slurm refused or did not answer: the next tick's plan asks again."""
        entry = {"command": "scontrol-features", "names": [], "job_id": job_id, "features": features, "reason": reason}
        what = f"jobid={job_id} features={features}"
        call = lambda: self.slurm.update_job_features(job_id, features)  # noqa: E731
        return self._job_update(entry, what, reason, call, "its constraint was widened")

    def exclude_job_nodes(self, job_id: int, names: Sequence[str], reason: str) -> bool:
        """``scontrol update jobid=<id> ExcNodeList=<names>`` (none: cleared): a pending gang kept off nodes that are
        up while the rest of it boots (`autoscaler.core.gang_exclusion`).  Logged and counted as
        ``scontrol-excnodes``.  False when Slurm refused or did not answer: the next tick asks again."""
        entry = {"command": "scontrol-excnodes", "names": list(names), "job_id": job_id, "reason": reason}
        what = f"jobid={job_id} ExcNodeList={','.join(names) or '(none)'}"
        call = lambda: self.slurm.update_job_excluded_nodes(job_id, names)  # noqa: E731
        return self._job_update(entry, what, reason, call, "its exclusion was set")

    def open_gang_gate(self, job_id: int, excluded: Sequence[str], reason: str) -> bool:
        """``scontrol update jobid=<id> [ExcNodeList=<names>] StartTime=now``: a gang the job_submit.lua gated is
        released, kept off `excluded` where it must boot whole (`autoscaler.slurm.gang_gate`).  Logged and counted
        as ``scontrol-gang-gate``.  False when Slurm refused or did not answer: the next tick asks again (the gate
        opens by itself `GANG_GATE_S` after the submission)."""
        entry = {"command": "scontrol-gang-gate", "names": list(excluded), "job_id": job_id, "reason": reason}
        what = f"jobid={job_id} StartTime=now ExcNodeList={','.join(excluded) or '(as it is)'}"
        call = lambda: self.slurm.start_job_now(job_id, excluded)  # noqa: E731
        return self._job_update(entry, what, reason, call, "its gate was opened")

    def lease_gang_gates(self, job_ids: Sequence[int], until: int, reason: str) -> bool:
        """``scontrol update jobid=<ids> StartTime=<until> AdminComment=<lease mark>``: gangs slurmctld cannot try
        yet (a dependency, a hold) kept behind the gate until `until` (`autoscaler.slurm.gang_gate`), in one call.
        Logged and counted as ``scontrol-gang-lease``.  A gang that started or left since the tick's read is no
        failure (slurmctld updates the others); False when Slurm refused or did not answer: the next tick asks again,
        the lease having half its length left."""
        ids = sorted(job_ids)
        entry = {"command": "scontrol-gang-lease", "names": [], "job_ids": ids, "until": until, "reason": reason}
        what = f"jobid={','.join(map(str, ids))} StartTime={until} AdminComment={lease_mark(until)}"

        def update() -> None:
            try:
                self.slurm.defer_jobs(ids, until, lease_mark(until))
            except SlurmUnavailable as exc:
                if moved_on(exc):
                    logger.bind(**entry).info("gang lease: {} (slurmctld leased the others)", exc)
                    return
                raise

        return self._slurm_update(entry, what, reason, update)

    def _job_update(self, entry: dict[str, Any], what: str, reason: str, call: Callable[[], None], done: str) -> bool:
        """`_slurm_update` of a pending job: one that started or left since the tick's read is no failure."""

        def update() -> None:
            try:
                call()
            except SlurmUnavailable as exc:
                if moved_on(exc):  # it started or left since the tick's read: nothing to do
                    logger.bind(**entry).info("job {} moved on before {} ({})", entry["job_id"], done, exc)
                    return
                raise

        return self._slurm_update(entry, what, reason, update)

    def _slurm_update(
        self,
        entry: dict[str, Any],
        what: str,
        reason: str,
        call: Callable[[], None],
        on_ok: Callable[[], None] | None = None,
    ) -> bool:
        """One ``scontrol update`` (`call`), dry-run aware, logged and counted under ``entry["command"]``; `on_ok`
        runs after it succeeded.  False when Slurm refused or did not answer."""
        command, names = entry["command"], entry["names"]
        if self.dry_run:
            logger.bind(**entry).info("dry-run: would scontrol update {} {}", names, what)
            self.log.add(**entry, outcome="dry-run")
            self._count(command, "dry-run")
            return True
        try:
            call()
        except SlurmUnavailable as exc:
            logger.bind(**entry, error=str(exc)).warning("scontrol update {} failed: {}", what, exc)
            self.log.add(**entry, outcome="failed", error=str(exc))
            self._count(command, "failed")
            return False
        if on_ok is not None:
            on_ok()
        logger.bind(**entry).info("scontrol update {} {} ({})", names, what, reason)
        self.log.add(**entry, outcome="ok")
        self._count(command, "ok")
        return True


#: slurmctld's refusals of a job update that mean the job is no longer waiting (22.05 messages, measured on
#: tests/slurm/test_job_features.py): not failures of the daemon
MOVED_ON = ("Job is no longer pending execution", "Invalid job id specified")
#: how slurmctld 22.05 reports a task range of a job array it did update, beside the ranges it refused (an update of
#: an array's record with tasks running: ``1_0-1: Job is no longer pending execution`` then ``1_2-9: No error``)
UPDATED = "No error"


def moved_on(error: SlurmUnavailable) -> bool:
    """slurmctld refused a job update only for jobs (or array tasks) that started or left since the tick's read:
    every line of its answer is such a refusal or a range of tasks it updated, at least one a refusal.  A refusal
    for any other reason, beside those or alone, is a failure."""
    lines = [line.strip() for line in str(error).split(": ", 1)[-1].splitlines() if line.strip()]
    refusals = [line for line in lines if not line.endswith(UPDATED)]
    return bool(refusals) and all(any(m in line for m in MOVED_ON) for line in refusals)


def deletable(name: str, slurm_nodes: Mapping[str, SlurmNode] | None) -> bool:
    """A name may be deleted only with a fresh Slurm view showing no work on it (or no such Slurm node)."""
    if slurm_nodes is None:
        return False
    s = slurm_nodes.get(name)
    return s is None or not s.has_work
