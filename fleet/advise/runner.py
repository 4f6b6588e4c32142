"""Run the advisor's replays: in a local process pool (all cores by default) or on an existing Ray cluster.

Both run `fleet.advise.replay.evaluate` on the same picklable tasks and return outcomes in task order, so
the figures are identical for the same seeds whichever runs them.  Ray is an optional extra
(`pip install 'gpu-fleet[ray]'`); it is imported only when `--ray-address` is given."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed

from fleet.advise.replay import Outcome, Task, evaluate

Progress = Callable[[int, int], None]  # (done, total)


class RunnerError(RuntimeError):
    """The chosen runner cannot run (Ray missing or unreachable); the message says what to do."""


def run_local(tasks: Sequence[Task], workers: int | None = None, progress: Progress | None = None) -> list[Outcome]:
    """`workers` processes (default: every core); one task runs in-process when there is one worker."""
    workers = max(1, workers or os.cpu_count() or 1)
    if workers == 1 or len(tasks) <= 1:
        out = []
        for i, t in enumerate(tasks):
            out.extend(evaluate(t))
            if progress:
                progress(i + 1, len(tasks))
        return out
    results: list[tuple[Outcome, ...] | None] = [None] * len(tasks)
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks))) as pool:
        futures = {pool.submit(evaluate, t): i for i, t in enumerate(tasks)}
        for done, fut in enumerate(as_completed(futures), 1):
            results[futures[fut]] = fut.result()
            if progress:
                progress(done, len(tasks))
    return [o for r in results if r is not None for o in r]


def run_ray(tasks: Sequence[Task], address: str, progress: Progress | None = None) -> list[Outcome]:
    """Run on the Ray cluster at `address` (`auto`, `ray://host:10001`, or `local` for a one-machine Ray)."""
    try:
        import ray
    except ImportError:
        raise RunnerError("--ray-address: Ray is not installed (pip install 'gpu-fleet[ray]')") from None
    started = False
    if not ray.is_initialized():
        try:
            if address == "local":
                ray.init(include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=address, log_to_driver=False)
        except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError ... by version
            raise RunnerError(f"--ray-address: cannot reach a Ray cluster at {address!r}: {exc}") from None
        started = True
    try:
        remote = ray.remote(evaluate)
        refs = [remote.remote(t) for t in tasks]
        index = {ref: i for i, ref in enumerate(refs)}
        results: list[tuple[Outcome, ...] | None] = [None] * len(tasks)
        pending = list(refs)
        done = 0
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                results[index[ref]] = ray.get(ref)
                done += 1
                if progress:
                    progress(done, len(tasks))
        return [o for r in results if r is not None for o in r]
    finally:
        if started:
            ray.shutdown()
