"""YAML through the gate: PyYAML's SafeLoader, plus the checks it lacks.

- a key given twice in one mapping is refused (PyYAML keeps the last silently); merge keys (`<<`) still work;
- mapping keys must be strings (`yes:` / `1:` would become a bool / an int key);
- the document is bounded *after alias expansion* (nodes, characters, nesting), so an alias bomb that is a
  few hundred bytes on disk but billions of values in JSON output is refused before it is constructed;
- numbers have at most `MAX_NUMBER_CHARS` characters and must be finite (`.nan`, `.inf`, `1e999` refused).

Every error carries the line and column of the offending node.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from fleet.input import limits
from fleet.input.errors import InputError, position
from fleet.input.files import read_text

_MERGE = "tag:yaml.org,2002:merge"


class GateYAMLError(yaml.MarkedYAMLError):
    """A document the gate refuses; `problem_mark` is where."""

    def __init__(self, node: Node, problem: str) -> None:
        super().__init__(problem=problem, problem_mark=node.start_mark)


def _bounds(root: Node) -> None:
    """Refuse a document whose alias-expanded form is too big or too deep, or that refers to itself."""
    memo: dict[int, tuple[int, int]] = {}  # id(node) -> (nodes, chars) after expansion
    on_path: set[int] = set()

    def walk(node: Node, depth: int) -> tuple[int, int]:
        key = id(node)
        if key in on_path:
            raise GateYAMLError(node, "an alias refers to the collection that contains it (recursive alias)")
        if key in memo:
            nodes, chars = memo[key]
        else:
            if depth > limits.MAX_DEPTH:
                raise GateYAMLError(node, f"nested more than {limits.MAX_DEPTH} levels deep")
            on_path.add(key)
            if isinstance(node, ScalarNode):
                nodes, chars = 1, len(node.value)
                if chars > limits.MAX_STRING_CHARS:
                    raise GateYAMLError(node, f"a value of {chars:,} characters (at most {limits.MAX_STRING_CHARS:,})")
            else:
                children: list[Node] = []
                if isinstance(node, SequenceNode):
                    children = list(node.value)
                elif isinstance(node, MappingNode):
                    children = [n for pair in node.value for n in pair]
                nodes, chars = 1, 0
                for child in children:
                    n, c = walk(child, depth + 1)
                    nodes, chars = nodes + n, chars + c
                    if nodes > limits.MAX_NODES or chars > limits.MAX_EXPANDED_CHARS:
                        break
            on_path.discard(key)
            memo[key] = (nodes, chars)
        if nodes > limits.MAX_NODES:
            raise GateYAMLError(node, f"expands to more than {limits.MAX_NODES:,} values (aliases included)")
        if chars > limits.MAX_EXPANDED_CHARS:
            raise GateYAMLError(
                node, f"expands to more than {limits.MAX_EXPANDED_CHARS:,} characters (aliases included)"
            )
        return nodes, chars

    walk(root, 0)


class GateLoader(yaml.SafeLoader):
    """SafeLoader with duplicate keys, non-string keys, unbounded aliases and unbounded numbers refused."""

    def get_single_node(self) -> Node | None:
        node = super().get_single_node()
        if node is not None:
            _bounds(node)
        return node

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:  # type: ignore[override]
        if isinstance(node, MappingNode):
            seen: dict[Any, Node] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE:
                    continue
                key = self.construct_object(key_node, deep=True)
                if not isinstance(key, str):
                    raise GateYAMLError(
                        key_node, f"mapping key {key_node.value!r} is not a string (quote it: a {type(key).__name__})"
                    )
                if key in seen:
                    first = seen[key].start_mark.line + 1
                    raise GateYAMLError(key_node, f"duplicate key {key!r} (first given on line {first})")
                seen[key] = key_node
        return super().construct_mapping(node, deep=deep)

    def _number_chars(self, node: ScalarNode) -> None:
        if len(node.value) > limits.MAX_NUMBER_CHARS:
            raise GateYAMLError(node, f"number of {len(node.value):,} characters (at most {limits.MAX_NUMBER_CHARS})")

    def construct_yaml_int(self, node: ScalarNode) -> int:  # type: ignore[override]
        self._number_chars(node)
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node: ScalarNode) -> float:  # type: ignore[override]
        self._number_chars(node)
        value = super().construct_yaml_float(node)
        if not math.isfinite(value):
            raise GateYAMLError(node, f"{node.value!r} is not a finite number")
        return value


GateLoader.add_constructor("tag:yaml.org,2002:int", GateLoader.construct_yaml_int)
GateLoader.add_constructor("tag:yaml.org,2002:float", GateLoader.construct_yaml_float)
GateLoader.add_constructor("tag:yaml.org,2002:map", GateLoader.construct_yaml_map)


def _where(exc: yaml.YAMLError) -> tuple[str, str]:
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        reason = " ".join(s for s in (exc.context, exc.problem) if s) or "not valid YAML"
        if exc.context_mark is not None and exc.problem_mark is not None and exc.context:
            reason = f"{exc.problem} ({exc.context} on line {exc.context_mark.line + 1})"
        return (position(mark.line, mark.column) if mark else ""), reason
    return "", str(exc)


def parse_yaml(text: str, source: str) -> Any:
    """The value of one YAML document (None when empty); InputError with line:column on anything refused."""
    try:
        return yaml.load(text, Loader=GateLoader)
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position)
        col = exc.position - (text.rfind("\n", 0, exc.position) + 1)
        reason = f"character {exc.character!r} is not allowed in YAML (control characters must be escaped)"
        raise InputError(source, [(position(line, col), reason)]) from None
    except GateYAMLError as exc:
        where, reason = _where(exc)
        raise InputError(source, [(where, reason)]) from None
    except yaml.YAMLError as exc:
        where, reason = _where(exc)
        raise InputError(source, [(where, f"not valid YAML: {reason}")]) from None
    except RecursionError:
        raise InputError(source, [("", f"not valid YAML: nested more than {limits.MAX_DEPTH} levels deep")]) from None


def load_yaml(path: Path | str, *, what: str, max_bytes: int) -> Any:
    """Read (size-checked, UTF-8) and parse one YAML file."""
    return parse_yaml(read_text(path, what=what, max_bytes=max_bytes), str(path))
