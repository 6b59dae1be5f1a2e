"""The ``/proc/PID/stat`` fields of this process and every process descended from it (Linux).

Shared by the benchmarks that sample a process tree while it runs (``bench_10m.py``'s resident set
of the build and its shard workers, ``bench_ray.py``'s CPU seconds of the driver and Ray's workers).
"""

from __future__ import annotations

import os


def tree_stat_fields() -> dict[int, list[str]]:
    """``{pid: fields}`` for this process and its descendants; ``fields[0]`` is the state, i.e. the
    fields of ``/proc/PID/stat`` after the command name (``proc(5)``'s field ``n`` is ``fields[n - 3]``).
    A process that exits while being read is left out."""
    parents: dict[int, int] = {}
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        stats[int(entry)] = fields
    me = os.getpid()
    mine: dict[int, list[str]] = {}
    for pid, fields in stats.items():
        ancestor = pid
        while ancestor > 1 and ancestor != me:
            ancestor = parents.get(ancestor, 0)
        if ancestor == me:
            mine[pid] = fields
    return mine
