"""The daemon checks the fix of a real crash loop with the unit's own SGLang, on a private systemd.

The demo's prefill unit (DeepSeek V4, `--hicache-size 150`) runs under the interpreter of a venv that holds the
real SGLang 0.5.23 wheel (tests/support/sglang_env.py); crashdoc must diagnose the loop at once and then, from its
verification thread, serve what SGLang's own argument checks said of the corrected command (`--hicache-ratio 2.0`)
in /diagnoses and in its log. Skipped where that venv or a private systemd is not available.
"""

from __future__ import annotations

import pytest

from crashdoc.sandbox.demo import PREFILL_UNIT, demo_units
from support.e2e import start_crashdoc, wait_for
from support.sglang_env import sglang_python

pytestmark = pytest.mark.sandbox

SGLANG, SGLANG_WHY = sglang_python()

CONFIG = """
units:
  - {name: "sglang-prefill.service", role: prefill}
"""


@pytest.mark.skipif(SGLANG is None, reason=SGLANG_WHY)
def test_the_daemon_serves_sglangs_own_verdict_on_the_fix(sandbox_factory, sandbox_workdir) -> None:
    units = demo_units(sandbox_workdir, str(SGLANG))
    sandbox = sandbox_factory({PREFILL_UNIT: units[PREFILL_UNIT]}, workdir=sandbox_workdir, start_units=[])
    cd = start_crashdoc(sandbox, config=CONFIG)
    try:
        sandbox.systemctl("start", PREFILL_UNIT, check=True)
        wait_for(lambda: cd.metric("crashdoc_unit_crashloop", unit=PREFILL_UNIT) == 1.0, 90, "the loop", cd)

        def verdict() -> str | None:
            found = [d for d in cd.diagnoses() if d["unit"] == PREFILL_UNIT]
            text = found[0]["fix"]["verified"] if found else None
            return text if text and not text.startswith("verification pending") else None

        text = str(wait_for(verdict, 180, "SGLang's verdict on the corrected command", cd, interval=0.5))
        assert text.startswith(f"the corrected command passes SGLang {SGLANG_WHY}'s argument checks"), text
        assert "the checks that need the model's config" in text  # DeepSeek-V4-Flash is not in any cache here
        assert f"{PREFILL_UNIT}: fix the corrected command passes SGLang" in cd.log()
    finally:
        cd.stop()
