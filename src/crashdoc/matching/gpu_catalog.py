"""NVIDIA's Xid catalog, shipped as data (`data/nvidia-xid-catalog.json`, which names its source and revision).

For each Xid: NVIDIA's mnemonic, description and resolution buckets (the immediate action and the
investigatory one), and crashdoc's reading of them: whether the Xid points at the hardware, the driver or
the application (what decides whether it can be a crash's cause), and the runbook family it belongs to.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CATALOG_PATH = Path(__file__).with_name("data") / "nvidia-xid-catalog.json"
POINTS_AT = ("hardware", "driver", "application", "informational")
# what crashdoc tells the on-call engineer to do, from NVIDIA's buckets ("drain": the GPU is gone for good)
ACTIONS = ("none", "restart-app", "reset-gpu", "reboot", "drain", "service", "update-driver", "recovery")
# Xid 154's recovery actions (NVML's nvmlGpuRecoveryAction_t), by the words the line prints
_RECOVERY_WORDS = (("drain and reset", "drain"), ("drain", "drain"), ("reboot", "reboot"), ("reset", "reset-gpu"),
                   ("flr", "reset-gpu"), ("none", "none"))  # fmt: skip


class CatalogError(ValueError):
    """The catalog file is missing or malformed: the package is broken."""


@dataclass(frozen=True, slots=True)
class XidEntry:
    code: int
    mnemonic: str
    description: str
    immediate: str  # NVIDIA's resolution bucket, immediate action (RESTART_APP, RESET_GPU, RESTART_BM, ...)
    investigatory: str  # NVIDIA's resolution bucket, investigatory action (CONTACT_SUPPORT, WORKFLOW_XID_48, ...)
    points_at: str  # hardware | driver | application | informational
    family: str  # the runbook page it belongs to


@dataclass(frozen=True, slots=True)
class XidCatalog:
    source: str
    version: str
    entries: dict[int, XidEntry]
    buckets: dict[str, tuple[str, str]]  # NVIDIA bucket -> (crashdoc action, meaning in words)
    families: dict[str, str]  # family -> its title
    points_at: dict[str, str]  # hardware|driver|... -> what it means for a crash
    sxid_source: str
    recovery_source: str

    def get(self, code: int | None) -> XidEntry | None:
        return self.entries.get(code) if code is not None else None

    def action(self, bucket: str) -> str:
        return self.buckets.get(bucket, ("service", ""))[0]

    def meaning(self, bucket: str) -> str:
        return self.buckets.get(bucket, ("", ""))[1]

    def family_of(self, kind: str, code: int | None) -> str:
        """The runbook family of an event: its Xid's, or the one its kind belongs to."""
        if kind == "xid":
            entry = self.get(code)
            return entry.family if entry is not None else "other"
        return {"sxid": "nvlink", "fallen-off-bus": "bus", "init-failed": "bus", "ecc": "memory"}.get(kind, "other")


def recovery_action(words: str) -> str:
    """Xid 154's "to 0x2 (Node Reboot Required)" as a crashdoc action ("" when the words are unknown)."""
    lowered = words.lower()
    for word, action in _RECOVERY_WORDS:
        if word in lowered:
            return action
    return ""


def parse_catalog(doc: Any) -> XidCatalog:
    """The catalog from its JSON document; CatalogError says what is wrong."""
    try:
        if doc["schema"] != 1:
            raise CatalogError(f"unknown catalog schema {doc['schema']!r}")
        buckets = {name: (str(b["action"]), str(b["meaning"])) for name, b in doc["resolution_buckets"].items()}
        entries: dict[int, XidEntry] = {}
        for row in doc["xids"]:
            entry = XidEntry(
                int(row["code"]),
                str(row["mnemonic"]),
                str(row["description"]),
                str(row["immediate"]),
                str(row["investigatory"]),
                str(row["points_at"]),
                str(row["family"]),
            )
            if entry.code in entries:
                raise CatalogError(f"Xid {entry.code} is listed twice")
            entries[entry.code] = entry
        return XidCatalog(
            source=str(doc["source"]),
            version=str(doc["version"]),
            entries=entries,
            buckets=buckets,
            families={str(k): str(v) for k, v in doc["families"].items()},
            points_at={str(k): str(v) for k, v in doc["points_at"].items()},
            sxid_source=str(doc["sxid_source"]),
            recovery_source=str(doc["recovery_source"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, CatalogError):
            raise
        raise CatalogError(f"malformed Xid catalog: {exc!r}") from exc


@functools.cache
def load_catalog(path: Path = CATALOG_PATH) -> XidCatalog:
    """The shipped catalog (read once per process: it is package data, never edited at run time)."""
    try:
        return parse_catalog(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError) as exc:
        raise CatalogError(f"cannot read the Xid catalog {path}: {exc}") from exc
