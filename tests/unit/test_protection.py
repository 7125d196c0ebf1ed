"""A fix that ends the crash loop by turning TLS or a key off, or by trusting outside code, says so.

SGLang's own checks accept `remove --ssl-keyfile` as readily as a certificate that exists: the server comes back
in plain HTTP. What the on-call engineer sees is the warning beside the fix, and, where another change would do,
that other change first.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crashdoc.events import FlagChange
from crashdoc.matching.protection import protection_notes
from crashdoc.remedy.argfacts import load_shipped
from crashdoc.remedy.candidates import candidates
from crashdoc.remedy.failing import Current, Failure
from crashdoc.remedy.pasted import parse_command
from crashdoc.remedy.rewrite import describe
from support.explaining import run_explain

KEYFILE_ALONE = """Traceback (most recent call last):
  File "/usr/lib/python3/dist-packages/sglang/srt/server_args.py", line 5000, in __post_init__
    self.check_server_args()
ValueError: --ssl-keyfile requires --ssl-certfile to be specified as well.
"""


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (FlagChange("remove", "--ssl-certfile"), "`remove --ssl-certfile` turns TLS off"),
        (FlagChange("remove", "--ssl-keyfile"), "`remove --ssl-keyfile` turns TLS off"),
        (FlagChange("remove", "--ssl-ca-certs"), "stops checking client certificates"),
        (FlagChange("remove", "--api-key"), "anyone who reaches the port can use the server"),
        (FlagChange("remove", "--admin-api-key"), "the admin endpoints no longer ask for it"),
        (FlagChange("replace", "--api-key", None, "--grpc-port"), "turns the API key off"),
        (FlagChange("add", "--trust-remote-code"), "runs Python code from the model's repository"),
    ],
)
def test_a_change_that_weakens_the_server_is_said_so(change: FlagChange, said: str) -> None:
    [note] = protection_notes([FlagChange("remove", "--grpc-port"), change])
    assert note.startswith("Weakens the server: ")
    assert said in note


@pytest.mark.parametrize(
    "change",
    [
        FlagChange("remove", "--grpc-port"),
        FlagChange("set", "--ssl-certfile", "/etc/tls/server.pem"),
        FlagChange("add", "--api-key"),
        FlagChange("set", "--trust-remote-code", "false"),
        FlagChange("remove", "--trust-remote-code"),
    ],
)
def test_a_change_that_keeps_the_protection_is_not_warned(change: FlagChange) -> None:
    assert protection_notes([change]) == []


def test_explain_shows_the_warning_beside_a_fix_that_turns_tls_off(tmp_path: Path) -> None:
    log = tmp_path / "pasted.log"
    log.write_text(KEYFILE_ALONE, encoding="utf-8")
    command = "python -m sglang.launch_server --model-path /m --ssl-keyfile /etc/tls/key.pem --port 30000"
    status, out = run_explain([log, "--command", command, "--sglang-version", "0.5.23"], as_json=False)  # type: ignore[list-item]
    assert status == 1
    assert "warning: Weakens the server: `remove --ssl-keyfile` turns TLS off: the server answers in plain HTTP." in out
    assert "give SGLang a certificate and key that exist instead" in out


def _best(command: str, message: str, condition: str, derived: FlagChange) -> list[str]:
    facts = load_shipped().get("0.5.23")
    assert facts is not None
    pasted = parse_command(f"python3 -m sglang.launch_server --model-path m {command}")
    assert pasted.command is not None
    current = Current.of([(f.name, f.values) for f in pasted.command.flags], facts)
    failure = Failure("ValueError", message, condition, curated=(derived,), reviewed=False)
    return ["; ".join(describe(c) for c in cand.changes) for cand in candidates(failure, current, facts)]


@pytest.mark.parametrize(
    "message",
    [
        "--grpc-port is incompatible with --api-key/--admin-api-key: the native gRPC listener bypasses HTTP auth "
        "middleware.",  # SGLang 0.5.23's own words
        "--api-key is incompatible with --grpc-port.",  # the key named first: word order must not decide it
    ],
)
def test_the_search_tries_a_change_that_keeps_the_key_before_one_that_drops_it(message: str) -> None:
    # the fix derived from SGLang's source drops the key; dropping the gRPC port ends the conflict too
    ranked = _best(
        "--api-key sk-live-1 --grpc-port 30001",
        message,
        "native_grpc and (cfg.api_key or cfg.admin_api_key)",
        FlagChange("remove", "--api-key"),
    )
    assert ranked[0] == "remove --grpc-port"
    assert "remove --api-key" in ranked  # still a candidate, when nothing else passes


def test_a_change_that_drops_tls_stays_a_candidate_when_it_is_the_only_one() -> None:
    ranked = _best(
        "--ssl-keyfile /etc/tls/key.pem",
        "--ssl-keyfile requires --ssl-certfile to be specified as well.",
        "cfg.ssl_keyfile and (not cfg.ssl_certfile)",
        FlagChange("remove", "--ssl-keyfile"),
    )
    assert ranked[:1] == ["remove --ssl-keyfile"]
