"""NVIDIA's Xid catalog as crashdoc ships it: the data against the documented format, and each Xid family of
the issue read from our own lines in the driver's format."""

from __future__ import annotations

import json
import re

import pytest

from crashdoc.diagnosis.hardware import can_cause, why_not
from crashdoc.matching.gpu_catalog import (
    ACTIONS,
    CATALOG_PATH,
    POINTS_AT,
    CatalogError,
    load_catalog,
    parse_catalog,
    recovery_action,
)
from crashdoc.sources.kernel_gpu import KernelGpuReader
from support.gpu_faults import FAMILY_LINES, SXID_FATAL, xid

# NVIDIA's catalog: "Type (XID) | Code | Mnemonic | Description | ... | Resolution Bucket (Immediate Action) |
# Resolution Bucket (Investigatory Action)"; mnemonics are C identifiers, two joined by " / " for Xid 13
MNEMONIC = re.compile(r"^[A-Z][A-Z0-9_]*(?: / [A-Z][A-Z0-9_]*)?$")
# the issue's families: application 13/31/43, memory 48/63/64/94/95, NVLink 74 and 144-150, bus 79, GSP 119/120, 154
REQUIRED = (13, 31, 43, 48, 63, 64, 94, 95, 74, *range(144, 151), 79, 119, 120, 154)


def test_the_catalog_names_its_source_and_revision() -> None:
    doc = json.loads(CATALOG_PATH.read_text(encoding="utf-8"))
    assert doc["source"].endswith("https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html")
    assert re.fullmatch(r"[A-Z][a-z]+ \d{4}", doc["version"])
    assert "Fabric Manager" in doc["sxid_source"] and "nvmlGpuRecoveryAction_t" in doc["recovery_source"]


def test_every_row_has_the_documented_form() -> None:
    doc = json.loads(CATALOG_PATH.read_text(encoding="utf-8"))
    catalog = load_catalog()
    codes = [row["code"] for row in doc["xids"]]
    assert codes == sorted(set(codes)) and all(1 <= c <= 172 for c in codes)  # the catalog's Xids, once each
    for row in doc["xids"]:
        assert set(row) == {"code", "mnemonic", "description", "immediate", "investigatory", "points_at", "family"}
        assert MNEMONIC.match(row["mnemonic"]), row
        assert row["description"].strip() and row["description"] != "Unused", row
        assert row["immediate"] in doc["resolution_buckets"] and row["investigatory"] in doc["resolution_buckets"]
        assert row["points_at"] in POINTS_AT and row["family"] in doc["families"], row
    for name, bucket in doc["resolution_buckets"].items():
        assert bucket["action"] in ACTIONS and bucket["meaning"], name
    assert set(doc["points_at"]) == set(POINTS_AT)
    assert len(catalog.entries) == len(codes)


def test_the_families_of_the_issue_are_all_there() -> None:
    catalog = load_catalog()
    assert set(REQUIRED) <= set(catalog.entries)
    assert {catalog.entries[c].family for c in (13, 31, 43)} == {"application"}
    assert {catalog.entries[c].family for c in (48, 63, 64, 94, 95)} == {"memory"}
    assert {catalog.entries[c].family for c in (74, *range(144, 151))} == {"nvlink"}
    assert catalog.entries[79].family == "bus" and catalog.entries[154].family == "recovery"
    assert {catalog.entries[c].family for c in (119, 120)} == {"firmware"}


# NVIDIA's buckets as the catalog gives them, for the rows crashdoc's decisions rest on
NVIDIA_ROWS = {
    13: ("RESTART_APP", "WORKFLOW_XID_13"),
    31: ("RESTART_APP", "WORKFLOW_XID_31"),
    43: ("IGNORE", "CONTACT_SUPPORT"),
    48: ("WORKFLOW_XID_48", "WORKFLOW_XID_48"),
    63: ("IGNORE", "IGNORE"),
    64: ("RESET_GPU", "CONTACT_SUPPORT"),
    74: ("WORKFLOW_NVLINK_ERR", "CONTACT_SUPPORT"),
    79: ("RESTART_BM", "CONTACT_SUPPORT"),
    94: ("RESTART_APP", "IGNORE (sympathetic)"),
    95: ("RESET_GPU", "IGNORE (sympathetic)"),
    119: ("RESET_GPU", "INVESTIGATE_SW"),
    120: ("RESET_GPU", "INVESTIGATE_SW"),
    154: ("XID_154", "N/A Informational only regarding another Xid"),
}


@pytest.mark.parametrize("code", sorted(NVIDIA_ROWS))
def test_nvidia_resolution_buckets(code: int) -> None:
    entry = load_catalog().entries[code]
    assert (entry.immediate, entry.investigatory) == NVIDIA_ROWS[code]


# what each family line of the issue means for a crash: (points at, can it be a crash's cause, crashdoc's action)
EXPECTED = {
    13: ("application", False, "restart-app"),
    31: ("application", False, "restart-app"),
    43: ("application", False, "none"),
    48: ("hardware", True, "reset-gpu"),
    63: ("hardware", False, "none"),  # a row remapped: non-fatal
    64: ("hardware", True, "reset-gpu"),
    74: ("hardware", True, "reset-gpu"),
    79: ("hardware", True, "reboot"),
    94: ("hardware", True, "restart-app"),
    95: ("hardware", True, "reset-gpu"),
    119: ("driver", True, "reset-gpu"),
    120: ("driver", True, "reset-gpu"),
    144: ("hardware", True, "reset-gpu"),  # the line says Fatal
    145: ("hardware", False, "reset-gpu"),  # the line says Nonfatal
    146: ("hardware", True, "reset-gpu"),
    147: ("hardware", False, "reset-gpu"),
    148: ("hardware", False, "reset-gpu"),
    149: ("hardware", True, "reset-gpu"),
    150: ("hardware", True, "reset-gpu"),
    154: ("informational", False, "recovery"),
}


@pytest.mark.parametrize("code", sorted(FAMILY_LINES))
def test_each_family_line_read_against_the_catalog(code: int) -> None:
    catalog = load_catalog()
    [event] = KernelGpuReader().feed(FAMILY_LINES[code], 1.0)
    entry = catalog.get(event.code)
    assert entry is not None and entry.code == code
    points_at, causes, action = EXPECTED[code]
    assert (entry.points_at, can_cause(event, catalog), catalog.action(entry.immediate)) == (points_at, causes, action)
    if not causes:
        assert why_not(event, catalog)  # the evidence says why it is not the cause


def test_sxid_and_unknown_xids_are_never_a_cause() -> None:
    catalog = load_catalog()
    [sxid] = KernelGpuReader().feed(SXID_FATAL)
    assert not can_cause(sxid, catalog) and "Xid 74" in why_not(sxid, catalog)
    [unknown] = KernelGpuReader().feed(xid(171, "Uncorrectable DRAM error", pid=1))
    assert not can_cause(unknown, catalog) and "not in crashdoc's copy" in why_not(unknown, catalog)


@pytest.mark.parametrize(
    ("words", "action"),
    [
        ("None", "none"),
        ("GPU Reset Required", "reset-gpu"),
        ("Node Reboot Required", "reboot"),
        ("OS Reboot", "reboot"),
        ("Drain P2P", "drain"),
        ("Drain and Reset", "drain"),
        ("PF FLR", "reset-gpu"),
        ("something new", ""),
    ],
)
def test_xid_154_recovery_words(words: str, action: str) -> None:
    assert recovery_action(words) == action


def test_a_broken_catalog_is_said_plainly() -> None:
    doc = json.loads(CATALOG_PATH.read_text(encoding="utf-8"))
    with pytest.raises(CatalogError, match="listed twice"):
        parse_catalog({**doc, "xids": [doc["xids"][0], doc["xids"][0]]})
    with pytest.raises(CatalogError, match="malformed"):
        parse_catalog({**doc, "xids": [{"code": 1}]})
    with pytest.raises(CatalogError, match="schema"):
        parse_catalog({**doc, "schema": 2})
