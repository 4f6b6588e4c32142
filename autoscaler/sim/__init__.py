"""The simulated cloud: a first-class `sim` provider behind the same protocol as the real clouds.

`SimCloud` implements `autoscaler.cloud.Provider` over simulated time (`SimClock`): boot and
registration delays per machine type, stockouts by offering (a probability per launch and
windows during which the offering stays out), quotas, reservations, spot preemptions at a rate,
per-second billing from launch request to deletion, all from one seed.  Tests, the trace replay
(`fleet simulate`) and the zero-credential demo all drive it.
"""

from autoscaler.sim.billing import BillingLedger, BillingRecord
from autoscaler.sim.clock import SimClock
from autoscaler.sim.cloud import NodeEvent, NodeEventKind, SimCloud
from autoscaler.sim.config import BootProfile, SimConfig, SimReservation, StockoutWindow

__all__ = [
    "BillingLedger",
    "BillingRecord",
    "BootProfile",
    "NodeEvent",
    "NodeEventKind",
    "SimClock",
    "SimCloud",
    "SimConfig",
    "SimReservation",
    "StockoutWindow",
]
