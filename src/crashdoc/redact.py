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
from functools import cache
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
_KEEP_VALUE = re.compile(r"""(?:None|null|nil|true|false|''|""|<redacted>|["']?\$(?:\w+|\{\w+\})["']?)\Z""", re.I)

# Words that follow a secret flag's name in prose (SGLang's own errors: "--ssl-keyfile-password has no effect
# without ..."; "--grpc-port is incompatible with --api-key/--admin-api-key: the native gRPC ..."), never its
# value: keeping them keeps the error readable. Only for `--flag word` and `--flag: word` in text; `--flag=word`
# and argv are always masked.
_PROSE_WORDS: frozenset[str] = frozenset(
    {
        "has", "have", "is", "are", "was", "were", "must", "requires", "require", "needs", "need", "cannot",
        "can", "should", "will", "and", "or", "with", "without", "only", "not", "to", "of", "in", "for", "when",
        "if", "but", "which", "that", "flag", "option", "value", "given", "set", "also", "the", "a", "an", "this",
        "it", "its", "please", "use", "because",
    }
)  # fmt: skip

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


# Cheap substring tests that rule a pattern out before the (slower) regex scans the text.
_TOKEN_HINTS: tuple[str, ...] = (
    "sk-",
    "hf_",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "xox",
    "xapp-",
    "eyJ",
    "PRIVATE KEY",
    "AKIA",
    "ASIA",
    "ABIA",
    "ACCA",
    "AGPA",
    "AIDA",
    "AROA",
    "AIPA",
    "ANPA",
    "ANVA",
)
_SECRET_HINTS: tuple[str, ...] = ("key", "token", "secret", "passw", "passphrase", "credential")
# ASCII only (str.lower would fold other letters too); spelt out: the `string` module costs ~1 ms to import
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


@dataclass(frozen=True, slots=True)
class Redactor:
    """The compiled patterns, plus literal secret values learnt elsewhere (the `--api-key` of a unit).

    Immutable: `with_secrets` returns a new one, so one instance can be shared by every output.
    """

    secrets: tuple[str, ...] = ()
    _named: re.Pattern[str] = field(init=False, repr=False)
    _flag_value: re.Pattern[str] = field(init=False, repr=False)
    _assign_value: re.Pattern[str] = field(init=False, repr=False)
    _auth: re.Pattern[str] = field(init=False, repr=False)
    _url: re.Pattern[str] = field(init=False, repr=False)
    _tokens: re.Pattern[str] = field(init=False, repr=False)
    _literal: re.Pattern[str] | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        # A secret word ending a name, then what separates the name from its value: `--api-key s3cr3t`,
        # `--api-key=s3cr3t`, `--api-key \<newline> s3cr3t`, `HF_TOKEN=x`, `api_key='x'`, `"api_key": "x"`.
        # The scan starts at the secret word (a literal the regex engine finds fast); the name is read
        # backwards from there, and `is_secret_flag` has the last word.
        set_(
            self,
            "_named",
            re.compile(
                r"(?:" + "|".join(SECRET_WORDS) + r")(?P<q>[\"']?)"
                r"(?P<sep>[ \t]*[:=][ \t]*|[ \t]+(?:\\\r?\n[ \t]*)?)"
            ),  # searched in a lower-cased copy: re.I would disable the engine's fast first-character scan
        )
        set_(self, "_flag_value", re.compile(r"(?!--)(?:" + _QUOTED + r"|[^\s'\"]+)"))
        set_(self, "_assign_value", re.compile(_QUOTED + r"|[^\s'\",;)}\]&]+"))
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
        # user:password@ after a scheme's `://`; the user stays readable.
        set_(self, "_url", re.compile(r"(?P<head>://[^\s:/?#@'\"]*:)[^\s/?#@'\"]+@"))
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
        if any(h in text for h in _TOKEN_HINTS):
            text = self._tokens.sub(REDACTED, text)
        if "://" in text:
            text = self._url.sub(lambda m: m["head"] + REDACTED + "@", text)
        low = text.lower()
        if "authorization" in low or "bearer" in low:
            text = self._auth.sub(lambda m: m["head"] + REDACTED, text)
            low = text.lower()
        if any(h in low for h in _SECRET_HINTS):
            if len(low) != len(text):  # a few letters lower-case to two characters: keep offsets aligned
                low = text.translate(_ASCII_LOWER)
            text = self._named_values(text, low)
        return text

    def _named_values(self, text: str, low: str) -> str:
        out: list[str] = []
        pos = 0
        secret: dict[str, bool] = {}
        for m in self._named.finditer(low):
            if m.start() < pos:
                continue  # inside a value masked already
            n = m.start()
            while n > 0 and (text[n - 1].isalnum() or text[n - 1] in "_.-"):
                n -= 1
            name = text[n : m.end() - len(m["q"]) - len(m["sep"])]
            if name not in secret:
                secret[name] = is_secret_flag(name)
            if not secret[name]:
                continue
            sep = m["sep"]
            # a flag's value follows `=` or blanks (and line continuations); `name=`/`name:` is an assignment
            flag_sep = sep.replace("\\\n", "").replace("\\\r\n", "").strip(" \t") in ("", "=")
            if name.startswith("-") and not m["q"] and flag_sep:
                value = self._flag_value.match(text, m.end())
                if value is not None and "=" not in sep and value[0].rstrip(".,;:") in _PROSE_WORDS:
                    continue
            elif ":" in sep or "=" in sep:
                value = self._assign_value.match(text, m.end())
                prose = value is not None and value[0].rstrip(".,;:") in _PROSE_WORDS
                if prose and name.startswith("-") and "=" not in sep:  # `--api-key: the ...` is SGLang's prose
                    continue
            else:
                continue
            if value is None or _KEEP_VALUE.match(value[0]):
                continue
            out.append(text[pos : value.start()])
            out.append(_mask(value[0]))
            pos = value.end()
        if not out:
            return text
        out.append(text[pos:])
        return "".join(out)

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


@cache
def _default() -> Redactor:
    """The shared redactor, built on the first redaction: its patterns cost ~1 ms that `explain` of a log
    with nothing to show never needs."""
    return Redactor()


@overload
def redact(value: str, redactor: Redactor | None = None) -> str: ...  # type: ignore[overload-overlap]
@overload
def redact(value: Sequence[str], redactor: Redactor | None = None) -> list[str]: ...
def redact(value: str | Sequence[str], redactor: Redactor | None = None) -> str | list[str]:
    """Mask secrets in a text (any number of lines) or in an argv list.

    >>> redact("python -m sglang.launch_server --api-key s3cr3t --tp 4")
    'python -m sglang.launch_server --api-key <redacted> --tp 4'
    >>> redact(["--api-key", "s3cr3t", "--tp", "4"])
    ['--api-key', '<redacted>', '--tp', '4']
    """
    r = redactor or _default()
    if isinstance(value, str):
        return r.text(value)
    return r.argv(value)
