"""NCCL and gloo timeouts: the rank that stopped first, from every rank's watchdog lines, and the network checks."""

from __future__ import annotations

import re
from collections.abc import Mapping

from crashdoc.events import FlagChange
from crashdoc.remedy.actions.common import Action, Inputs, as_int

_WATCHDOG = re.compile(
    r"Rank (?P<rank>\d+)\] Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), "
    r"OpType=(?P<op>\w+)[^)]*?Timeout\(ms\)=(?P<ms>\d+)\)"
)
_ENQUEUED = re.compile(
    r"Rank (?P<rank>\d+)\].*?(?:Timeout at NCCL work|detected by watchdog at work): (?P<seq>\d+), "
    r"last enqueued NCCL work: (?P<enq>-?\d+), "
    r"last completed NCCL work: (?P<done>-?\d+)"
)


def collective_timeout_action(inputs: Inputs) -> Action | None:
    """Which rank stalled: the one that never enqueued the collective the others waited on, or the lowest
    SeqNum among the watchdogs' lines; ranks that never reported are suspects too."""
    run = inputs.run
    if run is None:
        return None
    texts = [hit.line.text for hit in run.line_hits]
    texts += [tb.text for tb in run.tracebacks]
    texts += [m.text for m in run.markers if m.kind == "nccl-work"]
    seen: dict[int, tuple[int, str, int]] = {}
    enqueued: dict[int, int] = {}
    for text in texts:
        for m in _WATCHDOG.finditer(text):
            seen.setdefault(int(m["rank"]), (int(m["seq"]), m["op"], int(m["ms"])))
        for m in _ENQUEUED.finditer(text):
            enqueued.setdefault(int(m["rank"]), int(m["enq"]))
    if not seen:
        return None
    why: list[str] = []
    ranks = sorted(seen)
    seqs = {r: s[0] for r, s in seen.items()}
    low = min(seqs.values())
    _, op, ms = seen[ranks[0]]
    why.append(
        f"The watchdog of rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} gave up on "
        f"{op} after {ms / 1000:g} s."
    )
    stalled: list[int] = []
    if enqueued:
        behind = min(enqueued.values())
        if behind < max(enqueued.values()):
            stalled = sorted(r for r, e in enqueued.items() if e == behind)
            why.append(
                f"Rank {', '.join(map(str, stalled))} last enqueued NCCL work {behind}, the others "
                f"{max(enqueued.values())}: it stopped issuing collectives first."
            )
    if not stalled and len(set(seqs.values())) > 1:
        stalled = sorted(r for r, s in seqs.items() if s == low)
        why.append(f"Rank {', '.join(map(str, stalled))} timed out on an earlier collective (SeqNum={low}).")
    world = as_int(inputs.flags.get("--tp-size")) or 0
    silent = [r for r in range(world) if r not in seen] if world else []
    if not stalled and silent:
        stalled = silent
        why.append(
            f"Rank {', '.join(map(str, silent))} of {world} never reported a timeout: it was not in the "
            "collective at all (dead, hung, or on another node)."
        )
    why.append(
        "Network checks: rerun with NCCL_DEBUG=INFO (which transport and interface each rank uses), pin the "
        "interface with NCCL_SOCKET_IFNAME=<iface> on multi-homed hosts, check IB links (`ibstat`, "
        "`ibv_devinfo`) and `dmesg -T | grep -i xid` on the stalled rank's node."
    )
    first = f"rank {', '.join(map(str, stalled))}" if stalled else "the rank that stalled (not in this log)"
    changes: list[FlagChange] = []
    summary = f"look at {first} first: its process or link stopped before the {op} the others waited on"
    if run.ready_at is None:
        seconds = max(ms // 1000 * 2, 600)
        changes.append(FlagChange("set", "--dist-timeout", str(seconds)))
        summary += f"; if it was only slow to load, give start-up longer with `--dist-timeout {seconds}`"
        why.append(f"The run never got ready, so a slow load is possible: twice the {ms / 1000:g} s is {seconds} s.")
    return Action(summary=summary, changes=changes, why=why)


def gloo_timeout_action(inputs: Inputs, captures: Mapping[str, str]) -> Action:
    tb = inputs.traceback
    rank = (tb.rank if tb else "") or "this rank"
    ms = as_int(captures.get("ms")) or 0
    op = captures.get("op", "recv")
    why = [
        f"{rank} waited {ms / 1000:g} s in a gloo {op} (CPU-side control traffic between ranks): the peer never "
        f"{'sent' if op == 'recv' else 'received'}.",
        "Look at the other ranks' and nodes' logs for the one that stopped first (its own traceback, an OOM "
        "kill, a node reboot).",
        "Network checks: GLOO_SOCKET_IFNAME=<iface> (and NCCL_SOCKET_IFNAME) on multi-homed hosts, a firewall "
        "between the nodes' --dist-init-addr ports, NCCL_DEBUG=INFO for the GPU side.",
    ]
    changes: list[FlagChange] = []
    summary = f"{rank} timed out waiting for a peer in a gloo {op}; find the rank that stopped first"
    run = inputs.run
    if run is not None and run.ready_at is None and ms:
        seconds = max(ms // 1000 * 2, 600)
        changes.append(FlagChange("set", "--dist-timeout", str(seconds)))
        summary += f"; if start-up was only slow, `--dist-timeout {seconds}`"
        why.append(f"The run never got ready, so a slow load is possible: twice the {ms / 1000:g} s is {seconds} s.")
    return Action(summary=summary, changes=changes, why=why)
