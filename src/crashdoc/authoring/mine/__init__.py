"""`crashdoc signatures mine`: candidate signatures from SGLang's own raise and assert statements.

Most of what makes an SGLang unit crash-loop is a check that names the flag to change
(`raise ValueError(f"--x requires --y")`). Reading those statements from the source gives
every such message with its exact text, where it is raised and which flags it names; that is
the list a reviewed library should cover, the starting point of each new signature, and what
`signatures derive` turns into the derived library.

The source is only parsed (`ast`), never imported: mining must not need SGLang's
dependencies nor run its code. A message template is rebuilt from the statement and the
names it uses in the same file (`templates`); only the pieces of a module that can hold such
a message are parsed (`hot`, `source`); a folder, wheel or installed package is read file by
file (`tree`); each statement becomes a candidate with an RE2 pattern and a realistic
traceback (`candidates`); coverage runs each candidate through the real assembler, matcher
and root-cause choice, so "matched" means the daemon would name a signature for that crash
(`report`).

What is counted (`DEFINITION`) and what it gives on SGLang 0.5.23: 1,182 statements, 1,012
raise and 170 assert. Raises naming a flag: 858, naming an SGLANG_ variable: 200 (46 name
both); asserts: 141 and 36. An AST pass that also counts raises naming only another
project's variable (MOONCAKE_PROTOCOL, ASCEND_USE_FIA...) finds 1,193. Raises in srt/, the
runtime a systemd unit serves: 783. 7 of them have a message assigned in branches or extended
with `+=`, and 7 more splice text held in a local or a constant into an f-string hole; a pass
that leaves both as holes finds 769.
"""

from crashdoc.authoring.mine.base import DEFINITION, PACKAGE, TRACEBACK_DIR, MineError
from crashdoc.authoring.mine.candidates import (
    Candidate,
    candidate_entry,
    candidate_id,
    make_candidate,
    pattern_and_example,
    traceback_text,
)
from crashdoc.authoring.mine.report import (
    MineReport,
    measure_coverage,
    mine,
    report_json,
    report_text,
    run,
    write_candidates,
)
from crashdoc.authoring.mine.source import Failure, FileResult, Statement, mine_source
from crashdoc.authoring.mine.templates import Hole, Part, Template
from crashdoc.authoring.mine.tree import SourceTree, locate, mine_tree

__all__ = [
    "DEFINITION",
    "PACKAGE",
    "TRACEBACK_DIR",
    "Candidate",
    "Failure",
    "FileResult",
    "Hole",
    "MineError",
    "MineReport",
    "Part",
    "SourceTree",
    "Statement",
    "Template",
    "candidate_entry",
    "candidate_id",
    "locate",
    "make_candidate",
    "measure_coverage",
    "mine",
    "mine_source",
    "mine_tree",
    "pattern_and_example",
    "report_json",
    "report_text",
    "run",
    "traceback_text",
    "write_candidates",
]
