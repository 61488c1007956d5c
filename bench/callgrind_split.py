#!/usr/bin/env python3
"""Two callgrind profiles side by side, per iteration: the instructions
each object executed itself (the plugin, simverbs' libibverbs, libc, the
driver), and the plugins' own functions.  Used by bench/instructions.sh.

usage: callgrind_split.py A.out B.out ITERATIONS
"""
import collections
import re
import sys

NAMED = re.compile(r"(ob|fn|fl|fi|fe|cob|cfn|cfi|cfl)=\((\d+)\)(?: (.*))?")
KIND = {"cob": "ob", "cfn": "fn", "cfi": "fl", "cfl": "fl", "fi": "fl", "fe": "fl"}


def self_costs(path):
    """(object, function) -> instructions executed in it (not in callees)."""
    names = {"ob": {}, "fn": {}, "fl": {}}
    costs = collections.Counter()
    ob = fn = None
    skip = False  # the cost line after calls= is the call's inclusive cost
    with open(path) as f:
        for line in f:
            if line[0].isdigit() or line[0] in "+-*":
                if skip:
                    skip = False
                    continue
                parts = line.split()
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
                continue
            if line.startswith("calls="):
                skip = True
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
    a, b, iters = self_costs(sys.argv[1]), self_costs(sys.argv[2]), float(sys.argv[3])
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
    for x, d in (("A", a), ("B", b)):
        print("\n%s's own functions (instructions an iteration, 5 or more)" % x)
        own = sorted(((v / iters, f) for (o, f), v in d.items() if o == "the plugin"), reverse=True)
        for v, f in own:
            if v >= 5:
                print("%10.0f  %s" % (v, f))


if __name__ == "__main__":
    main()
