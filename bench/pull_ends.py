#!/usr/bin/env python3
"""Where a cable pull's time went, end by end (issue 13, docs/SCALE.md).

Reads what `KEEP=<dir> bash bench/many_conns.sh ...` kept for one K: the
syslog lines of the run with the pull (syslog.K.1) and the pull's wall
clock (pullwall.K).  Each failover line says when its end's traffic flowed
again (time=) and how long its move took from the moment that end saw the
fault (duration_us), so time - duration_us is when it saw it.  Prints, per
process, direction and reason, how many ends moved and, from the pull,
p50 / p99 / max of when they saw the fault and of when they flowed again;
then the same over every end.

usage: bench/pull_ends.py KEEP_DIR K
"""
import re
import sys
from datetime import datetime, timezone

LINE = re.compile(r"linkpass\[(\d+)\]: event=failover .*?dir=(\w+) .*?reason=(\w+) .*?duration_us=(\d+) .*?time=(\S+)")


def wall(stamp):
    """2026-12-05T18:56:29.931957Z -> seconds since the epoch."""
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()


def pct(values, p):
    v = sorted(values)
    return v[max(0, min(len(v) - 1, int(len(v) * p + 0.5) - 1))]


def row(name, ends):
    seen = [e[0] for e in ends]
    flowing = [e[1] for e in ends]
    print(
        "%-34s %5d | %7.1f %7.1f %7.1f | %7.1f %7.1f %7.1f"
        % (name, len(ends), pct(seen, 0.5), pct(seen, 0.99), max(seen), pct(flowing, 0.5), pct(flowing, 0.99), max(flowing))
    )


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: pull_ends.py KEEP_DIR K")
    keep, k = sys.argv[1], sys.argv[2]
    try:
        with open("%s/pullwall.%s" % (keep, k)) as f:
            pulled = float(f.read().strip())
        with open("%s/syslog.%s.1" % (keep, k)) as f:
            lines = f.readlines()
    except (OSError, ValueError) as e:
        sys.exit("pull_ends.py: %s (run bench/many_conns.sh with KEEP=%s first)" % (e, keep))
    groups = {}
    pids = []
    for line in lines:
        m = LINE.search(line)
        if m is None:
            continue
        pid, direction, reason, took_us, stamp = m.groups()
        if pid not in pids:
            pids.append(pid)
        flowing = (wall(stamp) - pulled) * 1e3
        groups.setdefault((pid, direction, reason), []).append((flowing - int(took_us) / 1e3, flowing))
    if not groups:
        sys.exit("pull_ends.py: no failover line in %s/syslog.%s.1" % (keep, k))
    print("# K = %s: ms from the pull; processes numbered as they first log (port_down ends: the pulled side)" % k)
    print("%-34s %5s | %23s | %23s" % ("process dir reason", "ends", "saw the fault p50/p99/max", "flowing p50/p99/max"))
    for (pid, direction, reason), ends in sorted(groups.items(), key=lambda g: (pids.index(g[0][0]), g[0][1:])):
        row("%d %s %s" % (pids.index(pid) + 1, direction, reason), ends)
    row("all", [e for ends in groups.values() for e in ends])


main()
