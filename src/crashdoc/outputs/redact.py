"""Masks secrets in everything crashdoc prints, serves or sends.

SGLang units carry secrets in plain sight: `--api-key` on the command line, `HF_TOKEN=` in the environment,
`server_args=ServerArgs(..., api_key='...')` in the first log line. Every output path calls `redact`, so a
pattern missed here is a leak; a pattern too eager only costs a readable value. The rules therefore lean to
masking, except where a flag is known to hold a path or a number (`--ssl-keyfile`, `--max-total-tokens`).

All patterns are linear in the input (no nested quantifiers), and every replacement is a fixed point:
redacting redacted text changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import overload

REDACTED = "<redacted>"

# A flag or variable is secret when its *last* word is one of these: `--api-key`, `HF_TOKEN`,
# `ssl_keyfile_password`. Requiring the last word keeps `--ssl-keyfile` (a path) and `--speculative-token-map`
# (a path) readable, and `tokens`/`keys`/`tokenizer` never match a whole word.
SECRET_WORDS: tuple[str, ...] = (
    "key",
    "apikey",
    "token",
    "secret",
    "password",
    "passwd",
    "passphrase",
    "credential",
    "credentials",
)
# Names with one of these words are counts, sizes or schemes, not secrets: `--bucket-time-to-first-token`,
# `--kt-max-deferred-experts-per-token`.
NON_SECRET_WORDS: frozenset[str] = frozenset(
    {"max", "min", "num", "per", "first", "bucket", "buckets", "ratio", "threshold", "size", "count", "limit"}
)
# SGLang's cache flag families: `--hicache-*` and `--kv-*` configure the KV cache, never a credential.
NON_SECRET_PREFIXES: tuple[str, ...] = ("hicache", "kv")
# Values that are no secret and say something useful when shown: unset, or a reference to a variable.
_KEEP_VALUE = re.compile(
    r"""(?:None|null|nil|true|false|''|""|<redacted>|["']?\$(?:\w+|\{\w+\})["']?)\Z""", re.I
)

_NAME = r"[\w.-]*?(?:" + "|".join(SECRET_WORDS) + r")"
# A value: quoted (possibly unterminated when a line was cut), or a bare word.
_QUOTED = r"""'[^'\n]*'?|"(?:[^"\\\n]|\\.)*"?"""


def is_secret_flag(flag: str) -> bool:
    """True when the value of `flag` (`--api-key`, `api_key`, `HF_TOKEN`) must never be shown."""
    name = flag.lstrip("-").lower()
    words = [w for w in re.split(r"[-_.]", name) if w]
    if not words or words[-1] not in SECRET_WORDS:
        return False
    if words[0] in NON_SECRET_PREFIXES and len(words) > 1:
        return False
    return not NON_SECRET_WORDS.intersection(words)


def _mask(value: str) -> str:
    """`<redacted>`, inside the same quotes as `value` so that quoted syntax stays valid."""
    if value[:1] in ("'", '"'):
        return value[0] + REDACTED + value[0]
    return REDACTED


@dataclass(frozen=True, slots=True)
class Redactor:
    """The compiled patterns, plus literal secret values learnt elsewhere (the `--api-key` of a unit).

    Immutable: `with_secrets` returns a new one, so one instance can be shared by every output.
    """

    secrets: tuple[str, ...] = ()
    _flag: re.Pattern[str] = field(init=False, repr=False)
    _assign: re.Pattern[str] = field(init=False, repr=False)
    _auth: re.Pattern[str] = field(init=False, repr=False)
    _url: re.Pattern[str] = field(init=False, repr=False)
    _tokens: re.Pattern[str] = field(init=False, repr=False)
    _literal: re.Pattern[str] | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        # `--api-key s3cr3t`, `--api-key=s3cr3t`, `--api-key \<newline> s3cr3t`; not `--api-key --port 1`.
        set_(
            self,
            "_flag",
            re.compile(
                r"(?<![\w.-])(?P<name>--?" + _NAME + r")(?P<sep>=|[ \t]+(?:\\\r?\n[ \t]*)?)"
                r"(?P<value>(?!--)(?:" + _QUOTED + r"|[^\s'\"]+))",
                re.I,
            ),
        )
        # `HF_TOKEN=hf_x`, `api_key='x'`, `"api_key": "x"`, `password: x`, `?token=x&`.
        set_(
            self,
            "_assign",
            re.compile(
                r"(?<![\w.-])(?P<name>" + _NAME + r")(?P<sep>[\"']?[ \t]*[:=][ \t]*)"
                r"(?P<value>" + _QUOTED + r"|[^\s'\",;)}\]&]+)",
                re.I,
            ),
        )
        set_(
            self,
            "_auth",
            re.compile(
                r"(?P<head>\b(?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*[\"']?"
                r"(?:(?:bearer|basic|token|digest|negotiate|apikey)[ \t]+)?"
                r"|\bbearer[ \t]+(?=[\w.~+/=-]{8}))"
                r"(?P<value>[^\s'\",;]+)",
                re.I,
            ),
        )
        set_(self, "_url", re.compile(r"(?P<head>\b[a-z][a-z0-9+.-]*://[^\s:/?#@'\"]*:)[^\s/?#@'\"]+@", re.I))
        set_(
            self,
            "_tokens",
            re.compile(
                r"(?<![\w-])(?:sk-[\w-]{20,}|hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}"
                r"|github_pat_\w{20,}|glpat-[\w-]{20,}|xox[abposr]-[\w-]{10,}|xapp-[\w-]{10,}"
                r"|eyJ[\w-]{8,}\.eyJ[\w-]{8,}\.[\w-]{8,})"
                r"|(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA)[A-Z0-9]{16}(?![A-Z0-9])"
                r"|-----BEGIN[A-Z ]*PRIVATE KEY-----(?:(?!-----END).)*(?:-----END[A-Z ]*PRIVATE KEY-----)?",
                re.S,
            ),
        )
        literal = sorted({s for s in self.secrets if len(s) >= 4 and s != REDACTED}, key=len, reverse=True)
        set_(self, "_literal", re.compile("|".join(map(re.escape, literal))) if literal else None)

    def with_secrets(self, values: Iterable[str]) -> Redactor:
        """A redactor that also masks these literal values wherever they appear (values under 4 chars are
        ignored: masking every "1" would make output unreadable and protect nothing)."""
        return Redactor(secrets=(*self.secrets, *values))

    def text(self, text: str) -> str:
        """`text` with every secret replaced by `<redacted>`."""
        if self._literal is not None:
            text = self._literal.sub(REDACTED, text)
        text = self._tokens.sub(REDACTED, text)
        text = self._url.sub(lambda m: m["head"] + REDACTED + "@", text)
        text = self._auth.sub(lambda m: m["head"] + REDACTED, text)
        text = self._flag.sub(self._named, text)
        return self._assign.sub(self._named, text)

    def argv(self, argv: Sequence[str]) -> list[str]:
        """`argv` with secret flag values (`--api-key X`, `--api-key=X`) and secrets inside words masked."""
        out: list[str] = []
        mask_next = False
        for word in argv:
            if mask_next and not word.startswith("--"):
                out.append(REDACTED if not _KEEP_VALUE.match(word) else word)
                mask_next = False
                continue
            mask_next = False
            if word.startswith("-") and not word.startswith("---"):
                name, eq, value = word.partition("=")
                if is_secret_flag(name):
                    if eq:
                        out.append(word if _KEEP_VALUE.match(value) else name + "=" + REDACTED)
                        continue
                    mask_next = True
                    out.append(word)
                    continue
            out.append(self.text(word))
        return out

    def _named(self, m: re.Match[str]) -> str:
        value = m["value"]
        if not is_secret_flag(m["name"]) or _KEEP_VALUE.match(value):
            return m[0]
        return m["name"] + m["sep"] + _mask(value)


_DEFAULT = Redactor()


@overload
def redact(value: str, redactor: Redactor | None = None) -> str: ...
@overload
def redact(value: Sequence[str], redactor: Redactor | None = None) -> list[str]: ...
def redact(value: str | Sequence[str], redactor: Redactor | None = None) -> str | list[str]:
    """Mask secrets in a text (any number of lines) or in an argv list.

    >>> redact("python -m sglang.launch_server --api-key s3cr3t --tp 4")
    'python -m sglang.launch_server --api-key <redacted> --tp 4'
    >>> redact(["--api-key", "s3cr3t", "--tp", "4"])
    ['--api-key', '<redacted>', '--tp', '4']
    """
    r = redactor or _DEFAULT
    if isinstance(value, str):
        return r.text(value)
    return r.argv(value)
