"""A process and everything below it, read from /proc: CPU seconds and
proportional resident memory, for the benchmarks that measure a whole
loader (the trainer, DataLoader's workers, or a private stokerd and its
workers)."""
from __future__ import annotations

import os


def _table():
    """Every process's parent and CPU seconds, from /proc."""
    children, cpu = {}, {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            fields = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(p))
        cpu[int(p)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return children, cpu


def below(pid):
    """{pid: (command name, CPU seconds)} of `pid` and every process below it."""
    children, cpu = _table()
    out, todo = {}, [pid]
    while todo:
        p = todo.pop()
        try:
            name = open(f"/proc/{p}/comm").read().strip()
        except OSError:
            name = "?"
        out[p] = (name, cpu.get(p, 0.0))
        todo += children.get(p, [])
    return out


def tree(pid):
    """(CPU seconds, PSS MiB, pinned MiB) of `pid` and every process below
    it: pinned is PSS less the file-backed pages (Pss_Anon + Pss_Shmem: what
    the kernel cannot drop; a mapped cache entry's clean pages it can)."""
    children, cpu = _table()
    total, pss, pinned, todo = 0.0, 0.0, 0.0, [pid]
    while todo:
        p = todo.pop()
        total += cpu.get(p, 0.0)
        try:
            for line in open(f"/proc/{p}/smaps_rollup"):
                key = line.split(":")[0]
                if key == "Pss":
                    pss += int(line.split()[1]) / 1024
                elif key in ("Pss_Anon", "Pss_Shmem"):
                    pinned += int(line.split()[1]) / 1024
        except OSError:
            pass
        todo += children.get(p, [])
    return total, pss, pinned
