"""SGLang's arguments: the flags ``sglang serve`` takes (argparse, with its real error for an unknown one), the
model family a path names, and the launcher's flag resolution (server_args.resolve_once and the
srt/arg_groups hooks), whose checks raise before any child exists."""

from __future__ import annotations

import argparse
from typing import Any

from crashdoc.sandbox.fake_sglang.failures import forced_raise
from crashdoc.sandbox.fake_sglang.messages import (
    KV_SHARDING_NEEDS_CHUNKS,
    KV_SHARDING_PREFILL_ONLY,
    LMCACHE_WITH_HICACHE,
    SSL_KEY_WITHOUT_CERT,
    attention_backend_default,
    logger,
)


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sglang serve")
    add = p.add_argument
    add("--model-path", "--model", required=True)
    add("--tokenizer-path")
    add("--host", default="127.0.0.1")
    add("--port", type=int, default=30000)
    add("--tp-size", "--tensor-parallel-size", type=int, default=1)
    add("--dp-size", "--data-parallel-size", type=int, default=1)
    add("--pp-size", "--pipeline-parallel-size", type=int, default=1)
    add("--ep-size", "--ep", type=int, default=1)
    add("--nnodes", type=int, default=1)
    add("--node-rank", type=int, default=0)
    add("--dist-init-addr")
    add("--base-gpu-id", type=int, default=0)
    add("--mem-fraction-static", type=float)
    add("--max-running-requests", type=int)
    add("--max-prefill-tokens", type=int, default=16384)
    add("--chunked-prefill-size", type=int)
    add("--context-length", type=int)
    add("--page-size", type=int)
    add("--kv-cache-dtype", default="auto")
    add("--dtype", default="auto")
    add("--quantization")
    add("--attention-backend")
    add("--trust-remote-code", action="store_true")
    add("--served-model-name")
    add("--api-key")
    add("--log-level", default="info")
    add("--watchdog-timeout", type=float, default=300)
    add("--random-seed", type=int)
    add("--enable-metrics", action="store_true")
    add("--cuda-graph-max-bs", type=int)
    add("--disable-cuda-graph", action="store_true")
    add("--disable-radix-cache", action="store_true")
    add("--enable-dp-attention", action="store_true")
    add("--moe-a2a-backend")
    add("--speculative-algorithm")
    add("--disaggregation-mode", choices=["null", "prefill", "decode"], default="null")
    add("--disaggregation-transfer-backend", default="mooncake")
    add("--disaggregation-bootstrap-port", type=int, default=8998)
    add("--disaggregation-ib-device")
    add("--enable-hierarchical-cache", action="store_true")
    add("--hicache-ratio", type=float, default=2.0)
    add("--hicache-size", type=int, default=0)
    add("--hicache-mem-layout", default="layer_first")
    add("--hicache-storage-backend")
    add("--enable-lmcache", action="store_true")
    add("--enable-kv-cache-sharding", action="store_true")
    add("--ssl-keyfile")
    add("--ssl-certfile")
    return p


def is_dsv4(args: argparse.Namespace) -> bool:
    name = args.model_path.lower().replace("_", "-")
    return "deepseek-v4" in name or "deepseekv4" in name


def architecture(args: argparse.Namespace) -> str:
    name = args.model_path.lower()
    if is_dsv4(args):
        return "DeepseekV4ForCausalLM"
    for key, arch in (
        ("deepseek", "DeepseekV3ForCausalLM"),
        ("qwen", "Qwen3ForCausalLM"),
        ("mistral", "MistralForCausalLM"),
        ("gemma", "Gemma3ForCausalLM"),
    ):
        if key in name:
            return arch
    return "LlamaForCausalLM"


# --- the launcher's flag resolution (srt/arg_groups hooks; runs before any child) ---------------


def kv_shard_hook(args: argparse.Namespace) -> None:
    if not args.enable_kv_cache_sharding:
        return
    if args.disaggregation_mode != "prefill":
        raise ValueError(KV_SHARDING_PREFILL_ONLY)
    if args.chunked_prefill_size is not None and args.chunked_prefill_size <= 0:
        raise ValueError(KV_SHARDING_NEEDS_CHUNKS)


def kv_cache_hook(args: argparse.Namespace) -> None:
    if args.enable_lmcache and args.enable_hierarchical_cache:
        raise ValueError(LMCACHE_WITH_HICACHE)


def serving_hook(args: argparse.Namespace) -> None:
    if args.ssl_keyfile and not args.ssl_certfile:
        raise ValueError(SSL_KEY_WITHOUT_CERT)


def validation_hook(args: argparse.Namespace) -> None:
    """FAKE_SGLANG_RAISE="ValueError: <message>": a check of another SGLang release, raised as SGLang's hooks do
    (the message must come from that release's source: tests take it from the tree they install)."""
    error = forced_raise()
    if error is not None:
        raise error


def run_resolution_pipeline(args: argparse.Namespace) -> None:
    for hook in (serving_hook, kv_cache_hook, kv_shard_hook, validation_hook):
        hook(args)


def resolve_once(args: argparse.Namespace) -> None:
    if args.attention_backend is None:
        backend = "flashmla" if is_dsv4(args) else "fa3"
        logger.info(attention_backend_default(backend))
    run_resolution_pipeline(args)


def resolved_dict(args: argparse.Namespace) -> dict[str, Any]:
    """What engine.py logs as ``server_args={...}``: every field, api_key included (not redacted)."""
    out: dict[str, Any] = {"model_path": args.model_path, "tokenizer_path": args.tokenizer_path or args.model_path}
    out.update({k: v for k, v in vars(args).items() if k not in out})
    out["served_model_name"] = args.served_model_name or args.model_path
    out["mem_fraction_static"] = args.mem_fraction_static if args.mem_fraction_static is not None else 0.835
    out["chunked_prefill_size"] = args.chunked_prefill_size if args.chunked_prefill_size is not None else 8192
    out["random_seed"] = args.random_seed if args.random_seed is not None else 951344417
    return out
