"""SGLang's memory lines: how much GPU memory each rank had, used and gave its KV pool, and what HiCache took
from the host. One set of patterns for everything that reads them: the markers that keep these lines
(assembly.markers), the OOM actions (remedy.actions.memory) and the HiCache safety check (remedy.safety).

SGLang 0.5.23's wording: model_runner.py ("Load weight begin/end"), kv_cache_configurator.py ("Memory pool
end"), memory_pool.py `_finalize_allocation_log` ("KV Cache is allocated"; older releases print no dtype, a
label such as "SWA" or "Full" may lead), kv_pool_runtime.py (the pool resized after CUDA-graph capture),
pool_host/base.py and memory_pool_host.py (HiCache's host pools, in 1e9 bytes). Device sizes are GiB
(divided by 1024**3), whatever the "GB" says.
"""

from __future__ import annotations

from crashdoc.text import LazyPattern

LOAD_BEGIN = "Load weight begin."  # avail mem= before the weights: SGLang's pre_model_load_memory
LOAD_END = "Load weight end."  # avail mem= after them, and their mem usage=
KV_CACHE = "KV Cache is allocated."
POOL_END = "Memory pool end."  # avail mem= after the KV pool
GRAPH_BEGIN = " graph begin."  # "Capture cuda graph begin." (and other graphs): avail mem= before capture

AVAIL = LazyPattern(r"avail mem=(?P<avail>[\d.]+) GB")
USAGE = LazyPattern(r"mem usage=(?P<used>[\d.]+) GB")
KV_ALLOCATED = LazyPattern(
    r"KV Cache is allocated\. (?:dtype: \S+, )?#tokens: (?P<tokens>\d+), "  # a leading label needs no match
    r"(?:K size: (?P<k>[\d.]+) GB, V size: (?P<v>[\d.]+) GB|KV size: (?P<kv>[\d.]+) GB)"
)
KV_POST_CAPTURE = LazyPattern(
    r"Post-capture KV sizing: (?:draft )?KV cache allocated\. dtype: \S+, #tokens: \d+, KV size: (?P<kv>[\d.]+) GB"
)
SWA_POOL = LazyPattern(r"SWAKVPool mem usage: (?P<kv>[\d.]+) GB")
HOST_ALLOCATED = LazyPattern(
    r"Allocating \S+ hierarchical KV host pool: \d+ tokens, (?P<gb>[\d.]+) GB host memory"
    r"|Allocating (?P<gb4>[\d.]+) GB host memory for V4 (?:paged|state) pool"
)
HOST_REFUSED = LazyPattern(
    r"Not enough host memory (?:available|for V4 \w+ pool \S+)\. Requesting (?P<req>[\d.]+) GB "
    r"but only have (?P<have>[\d.]+) GB free"
)


def avail_mem(text: str) -> float | None:
    """The free GPU memory a line reports (GiB), or None."""
    m = AVAIL.search(text)
    return float(m["avail"]) if m else None


def kv_allocated(text: str) -> tuple[int, float] | None:
    """(tokens, GiB) of a "KV Cache is allocated" line (K and V added up), or None."""
    m = KV_ALLOCATED.search(text)
    if m is None:
        return None
    return int(m["tokens"]), float(m["kv"]) if m["kv"] else float(m["k"]) + float(m["v"])
