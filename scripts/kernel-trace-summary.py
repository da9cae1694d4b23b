#!/usr/bin/env python3
"""Where a replayed decode step's time goes, from a kernel trace.

Run vatic with VATIC_KERNEL_TRACE=FILE (CUDA backend): every kernel launch records the source line of its
pdl_begin() call, its grid's width and the global timer once its wait on the kernel before is over. The time
from one record to the next is what a kernel adds to the stream (its own work after the kernel before it
finished), also inside a replayed CUDA graph, where no profiler here separates kernels.

    VATIC_KERNEL_TRACE=/tmp/t.csv vatic bench --device cuda --random CONFIG --tokens 32 --reps 1 --no-verify \\
        --draft none
    scripts/kernel-trace-summary.py /tmp/t.csv [--source src/backend/cuda/kernels.cu] [--list N]

Steps are cut after each argmax merge (the last kernel of a greedy step); the steps of the most common launch
count among the last ones (the replayed decode steps) are summarised: per kernel (GEMVs by grid width), the
median over steps of each position's time, summed. The source must be the one the binary was built from.

With --start KERNEL (e.g. embedding_kernel, whose grid is the forward's token count) forwards are cut before each
launch of that kernel instead, and every kind of forward that recurs (same launch count and first grid) is
summarised: decode steps beside `vatic bench`'s verification forwards over K+1 tokens.
"""
import argparse
import collections
import csv
import re
import statistics


def kernel_lines(source):
    names, current, pending = {}, None, False
    for no, line in enumerate(open(source), 1):
        # kernels, and the device functions whose body (with its pdl_begin) several kernels share; a kernel's name
        # may be on the line after `__global__` (after its launch bounds)
        if pending or "__global__" in line or "void gemv_chunks(" in line or "void attention_decode(" in line:
            called = [n for n in re.findall(r"\b(\w+)\(", line) if not n.startswith("__")]
            pending = not called and not pending
            if called:
                current = called[0]
        if "pdl_begin();" in line and current:
            names[no] = current
    return names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--source", default="src/backend/cuda/kernels.cu")
    ap.add_argument("--steps", type=int, default=16, help="replayed steps to summarise (the last ones)")
    ap.add_argument("--list", type=int, default=0, help="also list the first N launches of a step")
    ap.add_argument("--start", help="cut forwards before each launch of this kernel, summarise each recurring kind")
    a = ap.parse_args()
    names = kernel_lines(a.source)
    rows = sorted((int(r["ns"]), int(r["line"]), int(r["grid"])) for r in csv.DictReader(open(a.trace)))
    if a.start:
        starts = [i for i, r in enumerate(rows) if names.get(r[1]) == a.start]
        steps = [rows[s:e] for s, e in zip(starts, starts[1:])]
        if not steps:
            raise SystemExit(f"no {a.start} records in the trace")
        kinds = collections.Counter((len(s), s[0][2]) for s in steps)
        for (L, grid), n in sorted(kinds.items(), key=lambda x: x[0][1]):
            if n >= 3:
                print(f"\n== forwards of {L} launches starting with {a.start} of grid {grid} ({n} seen)")
                summarise([s for s in steps if (len(s), s[0][2]) == (L, grid)][-a.steps:], names, a.list)
        return
    ends = [i + 1 for i, r in enumerate(rows) if names.get(r[1]) == "argmax_merge_kernel"]
    steps = [rows[s:e] for s, e in zip(ends, ends[1:])]
    if not steps:
        raise SystemExit("no greedy steps in the trace (no argmax_merge_kernel records)")
    L = collections.Counter(len(s) for s in steps).most_common(1)[0][0]
    summarise([s for s in steps if len(s) == L][-a.steps:], names, a.list)


def summarise(dec, names, list_n):
    L = len(dec[0])
    step_us = statistics.median(s[-1][0] - s[0][0] for s in dec) / 1e3
    print(f"{len(dec)} steps of {L} launches; median step {step_us:.1f} us (first to last launch)")
    total, count, listing = collections.defaultdict(float), collections.Counter(), []
    for pos in range(L - 1):
        d = statistics.median(s[pos + 1][0] - s[pos][0] for s in dec) / 1e3
        name, grid = names.get(dec[0][pos][1], f"line {dec[0][pos][1]}"), dec[0][pos][2]
        key = f"{name} (grid {grid})" if name.startswith("gemv") else name
        total[key] += d
        count[key] += 1
        listing.append((name, grid, d))
    T = sum(total.values())
    print(f"{'kernel':44s} {'launches':>8s} {'us':>9s} {'us each':>8s} {'share':>6s}")
    for k, v in sorted(total.items(), key=lambda x: -x[1]):
        print(f"{k:44s} {count[k]:8d} {v:9.1f} {v / count[k]:8.2f} {100 * v / T:5.1f}%")
    for name, grid, d in listing[:list_n]:
        print(f"  {name:36s} grid {grid:6d} {d:7.2f} us")


if __name__ == "__main__":
    main()
