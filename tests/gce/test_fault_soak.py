"""A seeded fault soak: launches, relaunches (the daemon retrying), deletes and error polls while
the fake server injects 429s, 503s, replies stalled past the client timeout and stockouts.

Afterwards: no instance was created twice, nothing was deleted that was not named, no resize was
ever sent, and the cloud holds exactly the nodes the autoscaler believes it holds.  The counts are
printed (run with `-s` to see them) for the report.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from autoscaler.cloud import CloudNodeStatus, FailureKind, LaunchRequest, ProviderError
from autoscaler.gce import RetryPolicy
from tests.fakes.compute_api import FakeCompute
from tests.gce.conftest import ZONE_A, ZONE_B

pytestmark = pytest.mark.gce

ROUNDS = 40


def test_fault_soak_leaves_no_duplicates_and_no_strays(fake: FakeCompute, make_provider: Any) -> None:
    rng = random.Random(20261201)
    provider = make_provider(fake, retry=RetryPolicy(initial=0.005, maximum=0.02, deadline=10.0, attempt_timeout=0.15))
    wanted: dict[str, str] = {}  # name -> zone the autoscaler asked for and did not give up on
    requests: dict[str, LaunchRequest] = {}
    next_index = 0
    errors: dict[str, int] = {}
    for round_no in range(ROUNDS):
        fault = rng.choice(["none", "429", "503", "timeout", "timeout-before", "stockout"])
        if fault == "429":
            fake.fail_next(429, rng.randint(1, 3))
        elif fault == "503":
            fake.fail_next(503, rng.randint(1, 3), method="POST")
        elif fault == "timeout":
            fake.delay_next(0.3, path_contains=rng.choice(["createInstances", "deleteInstances"]))
        elif fault == "timeout-before":
            fake.delay_next(0.3, after=False, path_contains="listManagedInstances")
        elif fault == "stockout":
            fake.stockout(ZONE_B, "a3-megagpu-8g")
        action = rng.choice(["launch", "launch", "relaunch", "delete"])
        try:
            if fault == "stockout" or action == "launch" or (action == "relaunch" and not requests):
                zone = ZONE_B if fault == "stockout" else rng.choice([ZONE_A, ZONE_B])
                names = tuple(f"c1-spot-{next_index + i}" for i in range(rng.randint(1, 3)))
                next_index += len(names)
                req = LaunchRequest(f"soak-{round_no}", "spot", provider.offering_for("spot", zone), names)
                requests[req.request_id] = req
                wanted.update(dict.fromkeys(names, zone))
                provider.launch(req)
            elif action == "relaunch":
                req = requests[rng.choice(sorted(requests))]
                if all(n in wanted for n in req.names):
                    result = provider.launch(req)
                    assert set(result.already_existed) <= set(req.names)
            else:
                victims = rng.sample(sorted(wanted), k=min(len(wanted), rng.randint(1, 2)))
                provider.delete("spot", victims)
                for name in victims:
                    wanted.pop(name)
        except ProviderError as exc:  # a launch that gave up: the daemon would retry or fall back
            errors[exc.kind] = errors.get(exc.kind, 0) + 1
        for failure in provider.poll_errors():
            assert failure.kind is FailureKind.STOCKOUT
            assert failure.offering.zone == ZONE_B
            for name in failure.names:
                wanted.pop(name, None)  # cancelled by the provider
        if fault == "stockout":
            fake.clear_stockouts(retry=False)
    for failure in provider.poll_errors():
        for name in failure.names:
            wanted.pop(name, None)
    fake.wait_idle()
    nodes = {n.name: n for n in provider.list_nodes(["spot"])}

    report = {
        "rounds": ROUNDS,
        "faults_injected": dict(sorted(fake.faults_injected.items())),
        "client_retries": {k: v for k, v in sorted(provider.api.stats.items()) if k.startswith("retr")},
        "calls": sum(v for k, v in provider.api.stats.items() if k.startswith("calls:")),
        "instances_created": sum(fake.create_counts().values()),
        "requestId_dedups": len(fake.events_of("dedup")),
        "stockout_cancellations": len(fake.events_of("cancel")),
        "gave_up": {str(k): v for k, v in errors.items()},
        "duplicates": fake.duplicates(),
        "resizes": len(fake.events_of("resize")),
    }
    print("\nGCE fault soak:", json.dumps(report, indent=1))

    assert fake.duplicates() == {}
    assert fake.events_of("resize") == []
    assert sum(fake.faults_injected.values()) >= ROUNDS // 2
    assert report["requestId_dedups"] >= 1  # at least one stalled reply was retried and deduplicated
    deleted_unasked = {e.name for e in fake.events_of("delete-requested")} & set(wanted)
    assert deleted_unasked == set()
    assert {name: node.offering.zone for name, node in nodes.items()} == wanted
    assert all(n.status is CloudNodeStatus.RUNNING for n in nodes.values())
    assert fake.instance_names() == set(wanted)
