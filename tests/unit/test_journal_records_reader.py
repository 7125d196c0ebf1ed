"""crashdoc's own journal records written and read back through systemd-python's C functions alone: its `journal`
module (uuid, logging, traceback: ~0.25 MB the daemon kept) is not imported for them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.journal_files import AT, write_journal


def test_records_are_sent_and_read_back_without_the_journal_module(tmp_path: Path) -> None:
    from crashdoc.outputs.journal_records import MESSAGE_ID_DIAGNOSIS, MESSAGE_ID_LOOP_STARTED

    entries = [
        {
            "MESSAGE": "an old one",
            "MESSAGE_ID": MESSAGE_ID_DIAGNOSIS,
            "CRASHDOC_EVENT_ID": "ev-0",
            AT: "1700000000000000",
        },
        {
            "MESSAGE": "sglang-prefill.service is crash-looping",
            "MESSAGE_ID": MESSAGE_ID_LOOP_STARTED,
            "CRASHDOC_EVENT_ID": "ev-1",
            AT: "1800000000000000",
        },
        {"MESSAGE": "someone else's", "CRASHDOC_EVENT_ID": "not-ours", AT: "1800000000000001"},
        {
            "MESSAGE": "diagnosis",
            "MESSAGE_ID": MESSAGE_ID_DIAGNOSIS,
            "CRASHDOC_EVENT_ID": "ev-2",
            AT: "1800000000000002",
        },
    ]
    write_journal(tmp_path, entries)
    code = f"""
import json, sys
import systemd._journal
sent = []
systemd._journal.sendv = lambda *fields: sent.append(list(fields))
from crashdoc.outputs.journal_records import _journal_send, recorded_event_ids
_journal_send(MESSAGE="m", MESSAGE_ID="abc", PRIORITY="2", CRASHDOC_EVENT_ID="ev-9")
ids = recorded_event_ids(1_750_000_000.0, {str(tmp_path)!r})
print(json.dumps({{"sent": sent, "ids": sorted(ids), "journal_module": "systemd.journal" in sys.modules}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    got = json.loads(out)
    assert got["sent"] == [["MESSAGE=m", "MESSAGE_ID=abc", "PRIORITY=2", "CRASHDOC_EVENT_ID=ev-9"]]
    assert got["ids"] == ["ev-1", "ev-2"], "crashdoc's own records since the time, no one else's, none older"
    assert got["journal_module"] is False
