"""YAML that remembers where each value was written, so every error can say file:line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from crashdoc.errors import ProblemsError

Path_ = tuple[Any, ...]
# libyaml's loader composes ~10x faster and keeps the marks we need for file:line
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YamlError(Exception):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line, self.message = line, message


@dataclass(slots=True)
class LocatedYaml:
    data: Any
    lines: dict[Path_, int]

    def line_of(self, path: Path_) -> int:
        """The line of `path`, or of its nearest parent that has one."""
        while path and path not in self.lines:
            path = path[:-1]
        return self.lines.get(path, 0)

    def problem(self, name: str, path: Path_, message: str) -> str:
        """`FILE:LINE: key.path: message`, the form every file crashdoc reads reports a problem in."""
        return f"{name}:{self.line_of(path)}: {'.'.join(map(str, path)) or 'top level'}: {message}"


def read_located(path: str | Path, error: type[ProblemsError]) -> tuple[LocatedYaml, bytes]:
    """A YAML file parsed with the line of every value, and its bytes; `error` with the one problem (FILE: no
    such file, FILE: cannot read: why, FILE:LINE: invalid YAML: what) when it cannot be read or parsed."""
    name = str(path)
    try:
        raw = Path(path).read_bytes()
        text = raw.decode("utf-8")
    except FileNotFoundError as exc:
        raise error([f"{name}: no such file"]) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise error([f"{name}: cannot read: {getattr(exc, 'strerror', None) or exc}"]) from exc
    try:
        return parse_located(text), raw
    except YamlError as exc:
        raise error([f"{name}:{exc.line}: {exc.message}"]) from exc


MAX_VALUES = 100_000  # >100x the largest library file; aliases that expand past it are a "billion laughs"


def parse_located(text: str) -> LocatedYaml:
    """Parse one YAML document; raises YamlError with the line of the first problem (never anything else)."""
    try:
        node = yaml.compose(text, Loader=_LOADER)
    except yaml.reader.ReaderError as exc:  # it has a position in the text, not a mark
        line = text.count("\n", 0, exc.position) + 1
        raise YamlError(line, f"invalid YAML: character U+{exc.character:04X} is not allowed ({exc.reason})") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise YamlError(mark.line + 1 if mark is not None else 0, f"invalid YAML: {problem}") from exc
    except RecursionError as exc:  # the pure-Python composer on deep nesting (libyaml has its own limit)
        raise YamlError(0, "invalid YAML: nested too deeply") from exc
    lines: dict[Path_, int] = {}
    if node is None:
        return LocatedYaml(None, lines)
    return LocatedYaml(_Converter(lines).convert(node, ()), lines)


class _Converter:
    """Nodes -> plain values, recording lines. Aliases share nodes, so a document can refer to itself
    (an endless recursion) or expand exponentially: both are errors at the alias's line, not a hang."""

    def __init__(self, lines: dict[Path_, int]) -> None:
        self.lines = lines
        self.values = 0
        self.open: set[int] = set()  # collections being converted: an alias back to one is a cycle

    def convert(self, node: yaml.Node, path: Path_) -> Any:
        line = node.start_mark.line + 1
        self.lines[path] = line
        self.values += 1
        if self.values > MAX_VALUES:
            raise YamlError(line, f"more than {MAX_VALUES} values (aliases expanding without end?)")
        if isinstance(node, yaml.MappingNode | yaml.SequenceNode):
            if id(node) in self.open:
                raise YamlError(line, "an alias refers to a collection that contains it")
            self.open.add(id(node))
            try:
                return (
                    self._mapping(node, path)
                    if isinstance(node, yaml.MappingNode)
                    else [self.convert(item, (*path, i)) for i, item in enumerate(node.value)]
                )
            finally:
                self.open.discard(id(node))
        if node.tag == "tag:yaml.org,2002:str":
            return node.value
        try:
            value = yaml.SafeLoader("").construct_object(node)
        except (yaml.YAMLError, ValueError, OverflowError) as exc:  # ValueError: ints over 4300 digits
            raise YamlError(line, f"invalid value: {exc}") from exc
        return value if isinstance(value, str | int | float | bool | type(None)) else str(value)

    def _mapping(self, node: yaml.MappingNode, path: Path_) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise YamlError(key_node.start_mark.line + 1, "mapping keys must be plain strings")
            key = key_node.value
            if key in result:
                raise YamlError(key_node.start_mark.line + 1, f"duplicate key {key!r}")
            result[key] = self.convert(value_node, (*path, key))
        return result
