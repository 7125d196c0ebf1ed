"""Builds an engine and feeds it: the one wiring that `run`, `diagnose` and `explain` share.

The engine reads nothing from disk. `run` and `diagnose` read each unit's launch command before the engine's
step (`remedy.launch.LaunchReader`: its flags, its SGLang release) and apply the fixes it decides after it
(`remedy.stage.RemedyStage`); `explain` has no unit on disk, so its fixes stay described.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from crashdoc.diagnosis.engine import Engine, feed
from crashdoc.errors import UsageError, UserError
from crashdoc.events import Thresholds
from crashdoc.matching.library import Library
from crashdoc.matching.matcher import Matcher, shipped_derived

if TYPE_CHECKING:
    from crashdoc.diagnosis.report import DiagnosisBuilder, UnitContext
    from crashdoc.diagnosis.rootcause import Finding
    from crashdoc.events import Diagnosis, Fix
    from crashdoc.matching.derived import DerivedLibrary
    from crashdoc.sources.textinput import TextInput


def load_library_or_fail(dirs: Sequence[str] | None, *, matching_only: bool = False) -> Library:
    """The library in `dirs` (the built-in one when None), or a UserError listing its problems; `matching_only`
    for a command that shows no signature's examples or runbook page (`library.matching_part`)."""
    from crashdoc.matching.cache import CompiledCache, default_cache_directory
    from crashdoc.matching.library import LibraryError, builtin_signature_dirs, load_library

    folders = [Path(d) for d in dirs] if dirs else builtin_signature_dirs()
    if not folders:
        raise UserError("no signature library found (the package is incomplete); pass --signatures DIR")
    try:  # validated once, then read back from the cache while the files stay the same
        return load_library(folders, compiled=CompiledCache(default_cache_directory()), matching_only=matching_only)
    except LibraryError as exc:
        raise UserError(exc.said("the signature library has problems")) from exc


def diagnosis_builder() -> DiagnosisBuilder:
    """Diagnoses whose fixes are computed from the run's own numbers where a signature says how (`remedy.actions`,
    imported when the first diagnosis is built: a log with no failure never pays for it, nor for `report.py`:
    `build_engine` hands the engine this function, called at the first diagnosis)."""
    from crashdoc.diagnosis.report import DiagnosisBuilder

    def refine(finding: Finding, ctx: UnitContext, fix: Fix) -> None:
        from crashdoc.remedy.actions import refine as actions_refine

        actions_refine(finding, ctx, fix)

    return DiagnosisBuilder(refine=refine)


def release_option(version: str | None) -> tuple[str, str] | None:
    """`--sglang-version X` as the builder takes it; a value no release could have is a UserError."""
    if version is None:
        return None
    if not re.fullmatch(r"\d+(?:\.\d+){1,3}(?:(?:\.?(?:post|rc|dev|a|b))\d*)*(?:\+[\w.]+)?", version):
        raise UsageError(f"--sglang-version {version!r}: expected a release such as 0.5.23 or 0.5.10.post1")
    return version, "--sglang-version"


def derived_setup(
    version: str | None, source: str | None, cache: Path | None = None
) -> tuple[tuple[str, str] | None, DerivedLibrary]:
    """`--sglang-version` / `--sglang-source` -> (the release every diagnosis names, or None to read each unit's;
    the derived library to match with: the shipped one, plus the source's own when given)."""
    from crashdoc.matching.derived import load_shipped

    release = release_option(version)
    shipped = load_shipped()
    if source is None:
        return release, shipped
    from crashdoc.authoring.derive import DeriveError
    from crashdoc.authoring.hostrelease import derive_option

    try:
        library, found = derive_option(Path(source), version, cache)
    except DeriveError as exc:
        raise UserError(f"--sglang-source: {exc}") from exc
    origin = f"--sglang-source {source}" if version is None else f"--sglang-version, source {source}"
    return ((found, origin) if found else release), shipped.merged(library)


def build_engine(
    matcher: Matcher | Callable[[], Matcher],
    *,
    thresholds: Thresholds | None = None,
    role_of: Callable[[str], str | None] | None = None,
    release: tuple[str, str] | None = None,
    lone_lines: bool = False,
) -> Engine:
    """An engine; `release` is (version, where from) when `--sglang-version` / `--sglang-source` said which SGLang
    ran, above what each unit's files or log say."""
    builder = diagnosis_builder
    if role_of is None:
        return Engine(matcher, thresholds=thresholds, builder=builder, release_option=release, lone_lines=lone_lines)
    return Engine(
        matcher, thresholds=thresholds, role_of=role_of, builder=builder, release_option=release, lone_lines=lone_lines
    )


def daemon_engine(
    matcher: Callable[[], Matcher], thresholds: Thresholds, role_of: Callable[[str], str | None]
) -> Engine:
    """The daemon's engine: the current (hot-reloaded) matcher."""
    return build_engine(matcher, thresholds=thresholds, role_of=role_of)


def explain_text(
    text: str,
    library: Library,
    matcher: Matcher | None = None,
    release: tuple[str, str] | None = None,
) -> list[Diagnosis]:
    """Diagnose one pasted log."""
    return explain_text_with_warnings(text, library, matcher, release)[0]


def explain_text_with_warnings(
    text: str | TextInput,
    library: Library,
    matcher: Matcher | None = None,
    release: tuple[str, str] | None = None,
) -> tuple[list[Diagnosis], list[Diagnosis]]:
    """Diagnose one pasted log, its text or an input read in blocks (a large file: memory independent of its
    size): (failures, tracebacks the server survived)."""
    from crashdoc.sources.textinput import StreamedText, TextInput
    from crashdoc.sources.textlog import ParsedText, parse_text

    source = text if isinstance(text, TextInput) else TextInput("-", text)
    engine = build_engine(matcher or Matcher(library, shipped_derived), release=release, lone_lines=True)
    gpu = None
    parsed: ParsedText | StreamedText
    if source.streamed():
        parsed = source.parse()
    else:
        whole = source.whole()
        if "NVRM" in whole or "SXid" in whole:  # the kernel's GPU lines (Xid, ...), read apart from the program's log
            from crashdoc.diagnosis.hardware_paste import read_paste

            gpu = read_paste(whole)
        parsed = parse_text(gpu.rest if gpu is not None else whole)
    feed(engine, parsed.events)
    source.close()
    engine.finish()
    diagnoses, warnings = engine.diagnoses(), engine.warnings()
    if gpu is not None and isinstance(parsed, ParsedText):  # hardware or configuration: GPU faults against each crash
        from crashdoc.diagnosis.hardware_paste import apply_to_paste

        diagnoses = apply_to_paste(gpu, diagnoses, parsed.lines)
    if diagnoses or warnings:  # a log with no failure never imports the remedy stage (5 ms of `explain`)
        from crashdoc.remedy.stage import RemedyStage

        stage = RemedyStage(on_disk=False)  # the unit is not on this host: its fixes stay described
        diagnoses = stage.remedy_all(diagnoses, check=False)
        warnings = stage.remedy_all(warnings, check=False)
    # how the paste was read (quote markers, a CI column, ...): the evidence says it, once per diagnosis
    notes = [f"read the pasted log after: {n}" for n in parsed.notes if not n.startswith("no traceback given")]
    if notes:
        diagnoses = [replace(d, evidence=[*d.evidence, *notes]) for d in diagnoses]
        warnings = [replace(d, evidence=[*d.evidence, *notes]) for d in warnings]
    return diagnoses, warnings


def explain_texts(
    sources: Iterable[tuple[str, str | TextInput]],
    library: Library,
    release: tuple[str, str] | None = None,
    derived: DerivedLibrary | None = None,
) -> list[tuple[str, list[Diagnosis], list[Diagnosis]]]:
    matcher = Matcher(library, derived if derived is not None else shipped_derived)  # `or` would load it (len)
    return [(name, *explain_text_with_warnings(text, library, matcher, release)) for name, text in sources]


def sglang_python_option(path: str | None) -> str | None:
    """`--sglang-python PATH`: the interpreter the operator allows crashdoc to run SGLang's checks with."""
    if path is None:
        return None
    from crashdoc.remedy.interpreter import unsafe_to_run

    absolute = str(Path(path).absolute())
    if not Path(absolute).is_file():
        raise UserError(f"--sglang-python {path}: no such file")
    unsafe = unsafe_to_run(absolute)
    if unsafe:
        raise UserError(f"--sglang-python {path}: {unsafe}")
    return absolute


def interpreter_release(interpreter: str | None) -> tuple[str, str] | None:
    """(release, where read) of the SGLang `--sglang-python` imports, read as files like a unit's (no child): the
    same interpreter answers the checks, so the diagnosis names its release, not "unknown"."""
    if interpreter is None:
        return None
    from crashdoc.sources.sglang_install import find_sglang

    install = find_sglang(interpreter)
    return (install.version, install.origin) if install.version else None


def accepted_fixes(
    sources: Sequence[tuple[str, str | TextInput]],
    results: list[tuple[str, list[Diagnosis], list[Diagnosis]]],
    command: str | None,
    interpreter: str | None,
    derived: DerivedLibrary | None,
) -> list[tuple[str, list[Diagnosis], list[Diagnosis]]]:
    """The remedy stage's search for pasted logs: each flag failure's fix searched on the paste's command (or
    `--command`), checked by `--sglang-python`'s SGLang when given."""
    if not any(found for _, found, _ in results):
        return results  # a healthy log: explain's start-up pays nothing for the search
    from crashdoc.remedy.accepted import pasted_launch
    from crashdoc.remedy.stage import RemedyStage

    stage = RemedyStage(
        on_disk=False, derived=derived if derived is not None else shipped_derived, interpreter=interpreter
    )
    # the paste's text (the command above the log, its logged server_args); a large input read in blocks is
    # not kept whole (its memory stays bounded): its command comes from `--command` only
    texts = {name: source if isinstance(source, str) else source.text or "" for name, source in sources}
    return [
        (name, stage.remedy_pasted(found, pasted_launch(texts[name], command)) if found else found, warnings)
        for name, found, warnings in results
    ]
