#!/usr/bin/env python3
"""vatic beside llama.cpp on the CPU: same weights, alternating runs, best of N, a ratio table.

Usage:
  bench/cpu_side_by_side.py --llama-bench PATH/llama-bench --vatic build/vatic --models STORE \\
      --row 'demo|bf16|demo-bf16.gguf|demo-bf16' --row 'demo|int8 vs Q8_0|demo-Q8_0.gguf|demo-int8' ...
Each --row is  model label | quant label | GGUF for llama.cpp | vatic store model (same weights, no DRAFT).
--vatic may be given several times as NAME=PATH (e.g. before=/tmp/vatic-before after=build/vatic): each binary
runs in every round, in turn with llama.cpp, and the table gets one column per binary and metric.
A vatic model with a DRAFT (speculative decoding) can be given as a fifth field; its decode is compared with
llama.cpp's plain decode of the same row.

Options: --threads 1,2  --rounds 3 (alternations; the order flips every round)  --reps 2 (runs per tool per round)
--ngen 128 (decode tokens)  --pp 128,512 (prompt lengths)  --vocab 4096 (prompt ids are drawn below it)
--json FILE (raw best values).  --prefill warm|cold (default warm).  llama.cpp is never built by the project: build
it yourself (see docs/performance.md).

Prefill is measured the way llama-bench measures it: warm, in one process that has already run the prompt (its
buffers allocated, the weights paged in), best of --reps + 1 runs: `vatic bench --model M --prompt N --reps R+1`
(it restarts from an empty state each run, so nothing is reused). `--prefill cold` times the prompt of a fresh
`vatic debug generate` process instead (first-touch page faults of weights and buffers included; about 10 % on
the demo model). Decode is `vatic debug generate --ignore-eos` from an 8-token prompt either way.
"""
import argparse, json, os, random, subprocess, sys, time

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--llama-bench", required=True)
ap.add_argument("--vatic", action="append", required=True)
ap.add_argument("--models", help="vatic store (VATIC_MODELS)")
ap.add_argument("--row", action="append", required=True)
ap.add_argument("--threads", default="1,2")
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--reps", type=int, default=2)
ap.add_argument("--ngen", type=int, default=128)
ap.add_argument("--pp", default="128,512")
ap.add_argument("--vocab", type=int, default=4096)
ap.add_argument("--json")
ap.add_argument("--prefill", choices=["warm", "cold"], default="warm")
args = ap.parse_args()

env0 = dict(os.environ)
if args.models:
    env0["VATIC_MODELS"] = args.models
rng = random.Random(0)
def ids(n): return ",".join(["2"] + [str(rng.randrange(10, args.vocab)) for _ in range(n - 1)])
PPS = [int(x) for x in args.pp.split(",") if x]
prompts = {n: ids(n) for n in PPS}
PROMPT8 = ids(8)
threads = [int(x) for x in args.threads.split(",")]
rows = [r.split("|") for r in args.row]
# vatic binaries: (name, path); a plain path is named "vatic".
binaries = [tuple(v.split("=", 1)) if "=" in v else ("vatic", v) for v in args.vatic]

def llama(gguf, t):
    cmd = [args.llama_bench, "-m", gguf, "-t", str(t), "-p", ",".join(map(str, PPS)), "-n", str(args.ngen),
           "-r", str(args.reps), "-o", "jsonl"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env0)
    res = {}
    for line in p.stdout.splitlines():
        j = json.loads(line)
        key = f"pp{j['n_prompt']}" if j["n_prompt"] else "tg"
        res[key] = max(j["samples_ts"])
    if not res:
        sys.exit(f"llama-bench failed: {p.stderr[-2000:]}")
    return res

def vatic_run(exe, model, t, tokens, max_tokens, ignore_eos):
    env = dict(env0, OMP_NUM_THREADS=str(t))
    cmd = [exe, "debug", "generate", model, "--tokens", tokens, "--max-tokens", str(max_tokens)]
    if ignore_eos:
        cmd.append("--ignore-eos")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode:
        sys.exit(f"vatic failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return json.loads(p.stdout)["stats"]

def vatic_prefill_warm(exe, model, t, n):
    env = dict(env0, OMP_NUM_THREADS=str(t))
    cmd = [exe, "bench", "--model", model, "--prompt", str(n), "--tokens", "1", "--reps", str(args.reps + 1),
           "--no-verify", "--bandwidth-mib", "16"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    for line in p.stdout.splitlines():
        f = line.split()
        if f and f[0] == f"pp{n}":
            return float(f[1])
    sys.exit(f"vatic bench failed: {' '.join(cmd)}\n{p.stdout[-1000:]}{p.stderr[-2000:]}")

def vatic(exe, model, draft_model, t):
    res = {}
    if args.prefill == "warm":
        for n in PPS:
            res[f"pp{n}"] = vatic_prefill_warm(exe, model, t, n)
    for _ in range(args.reps):
        o = vatic_run(exe, model, t, PROMPT8, args.ngen, True)
        res["tg"] = max(res.get("tg", 0), o["decode_tokens_per_second"])
        for n in PPS if args.prefill == "cold" else []:
            o = vatic_run(exe, model, t, prompts[n], 1, False)
            res[f"pp{n}"] = max(res.get(f"pp{n}", 0), o["prompt_tokens"] / o["prefill_seconds"])
        if draft_model:
            o = vatic_run(exe, draft_model, t, PROMPT8, args.ngen, True)
            res["tg_draft"] = max(res.get("tg_draft", 0), o["decode_tokens_per_second"])
    return res

best = {}
for r in range(args.rounds):
    for row in rows:
        label, quant, gguf, vm = row[:4]
        dm = row[4] if len(row) > 4 else None
        for t in threads:
            order = [("llama", lambda: llama(gguf, t))]
            order += [(name, lambda exe=exe: vatic(exe, vm, dm, t)) for name, exe in binaries]
            if r % 2:
                order.reverse()
            for tool, fn in order:
                t0 = time.time()
                res = fn()
                for k, v in res.items():
                    kk = (label, quant, t, k, tool)
                    best[kk] = max(best.get(kk, 0), v)
                print(f"round {r} {label} {quant} t={t} {tool}: " + " ".join(f"{k}={v:.1f}" for k, v in res.items())
                      + f" ({time.time() - t0:.1f} s, load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)

metrics = ["tg"] + [f"pp{n}" for n in PPS]
names = {"tg": f"decode {args.ngen}", **{f"pp{n}": f"prefill {n}" for n in PPS}}
cols = [(m, name) for m in metrics for name, _ in binaries]
def head(m, name): return f"{names[m]} {name} / llama.cpp (tok/s)" if len(binaries) > 1 else f"{names[m]} vatic / llama.cpp (tok/s)"
print("| model | quant | threads | " + " | ".join(head(m, name) for m, name in cols) + " |")
print("|---|---|---|" + "---|" * len(cols))
for row in rows:
    label, quant = row[0], row[1]
    for t in threads:
        cells = []
        for m, name in cols:
            v, l = best.get((label, quant, t, m, name), 0), best.get((label, quant, t, m, "llama"), 0)
            cells.append(f"{v:.1f} / {l:.1f} ({v / l if l else 0:.2f})")
        print(f"| {label} | {quant} | {t} | " + " | ".join(cells) + " |")
        if len(row) > 4:
            cells = []
            for name, _ in binaries:
                v, l = best.get((label, quant, t, "tg_draft", name), 0), best.get((label, quant, t, "tg", "llama"), 0)
                cells.append(f"{v:.1f} / {l:.1f} ({v / l if l else 0:.2f}) vs plain")
            print(f"| {label} + drafter | {quant} | {t} | " + " | ".join(cells) + " |"
                  + " – |" * (len(cols) - len(binaries)))
if args.json:
    json.dump({"|".join(map(str, k)): v for k, v in best.items()}, open(args.json, "w"), indent=1)
