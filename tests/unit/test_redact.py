"""What an on-call engineer sees after redaction: no secret, and everything else intact."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crashdoc.redact import REDACTED, Redactor, is_secret_flag, redact

SECRET = "s3cr3t-Value_9"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            f"python -m sglang.launch_server --model-path m --api-key {SECRET} --tp 4",
            "python -m sglang.launch_server --model-path m --api-key <redacted> --tp 4",
        ),
        (f"--admin-api-key={SECRET} --port 30000", "--admin-api-key=<redacted> --port 30000"),
        (f"--api-key '{SECRET} with spaces' --tp 4", "--api-key '<redacted>' --tp 4"),
        (f'--api-key="{SECRET}" --tp 4', '--api-key="<redacted>" --tp 4'),
        ("--api-key=has --api-key hunter2 has", "--api-key=<redacted> --api-key <redacted> has"),
        (f"    --api-key \\\n    {SECRET} \\\n", "    --api-key \\\n    <redacted> \\\n"),
        (f"--hf-token {SECRET}", "--hf-token <redacted>"),
        (
            f"--ssl-keyfile /etc/ssl/k.pem --ssl-keyfile-password {SECRET}",
            "--ssl-keyfile /etc/ssl/k.pem --ssl-keyfile-password <redacted>",
        ),
        (f"--watermark-key {SECRET}", "--watermark-key <redacted>"),
        (f"HF_TOKEN={SECRET} CUDA_VISIBLE_DEVICES=0,1", "HF_TOKEN=<redacted> CUDA_VISIBLE_DEVICES=0,1"),
        (f"Environment=OPENAI_API_KEY={SECRET}", "Environment=OPENAI_API_KEY=<redacted>"),
        (f"export AWS_SECRET_ACCESS_KEY={SECRET}", "export AWS_SECRET_ACCESS_KEY=<redacted>"),
        (f"DB_PASSWORD='{SECRET}'", "DB_PASSWORD='<redacted>'"),
        (f"MY_SECRET={SECRET}", "MY_SECRET=<redacted>"),
        (
            f"server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-V4', api_key='{SECRET}', "
            "admin_api_key=None, max_total_tokens=None, hicache_ratio=2.0)",
            "server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-V4', api_key='<redacted>', "
            "admin_api_key=None, max_total_tokens=None, hicache_ratio=2.0)",
        ),
        (f'{{"api_key": "{SECRET}", "tp_size": 4}}', '{"api_key": "<redacted>", "tp_size": 4}'),
        (f"api_key: {SECRET}\nport: 30000", "api_key: <redacted>\nport: 30000"),
        (f"--api-key: {SECRET} --tp 4", "--api-key: <redacted> --tp 4"),
        (
            f'curl -H "Authorization: Bearer {SECRET}" http://127.0.0.1:30000/health',
            'curl -H "Authorization: Bearer <redacted>" http://127.0.0.1:30000/health',
        ),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "Authorization: Basic <redacted>"),
        (f"sent bearer {SECRET}", "sent bearer <redacted>"),
        (
            f"pip install git+https://deploy:{SECRET}@git.example.com/sglang.git",
            "pip install git+https://deploy:<redacted>@git.example.com/sglang.git",
        ),
        (f"GET /v1/models?token={SECRET}&x=1", "GET /v1/models?token=<redacted>&x=1"),
        ("key sk-proj-AbCdEfGhIjKlMnOpQrStUvWx0123 used", "key <redacted> used"),
        ("hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345 in log", "<redacted> in log"),
        ("origin ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "origin <redacted>"),
        ("slack xoxb-1234567890-0987654321-AbCdEf", "slack <redacted>"),
        ("aws AKIAIOSFODNN7EXAMPLE ok", "aws <redacted> ok"),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc\n-----END RSA PRIVATE KEY-----\nnext",
            "<redacted>\nnext",
        ),
    ],
)
def test_secrets_are_masked(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "--kv-cache-dtype fp8_e5m2 --hicache-size 150 --hicache-ratio 2.0",
        "--ssl-keyfile /etc/ssl/private/server.key --ssl-certfile /etc/ssl/cert.pem",
        "--max-total-tokens 100000 --max-prefill-tokens 16384 --num-reserved-decode-tokens 512",
        "--tokenizer-path deepseek-ai/DeepSeek-V4 --skip-tokenizer-init",
        "--speculative-token-map /models/map.pt --bucket-time-to-first-token 0.1 0.5 1",
        "--kt-max-deferred-experts-per-token 2 --hicache-key-scheme sha256",
        "KeyError: 'model.layers.0.self_attn.kv_b_proj.weight'",
        "max_total_tokens=3262823, hicache_key_scheme='plain'",
        "[2026-02-26 05:35:08 TP7] KV Cache is allocated. #tokens: 3262823, KV size: 186.77 GB",
        "https://huggingface.co/deepseek-ai/DeepSeek-V4",
        "Bearer tokens are checked by the router",
        "--api-key --port 30000",
        'api_key=None, admin_api_key=""',
        '--api-key "$API_KEY" --hf-token ${HF_TOKEN}',
        # SGLang's own errors about secret flags: the word after the name is prose, not a value
        "ValueError: --ssl-keyfile-password has no effect without --ssl-certfile and --ssl-keyfile.",
        "--ssl-ca-certs or --ssl-keyfile-password without --ssl-certfile and --ssl-keyfile",
        "ValueError: --grpc-port is incompatible with --api-key/--admin-api-key: the native gRPC listener bypasses "
        "HTTP auth middleware.",
    ],
)
def test_non_secrets_stay_readable(text: str) -> None:
    assert redact(text) == text


def test_argv_masks_flag_values_and_inline_secrets() -> None:
    argv = [
        "/usr/bin/env",
        f"HF_TOKEN={SECRET}",
        "python3",
        "-m",
        "sglang.launch_server",
        "--api-key",
        SECRET,
        f"--admin-api-key={SECRET}",
        "--kv-cache-dtype",
        "fp8_e5m2",
        "--ssl-keyfile",
        "/k.pem",
        "--tp",
        "4",
    ]
    out = redact(argv)
    assert SECRET not in " ".join(out)
    assert out == [
        "/usr/bin/env",
        "HF_TOKEN=<redacted>",
        "python3",
        "-m",
        "sglang.launch_server",
        "--api-key",
        REDACTED,
        "--admin-api-key=<redacted>",
        "--kv-cache-dtype",
        "fp8_e5m2",
        "--ssl-keyfile",
        "/k.pem",
        "--tp",
        "4",
    ]


def test_argv_masks_inside_bash_c_strings() -> None:
    out = redact(["/bin/bash", "-c", f"exec python -m sglang.launch_server --api-key {SECRET}"])
    assert out == ["/bin/bash", "-c", "exec python -m sglang.launch_server --api-key <redacted>"]


def test_learnt_secret_values_are_masked_everywhere() -> None:
    r = Redactor().with_secrets([SECRET, "1"])
    text = f"ValueError: bad header value {SECRET!r}; retried 1 time"
    assert redact(text, r) == "ValueError: bad header value '<redacted>'; retried 1 time"


def test_secret_flag_names() -> None:
    assert is_secret_flag("--api-key")
    assert is_secret_flag("--admin-api-key")
    assert is_secret_flag("HF_TOKEN")
    assert is_secret_flag("--ssl-keyfile-password")
    assert not is_secret_flag("--ssl-keyfile")
    assert not is_secret_flag("--kv-cache-dtype")
    assert not is_secret_flag("--hicache-key")
    assert not is_secret_flag("--max-total-tokens")
    assert not is_secret_flag("--tokenizer-path")


def test_long_lines_stay_linear() -> None:
    """Hostile repetition (what a regex with nested quantifiers chokes on) finishes and masks the secret."""
    for filler in ("a" * 200_000, "--key " * 40_000, "key=" * 50_000, "x:" * 100_000, "-" * 200_000):
        text = filler + f" --api-key {SECRET}"
        assert SECRET not in redact(text)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([*"ab =:-_'\"\\\n@/$<>{}", "api", "--", "key", "token", "Bearer ", "://u:"])).map("".join)
)
def test_redaction_is_idempotent(text: str) -> None:
    once = redact(text)
    assert redact(once) == once


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["--api-key ", "--api-key=", "--hf-token ", "HF_TOKEN=", "api_key='", "password: "]),
    st.from_regex(re.compile(r"[A-Za-z0-9_.+/-]{6,30}", re.A), fullmatch=True).filter(lambda s: not s.startswith("-")),
    st.sampled_from(["", " --tp 4", "\n", "' ", ", port=1"]),
)
def test_secret_never_survives(prefix: str, secret: str, suffix: str) -> None:
    out = redact(prefix + secret + suffix)
    assert secret not in out
    assert REDACTED in out
