"""The on-call pages: a unit's diagnosis and a signature's runbook, as plain HTML.

Everything that came from a log is cleaned (ANSI escapes and control characters dropped: they hide
text or break the page), redacted and only then escaped; the Markdown of runbooks is rendered by a
deliberately small converter (headings, paragraphs, lists, code) that escapes first and only then adds
tags, so no input can inject markup. Links are relative and percent-encoded, so the pages also work
behind a reverse proxy that serves them under a path prefix.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence
from urllib.parse import quote

from crashdoc.diagnosis.hardware import action_words
from crashdoc.diagnosis.views import UnitView
from crashdoc.events import HARDWARE, Diagnosis
from crashdoc.matching.library import Signature
from crashdoc.outputs.render import sglang_release_text
from crashdoc.redact import redact
from crashdoc.remedy.rewrite import describe
from crashdoc.text import clean

_STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:2em auto;max-width:60em;padding:0 1em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}code,pre{font:13px ui-monospace,monospace;background:#f4f4f4}
pre{padding:.7em;overflow-x:auto}.crit{color:#b00}.ok{color:#070}.meta{color:#555}table{border-collapse:collapse}
td,th{padding:.2em .8em;text-align:left;border-bottom:1px solid #ddd}.add{color:#070}.del{color:#b00}
"""


_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")  # direction overrides make text read other than it is


def esc(text: object) -> str:
    """Text from anywhere (logs above all) made safe for HTML: cleaned, redacted, escaped (quotes too)."""
    return html.escape(redact(_BIDI.sub("", clean(str(text)))), quote=True)


def href(*parts: str) -> str:
    """A relative link with each path part percent-encoded (unit names hold `@`, `\\`, quotes...)."""
    return esc("/".join(quote(p, safe="") for p in parts))


def page(title: str, body: str) -> bytes:
    doc = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{esc(title)}</title><style>{_STYLE}</style></head><body>{body}"
        "<p class='meta'>crashdoc &mdash; it never changes anything itself; apply fixes by hand.</p></body></html>"
    )
    return doc.encode("utf-8", "replace")


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
    """One diagnosis: what, why, the exact fix with its diff and commands, the evidence."""
    parts = [
        f"<h2>{esc(d.title)}</h2>",
        "<table>",
        f"<tr><th>signature</th><td>{esc(d.signature or 'unknown')}</td></tr>",
        f"<tr><th>category</th><td>{esc(d.category)}</td></tr>",
        f"<tr><th>kind</th><td>{esc(d.kind or 'unknown')}</td></tr>",
        f"<tr><th>severity</th><td class='crit'>{esc(d.severity)}</td></tr>",
        *([f"<tr><th>GPU</th><td class='crit'>{esc(gpu_fault(d))}</td></tr>"] if d.kind == HARDWARE else []),
        f"<tr><th>restarts (NRestarts)</th><td>{esc(d.restarts if d.restarts is not None else '?')}</td></tr>",
        f"<tr><th>crashes / confidence</th><td>{esc(d.crashes)} / {esc(f'{d.confidence:.2f}')}</td></tr>",
        f"<tr><th>exit</th><td>{esc(d.exit or '')}</td></tr>",
        f"<tr><th>SGLang release</th><td>{esc(sglang_release_text(d))}</td></tr>",
        *([f"<tr><th>version note</th><td class='crit'>{esc(d.version_note)}</td></tr>"] if d.version_note else []),
        f"<tr><th>fingerprint</th><td><code>{esc(d.fingerprint)}</code></td></tr>",
        "</table>",
        f"<h3>Root cause</h3><pre>{esc(d.root_cause.line or d.root_cause.message)}</pre>",
        f"<h3>Fix</h3><p>{_inline(d.fix.summary)}</p>",
    ]
    if d.fix.why:  # how a computed value follows from the run's own numbers
        parts.append("<ul>" + "".join(f"<li>{esc(reason)}</li>" for reason in d.fix.why) + "</ul>")
    if d.fix.verified:
        parts.append(f"<p>verified: {esc(d.fix.verified)}</p>")
    for warning in d.fix.warnings:
        parts.append(f"<p class='crit'>warning: {esc(warning)}</p>")
    if d.fix.command:
        parts.append(f"<p>Corrected command:</p><pre>{esc(d.fix.command)}</pre>")
    if d.fix.diff:
        parts.append("<p>Change to make:</p><pre>" + _diff(d.fix.diff) + "</pre>")
    if d.fix.apply:
        parts.append("<p>To apply (crashdoc changes nothing itself):</p><pre>" + esc("\n".join(d.fix.apply)) + "</pre>")
    if d.fix.rollback:
        parts.append("<p>To roll back:</p><pre>" + esc("\n".join(d.fix.rollback)) + "</pre>")
    if d.evidence:
        parts.append("<h3>Evidence</h3><ul>" + "".join(f"<li>{esc(e)}</li>" for e in d.evidence) + "</ul>")
    if runbook_href:
        parts.append(f"<p><a href='{runbook_href}'>Runbook</a></p>")
    return "\n".join(parts)


def gpu_fault(d: Diagnosis) -> str:
    """A hardware diagnosis' GPU and what to do: "GPU 6 (0000:c1:00.0), TP3, Xid 79: drain the node"."""
    c = d.captures
    gpu = f"GPU {c['gpu']} ({c.get('bus_id', '')})" if c.get("gpu") else f"GPU {c.get('bus_id') or '?'}"
    what = ", ".join(
        part for part in (gpu, c.get("rank", ""), f"Xid {c['xid']}" if c.get("xid") else c.get("gpu_event", "")) if part
    )
    return f"{what}: {action_words(c['action'])}" if c.get("action") else what


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


def _signature_header(sig: Signature) -> str:
    flags = " ".join(f"<code>{esc(f)}</code>" for f in sig.flags) or "none"
    return (
        f"<p class='meta'>{esc(sig.id)} &middot; {esc(sig.category)} &middot; {esc(sig.severity)}"
        f" &middot; flags: {flags}</p>"
    )


def unit_page(rec: UnitView, d: Diagnosis | None, sig: Signature | None, warnings: Sequence[Diagnosis] = ()) -> bytes:
    """`/units/<unit>`: the unit's state, its (last) diagnosis `d` with the fix, and the runbook it points to;
    then the errors its runs survived (warnings: no crash).

    `sig` is the signature of the diagnosis, None for an unknown error."""
    body = [
        f"<h1>{esc(rec.name)}: {esc(rec.loop_state)}</h1>",
        f"<p class='meta'>NRestarts {esc(rec.n_restarts if rec.n_restarts is not None else '?')}"
        f" &middot; restarts seen {esc(rec.restarts_total)} &middot; crashes {esc(rec.crashes_total)}</p>",
    ]
    if d is None:
        body.append("<p class='ok'>No crash loop diagnosed.</p>")
    else:
        if rec.diagnosis is None:
            body.append("<p class='ok'>Not crash-looping now; the last diagnosis was:</p>")
        runbook = href("..", "runbook", d.signature) if sig is not None and d.signature else None
        body.append(diagnosis_section(d, runbook))
        if sig is not None:
            body.append(f"<h2>Runbook: {esc(sig.title)}</h2>")
            body.append(_signature_header(sig))
            body.append(markdown(sig.runbook))
    if warnings:
        body.append("<h2>Errors the server survived (warnings, no crash)</h2><ul>")
        for w in warnings:
            times = f" ({w.crashes} times)" if w.crashes > 1 else ""
            body.append(
                f"<li><code>{esc(w.root_cause.line)}</code>{esc(times)}: {esc(w.handled)}"
                f" <span class='meta'>{esc(w.subsystem or w.category)} &middot; {esc(w.kind)}</span></li>"
            )
        body.append("</ul>")
    return page(f"{rec.name} - crashdoc", "\n".join(body))


def runbook_page(sig: Signature, records: Iterable[tuple[UnitView, Diagnosis | None]]) -> bytes:
    """`/runbook/<signature>`: what alerts link to. The runbook, then the latest diagnosis of every unit that
    has (or had) this root cause (each unit with it), with its evidence and the exact fix for that unit."""
    changes = "".join(f"<li><code>{esc(describe(c))}</code></li>" for c in sig.changes)
    body = [
        f"<h1>{esc(sig.title)}</h1>",
        _signature_header(sig),
        f"<h2>Fix</h2><p>{_inline(sig.fix_summary)}</p>",
        f"<ul>{changes}</ul>" if changes else "",
        markdown(sig.runbook),
    ]
    if sig.source:
        body.append(f"<p class='meta'>Raised in SGLang {esc(sig.sglang)} <code>{esc(sig.source)}</code></p>")
    seen = False
    for rec, d in sorted(records, key=lambda r: r[0].name):
        if d is None or d.signature != sig.id:
            continue
        seen = True
        body.append(
            f"<h2>Latest on <a href='{href('..', 'units', rec.name)}'>{esc(rec.name)}</a> ({esc(rec.loop_state)})</h2>"
        )
        body.append(diagnosis_section(d))
    if not seen:
        body.append("<p class='ok'>No watched unit has this failure now.</p>")
    return page(f"{sig.id} - crashdoc runbook", "\n".join(body))


def index_page(records: Iterable[UnitView]) -> bytes:
    """`/`: every watched unit, its state and current diagnosis."""
    body = ["<h1>crashdoc</h1><table><tr><th>unit</th><th>state</th><th>diagnosis</th></tr>"]
    for rec in sorted(records, key=lambda r: r.name):
        d = rec.diagnosis
        state = rec.loop_state
        cls = "crit" if state in ("crash-looping", "failed") else "ok"
        what = f"{esc(d.signature or 'unknown')} {esc(d.title)}" if d is not None else ""
        body.append(
            f"<tr><td><a href='{href('units', rec.name)}'>{esc(rec.name)}</a></td><td class='{cls}'>{esc(state)}</td>"
            f"<td>{what}</td></tr>"
        )
    body.append("</table><p><a href='diagnoses'>/diagnoses</a> (JSON) &middot; <a href='metrics'>/metrics</a></p>")
    return page("crashdoc", "".join(body))
