"""A derived signature made by hand, as SGLang's source would give one: the tests of the derived library and of
its shipped layout build their records with it."""

from __future__ import annotations

from crashdoc.events import FlagChange
from crashdoc.matching.derived import DerivedSignature, signature_id


def page_size_check(
    template: str, releases: tuple[str, ...], *, condition: str = "cfg.page_size < 1", line: int = 10, step: int = 0
) -> DerivedSignature:
    """A `ValueError` check on `--page-size` whose message is `template` (`{}` a value), found in `releases` at
    sglang/srt/x.py:`line` (the line moving by `step` from one release to the next)."""
    pattern = "^" + template.replace("-", "\\-").replace(".", "\\.").replace("{}", "(?P<v>[^\\n]+)")
    return DerivedSignature(
        id=signature_id("ValueError", template),
        exception_type="ValueError",
        template=template,
        pattern=pattern,
        flags=("--page-size",),
        env=(),
        condition=condition,
        fix=(FlagChange("set", "--page-size", "1"),),
        summary="Set --page-size 1",
        sites=tuple((r, "sglang/srt/x.py", line + step * i, "check") for i, r in enumerate(releases)),
        releases=releases,
    )
