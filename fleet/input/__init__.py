"""The input gate: every file the product reads (fleet specs, stack files, daemon configs, inventories, traces,
hostlists) comes in through here.

- `files.read_text`: a size limit checked before reading, regular files only, strict UTF-8 with the line and
  column of the first bad byte.
- `yamlsafe.load_yaml` / `jsonsafe.load_json`: duplicate keys refused, alias expansion and nesting bounded,
  numbers bounded in digits and finite, every syntax error with its line and column.
- `types`: constrained strings for values that reach a GCE name, a label, slurm.conf or a shell script, and
  strict numbers (no string or boolean coerced to a count, no NaN).
- `outputs`: the files a command writes (`--out`, `--report`): the path checked before any work (the parent
  exists, the target is no directory, an existing file only with `--force`), then written atomically.
- `errors.InputError`: one error type, rendered `FILE: field.path: reason` or `FILE:LINE:COL: reason`.

The limits themselves live in `limits` and are documented in docs/spec.md ("Input limits").
"""

from __future__ import annotations

import importlib

# Loaded on first use: the Slurm hooks import `fleet.input.limits` and must not pay for PyYAML or pydantic.
_EXPORTS = {
    "InputError": "fleet.input.errors",
    "format_loc": "fleet.input.errors",
    "read_text": "fleet.input.files",
    "load_json": "fleet.input.jsonsafe",
    "parse_json": "fleet.input.jsonsafe",
    "load_yaml": "fleet.input.yamlsafe",
    "parse_yaml": "fleet.input.yamlsafe",
    "check_output_file": "fleet.input.outputs",
    "write_atomic": "fleet.input.outputs",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'fleet.input' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
