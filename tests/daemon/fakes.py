"""In-memory Slurm and cloud for daemon unit tests (the real ones are in tests/e2e).

`FakeSlurm` keeps CLOUD nodes with the power-saving flags slurmctld uses and lets a test play Slurm's part
(allocate a job -> POWERING_UP + a resume request; register; finish; suspend).  `FakeCloud` implements
`autoscaler.cloud.Provider`, idempotent by request id and name, with injectable faults, and counts every
create so tests can assert "no duplicate instance".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from autoscaler.cloud import (
    CloudNode,
    CloudNodeStatus,
    InsufficientCapacity,
    LaunchRequest,
    LaunchResult,
    Offering,
    OfferingKey,
    ProviderError,
    ProvisioningFailure,
)
from autoscaler.slurm.client import SlurmUnavailable, check_features
from autoscaler.slurm.readers import SlurmJob, SlurmNode
from fleet.catalog import CapacityType


@dataclass
class FakeSlurm:
    nodes_: dict[str, SlurmNode] = field(default_factory=dict)
    jobs_: list[SlurmJob] = field(default_factory=list)
    down: bool = False
    updates: list[tuple[tuple[str, ...], str]] = field(default_factory=list)
    weight_updates: list[tuple[tuple[str, ...], int]] = field(default_factory=list)  # `update_weight` calls
    feature_updates: list[tuple[int, str]] = field(default_factory=list)  # `update_job_features` calls slurmctld took
    exclusion_updates: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)  # `update_job_excluded_nodes`
    gate_releases: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)  # `start_job_now` calls
    deferrals: list[tuple[tuple[int, ...], int, str]] = field(default_factory=list)  # `defer_jobs` calls
    reservations_: dict[str, tuple[str, ...]] = field(default_factory=dict)  # active advanced reservations' nodes
    reservation_reads: int = 0

    def add_cloud_nodes(
        self,
        names: Sequence[str],
        gpus: int = 8,
        partition: str = "gpu",
        weight: int | None = None,
        *,
        features: Sequence[str] = (),
        cpus: int = 0,
        memory_mib: int = 0,
    ) -> None:
        for n in names:
            self.nodes_[n] = SlurmNode(
                n, "idle", frozenset({"CLOUD", "POWERED_DOWN"}), gpus, 0, (partition,), tuple(features),
                weight=weight, cpus=cpus, real_memory_mib=memory_mib,
            )  # fmt: skip

    def set(self, name: str, state: str, *flags: str, gpus_used: int = 0, last_busy: float = 0.0) -> None:
        n = self.nodes_[name]
        self.nodes_[name] = replace(
            n,
            state=state,
            flags=frozenset({"CLOUD", *flags}),
            gpus_used=gpus_used,
            alloc_cpus=1 if state in ("allocated", "mixed") else 0,
            extra={"last_busy": last_busy},
        )

    def nodes(self) -> list[SlurmNode]:
        if self.down:
            raise SlurmUnavailable("slurm_load_node: Unable to contact slurm controller (connect failure)")
        return list(self.nodes_.values())

    def jobs(self) -> list[SlurmJob]:
        if self.down:
            raise SlurmUnavailable("slurm_load_jobs error: Unable to contact slurm controller")
        return list(self.jobs_)

    def reservations(self) -> dict[str, tuple[str, ...]]:
        if self.down:
            raise SlurmUnavailable("slurm_load_reservations: Unable to contact slurm controller")
        self.reservation_reads += 1
        return dict(self.reservations_)

    def update_nodes(self, names: Sequence[str], state: str, reason: str | None = None) -> None:
        if self.down:
            raise SlurmUnavailable("scontrol: Unable to contact slurm controller")
        self.updates.append((tuple(names), state))
        for n in names:
            node = self.nodes_[n]
            flags = set(node.flags)
            if state == "drain":
                flags.add("DRAIN")
                node = replace(node, reason=reason or "")
            elif state == "undrain":
                flags.discard("DRAIN")
                node = replace(node, reason="")
            elif state == "down":  # slurmctld marks it DOWN, then requeues its jobs (none shown on it any more)
                node = replace(node, state="down", reason=reason or "", gpus_used=0, alloc_cpus=0)
            elif state == "power_up" and "POWERED_DOWN" in flags:  # drained stays drained (22.05), and shows the
                flags -= {"POWERED_DOWN"}  # command's reason until it registers (measured on the sized e2e pools)
                flags |= {"POWERING_UP", "NOT_RESPONDING"}
                node = replace(node, reason=reason or "")
            elif state == "resume":
                flags -= {"DRAIN", "POWERING_UP", "NOT_RESPONDING"}
                flags.add("POWERED_DOWN")
                node = replace(node, state="idle")
            elif state == "power_down":  # pending until slurmctld's power thread takes it (`power_thread`)
                flags -= {"POWERING_UP"}
                flags.add("POWER_DOWN")
            elif state == "power_down_force":  # a boot aborted too: POWERING_UP goes at once, the thread takes the
                flags -= {"POWERING_UP", "POWER_UP"}  # rest within a second (bench/probe_abort_held_boot.py, 22.05)
                flags.add("POWER_DOWN")
            self.nodes_[n] = replace(node, flags=frozenset(flags))

    def power_thread(self) -> None:
        """slurmctld's power thread takes the pending power-downs: POWER_DOWN -> POWERING_DOWN, and it clears a
        DRAIN the node has then (22.05 reads it as the power-down's own; measured, tests/e2e/test_late_binding.py)."""
        for n, node in self.nodes_.items():
            if "POWER_DOWN" in node.flags:  # a DOWN node (ResumeTimeout) is returned to service as it is taken
                flags = (node.flags - {"POWER_DOWN", "DRAIN", "NOT_RESPONDING"}) | {"POWERING_DOWN"}
                self.nodes_[n] = replace(node, flags=flags, state="idle" if node.state == "down" else node.state)

    def power_downs_complete(self) -> None:
        """SuspendTimeout passed: POWERING_DOWN -> POWERED_DOWN; a DRAIN set meanwhile stays."""
        for n, node in self.nodes_.items():
            if "POWERING_DOWN" in node.flags:
                flags = (node.flags - {"POWERING_DOWN"}) | {"POWERED_DOWN"}
                self.nodes_[n] = replace(node, state="idle", flags=flags)

    def update_weight(self, names: Sequence[str], weight: int) -> None:
        if self.down:
            raise SlurmUnavailable("scontrol: Unable to contact slurm controller")
        self.weight_updates.append((tuple(names), weight))
        for n in names:
            self.nodes_[n] = replace(self.nodes_[n], weight=weight)

    def update_job_features(self, job_id: int, features: str) -> None:
        """Like ``scontrol update jobid=<id> features=<expr>`` on 22.05: a pending job's constraint is replaced;
        an unknown job or one no longer pending is refused (the daemon's view may be a tick old)."""
        check_features(features)
        i = self._pending_job(job_id)
        self.feature_updates.append((job_id, features))
        self.jobs_[i] = replace(self.jobs_[i], features=tuple(features.split("|")), constraint=features)

    def update_job_excluded_nodes(self, job_id: int, names: Sequence[str]) -> None:
        """Like ``scontrol update jobid=<id> ExcNodeList=<names>`` on 22.05: refused for an unknown job or one no longer
        pending."""
        i = self._pending_job(job_id)
        self.exclusion_updates.append((job_id, tuple(names)))
        self.jobs_[i] = replace(self.jobs_[i], excluded_nodes=tuple(names))

    def start_job_now(self, job_id: int, excluded: Sequence[str] = ()) -> None:
        """Like ``scontrol update jobid=<id> [ExcNodeList=<names>] StartTime=now`` on 22.05: the job is eligible at
        once (untried until slurmctld's pass: reason None), kept off `excluded` if any; refused as any job update."""
        i = self._pending_job(job_id)
        self.gate_releases.append((job_id, tuple(excluded)))
        j = self.jobs_[i]
        self.jobs_[i] = replace(
            j, reason="None", eligible_time=None, excluded_nodes=tuple(excluded) if excluded else j.excluded_nodes
        )

    def defer_jobs(self, job_ids: Sequence[int], until: int, admin_comment: str) -> None:
        """Like ``scontrol update jobid=<list> StartTime=<until> AdminComment=<comment>`` on 22.05: each pending job
        listed gets the BeginTime and comment and its reason is None until slurmctld's pass (a held job keeps
        JobHeld*); a job no longer pending or unknown is named on stderr, the others updated all the same."""
        if self.down:
            raise SlurmUnavailable("scontrol: Unable to contact slurm controller")
        self.deferrals.append((tuple(job_ids), until, admin_comment))
        refused = []
        for job_id in job_ids:
            i = next((i for i, j in enumerate(self.jobs_) if j.job_id == job_id), None)
            if i is None or not self.jobs_[i].pending:
                what = "Invalid job id specified" if i is None else "Job is no longer pending execution"
                refused.append(f"{what} for job {job_id}")
                continue
            j = self.jobs_[i]
            reason = j.reason if j.reason.startswith("JobHeld") else "None"
            self.jobs_[i] = replace(j, reason=reason, eligible_time=float(until), admin_comment=admin_comment)
        if refused:
            ids = ",".join(map(str, job_ids))
            raise SlurmUnavailable(f"scontrol update jobid={ids} exited 1: " + "\n".join(refused))

    def _pending_job(self, job_id: int) -> int:
        """The index of pending job `job_id`, as slurmctld 22.05 answers a job update: refused when it is down, for
        an unknown job, and for one no longer pending (the daemon's view may be a tick old)."""
        if self.down:
            raise SlurmUnavailable("scontrol: Unable to contact slurm controller")
        i = next((i for i, j in enumerate(self.jobs_) if j.job_id == job_id), None)
        if i is None:
            raise SlurmUnavailable(f"scontrol update jobid={job_id} exited 1: Invalid job id specified")
        if not self.jobs_[i].pending:
            raise SlurmUnavailable(f"scontrol update jobid={job_id} exited 1: Job is no longer pending execution")
        return i


def offering(zone: str, ct: CapacityType = CapacityType.SPOT, mt: str = "a3-highgpu-8g") -> OfferingKey:
    return OfferingKey("gcp", zone, mt, ct)


@dataclass
class FakeCloud:
    offers: list[Offering]
    name: str = "fake"
    nodes_: dict[str, CloudNode] = field(default_factory=dict)
    creates: Counter = field(default_factory=Counter)  # name -> times created
    stocked_out: set[OfferingKey] = field(default_factory=set)
    launch_faults: list[ProviderError] = field(default_factory=list)  # raised by the next launches, in order
    async_failures: list[ProvisioningFailure] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    requests_seen: Counter = field(default_factory=Counter)
    dup_attempts: int = 0  # launches of a live name under a different request id (must stay 0)
    clock: float = 1000.0

    def list_nodes(self, pools: Sequence[str] | None = None) -> list[CloudNode]:
        return [n for n in self.nodes_.values() if pools is None or n.pool in pools]

    def launch(self, request: LaunchRequest) -> LaunchResult:
        self.requests_seen[request.request_id] += 1
        if self.launch_faults:
            raise self.launch_faults.pop(0)
        if request.offering in self.stocked_out:
            raise InsufficientCapacity(
                f"ZONE_RESOURCE_POOL_EXHAUSTED in {request.offering.zone}", offering=request.offering
            )
        existed = []
        for n in request.names:
            if n in self.nodes_ and self.nodes_[n].status is not CloudNodeStatus.GONE:
                if self.nodes_[n].request_id != request.request_id:
                    self.dup_attempts += 1
                existed.append(n)
                continue
            self.creates[n] += 1
            self.nodes_[n] = CloudNode(
                n, request.pool, request.offering, CloudNodeStatus.RUNNING, self.clock, request.request_id
            )
        return LaunchResult(request.request_id, tuple(request.names), tuple(existed))

    def delete(self, pool: str, names: Sequence[str]) -> None:
        for n in names:
            if n in self.nodes_:
                del self.nodes_[n]
                self.deleted.append(n)

    def poll_errors(self) -> list[ProvisioningFailure]:
        """Like GceProvider(cancel_failed_requests=True): a failed request's instances are deleted as reported."""
        out, self.async_failures = self.async_failures, []
        for f in out:
            for n in f.names:
                self.nodes_.pop(n, None)
        return out

    def offerings(self) -> list[Offering]:
        return list(self.offers)

    @property
    def duplicates(self) -> int:
        return sum(c - 1 for c in self.creates.values() if c > 1)
