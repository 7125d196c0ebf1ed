"""Real SGLang 0.5.23 crash-looping under a private systemd: the daemon finds a fix SGLang's own checks accept.

Each unit runs SGLang 0.5.23's real launcher (`python -m sglang.launch_server`, the test environment that
`make test` builds, on CPU with a tiny local Llama config) with a command that fails SGLang's checks, as the
launch failures of bench/launch_failures do: a flag only supported for some models, a value SGLang does not know,
a plain flag conflict, and one whose first candidates SGLang rejects (the search goes on to the next). crashdoc
watches them as an operator runs it; the fix it serves (/diagnoses, the unit's page, the journal record of the
checked fix) must pass SGLang 0.5.23's argument checks. The time from the unit's second crash (PID 1's record)
to the journal record of the checked fix is printed per unit (the README's figure), never asserted.
"""

from __future__ import annotations

import html
import shlex
from pathlib import Path
from typing import Any

import pytest

from crashdoc.outputs.journal_records import MESSAGE_ID_FIX_CHECKED
from crashdoc.sandbox.demo import sglang_unit
from support.e2e import PROCESS_EXITED, journal_json, pid1_records, start_crashdoc, wait_for
from support.sglang_env import sglang_python, tiny_model

pytestmark = pytest.mark.sandbox

SGLANG, SGLANG_WHY = sglang_python()

# unit -> (the options that make SGLang 0.5.23 refuse to start, what the checked fix must no longer pass)
FAILURES = {
    "sglang-lnsp.service": ("--enable-layernorm-sp", "--enable-layernorm-sp"),  # only for some models
    "sglang-dllm.service": ("--dllm-algorithm none", "--dllm-algorithm none"),  # a value SGLang does not know
    "sglang-tls.service": ("--ssl-keyfile-password {missing}", "--ssl-keyfile-password"),  # a flag conflict
    # deterministic inference on CPU (fsdp's on-policy target) with an attention backend SGLang refuses for it:
    # candidates are rejected with the same error before one passes
    "sglang-rl.service": ("--rl-on-policy-target fsdp --tp-size 1024 --mamba-ssm-dtype bfloat16", ""),
}
CONFIG = """
units:
  - {name: "sglang-*.service", role: any}
"""


def _units(workdir: Path, python: str) -> dict[str, str]:
    model = tiny_model(workdir / "tiny-llama")
    units = {}
    for unit, (options, _) in FAILURES.items():
        extra = options.format(missing=workdir / "missing")
        argv = f"{shlex.quote(python)} -m sglang.launch_server --model-path {model} --device cpu {extra}"
        env = {"CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        units[unit] = sglang_unit(f"SGLang 0.5.23 ({options})", argv, workdir=workdir, env=env, restart_sec=1)
    return units


def _checked_record(sandbox: Any, unit: str) -> dict[str, Any] | None:
    records = journal_json(sandbox, f"MESSAGE_ID={MESSAGE_ID_FIX_CHECKED}", f"CRASHDOC_UNIT={unit}")
    return records[-1] if records else None


@pytest.mark.alone  # eight real SGLang loops restarting each second, and checks that run on a spare CPU
@pytest.mark.skipif(SGLANG is None, reason=SGLANG_WHY)
def test_real_sglang_loops_get_a_fix_sglang_accepts(sandbox_factory, sandbox_workdir) -> None:
    assert SGLANG is not None
    sandbox = sandbox_factory(_units(sandbox_workdir, SGLANG), workdir=sandbox_workdir, start_units=[])
    cd = start_crashdoc(sandbox, config=CONFIG)
    latencies: dict[str, float] = {}
    try:
        for unit, (_, gone) in FAILURES.items():  # one loop at a time, as a host would see one bad deploy
            sandbox.systemctl("start", unit, check=True)
            record = wait_for(lambda u=unit: _checked_record(sandbox, u), 300, f"{unit}'s checked fix", cd, interval=1)
            sandbox.systemctl("stop", unit, check=True)
            assert isinstance(record, dict)
            verified = record["CRASHDOC_FIX_VERIFIED"]
            assert verified.startswith(f"passes SGLang {SGLANG_WHY}'s argument checks ("), record
            [shown] = [d for d in cd.diagnoses() if d["unit"] == unit]
            assert shown["fix"]["verified"] == verified  # /diagnoses serves what the journal says
            command = shown["fix"]["command"]
            assert command and command == record["CRASHDOC_FIXED_COMMAND"]
            if gone:
                assert gone not in command, command
            status, page = cd.get(f"/units/{unit}")
            assert status == 200 and verified in html.unescape(page.decode()), "the unit's page shows it"
            exits = sorted(int(e["__REALTIME_TIMESTAMP"]) for e in pid1_records(sandbox, unit, PROCESS_EXITED))
            assert len(exits) >= 2, exits
            latencies[unit] = (int(record["__REALTIME_TIMESTAMP"]) - exits[1]) / 1e6
            print(f"{unit}: checked fix {latencies[unit]:.1f} s after the second crash: {verified}")
        tried = _checked_record(sandbox, "sglang-rl.service")
        assert tried is not None and "still fails" in tried.get("CRASHDOC_FIX_TRIED", ""), tried
        [rl] = [d for d in cd.diagnoses() if d["unit"] == "sglang-rl.service"]
        assert any(w.startswith("tried: ") and "still fails" in w for w in rl["fix"]["why"]), rl["fix"]
    finally:
        cd.stop()
    print("checked fix after the second crash (s): " + ", ".join(f"{u} {s:.1f}" for u, s in latencies.items()))
