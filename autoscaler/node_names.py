"""The one parser of managed node names, ``f"{prefix}-{index}"``: Slurm node names and GCE instance names.

A pool's name space is ``prefix-0`` .. ``prefix-(max_nodes-1)``, written as `node_name` writes them: the index in
canonical decimal, ASCII digits, no leading zero (``0`` itself excepted).  Everything that maps a name back to its
pool (the Slurm hooks, the daemon's `NameIndex`, the GCE actuator's name check, the planner's ordering, the replay)
parses it here, so ``e2e-od-0003`` or ``e2e-od-٣`` is nobody's node: ``int()`` would read index 3, but the VM
``e2e-od-0003`` is never created.  Because an index has no '-', distinct prefixes never yield the same name
(``a-od-1-0`` is ``a-od-1`` index 0, never ``a-od`` index ``1-0``).  Standard library only: the hooks import it.
"""

from __future__ import annotations

import re

#: an index as `node_name` writes it; at most 9 digits (a pool holds at most a few thousand nodes)
_INDEX = re.compile(r"0|[1-9][0-9]{0,8}")


def node_name(prefix: str, index: int) -> str:
    """The node (and instance) name of `index` in the name space of `prefix`."""
    return f"{prefix}-{index}"


def split_node_name(name: str) -> tuple[str, int] | None:
    """`(prefix, index)` of a ``prefix-index`` name; None when the part after the last '-' is not a canonical
    index (``0003``, ``+3``, non-ASCII digits) or there is no prefix."""
    prefix, sep, idx = name.rpartition("-")
    if not sep or not prefix or not _INDEX.fullmatch(idx):
        return None
    return prefix, int(idx)
