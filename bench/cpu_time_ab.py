#!/usr/bin/env python3
"""CPU time of `vatic debug generate` for two (or more) vatic binaries, alternating, on a shared machine.

    bench/cpu_time_ab.py --models STORE --model demo-int8 --threads 1,2 --rounds 3 --reps 5 \\
        before=/tmp/vatic-before after=build/vatic

Each round runs every binary in turn (the order flips every round), `--reps` times each, under
`perf stat -e task-clock` (CPU time of the whole process, all threads, model load included). CPU time moves far
less with the machine's load than wall time does; the wall-clock decode rate from the run's own stats is printed
beside it. Per binary and thread count: the median task-clock over all runs, its spread (min-max), the median
decode tok/s, and the load average at the start and end.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys

ap = argparse.ArgumentParser()
ap.add_argument("binaries", nargs="+", help="label=path")
ap.add_argument("--models", help="vatic store (VATIC_MODELS)")
ap.add_argument("--model", action="append", required=True)
ap.add_argument("--threads", default="1,2")
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--reps", type=int, default=5)
ap.add_argument("--ngen", type=int, default=512)
ap.add_argument("--prompt", type=int, default=8)
ap.add_argument("--vocab", type=int, default=4096)
args = ap.parse_args()

env0 = dict(os.environ)
if args.models:
    env0["VATIC_MODELS"] = args.models
rng = random.Random(0)
tokens = ",".join(["2"] + [str(rng.randrange(10, args.vocab)) for _ in range(args.prompt - 1)])
bins = [b.split("=", 1) for b in args.binaries]
threads = [int(t) for t in args.threads.split(",")]


def load():
    return float(open("/proc/loadavg").read().split()[0])


def run(path, model, t):
    env = dict(env0, OMP_NUM_THREADS=str(t))
    cmd = ["perf", "stat", "-x,", "-e", "task-clock", path, "debug", "generate", model, "--tokens", tokens,
           "--max-tokens", str(args.ngen), "--ignore-eos"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    ms = next(float(l.split(",")[0]) for l in p.stderr.splitlines() if "task-clock" in l)
    return ms, json.loads(p.stdout)["stats"]["decode_tokens_per_second"]


res = {}
loads = {}
for model in args.model:
    for t in threads:
        loads[(model, t)] = [load()]
        for r in range(args.rounds):
            order = bins if r % 2 == 0 else bins[::-1]
            for label, path in order:
                for _ in range(args.reps):
                    res.setdefault((model, t, label), []).append(run(path, model, t))
        loads[(model, t)].append(load())

print(f"| model | threads | binary | task-clock ms (median, min-max) | decode tok/s (median) | load average |")
print("|---|---|---|---|---|---|")
for model in args.model:
    for t in threads:
        for label, _ in bins:
            v = res[(model, t, label)]
            ms = [x[0] for x in v]
            tps = [x[1] for x in v]
            la = loads[(model, t)]
            print(f"| {model} | {t} | {label} | {statistics.median(ms):.0f} ({min(ms):.0f}-{max(ms):.0f}) | "
                  f"{statistics.median(tps):.1f} | {la[0]:.1f} -> {la[1]:.1f} |")
