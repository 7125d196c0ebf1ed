"""`crashdoc check-config`: validate a configuration file as `crashdoc run` would."""

from __future__ import annotations

import argparse
import sys

from crashdoc.config import check_config_file


def main(args: argparse.Namespace) -> int:
    """OK and a summary on stdout, or every problem as FILE:LINE on stderr and exit 1: a config rollout
    can be gated on it."""
    result = check_config_file(args.file)
    for problem in result.problems:
        print(problem, file=sys.stderr)
    for line in result.summary:
        print(line)
    return 1 if result.problems else 0
