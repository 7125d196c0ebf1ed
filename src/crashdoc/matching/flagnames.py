"""SGLang's other spellings of its flags, so `--tp 8` is found when a fix is about `--tp-size`.

The aliases are those SGLang 0.5.23 registers (`aliases=[...]` in srt/arg_groups/fields), plus
`--tp`, which argparse accepts as an abbreviation of `--tp-size` and which launch scripts use.
"""

from __future__ import annotations

from collections.abc import Mapping

ALIASES: dict[str, str] = {
    "--attention-context-parallel-size": "--attn-cp-size",
    "--attention-data-parallel-size": "--attn-dp-size",
    "--context-bucket": "--cuda-graph-prefill-max-context",
    "--data-parallel-size": "--dp-size",
    "--decode-context-parallel-size": "--dcp-size",
    "--enable-hicache": "--enable-hierarchical-cache",
    "--ep": "--ep-size",
    "--expert-parallel-size": "--ep-size",
    "--grpc-http-sidecar-port": "--smg-http-sidecar-port",
    "--hierarchical-sparse-attention-extra-config": "--hisparse-config",
    "--model": "--model-path",
    "--moe-data-parallel-size": "--moe-dp-size",
    "--nccl-init-addr": "--dist-init-addr",
    "--pipeline-parallel-size": "--pp-size",
    "--speculative-draft-model": "--speculative-draft-model-path",
    "--tensor-parallel-size": "--tp-size",
    "--tp": "--tp-size",
}
_SPELLINGS: dict[str, tuple[str, ...]] = {}
for _alias, _name in ALIASES.items():
    _SPELLINGS[_name] = (*_SPELLINGS.get(_name, (_name,)), _alias)


def canonical(flag: str) -> str:
    return ALIASES.get(flag, flag)


def spellings(flag: str) -> tuple[str, ...]:
    """Every way to write the flag's option on the command line, the canonical name first."""
    name = canonical(flag)
    return _SPELLINGS.get(name, (name,))


def canonical_flags(flags: Mapping[str, str]) -> dict[str, str]:
    """Flags under their canonical names (a later spelling wins, as argparse does)."""
    return {canonical(name): value for name, value in flags.items()}
