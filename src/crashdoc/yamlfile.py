"""YAML that remembers where each value was written, so every error can say file:line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

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


def parse_located(text: str) -> LocatedYaml:
    """Parse one YAML document; raises YamlError with the line of the first problem."""
    try:
        node = yaml.compose(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise YamlError(mark.line + 1 if mark is not None else 0, f"invalid YAML: {problem}") from exc
    lines: dict[Path_, int] = {}
    if node is None:
        return LocatedYaml(None, lines)
    return LocatedYaml(_to_python(node, (), lines), lines)


def _to_python(node: yaml.Node, path: Path_, lines: dict[Path_, int]) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise YamlError(key_node.start_mark.line + 1, "mapping keys must be plain strings")
            key = key_node.value
            if key in result:
                raise YamlError(key_node.start_mark.line + 1, f"duplicate key {key!r}")
            result[key] = _to_python(value_node, (*path, key), lines)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_to_python(item, (*path, i), lines) for i, item in enumerate(node.value)]
    if node.tag == "tag:yaml.org,2002:str":
        return node.value
    try:
        value = yaml.SafeLoader("").construct_object(node)
    except yaml.YAMLError as exc:
        raise YamlError(node.start_mark.line + 1, f"invalid value: {exc}") from exc
    return value if isinstance(value, str | int | float | bool | type(None)) else str(value)
