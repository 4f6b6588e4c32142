"""The module names a source file of this project imports, read from its syntax tree (nothing is imported).

Both the layering rules (test_layering.py) and the controller's import closure (test_controller_install.py) read
them.  Every import statement counts, function-level ones included, and `from a import b` names both `a` and
`a.b` (b may be a module).  The project writes absolute imports only; a relative one is refused here, so neither
test silently skips it."""

from __future__ import annotations

import ast
from pathlib import Path


def imported_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level or not node.module:
                raise ValueError(f"{path}:{node.lineno}: a relative import; the project imports absolutely")
            names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return names
