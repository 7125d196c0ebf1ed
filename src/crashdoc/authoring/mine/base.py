"""Names and limits shared by the miner's modules: what counts as a flag or an SGLang variable."""

from __future__ import annotations

import re

import re2

PACKAGE = "sglang"
TRACEBACK_DIR = f"/x/{PACKAGE}"  # where mined examples say the package is installed
MAX_ID = 80
MAX_RESOLVE_DEPTH = 8
MAX_CHOICES = 6  # branches of one message rebuilt as alternatives
PARALLEL_BYTES = 4 << 20  # below this, parsing in-process is faster than starting workers
TODO = "TODO(review)"
MAX_CONDITION = 400  # characters of a guarding condition kept

# A flag as SGLang's messages write it: `--x` not glued to a word or another dash. The schema
# wants lowercase kebab-case; `--Foo` or `--foo_bar` in a message is reported but not listed.
FLAG = re.compile(r"(?<![\w-])--([A-Za-z0-9][A-Za-z0-9_-]*[A-Za-z0-9]|[A-Za-z0-9])(?![\w])")
SCHEMA_FLAG = re.compile(r"^--[a-z0-9][a-z0-9-]*$")
# SGLang's own environment variables. Other variables that SGLang messages name (MOONCAKE_*,
# NCCL_*, CUDA_VISIBLE_DEVICES) belong to other projects and are not counted; see DEFINITION.
ENV = re.compile(r"(?<![A-Za-z0-9_])SGLANG_[A-Z0-9_]*[A-Z0-9](?![A-Za-z0-9_])")
# cheap whole-file prefilter: a file without one of these cannot yield a mined error, because
# templates are rebuilt only from the text of the file that raises
PREFILTER = re2.compile(r"--[A-Za-z0-9]|SGLANG_")  # RE2: one DFA pass over 68 MB
EXCEPTION_SUFFIXES = ("Error", "Exception", "Exit", "Interrupt", "Warning", "Failure")

DEFINITION = (
    "A mined error is one `raise X(...)` or `assert cond, msg` statement whose message, rebuilt from the "
    "statement and the names it uses in the same file, has a command-line flag (`--x`) or an SGLang "
    "environment variable (`SGLANG_*`) in its literal text. Text that is only known at run time (a hole) does "
    "not count; other projects' variables (MOONCAKE_*, NCCL_*) do not count; a statement counts once however "
    "many flags it names, and the same message raised in two places counts twice. The whole package is mined "
    "(srt/ is the LLM runtime; multimodal_gen/, kernels/, benchmark/, test/ and cli/ are reported by folder)."
)


class MineError(Exception):
    """The source to mine cannot be found or read; printed as is."""
