"""The interface every replayed scaling policy implements: the gpu-fleet driver and each baseline.

The engine calls `decide(view, now, reasons)` whenever something changed (work submitted or
requeued, a node registered or went idle, a launch failed, a timer the policy asked for fired).
The policy answers with commands — the model's `ScaleUp`, `Drain`, `DeleteNodes`, the same data
the real actuators execute — and optionally when it wants to be called again (`wake_at`).  The
engine executes them on the sim cloud through the provider protocol and reports synchronous
launch refusals back through `on_launch_failure`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from autoscaler.cloud import Offering, ProviderError
from autoscaler.model import Command, Pool, ScaleUp
from fleet.catalog import CapacityType

if TYPE_CHECKING:
    from autoscaler.replay.scenario import Scenario
    from autoscaler.replay.state import ClusterState


@dataclass(frozen=True)
class Decision:
    """Commands to execute now, in order.  `nominations` maps a unit (job id) to the new node names
    launched for it, where a command's `units` alone do not say which node is whose.  `wake_at`:
    call again at this time even if nothing changes (batch windows, idle timers)."""

    commands: tuple[Command, ...] = ()
    nominations: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    wake_at: float | None = None
    again: bool = False  # call again at once, after these commands ran (e.g. delete what was just drained)


class ReplayView(Protocol):
    """What a policy may look at: the scheduler state, the cloud's offerings, its pools."""

    scenario: Scenario
    state: ClusterState
    pools: Mapping[str, Pool]

    def offerings(self) -> Sequence[Offering]: ...

    def new_names(self, pool: Pool, count: int) -> tuple[str, ...]:
        """Free node names of `pool`, not handed out before in this decision."""
        ...

    def scale_up(
        self, pool: Pool, offering: Offering, count: int, units: tuple[str, ...], reason: str, *, gang: bool = False
    ) -> ScaleUp: ...


class ReplayPolicy(Protocol):
    name: str
    description: str
    #: a job with nominated nodes waits for them (Slurm allocates powered-down nodes to the job)
    binds_nominations: bool
    #: Slurm node Weight per capacity type for the scheduler (lower first); None: plain best fit
    placement_weights: Mapping[CapacityType, int] | None

    def pools(self, scenario: Scenario) -> list[Pool]: ...

    def decide(self, view: ReplayView, now: float, reasons: frozenset[str]) -> Decision: ...

    def on_launch_failure(self, command: ScaleUp, error: ProviderError, now: float) -> None: ...
