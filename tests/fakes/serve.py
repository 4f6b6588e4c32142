"""Run the fake Compute server as a process (for end-to-end tests and the zero-credential demo):

    .venv/bin/python -m tests.fakes.serve --inventory inventory.json --port 8089 \\
        --quota us-central1:NVIDIA_H100_MEGA_GPUS=64 --reservation us-central1-a:h100-resv:a3-megagpu-8g:4 \\
        --on-boot "scripts/start-slurmd" --on-delete "scripts/stop-slurmd" --boot-delay 2

Prints `FAKE_COMPUTE_URL=http://127.0.0.1:PORT` on stdout once listening, then serves until
SIGTERM/SIGINT.  Hook commands are run with the instance name and zone appended.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from fleet.inventory import load_inventory
from tests.fakes.compute_api import FakeCompute


def _split(value: str, n: int, what: str) -> list[str]:
    parts = value.split(":")
    if len(parts) < n:
        raise argparse.ArgumentTypeError(f"{what}: expected {n} ':'-separated parts, got {value!r}")
    return parts


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m tests.fakes.serve", description=__doc__.split("\n\n")[0])
    ap.add_argument("--project", default="test-project")
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port")
    ap.add_argument("--inventory", type=Path, action="append", default=[], help="autoscaler_inventory JSON")
    ap.add_argument("--quota", action="append", default=[], help="REGION:METRIC=LIMIT")
    ap.add_argument("--reservation", action="append", default=[], help="ZONE:NAME:MACHINE_TYPE:COUNT")
    ap.add_argument("--stockout", action="append", default=[], help="ZONE:MACHINE_TYPE[:SPOT|STANDARD|FLEX_START]")
    ap.add_argument("--boot-delay", type=float, default=0.0)
    ap.add_argument("--delete-delay", type=float, default=0.0)
    ap.add_argument("--on-boot", default=None, help="command run as CMD NAME ZONE when an instance is RUNNING")
    ap.add_argument("--on-delete", default=None, help="command run as CMD NAME ZONE when an instance is gone")
    return ap.parse_args(argv)


def build(args: argparse.Namespace) -> FakeCompute:
    fake = FakeCompute(
        args.project,
        boot_delay=args.boot_delay,
        delete_delay=args.delete_delay,
        on_boot=args.on_boot,
        on_delete=args.on_delete,
    )
    for path in args.inventory:
        fake.add_inventory(load_inventory(path))
    for q in args.quota:
        region, rest = _split(q, 2, "--quota")[0], q.split(":", 1)[1]
        metric, _, limit = rest.partition("=")
        if not limit:
            raise SystemExit(f"--quota: expected REGION:METRIC=LIMIT, got {q!r}")
        fake.add_region(region, [])
        fake.set_quota(region, metric, float(limit))
    for r in args.reservation:
        zone, name, machine, count = _split(r, 4, "--reservation")[:4]
        fake.add_reservation(zone, name, machine, int(count))
    for s in args.stockout:
        parts = _split(s, 2, "--stockout")
        fake.stockout(parts[0], parts[1], parts[2] if len(parts) > 2 else None)
    return fake


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    fake = build(args)
    fake.start(args.port)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"FAKE_COMPUTE_URL={fake.url}", flush=True)
    stop.wait()
    fake.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
