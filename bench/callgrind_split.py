#!/usr/bin/env python3
"""Two callgrind profiles side by side, per iteration: the instructions
each object executed itself (the plugin, simverbs' libibverbs, libc, the
driver), NCCL's calls into each plugin (how many an iteration, and what
one costs with everything it calls), and the plugins' own functions.
Used by bench/instructions.sh.

usage: callgrind_split.py A.out B.out ITERATIONS
"""
import collections
import re
import sys

NAMED = re.compile(r"(ob|fn|fl|fi|fe|cob|cfn|cfi|cfl)=\((\d+)\)(?: (.*))?")
KIND = {"cob": "ob", "cfn": "fn", "cfi": "fl", "cfl": "fl", "fi": "fl", "fe": "fl"}


def self_costs(path, calls, inclusive):
    """(object, function) -> instructions executed in it (not in callees);
    also, per called function, the calls made to it and their inclusive
    instructions (into `calls` and `inclusive`)."""
    names = {"ob": {}, "fn": {}, "fl": {}}
    costs = collections.Counter()
    ob = fn = callee = None
    ncalls = 0
    with open(path) as f:
        for line in f:
            if line[0].isdigit() or line[0] in "+-*":
                parts = line.split()
                if callee is not None:  # the cost line after calls= is the call's inclusive cost
                    if len(parts) >= 2 and callee != fn:
                        calls[callee] += ncalls
                        inclusive[callee] += int(parts[1])
                    callee = None
                    continue
                if len(parts) >= 2 and fn:
                    costs[(ob, fn)] += int(parts[1])
                continue
            m = NAMED.match(line)
            if m:
                kind = KIND.get(m.group(1), m.group(1))
                if m.group(3):
                    names[kind][m.group(2)] = m.group(3).strip()
                if m.group(1) == "ob":
                    ob = names["ob"][m.group(2)].split("/")[-1]
                elif m.group(1) == "fn":
                    fn = names["fn"][m.group(2)]
                elif m.group(1) == "cfn":
                    called = names["fn"][m.group(2)]
                continue
            if line.startswith("calls="):
                ncalls = int(line.split("=")[1].split()[0])
                callee = called
    out = collections.Counter()
    for (o, f), v in costs.items():
        if o and o.startswith("libnccl-net"):
            o = "the plugin"
        elif o and o.startswith("libibverbs"):
            o = "simverbs (libibverbs)"
        out[(o, f)] += v
    return out


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    calls = {x: collections.Counter() for x in "AB"}
    incl = {x: collections.Counter() for x in "AB"}
    a = self_costs(sys.argv[1], calls["A"], incl["A"])
    b = self_costs(sys.argv[2], calls["B"], incl["B"])
    iters = float(sys.argv[3])
    by_ob = {x: collections.Counter() for x in "AB"}
    for x, d in (("A", a), ("B", b)):
        for (o, _), v in d.items():
            by_ob[x][o] += v
    print("%-28s %10s %10s %10s" % ("object", "A", "B", "A - B"))
    total_a = total_b = 0
    for o in sorted(set(by_ob["A"]) | set(by_ob["B"]), key=lambda o: -(by_ob["A"][o] + by_ob["B"][o])):
        va, vb = by_ob["A"][o] / iters, by_ob["B"][o] / iters
        total_a, total_b = total_a + va, total_b + vb
        if va + vb >= 1:
            print("%-28s %10.0f %10.0f %+10.0f" % (o, va, vb, va - vb))
    print("%-28s %10.0f %10.0f %+10.0f" % ("all", total_a, total_b, total_a - total_b))
    # NCCL's calls into each plugin (the driver's ABI shims call these).
    entries = {"A": ("lp_isend", "lp_irecv", "lp_test"), "B": ("ncclIbIsend", "ncclIbIrecv", "ncclIbTest")}
    print("\n%-8s %-12s %14s %24s" % ("", "call", "calls an iter.", "instructions a call (incl.)"))
    for x in "AB":
        for name in entries[x]:
            n = calls[x][name]
            print("%-8s %-12s %14.2f %24.0f" % (x, name, n / iters, incl[x][name] / n if n else 0))
    for x, d in (("A", a), ("B", b)):
        print("\n%s's own functions (instructions an iteration, 5 or more)" % x)
        own = sorted(((v / iters, f) for (o, f), v in d.items() if o == "the plugin"), reverse=True)
        for v, f in own:
            if v >= 5:
                print("%10.0f  %s" % (v, f))


if __name__ == "__main__":
    main()
