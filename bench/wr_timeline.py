#!/usr/bin/env python3
"""The segments of an 8-byte iteration, from bench/wr_timeline.sh's notes.

Reads TRACE_DIR/<run>/<pid> (one file a rank: time in ns, kind 1 post /
2 executed / 3 polled, QP or CQ index, opcode) for runs named A1, B1, A2,
... and prints, for each plugin, each segment of the path from one
clear-to-send to the next, in ns: the 10th, 50th and 90th percentile and
the mean of the fastest 99 %, each the median over the runs and both
directions.  Assumes a message is one work request: a clear-to-send is an
RDMA_WRITE, the data one RDMA_WRITE_WITH_IMM (both plugins, one QP, up to
16 MiB).

usage: bench/wr_timeline.py TRACE_DIR
"""
import bisect
import collections
import os
import statistics
import sys

POST, EXECUTED, POLLED = 1, 2, 3
WR_RDMA_WRITE, WR_RDMA_WRITE_WITH_IMM = 0, 1
WC_RECV_RDMA_WITH_IMM = 129
SEGMENTS = [
    ("clear-to-send on the wire (post to executed)", "cts_wire"),
    ("sender: its arrival to the data's post", "sender"),
    ("data on the wire (post to executed)", "data_wire"),
    ("receiver: its arrival to the poll that takes it", "receiver"),
    ("receiver: that poll to the next clear-to-send", "turnaround"),
    ("an iteration (clear-to-send to the next)", "cycle"),
]


def load(path):
    events = []
    with open(path) as f:
        for line in f:
            t, kind, obj, op = map(int, line.split())
            events.append((t, kind, obj, op))
    events.sort()
    return events


def busiest_qp(events, opcode):
    count = collections.Counter(e[2] for e in events if e[1] == POST and e[3] == opcode)
    return count.most_common(1)[0][0]


def times(events, kind, opcode, qp=None):
    return [e[0] for e in events if e[1] == kind and e[3] == opcode and (qp is None or e[2] == qp)]


def following(starts, ends):
    """For each start, the time to the first end at or after it."""
    out = []
    for t in starts:
        i = bisect.bisect_left(ends, t)
        if i < len(ends):
            out.append(ends[i] - t)
    return out


def summary(xs):
    xs = sorted(xs)
    n = len(xs)
    return (xs[n // 10], xs[n // 2], xs[9 * n // 10], statistics.mean(xs[: max(1, int(n * 0.99))]))


def direction(recv, send):
    """Segments of the messages `send` sends to `recv`."""
    cts_qp, data_qp = busiest_qp(recv, WR_RDMA_WRITE), busiest_qp(send, WR_RDMA_WRITE_WITH_IMM)
    cts_post = times(recv, POST, WR_RDMA_WRITE, cts_qp)
    cts_post = cts_post[len(cts_post) // 100 :]  # past the warm-up
    t0 = cts_post[0]
    cts_done = [t for t in times(recv, EXECUTED, WR_RDMA_WRITE, cts_qp) if t >= t0]
    data_post = [t for t in times(send, POST, WR_RDMA_WRITE_WITH_IMM, data_qp) if t >= t0]
    data_done = [t for t in times(send, EXECUTED, WR_RDMA_WRITE_WITH_IMM, data_qp) if t >= t0]
    polled = [e[0] for e in recv if e[1] == POLLED and e[3] == WC_RECV_RDMA_WITH_IMM and e[0] >= t0]
    return {
        "cts_wire": following(cts_post, cts_done),
        "sender": following(cts_done, data_post),
        "data_wire": following(data_post, data_done),
        "receiver": following(data_done, polled),
        "turnaround": following(polled, cts_post),
        "cycle": [b - a for a, b in zip(cts_post, cts_post[1:])],
    }


def main():
    top = sys.argv[1]
    per = collections.defaultdict(lambda: collections.defaultdict(list))  # plugin -> segment -> [summaries]
    for run in sorted(os.listdir(top)):
        ranks = [load(os.path.join(top, run, f)) for f in sorted(os.listdir(os.path.join(top, run)))]
        if len(ranks) != 2:
            sys.exit("wr_timeline: %s has %d ranks' notes, expected 2" % (run, len(ranks)))
        for recv, send in ((ranks[0], ranks[1]), (ranks[1], ranks[0])):
            for key, xs in direction(recv, send).items():
                per[run[0]][key].append(summary(xs))
    plugins = sorted(per)
    print("%-50s %s" % ("segment (ns: p10 / p50 / p90 / mean)", "   ".join("%-27s" % p for p in plugins)),
          "  p50 A - B" if plugins == ["A", "B"] else "")
    for name, key in SEGMENTS:
        cols, p50 = [], {}
        for p in plugins:
            s = [statistics.median(v[i] for v in per[p][key]) for i in range(4)]
            p50[p] = s[1]
            cols.append("%5.0f / %5.0f / %5.0f / %5.0f" % tuple(s))
        diff = "  %+9.0f" % (p50["A"] - p50["B"]) if plugins == ["A", "B"] else ""
        print("%-50s %s%s" % (name, "   ".join(cols), diff))


if __name__ == "__main__":
    main()
