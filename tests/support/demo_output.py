"""The demo's output as the README shows it: its blocks, and a mask for what differs between two runs.

What differs is said, never guessed at: paths (the sandbox's work folder, the interpreter, where the package
lives), the port, systemd's invocation id, how often the unit restarted by the time crashdoc printed, how
long a run lived, and what this host's memory makes of the HiCache ratio (the value the host-memory check
accepts, and its arithmetic). Everything else must be the same, word for word.
"""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
FULL_MARK = "<!-- the output of `make run`: tests/e2e/test_demo.py compares it with a run of the demo -->"
EXCERPT_MARK = "<!-- an excerpt of the demo's output: tests/e2e/test_demo.py finds it in a run -->"

_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"/var/tmp/crashdoc-sandbox-\d+-\w+"), "<sandbox>"),
    (re.compile(r"/\S*/bin/python[\d.]*"), "<python>"),
    (re.compile(r"/\S*/crashdoc/sandbox/fake_sglang/scheduler\.py"), "<crashdoc>/sandbox/fake_sglang/scheduler.py"),
    (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:<port>"),
    (re.compile(r"invocation: [0-9a-f]{32}"), "invocation: <id>"),
    (re.compile(r"restarts \(NRestarts\): \d+   crashes: \d+"), "restarts (NRestarts): <n>   crashes: <n>"),
    (re.compile(r"^(\s+- )\d+ crashes in this loop", re.M), r"\1<n> crashes in this loop"),
    (re.compile(r"died [\d.]+ s after start"), "died <t> s after start"),
    # the host-memory check: its arithmetic and the value it accepts are this host's
    (re.compile(r"^(\s+warning: --hicache-ratio) .*$", re.M), r"\1 <checked against this host's memory>"),
    (re.compile(r" \(the largest ratio that fits this host; [\d.]+ does not\)"), ""),
    (re.compile(r"--hicache-ratio [\d.]+"), "--hicache-ratio <r>"),
)


def mask(text: str) -> str:
    """`text` with what differs between runs and hosts replaced by placeholders; make's own line and the
    terminal's echo of Ctrl-C (`^C`) dropped."""
    lines = [ln for ln in text.splitlines() if ln.strip() != "^C" and not ln.startswith("PID 1 is not systemd here")]
    out = "\n".join(lines)
    for pattern, placeholder in _MASKS:
        out = pattern.sub(placeholder, out)
    return out.strip("\n") + "\n"


def readme_block(mark: str, readme: Path = README) -> str:
    """The fenced block that follows `mark` in the README."""
    text = readme.read_text()
    at = text.index(mark)
    m = re.compile(r"```[^\n]*\n(.*?)\n```", re.S).search(text, at)
    assert m is not None, f"no block after {mark!r} in {readme}"
    return m.group(1) + "\n"


def check_one_ratio(output: str) -> str | None:
    """The HiCache ratio the demo's fix carries, after checking the summary, the corrected command, the diff, the
    sed line and the warning say the same value and the host-memory check accepted it; None when no ratio fits
    this host and the fix turns HiCache off."""
    lines = output.splitlines()
    fix = next(ln for ln in lines if ln.startswith("  fix: "))
    warning = next(ln for ln in lines if ln.startswith("  warning: --hicache-ratio"))
    command = lines[lines.index("  corrected command:") + 1]
    if "No --hicache-ratio fits" in warning:
        assert "--hicache" not in command and "--enable-hierarchical-cache" not in command, command
        assert fix.startswith("  fix: no --hicache-ratio fits this host: turn HiCache off"), fix
        return None
    m = re.search(r"--hicache-ratio ([\d.]+) ", command)
    assert m, command
    value = m.group(1)
    assert f"--hicache-ratio {value}`" in fix, (value, fix)
    assert f"    +    --hicache-ratio {value} \\" in lines, (value, output)
    [sed] = [ln for ln in lines if ln.startswith("    $ sed ")]
    assert f"/--hicache-ratio {value}/" in sed, (value, sed)
    accepted = (f"--hicache-ratio {value} fits", f"The corrected command uses --hicache-ratio {value}, the largest")
    assert any(a in warning for a in accepted), (value, warning)
    return value
