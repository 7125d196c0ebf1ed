"""Will `--hicache-ratio R` fit? What crashdoc tells the on-call engineer before they restart the unit."""

from __future__ import annotations

from pathlib import Path

import pytest

from crashdoc.events import FlagChange, LogLine
from crashdoc.remedy.commandline import find_launch_command, parse_argv
from crashdoc.remedy.safety import safety_warnings
from crashdoc.remedy.safety.hicache_check import auto_sizes, check_hicache_ratio, hicache_host_memory, ranks_on_host
from crashdoc.remedy.safety.hicache_fix import hicache_fix, ratio_from_changes
from crashdoc.remedy.safety.host_memory import NumaBinding, host_memory, numa_binding, parse_list
from crashdoc.remedy.safety.kv_pool import GIB, host_memory_refusal, kv_pool_from_log
from support.corpus import corpus_dir

FIXTURES = Path(__file__).parent.parent / "fixtures"
TWO_NODES = FIXTURES / "sysfs" / "two-nodes"
NO_NUMA = FIXTURES / "sysfs" / "no-numa"
REAL = corpus_dir()
KB = 1024


def rank_lines(template: str, ranks: int = 4, stamp: str = "2026-05-01 12:00:03") -> list[str]:
    return [f"[{stamp} TP{r}] {template}" for r in range(ranks)]


DSV4_PREFILL_LOG = [
    "[2026-05-01 12:00:01] server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-V4', tp_size=4, api_key='x')",
    *rank_lines(
        "Load weight end. elapsed=61.20 s, type=DeepseekV4ForCausalLM, avail mem=52.31 GB, mem usage=41.02 GB."
    ),
    *rank_lines("Memory pool end. avail mem=12.11 GB"),
]
POOL_40G = rank_lines("KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1310720, KV size: 40.00 GB")


def prefill_command():
    read = lambda p: (FIXTURES / "launch" / "prefill.sh").read_text()  # noqa: E731
    return find_launch_command(("/bin/bash", "/opt/sglang/prefill.sh"), read).command


# --- the pool, from SGLang's own lines ---------------------------------------------------------------


def test_pool_from_the_kv_line_of_each_rank() -> None:
    pool = kv_pool_from_log(POOL_40G)
    assert pool is not None
    assert pool.bytes_per_rank == 40 * GIB
    assert pool.ranks_logged == 4
    assert not pool.estimated
    assert pool.evidence == POOL_40G[0]


def test_pool_from_k_and_v_sizes_and_older_lines_without_dtype() -> None:
    lines = rank_lines("KV Cache is allocated. #tokens: 46611, K size: 1.42 GB, V size: 1.42 GB")
    assert kv_pool_from_log(lines).bytes_per_rank == int(2.84 * GIB)


def test_pools_of_one_rank_add_up_and_the_largest_rank_counts() -> None:
    lines = [
        "[2026-05-01 12:00:03 TP0] Full KV Cache is allocated. dtype: torch.bfloat16, #tokens: 100, K size: 10.00 GB, "
        "V size: 10.00 GB",
        "[2026-05-01 12:00:03 TP0] SWA KV Cache is allocated. dtype: torch.bfloat16, #tokens: 100, K size: 2.00 GB, "
        "V size: 2.00 GB",
        "[2026-05-01 12:00:03 TP0] SWAKVPool mem usage: 24.00 GB, swa size: 100, full size: 100",
        "[2026-05-01 12:00:03 TP1] Full KV Cache is allocated. dtype: torch.bfloat16, #tokens: 90, K size: 9.00 GB, "
        "V size: 9.00 GB",
        "[2026-05-01 12:00:03 TP1] SWA KV Cache is allocated. dtype: torch.bfloat16, #tokens: 90, K size: 3.00 GB, "
        "V size: 3.00 GB",
    ]
    pool = kv_pool_from_log(lines)
    assert pool.bytes_per_rank == 24 * GIB  # TP0: 20 + 4; the SWAKVPool summary is not counted twice
    assert pool.ranks_logged == 2


def test_post_capture_resize_wins_and_va_upper_bounds_do_not_count() -> None:
    lines = [
        "[2026-05-01 12:00:03 TP0] KV Cache VA upper bound. dtype: torch.bfloat16, #tokens: 9999, KV size: 90.00 GB",
        "[2026-05-01 12:00:09 TP0] Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, "
        "#tokens: 800000, KV size: 35.50 GB, avail mem=3.10 GB",
    ]
    assert kv_pool_from_log(lines).bytes_per_rank == int(35.5 * GIB)


def test_deepseek_v4_pool_is_estimated_from_free_gpu_memory() -> None:
    pool = kv_pool_from_log(DSV4_PREFILL_LOG)
    assert pool.estimated
    assert pool.bytes_per_rank == int((52.31 - 12.11) * GIB)
    assert pool.ranks_logged == 4


def test_only_the_last_launch_counts() -> None:
    older = [
        "[2026-05-01 11:00:00] server_args=ServerArgs(tp_size=4)",
        *rank_lines("KV Cache is allocated. #tokens: 1, KV size: 80.00 GB"),
    ]
    newer = [
        "[2026-05-01 12:00:00] server_args=ServerArgs(tp_size=4)",
        *POOL_40G,
        "[2026-05-01 12:00:30] server_args=ServerArgs(tp_size=4)",
    ]  # the next start died before its pool
    assert kv_pool_from_log(older + newer).bytes_per_rank == 40 * GIB
    by_invocation = [LogLine("u", 1, t, invocation="a") for t in older[1:]] + [
        LogLine("u", 2, t, invocation="b") for t in POOL_40G
    ]
    assert kv_pool_from_log(by_invocation).bytes_per_rank == 40 * GIB


def test_no_pool_line() -> None:
    assert kv_pool_from_log(["[2026-05-01 12:00:03 TP0] Load weight begin. avail mem=90.00 GB"]) is None
    assert kv_pool_from_log([]) is None


def test_hicache_host_lines() -> None:
    lines = [
        *POOL_40G,
        "[2026-05-01 12:00:04 TP0] Allocating kv hierarchical KV host pool: 2621440 tokens, 85.90 GB host memory.",
        "[2026-05-01 12:00:04 TP1] Allocating 12.50 GB host memory for V4 paged pool 'c4' (layers=61, pages=10, "
        "item_bytes=1, layout=page_first).",
        "[2026-05-01 12:00:04 TP1] Allocating 1.50 GB host memory for V4 state pool 'c4_state' (layers=61, pages=10, "
        "state_page_bytes=1, layout=page_first).",
    ]
    assert kv_pool_from_log(lines).host_bytes_per_rank == int(85.9e9)
    refusal = [
        "[2026-05-01 12:00:04 TP0] ValueError: Not enough host memory available. Requesting 343.60 GB but "
        "only have 250.10 GB free. Please reduce the size of the hierarchical cache."
    ]
    assert host_memory_refusal(refusal) == (int(343.6e9), int(250.1e9))
    assert host_memory_refusal(POOL_40G) is None


@pytest.mark.skipif(not REAL.is_dir(), reason=f"the real log corpus is absent ({REAL}; set CRASHDOC_CORPUS)")
def test_real_logs_of_healthy_servers() -> None:
    """Every real log that logged a KV pool yields it, with one entry per TP rank it printed."""
    found = 0
    for log in sorted(REAL.glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()
        sizes = [line for line in lines if "KV Cache is allocated" in line]
        pool = kv_pool_from_log(lines)
        if not sizes:
            continue
        found += 1
        assert pool is not None, log.name
        assert pool.bytes_per_rank > GIB // 10, log.name
        assert 1 <= pool.ranks_logged <= 64, log.name
    assert found >= 1


# --- ranks -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "ranks"),
    [
        ([], 1),
        (["--tp-size", "4"], 4),
        (["--tp", "8", "--pp-size", "2"], 16),
        (["--tensor-parallel-size", "8", "--pp-size", "2", "--nnodes", "2"], 8),
        (["--tp", "4", "--dp-size", "2"], 8),
        (["--tp", "8", "--dp", "8", "--enable-dp-attention"], 8),
        (["--tp", "$TP"], None),
    ],
)
def test_ranks_on_this_host(flags: list[str], ranks: int | None) -> None:
    assert ranks_on_host(parse_argv(["python", "-m", "sglang.launch_server", *flags])) == ranks


# --- where the memory comes from ---------------------------------------------------------------------


def test_parse_list() -> None:
    assert parse_list("0") == (0,)
    assert parse_list("0-3,8") == (0, 1, 2, 3, 8)
    assert parse_list("0-31 64-95")[-1] == 95
    assert parse_list("x") is None and parse_list("") is None


@pytest.mark.parametrize(
    ("wrapper", "expected"),
    [
        (["numactl", "--membind=0"], NumaBinding((0,), True, "numactl --membind=0")),
        (["numactl", "-m", "1"], NumaBinding((1,), True, "numactl --membind=1")),
        (["numactl", "-m0", "-N0"], NumaBinding((0,), True, "numactl --membind=0")),
        (["numactl", "--membind", "0,1"], NumaBinding((0, 1), True, "numactl --membind=0,1")),
        (["numactl", "--membind=!1"], NumaBinding((0,), True, "numactl --membind=!1")),
        (["numactl", "--interleave=all"], NumaBinding((0, 1), False, "numactl --interleave=all")),
        (["numactl", "--cpunodebind=1"], NumaBinding((1,), False, "numactl --cpunodebind=1")),
        (["numactl", "--physcpubind=32-47"], NumaBinding((1,), False, "numactl --physcpubind=32-47")),
        (["numactl", "--localalloc"], None),
        ([], None),
    ],
)
def test_numa_binding_from_the_command(wrapper: list[str], expected: NumaBinding | None) -> None:
    inv = parse_argv([*wrapper, "python", "-m", "sglang.launch_server", "--tp", "4"])
    assert numa_binding(inv, root=TWO_NODES) == expected


def test_numa_binding_around_a_launch_script_and_from_the_unit() -> None:
    read = lambda p: "exec python -m sglang.launch_server --tp 4\n"  # noqa: E731
    inv = find_launch_command(["/usr/bin/numactl", "--membind=1", "/opt/sglang/run.sh"], read).command
    assert numa_binding(inv, root=TWO_NODES) == NumaBinding((1,), True, "numactl --membind=1")

    plain = parse_argv(["python", "-m", "sglang.launch_server"])
    assert numa_binding(plain, numa_policy="bind", numa_mask="0", root=TWO_NODES) == NumaBinding(
        (0,), True, "NUMAPolicy=bind NUMAMask=0"
    )
    assert numa_binding(plain, cpu_affinity="0-31", root=TWO_NODES) == NumaBinding((0,), False, "CPUAffinity=0-31")
    assert numa_binding(plain, cpu_affinity="0-127", root=TWO_NODES) is None  # every node: no binding
    assert numa_binding(plain, numa_policy="default", root=TWO_NODES) is None


def test_host_memory_in_each_scope() -> None:
    node0 = (241000000 + 2000000 + 8000000 + 1000000) * KB  # free + file pages + reclaimable slab
    mem = host_memory(TWO_NODES, NumaBinding((0,), True, "numactl --membind=0"))
    assert (mem.available, mem.total, mem.scope) == (node0, 263979464 * KB, "NUMA node 0")
    both = host_memory(TWO_NODES, NumaBinding((0, 1), True, "numactl --membind=0,1"))
    assert both.scope == "NUMA nodes 0,1" and both.available > node0
    soft = host_memory(TWO_NODES, NumaBinding((0,), False, "CPUAffinity=0-31"))
    assert (soft.available, soft.scope, soft.preferred_available) == (500123456 * KB, "the host", node0)
    capped = host_memory(TWO_NODES, None, memory_max=100 * GIB)
    assert (capped.available, capped.scope) == (100 * GIB, "the host (MemoryMax=)")
    missing = host_memory(NO_NUMA, NumaBinding((0,), True, "numactl --membind=0"))
    assert missing.scope == "the host" and missing.note == "the meminfo of NUMA node(s) 0 is unreadable"
    assert host_memory(FIXTURES / "nowhere", None) is None


# --- the check, as the on-call engineer reads it ----------------------------------------------------


def test_the_deepseek_v4_prefill_story() -> None:
    """4 GPUs x 40 GiB of KV pool, ratio 2.0, membind to NUMA node 0 with ~240 GiB: it does not fit."""
    warnings = hicache_host_memory(2.0, POOL_40G, prefill_command(), root=TWO_NODES)
    assert warnings == [
        "--hicache-ratio 2.0 does not fit: HiCache would pin 2.0 x 40.0 GiB device KV pool per rank x 4 ranks "
        "= 320.0 GiB of host memory, and NUMA node 0 (numactl --membind=0) has 240.3 GiB available "
        "(251.8 GiB total).",
        "The largest ratio that fits, keeping SGLang's 10.0 GiB reserve and 10% headroom, is --hicache-ratio 1.2 "
        "(192.0 GiB).",
    ]


def test_a_ratio_that_fits() -> None:
    assert hicache_host_memory(1.2, POOL_40G, prefill_command(), root=TWO_NODES) == [
        "--hicache-ratio 1.2 fits: HiCache would pin 1.2 x 40.0 GiB device KV pool per rank x 4 ranks = 192.0 GiB "
        "of host memory, and NUMA node 0 (numactl --membind=0) has 240.3 GiB available (251.8 GiB total)."
    ]


def test_fits_but_without_headroom() -> None:
    warnings = hicache_host_memory(1.4, POOL_40G, prefill_command(), root=TWO_NODES)
    assert warnings[0].startswith("--hicache-ratio 1.4 fits: ")
    assert warnings[1] == (
        "The largest ratio that fits, keeping SGLang's 10.0 GiB reserve and 10% headroom, is --hicache-ratio 1.2 "
        "(192.0 GiB)."
    )


def test_unbound_host_and_soft_binding() -> None:
    inv = parse_argv(["python", "-m", "sglang.launch_server", "--tp", "4"])
    assert hicache_host_memory(2.0, POOL_40G, inv, root=TWO_NODES)[0] == (
        "--hicache-ratio 2.0 fits: HiCache would pin 2.0 x 40.0 GiB device KV pool per rank x 4 ranks = 320.0 GiB "
        "of host memory, and the host has 477.0 GiB available (503.5 GiB total)."
    )
    soft = hicache_host_memory(2.0, POOL_40G, inv, cpu_affinity="0-31", root=TWO_NODES)
    assert soft[1] == (
        "That is more than the 240.3 GiB of the NUMA node(s) the unit runs on (CPUAffinity=0-31): the rest comes "
        "from remote memory, which slows HiCache transfers down."
    )


def test_small_and_impossible_ratios() -> None:
    big = rank_lines("KV Cache is allocated. #tokens: 1, KV size: 70.00 GB", ranks=4)
    warnings = hicache_host_memory(2.0, big, prefill_command(), root=TWO_NODES)
    assert warnings[1].endswith("is --hicache-ratio 0.7 (196.0 GiB).")
    assert warnings[2].startswith("Below 1.0 the host pool is smaller than the device pool")
    huge = rank_lines("KV Cache is allocated. #tokens: 1, KV size: 700.00 GB", ranks=4)
    assert hicache_host_memory(2.0, huge, prefill_command(), root=TWO_NODES)[1] == (
        "No ratio fits: bind the unit to more NUMA nodes or drop --enable-hierarchical-cache."
    )


def test_estimated_pool_and_ranks_from_the_log() -> None:
    warnings = hicache_host_memory(2.0, DSV4_PREFILL_LOG, None, root=TWO_NODES)
    assert "40.2 GiB device KV pool per rank (estimated from free GPU memory) x 4 ranks" in warnings[0]
    assert warnings[-1] == "Rank count: the command is unknown; crashdoc counted 4 rank(s) in the log."


def test_what_cannot_be_checked_is_said() -> None:
    assert hicache_host_memory(None, [], prefill_command(), root=TWO_NODES) == [
        'crashdoc could not check that --hicache-ratio 2.0 fits in host memory: the log has no "KV Cache is '
        'allocated" line (SGLang crashed before it sized the KV pool). Each rank will pin 2.0 x its device KV pool '
        "in host memory."
    ]
    nowhere = FIXTURES / "nowhere"
    assert hicache_host_memory(1.5, POOL_40G, None, root=nowhere) == [
        f"crashdoc could not check that --hicache-ratio 1.5 fits: {nowhere}/proc/meminfo is unreadable. It needs "
        "about 240.0 GiB of host memory."
    ]


def test_ratio_defaults_to_the_command_then_sglang() -> None:
    inv = parse_argv(["python", "-m", "sglang.launch_server", "--tp", "4", "--hicache-ratio", "1.5"])
    assert hicache_host_memory(None, POOL_40G, inv, root=TWO_NODES)[0].startswith("--hicache-ratio 1.5 fits")


def test_check_numbers() -> None:
    mem = host_memory(TWO_NODES, NumaBinding((0,), True, "numactl --membind=0"))
    check = check_hicache_ratio(2.0, kv_pool_from_log(POOL_40G), 4, mem)
    assert (check.fits, check.needed, check.max_ratio, check.ranks) == (False, 320 * GIB, 1.2, 4)
    assert check.available == mem.available


def test_named_safety_check() -> None:
    kwargs = {"ratio": 2.0, "lines": POOL_40G, "inv": prefill_command(), "root": TWO_NODES}
    assert safety_warnings("hicache-host-memory", **kwargs) == hicache_host_memory(**kwargs)
    assert safety_warnings(None) == [] and safety_warnings("unknown") == []


def test_ratio_from_the_fix() -> None:
    assert ratio_from_changes([FlagChange("replace", "--hicache-size", "2.0", "--hicache-ratio")]) == 2.0
    assert ratio_from_changes([FlagChange("set", "--hicache-ratio", "1.5")]) == 1.5
    assert ratio_from_changes([FlagChange("remove", "--hicache-ratio")]) is None
    assert ratio_from_changes([FlagChange("set", "--hicache-ratio", "${ratio}")]) is None


# --- the fix the check leaves: one value everywhere, and what SGLang's release does itself -------------------

MODE_CACHE = [FlagChange("set", "--hicache-host-memory-mode", "cache")]  # a fix that sets no ratio
SUMMARY = "set `--hicache-host-memory-mode cache`"


def unbound_command():
    return parse_argv(["python", "-m", "sglang.launch_server", "--tp", "4", "--enable-hierarchical-cache"])


def test_which_releases_size_hicache_themselves() -> None:
    """srt/mem_cache/hicache_auto_size.py ships from 0.5.21 on (checked in the 0.5.20-0.5.23 wheels)."""
    assert [auto_sizes(r) for r in ("0.5.20", "0.5.21", "0.5.22.post1", "0.5.23", "0.6.0")] == [
        False,
        True,
        True,
        True,
        True,
    ]
    assert auto_sizes("") is None and auto_sizes("unknown") is None


@pytest.mark.parametrize("release", ["0.5.20", "0.5.23"])
def test_the_seeds_numbers_with_a_fix_that_sets_no_ratio(release: str) -> None:
    """NUMA node 0 with 240 GiB, 40 GiB x 4 ranks. Without a ratio, 0.5.20 runs SGLang's default 2.0 and 0.5.23
    sizes the pool itself, but against the whole host's 477 GiB (min(2.0, 2.2) = 2.0): both pin 320 GiB on a
    240 GiB node. The fix gets an explicit --hicache-ratio 1.2, which the check accepts."""
    fix = hicache_fix(MODE_CACHE, SUMMARY, POOL_40G, prefill_command(), release=release, root=TWO_NODES)
    assert fix.changes == (*MODE_CACHE, FlagChange("set", "--hicache-ratio", "1.2"))
    assert fix.summary == f"{SUMMARY}; set `--hicache-ratio 1.2` (the largest ratio that fits this host)"
    text = " ".join(fix.sentences)
    assert (
        "--hicache-ratio 2.0 does not fit: HiCache would pin 2.0 x 40.0 GiB device KV pool per rank x 4 ranks" in text
    )
    assert "The corrected command uses --hicache-ratio 1.2, the largest that fits" in text
    auto = [x for x in fix.sentences if x.startswith("SGLang 0.5.23 sizes the HiCache host pool itself")]
    if release == "0.5.23":
        assert auto == [
            "SGLang 0.5.23 sizes the HiCache host pool itself when no ratio is given: min(2.0, (477.0 GiB available "
            "on the host - 10.0 GiB reserve) / 4 ranks x 0.8 x 0.95 / 40.0 GiB device KV pool per rank) = 2.000; it "
            "reads the host's memory, not that of NUMA node 0 (numactl --membind=0)."
        ]
        assert "An explicit ratio turns SGLang's auto-sizing off." in fix.sentences
    else:
        assert auto == []
    inv = parse_argv(["numactl", "--membind=0", "python", "-m", "sglang.launch_server", "--tp-size", "4"])
    assert hicache_host_memory(1.2, POOL_40G, inv, root=TWO_NODES)[0].startswith("--hicache-ratio 1.2 fits")


def test_a_release_that_sizes_hicache_itself_needs_no_ratio_where_the_host_is_what_it_reads() -> None:
    """Not bound to a node: SGLang 0.5.23's own ratio (2.0, 320 GiB of 477 GiB) fits; the fix stays as it is.
    On 0.5.20 the default 2.0 fits the same way."""
    for release in ("0.5.23", "0.5.20"):
        fix = hicache_fix(MODE_CACHE, SUMMARY, POOL_40G, unbound_command(), release=release, root=TWO_NODES)
        assert (fix.changes, fix.summary) == (tuple(MODE_CACHE), "")
        assert any(x.startswith("--hicache-ratio 2.0 fits") for x in fix.sentences), fix.sentences


def test_a_small_host_with_and_without_auto_sizing() -> None:
    """MemoryMax=100G, 40 GiB x 4 ranks. 0.5.20 would pin the default 2.0 x 160 = 320 GiB: the fix sets 0.5
    (80 GiB of the 90 GiB after the reserve, 10 % headroom). 0.5.23 sizes itself to (100 - 10) / 4 x 0.8 x 0.95 /
    40 = 0.427 (68.3 GiB), which fits: no ratio is added, the arithmetic is shown."""
    old = hicache_fix(
        MODE_CACHE, SUMMARY, POOL_40G, unbound_command(), release="0.5.20", memory_max=100 * GIB, root=TWO_NODES
    )
    assert old.changes[-1] == FlagChange("set", "--hicache-ratio", "0.5")
    assert "the host (MemoryMax=) has 100.0 GiB available" in old.sentences[0]
    new = hicache_fix(
        MODE_CACHE, SUMMARY, POOL_40G, unbound_command(), release="0.5.23", memory_max=100 * GIB, root=TWO_NODES
    )
    assert (new.changes, new.summary) == (tuple(MODE_CACHE), "")
    assert new.sentences[0].endswith("/ 40.0 GiB device KV pool per rank) = 0.427."), new.sentences[0]
    assert new.sentences[1].startswith("--hicache-ratio 0.427 fits: HiCache would pin 0.427 x 40.0 GiB"), new.sentences
    assert new.sentences[2].startswith("Below 1.0 the host pool is smaller than the device pool")


def test_no_ratio_fits_turns_hicache_off_with_the_arithmetic() -> None:
    """MemoryMax=12G: 2 GiB after the reserve. On 0.5.20 even 0.1 (16 GiB) does not fit: HiCache off. On 0.5.23
    SGLang would size itself a tiny pool (0.009) that fits; the DeepSeek V4 fix (an explicit ratio) gets HiCache
    off on both."""
    old = hicache_fix(
        MODE_CACHE, SUMMARY, POOL_40G, unbound_command(), release="0.5.20", memory_max=12 * GIB, root=TWO_NODES
    )
    assert old.changes == (*MODE_CACHE, FlagChange("remove", "--enable-hierarchical-cache"))
    assert old.summary == "no --hicache-ratio fits this host: turn HiCache off (remove `--enable-hierarchical-cache`)"
    assert any(
        x.startswith("No --hicache-ratio fits: the host (MemoryMax=) has 12.0 GiB available, 2.0 GiB after")
        for x in old.sentences
    ), old.sentences
    dsv4 = [FlagChange("replace", "--hicache-size", "2.0", "--hicache-ratio")]
    for release in ("0.5.20", "0.5.23"):
        off = hicache_fix(
            dsv4,
            "replace `--hicache-size 150` with `--hicache-ratio 2.0`",
            POOL_40G,
            prefill_command(),
            release=release,
            memory_max=12 * GIB,
            root=TWO_NODES,
        )
        assert off.changes == (
            FlagChange("remove", "--hicache-size"),
            FlagChange("remove", "--enable-hierarchical-cache"),
        )
    tiny = hicache_fix(
        MODE_CACHE, SUMMARY, POOL_40G, unbound_command(), release="0.5.23", memory_max=12 * GIB, root=TWO_NODES
    )
    assert tiny.changes == tuple(MODE_CACHE) and tiny.sentences[1].startswith("--hicache-ratio 0.009 fits")


def test_what_cannot_be_checked_leaves_the_fix_and_says_so() -> None:
    fix = hicache_fix(MODE_CACHE, SUMMARY, [], prefill_command(), release="0.5.23", root=TWO_NODES)
    assert fix.changes == tuple(MODE_CACHE) and fix.summary == ""
    assert fix.sentences[0].startswith("crashdoc could not check that --hicache-ratio 2.0 fits in host memory")
