"""Where the real-log corpus is: next to the repository (`../shared/corpus/real`) or `$CRASHDOC_CORPUS`.

It is read in place and never copied into the repository; tests that need it skip when it is absent.
"""

from __future__ import annotations

import os
from pathlib import Path


def corpus_dir() -> Path:
    override = os.environ.get("CRASHDOC_CORPUS")
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[3] / "shared" / "corpus" / "real"
