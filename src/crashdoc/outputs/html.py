"""The on-call pages: a unit's diagnosis and a signature's runbook, as plain HTML.

Everything that came from a log is escaped and redacted; the Markdown of runbooks is
rendered by a deliberately small converter (headings, paragraphs, lists, code) that escapes
first and only then adds tags, so no input can inject markup.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from crashdoc.events import Diagnosis
from crashdoc.outputs.redact import redact

_STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:2em auto;max-width:60em;padding:0 1em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}code,pre{font:13px ui-monospace,monospace;background:#f4f4f4}
pre{padding:.7em;overflow-x:auto}.crit{color:#b00}.ok{color:#070}.meta{color:#555}table{border-collapse:collapse}
td,th{padding:.2em .8em;text-align:left;border-bottom:1px solid #ddd}.add{color:#070}.del{color:#b00}
"""


def esc(text: object) -> str:
    return html.escape(redact(str(text)), quote=True)


def page(title: str, body: str) -> bytes:
    doc = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{esc(title)}</title><style>{_STYLE}</style></head><body>{body}"
        "<p class='meta'>crashdoc &mdash; it never changes anything itself; apply fixes by hand.</p></body></html>"
    )
    return doc.encode("utf-8")


def markdown(text: str) -> str:
    """A small, safe Markdown subset: #-headings, paragraphs, - lists, `code` and ``` blocks."""
    out: list[str] = []
    in_code = False
    in_list = False
    paragraph: list[str] = []

    def flush_paragraph() -> None:
        if paragraph:
            out.append("<p>" + _inline(" ".join(paragraph)) + "</p>")
            paragraph.clear()

    for raw in text.split("\n"):
        line = raw.rstrip()
        if line.startswith("```"):
            flush_paragraph()
            out.append("</pre>" if in_code else "<pre>")
            in_code = not in_code
            continue
        if in_code:
            out.append(esc(raw) + "\n")
            continue
        heading = re.match(r"(#{1,4})\s+(.*)", line)
        item = re.match(r"\s*[-*]\s+(.*)", line)
        if in_list and not item:
            out.append("</ul>")
            in_list = False
        if heading:
            flush_paragraph()
            level = min(len(heading.group(1)) + 1, 4)
            out.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
        elif item:
            flush_paragraph()
            if not in_list:
                out.append("<ul>")
                in_list = True
            out.append(f"<li>{_inline(item.group(1))}</li>")
        elif not line.strip():
            flush_paragraph()
        else:
            paragraph.append(line.strip())
    flush_paragraph()
    if in_list:
        out.append("</ul>")
    if in_code:
        out.append("</pre>")
    return "\n".join(out)


def _inline(text: str) -> str:
    parts = re.split(r"(`[^`]*`)", text)
    rendered = []
    for part in parts:
        if part.startswith("`") and part.endswith("`") and len(part) > 1:
            rendered.append(f"<code>{esc(part[1:-1])}</code>")
        else:
            rendered.append(re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", esc(part)))
    return "".join(rendered)


def diagnosis_section(d: Diagnosis, runbook_href: str | None = None) -> str:
    parts = [
        f"<h2>{esc(d.title)}</h2>",
        "<table>",
        f"<tr><th>signature</th><td>{esc(d.signature or 'unknown')}</td></tr>",
        f"<tr><th>category</th><td>{esc(d.category)}</td></tr>",
        f"<tr><th>severity</th><td class='crit'>{esc(d.severity)}</td></tr>",
        f"<tr><th>restarts (NRestarts)</th><td>{esc(d.restarts if d.restarts is not None else '?')}</td></tr>",
        f"<tr><th>crashes / confidence</th><td>{esc(d.crashes)} / {esc(f'{d.confidence:.2f}')}</td></tr>",
        f"<tr><th>exit</th><td>{esc(d.exit or '')}</td></tr>",
        f"<tr><th>fingerprint</th><td><code>{esc(d.fingerprint)}</code></td></tr>",
        "</table>",
        f"<h3>Root cause</h3><pre>{esc(d.root_cause.line)}</pre>",
        f"<h3>Fix</h3><p>{_inline(d.fix.summary)}</p>",
    ]
    for warning in d.fix.warnings:
        parts.append(f"<p class='crit'>warning: {esc(warning)}</p>")
    if d.fix.command:
        parts.append(f"<p>Corrected command:</p><pre>{esc(d.fix.command)}</pre>")
    if d.fix.diff:
        parts.append("<p>Change to make:</p><pre>" + _diff(d.fix.diff) + "</pre>")
    if d.fix.apply:
        parts.append("<p>To apply:</p><pre>" + esc("\n".join(d.fix.apply)) + "</pre>")
    if d.fix.rollback:
        parts.append("<p>To roll back:</p><pre>" + esc("\n".join(d.fix.rollback)) + "</pre>")
    if d.evidence:
        parts.append("<h3>Evidence</h3><ul>" + "".join(f"<li>{esc(e)}</li>" for e in d.evidence) + "</ul>")
    if runbook_href:
        parts.append(f"<p><a href='{esc(runbook_href)}'>Runbook</a></p>")
    return "\n".join(parts)


def _diff(diff: str) -> str:
    lines = []
    for line in diff.rstrip("\n").split("\n"):
        cls = (
            "add"
            if line.startswith("+") and not line.startswith("+++")
            else ("del" if line.startswith("-") and not line.startswith("---") else "")
        )
        lines.append(f"<span class='{cls}'>{esc(line)}</span>" if cls else esc(line))
    return "\n".join(lines)


def index_page(rows: Sequence[tuple[str, str, str, str]]) -> bytes:
    """rows: (unit, state, signature, title)."""
    body = ["<h1>crashdoc</h1><table><tr><th>unit</th><th>state</th><th>diagnosis</th></tr>"]
    for unit, state, signature, title in rows:
        cls = "crit" if state in ("crash-looping", "failed") else "ok"
        body.append(
            f"<tr><td><a href='/units/{esc(unit)}'>{esc(unit)}</a></td><td class='{cls}'>{esc(state)}</td>"
            f"<td>{esc(signature)} {esc(title)}</td></tr>"
        )
    body.append("</table><p><a href='/diagnoses'>/diagnoses</a> (JSON) &middot; <a href='/metrics'>/metrics</a></p>")
    return page("crashdoc", "".join(body))
