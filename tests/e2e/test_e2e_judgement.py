"""A handled traceback on a healthy server, under a real (private) systemd: a warning, never a crash.

sglang-decode.service logs SGLang's "load-publisher disabled: ..." record with the zmq.error.ZMQError
traceback (scheduler_components/load_publisher.py, `exc_info=True`), then says it is ready and serves.
crashdoc must count one warning of kind environment, and show no crash, no loop and no diagnosis, on
/metrics, /diagnoses and `crashdoc diagnose`.
"""

from __future__ import annotations

import json
import shlex

import pytest

from crashdoc.sandbox.demo import DECODE_UNIT, decode_argv, sglang_unit
from support.e2e import CRASHDOC, start_crashdoc, wait_for

pytestmark = pytest.mark.sandbox

CONFIG = """
units:
  - {name: "sglang-decode.service", role: decode}
thresholds:
  recovery: 4
"""
ZMQ_LINE = "zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:5757')"


def test_a_handled_traceback_is_a_warning_not_a_crash(sandbox_factory, sandbox_workdir) -> None:
    argv = " ".join(shlex.quote(a) for a in decode_argv(CRASHDOC[0]))
    unit = sglang_unit(
        "SGLang decode server with a load publisher that cannot bind",
        argv,
        workdir=sandbox_workdir,
        env={"FAKE_SGLANG_HANDLED": "load-publisher", "FAKE_SGLANG_BATCH_INTERVAL": "0.5"},
    )
    sandbox = sandbox_factory({DECODE_UNIT: unit}, workdir=sandbox_workdir, start_units=[])
    cd = start_crashdoc(sandbox, config=CONFIG)
    try:
        sandbox.systemctl("start", DECODE_UNIT, check=True)
        wait_for(
            lambda: cd.metric("crashdoc_warnings_total", unit=DECODE_UNIT, kind="environment") == 1.0,
            60,
            "the handled traceback counted as a warning on /metrics",
            cd,
        )
        wait_for(lambda: cd.metric("crashdoc_unit_state", unit=DECODE_UNIT, state="healthy") == 1.0, 30, "healthy", cd)
        metrics = cd.metrics()
        assert metrics[("crashdoc_unit_crashloop", (("unit", DECODE_UNIT),))] == 0.0
        assert metrics[("crashdoc_crashes_total", (("signature", "unknown"), ("unit", DECODE_UNIT)))] == 0.0
        assert not [k for k in metrics if k[0] == "crashdoc_diagnosis_info"]
        assert sum(v for k, v in metrics.items() if k[0] == "crashdoc_warnings_total") == 1.0
        assert cd.diagnoses() == []

        out = sandbox.run([*CRASHDOC, "diagnose", "--unit", DECODE_UNIT, "--json"], check=True).stdout
        doc = json.loads(out)
        assert doc["diagnoses"] == []
        [w] = doc["warnings"]
        assert (w["unit"], w["root_cause"]["line"], w["kind"]) == (DECODE_UNIT, ZMQ_LINE, "environment")
        assert w["handled"].startswith("logged as: load-publisher disabled: failed to bind the load socket")
    finally:
        cd.stop()
