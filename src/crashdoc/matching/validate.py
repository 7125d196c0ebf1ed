"""The JSON Schema check of signature files, in this process or in a throw-away child.

jsonschema (with referencing and rpds) is ~6 MB of heap and shared libraries once imported, and a process keeps
what it imported. A one-shot command validates in its own process; the daemon, which validates only after a cold
library cache (an upgrade, an edited signature, a hot reload), has the files checked in a child that exits with
what it imported (`apart`), and keeps only the answers: each schema error's path in the file and its message,
the same words `load_bytes` gives in process (`tests/unit/test_library_validate.py` compares them).
"""

from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jsonschema

SCHEMA_PATH = Path(__file__).with_name("signature.schema.json")
CHILD_TIMEOUT = 120.0  # seconds: the shipped library (49 files) takes ~1 s
# a schema error: its path in the file's data (keys and indexes) and its message
Found = list[tuple[tuple[Any, ...], str]]


@cache
def _validator() -> jsonschema.protocols.Validator:
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def schema_errors(data: Any) -> Found:
    """The schema's errors in a file's parsed data, in the order they are reported (by path)."""
    errors = sorted(_validator().iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    return [(tuple(e.absolute_path), _describe(e)) for e in errors]


def _describe(err: jsonschema.ValidationError) -> str:
    where = ".".join(str(p) for p in err.absolute_path)
    if err.validator == "additionalProperties":
        message = err.message.replace("Additional properties are not allowed", "unknown key(s)")
    elif err.validator == "required":
        message = err.message.replace("is a required property", "is missing")
        message = message.split(" is missing")[0][-60:] + " is missing"
    elif err.validator == "enum":
        message = f"{err.instance!r} is not one of {', '.join(map(str, err.validator_value))}"
    else:
        message = err.message
        if len(message) > 300:
            message = message[:300] + "..."
    return f"{where}: {message}" if where else message


def _checked(texts: dict[str, str]) -> dict[str, Found]:
    """Each file's schema errors; a file whose YAML does not parse (or holds nothing) has none here: its loader
    reports that itself."""
    from crashdoc.yamlfile import YamlError, parse_located

    out: dict[str, Found] = {}
    for name, text in texts.items():
        try:
            located = parse_located(text)
        except YamlError:
            continue
        if located.data is not None:
            out[name] = schema_errors(located.data)
    return out


def apart(texts: dict[str, str]) -> dict[str, Found] | None:
    """`texts`' schema errors, found by a child of this interpreter running this crashdoc; None when the child
    could not answer (the caller then validates in its own process)."""
    if not texts:
        return {}
    import subprocess  # the daemon's alone: a one-shot command validates in process

    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD],
            input=json.dumps({"path": sys.path, "texts": texts}).encode(),  # this import path: this crashdoc
            capture_output=True,
            timeout=CHILD_TIMEOUT,
            check=True,
        )
        answer = json.loads(done.stdout)
        return {name: [(tuple(path), message) for path, message in found] for name, found in answer.items()}
    except (OSError, subprocess.SubprocessError, ValueError, TypeError):
        return None


_CHILD = """import json, sys
asked = json.loads(sys.stdin.buffer.read())
sys.path[:] = asked["path"]
from crashdoc.matching.validate import serve
serve(asked["texts"])
"""


def serve(texts: dict[str, str]) -> None:
    """The child: the files' schema errors, as JSON on standard output."""
    found = _checked(texts)
    sys.stdout.write(json.dumps({name: [[list(path), message] for path, message in f] for name, f in found.items()}))
    sys.stdout.flush()
