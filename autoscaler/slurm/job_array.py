"""Job arrays as squeue shows them: the pending tasks one record stands for.

slurmctld keeps a job array's pending tasks in one record (its id is the array's id) until it starts one: each task
it starts is split off into a record of its own (a new job id, ``array_task_id`` set); the last pending task takes
over the array's record.  `squeue --json` (22.05, without ``-r``) lists that pending record once, with the tasks it
still holds in ``array_task_string``: ``0-9``, ``1-999:2``, ``0,2-3``, and ``%N`` after them when the array is
throttled (``--array=0-9%2``: at most N tasks run at once; slurmctld shows reason ``JobArrayTaskLimit`` while N run).
Read as one job, a pending array of 100 single-node tasks is one node of demand, and a held pool boots its tasks'
nodes one at a time, a boot each (measured on slurmctld 22.05.8 under late binding: three boots 4 s apart for
``--array=0-2`` before this module, one call for the three after).

squeue cuts the string at ``SLURM_BITSTR_LEN`` characters (64 by default) and ends it with ``...``; with
``SLURM_BITSTR_LEN=0`` it prints it whole (measured: an irregular 300-task array, 63 characters and ``...`` at the
default, 1,075 with 0), so the CLI client reads squeue with 0.  A cut string counts the tasks it lists whole: fewer
than there are, never more, and the rest are read once those started.  Pure."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain, islice

#: what squeue appends to a task list it cut at SLURM_BITSTR_LEN characters
CUT_MARK = "..."
#: the environment a client runs squeue with so that it prints every pending task (no cut)
FULL_TASK_LIST_ENV = {"SLURM_BITSTR_LEN": "0"}

_RANGE = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")


@dataclass(frozen=True)
class ArrayTasks:
    """The pending tasks one squeue record holds: `ranges` of task ids, `throttle` (``%N``: at most N of the array's
    tasks run at once; 0 none), and whether the list is `whole` (not cut by squeue, every part read)."""

    ranges: tuple[range, ...] = ()
    throttle: int = 0
    whole: bool = True

    @property
    def count(self) -> int:
        return sum(len(r) for r in self.ranges)

    def ids(self, limit: int | None = None) -> Iterator[int]:
        """The task ids, lowest first (the order slurmctld starts them in), at most `limit`."""
        return islice(chain.from_iterable(self.ranges), limit)

    def startable(self, running: int) -> int:
        """How many of these tasks slurmctld may start now, with `running` of the array's tasks holding nodes."""
        if not self.throttle:
            return self.count
        return max(0, min(self.count, self.throttle - running))


#: a record that holds no pending tasks of an array (any job but a pending array's record)
NO_TASKS = ArrayTasks()


def parse_array_tasks(text: str | None) -> ArrayTasks:
    """``array_task_string`` -> `ArrayTasks` (none for an empty string: a record that is one task, or no array).  A
    part that cannot be read (and the part a cut ends in, which may be a number cut short) is left out, and the
    list is then not `whole`."""
    text = (text or "").strip()
    if not text:
        return NO_TASKS
    whole = not text.endswith(CUT_MARK)
    body = text.removesuffix(CUT_MARK)
    throttle = 0
    if not whole:
        body = body.rpartition(",")[0]  # the last part may be cut short ("57" of "578")
    elif "%" in body:
        body, _, limit = body.rpartition("%")
        throttle = int(limit) if limit.isdigit() else 0
        whole = limit.isdigit()
    ranges = []
    for part in filter(None, body.split(",")):
        m = _RANGE.match(part.strip())
        if m is None:
            whole = False
            continue
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        step = int(m.group(3)) if m.group(3) is not None else 1
        if last < first or step < 1:
            whole = False
            continue
        ranges.append(range(first, last + 1, step))
    return ArrayTasks(tuple(ranges), throttle, whole)
