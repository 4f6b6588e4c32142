"""The input gate: every file the product reads (fleet specs, stack files, daemon configs, inventories, traces,
hostlists) comes in through here.

- `files.read_text`: a size limit checked before reading, regular files only, strict UTF-8 with the line and
  column of the first bad byte.
- `yamlsafe.load_yaml` / `jsonsafe.load_json`: duplicate keys refused, alias expansion and nesting bounded,
  numbers bounded in digits and finite, every syntax error with its line and column.
- `types`: constrained strings for values that reach a GCE name, a label, slurm.conf or a shell script, and
  strict numbers (no string or boolean coerced to a count, no NaN).
- `errors.InputError`: one error type, rendered `FILE: field.path: reason` or `FILE:LINE:COL: reason`.

The limits themselves live in `limits` and are documented in docs/spec.md ("Input limits").
"""

from fleet.input.errors import InputError, format_loc
from fleet.input.files import read_text
from fleet.input.jsonsafe import load_json, parse_json
from fleet.input.yamlsafe import load_yaml, parse_yaml

__all__ = ["InputError", "format_loc", "load_json", "load_yaml", "parse_json", "parse_yaml", "read_text"]
