"""Signature files written by tests: a good one beside the fixture library (tests/fixtures/signatures)."""

from __future__ import annotations

EXTRA = """signatures:
  - id: test-extra-error
    title: An error added by a live edit
    category: other
    severity: critical
    match: {exception: [KeyError], message: 'glm_moe_dsa'}
    fix: {summary: upgrade transformers}
    runbook: "Why it happens: x. How to confirm: y. Safe fix: upgrade. Roll back: downgrade it again."
    examples:
      match:
        - text: "KeyError: 'glm_moe_dsa'"
"""
