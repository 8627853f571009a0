"""`kaiwu status`'s output: aligned tables for people (coloured on a terminal unless NO_COLOR),
or the reports as JSON or YAML for scripts.

Called by reconciler.statuscmd (main), on the reports of reconciler.statuscmd.reading; pure.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TextIO

import yaml

from reconciler import status as st

GREEN, RED, YELLOW, BOLD, RESET = "\033[32m", "\033[31m", "\033[33m", "\033[1m", "\033[0m"


def use_colour(stream: TextIO) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    return stream.isatty() and not os.environ.get("NO_COLOR")


def _rows(header: Sequence[str], rows: Iterable[Sequence[str]], indent: str,
          paint: Callable[[int, Sequence[str], str], str]) -> list[str]:
    """Aligned columns; `paint(column, row, padded)` may colour a padded cell (`row`: the
    row's raw cells), so colour codes never count towards the widths."""
    rows = [list(header)] + [list(r) for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = []
    for n, row in enumerate(rows):
        cells = [cell.ljust(widths[i]) if i < len(row) - 1 else cell
                 for i, cell in enumerate(row)]
        if n > 0:
            cells = [paint(i, row, cells[i]) for i in range(len(cells))]
        lines.append(indent + "  ".join(cells).rstrip())
    return lines


def table(reports: Sequence[Mapping[str, Any]], colour: bool = False) -> str:
    """The reports as aligned text for people (colour: ANSI colours on the status words)."""
    def c(code: str, text: str) -> str:
        return f"{code}{text}{RESET}" if colour else text

    def status_colour(raw: str, padded: str) -> str:
        if raw in ("True", "live", "yes"):
            return c(GREEN, padded)
        if raw in ("False", "not-live", "no", "CrashLoopBackOff", "Error"):
            return c(RED, padded)
        if raw in ("Unknown", "decommissioning", "Pending"):
            return c(YELLOW, padded)
        return padded

    def condition_colour(row: Sequence[str], padded: str) -> str:
        # Ready is good when True; Reconciling, Stalled and Drifted (kstatus's abnormal-true
        # conditions) when False: a healthy cluster's condition table is all green.
        kind, status = row[0], row[1]
        if kind in (st.RECONCILING, st.STALLED, st.DRIFTED) and status in ("True", "False"):
            if status == "False":
                return c(GREEN, padded)
            return c(YELLOW if kind == st.RECONCILING else RED, padded)
        return status_colour(status, padded)

    if not reports:
        return "No KaiwuClusters found.\n"
    out: list[str] = []
    for r in reports:
        head = f"{r['namespace']}/{r['name']}"
        word = "Ready" if r["ready"] else f"NotReady ({r['reason'] or 'no status yet'})"
        version = r["version"] or "-"
        if r["specVersion"] and r["specVersion"] != r["version"]:
            version += f" (spec {r['specVersion']})"
        out.append(f"{c(BOLD, head)}  {c(GREEN if r['ready'] else RED, word)}  "
                   f"nodes {r['readyNodes']}/{r['replicas']}  version {version}"
                   + (f"  phase {r['phase']}" if r["phase"] else "")
                   + (f"  {c(YELLOW, 'PAUSED')}" if r["paused"] else ""))
        if r["message"] and not r["ready"]:
            out.append(f"  {r['message']}")
        if r["conditions"]:
            out += _rows(("CONDITION", "STATUS", "REASON", "SINCE", "MESSAGE"),
                         ((x["type"] or "", x["status"] or "", x["reason"],
                           f"{x['for']} ago" if x["for"] else "-", st.one_line(x["message"]))
                          for x in r["conditions"]), "  ",
                         lambda i, row, padded: condition_colour(row, padded) if i == 1
                         else padded)
        op = r["operation"]
        out.append("  operation: " + (c(YELLOW, f"{op['type']} {op['summary']}") if op
                                      else "none"))
        if r.get("backups"):
            out.append("  backups: " + _backups_line(r["backups"], c))
        ro = r["rollout"]
        if ro:
            out.append(f"  rollout: {ro['updated']}/{ro['replicas']} updated, partition "
                       f"{ro['partition']}, revision {ro['updateRevision'] or '-'}"
                       + ("" if ro["updateRevision"] == ro["currentRevision"]
                          else f" (current {ro['currentRevision'] or '-'})"))
        else:
            out.append("  rollout: no StatefulSet yet")
        d = r["drift"]
        out.append("  drift: " + (f"{d['reason']}" + (f" ({st.one_line(d['message'], 100)})"
                                                        if d["status"] == "True" else "")
                                  if d else "not reported yet"))
        cert = r["certificates"]
        if cert:
            text = f"node certificate ({cert['secret']}) expires {cert['notAfter']}"
            text += f" (in {cert['expiresIn']})" if cert["expiresIn"] != "expired" \
                else " (EXPIRED)"
            out.append("  certificates: " + (c(RED, text) if cert["days"] < 30 else text))
        else:
            out.append("  certificates: " + ("none found" if r["tls"] else "TLS off"))
        if r["pods"]:
            out += _rows(("POD", "K8S NODE", "KWDB ID", "LIVENESS", "READY", "RESTARTS",
                          "STATE"),
                         ((p["name"], p["node"] or "-",
                           str(p["nodeId"]) if p["nodeId"] is not None else "-",
                           p["liveness"] or "-", "yes" if p["ready"] else "no",
                           str(p["restarts"]), p["state"]) for p in r["pods"]), "  ",
                         lambda i, row, padded: status_colour(row[i], padded)
                         if i in (3, 4, 6) else padded)
        else:
            out.append("  pods: none")
        for n in r["nodesWithoutPod"]:
            out.append(f"  kwdb node {n['nodeId']} ({n['address']}): {n['state']}, no pod")
        if r["lastActions"]:
            out.append("  last actions:")
            out += _rows(("TIME", "ACTION", "TARGET", "MESSAGE"),
                         ((a.get("time", ""), a.get("action", ""), a.get("target", ""),
                           st.one_line(a.get("message", ""))) for a in r["lastActions"][:5]),
                         "    ", lambda i, row, padded: padded)
        out.append("")
    return "\n".join(out)


def _backups_line(b: Mapping[str, Any], c: Callable[[str, str], str]) -> str:
    if not b["readable"]:
        return c(YELLOW, "not readable (you may not list kaiwubackups or kaiwubackupschedules)")
    last = b["lastSuccess"]
    if last:
        ago_text = f" ({last['ago']} ago)" if last.get("ago") else ""
        parts = [f"last {st.one_line(last['name'], 60)}{ago_text}"]
    else:
        parts = [c(YELLOW, "none completed")]
    if b["running"]:
        parts.append(f"running {st.one_line(str(b['running']['name']), 60)}")
    nxt = b["next"]
    if nxt and nxt["overdue"]:
        parts.append(c(RED, f"next was due {nxt['at']} ({st.one_line(nxt['schedule'], 60)}): "
                        "overdue, no backups are being made"))
    elif nxt:
        parts.append(f"next {nxt['at']} ({st.one_line(nxt['schedule'], 60)})")
    elif b["schedules"] and len(b["suspended"]) == len(b["schedules"]):
        parts.append(c(YELLOW, "every schedule suspended"))
    elif b["schedules"]:
        parts.append("schedule not yet seen by the reconciler")
    else:
        parts.append("no schedule")
    if b["failedSinceCount"]:
        parts.append(c(RED, f"{b['failedSinceCount']} failed since: " + ", ".join(
            f"{st.one_line(str(f['name']), 60)} ({st.one_line(str(f['reason'] or 'failed'), 40)})"
            for f in b["failedSince"]) + (", ..." if b["failedSinceCount"] > 3 else "")))
    return "; ".join(parts)


def render(reports: Sequence[Mapping[str, Any]], output: str, colour: bool) -> str:
    if output == "json":
        return json.dumps({"clusters": list(reports)}, indent=2, sort_keys=True) + "\n"
    if output == "yaml":
        return str(yaml.safe_dump({"clusters": [dict(r) for r in reports]}, sort_keys=True))
    return table(reports, colour)
