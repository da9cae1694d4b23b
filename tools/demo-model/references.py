#!/usr/bin/env python3
"""Reference outputs of the bundled demo pair, for the engine's parity tests.

    python3 tools/demo-model/references.py --models models/demo --out tests/fixtures/demo/references.json

Greedy continuations are computed by transformers in float32 on the CPU from the bf16 weights, eager attention,
both with plain `generate` and with `generate(assistant_model=...)`; the clean drafting rounds (the fixtures
README's semantics) are computed by common.speculative_decode on the CPU in float32 as well. The acceptance
lengths over many held-out prompts run on a CUDA GPU when there is one (float32, TF32 off), else on the CPU.
"""
import argparse
import json
import os
import random
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402

T0 = time.time()
NEW_TOKENS = 48
TOKENIZER_SAMPLES = [
    "Hello world",
    "It is a truth universally acknowledged",
    "  two  spaces, a tab\tand trailing space ",
    "line\nbreak\n\n\nnew paragraph",
    "\u00a320,000 a year, caf\u00e9, na\u00efve \u2014 \u2615",
    "<|turn>user\nHow are you?<turn|>\n<|turn>model\n",
]


def log(*a):
    print(f"[{time.time() - T0:7.1f}s]", *a, flush=True)


def load(models, device, impl):
    from transformers import Gemma4AssistantForCausalLM, Gemma4ForCausalLM

    t = Gemma4ForCausalLM.from_pretrained(os.path.join(models, "gemma4-demo"), dtype=torch.float32,
                                          attn_implementation=impl).to(device).eval()
    d = Gemma4AssistantForCausalLM.from_pretrained(os.path.join(models, "gemma4-demo-assistant"),
                                                   dtype=torch.float32, attn_implementation=impl).to(device).eval()
    return t, d


def pick_prompts(heldout, n, seed):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        novel = C.NOVELS[i % len(C.NOVELS)]
        cands = [p for p in heldout[novel] if len(p.split()) >= 40 and not p.upper().startswith("CHAPTER")]
        p = cands[rng.randrange(len(cands))]
        words = p.split()[: rng.randint(8, 30)]
        out.append(" ".join(words))
    return out


@torch.no_grad()
def hf_forward_check(target, drafter_hf, drafter_mine, seq):
    """transformers' own Gemma4AssistantForCausalLM.forward for one query vs common.drafter_step, 2 steps."""
    res = []
    h, kv, emb, _ = C.target_pass(target, seq)
    for L in (40, C.SLIDING_WINDOW + 1, C.SLIDING_WINDOW + 2, 300):
        if L > seq.shape[1]:
            continue
        p = L - 1
        kv_c = {k: (v[0][:, :, :p], v[1][:, :, :p]) for k, v in kv.items()}
        pos = torch.tensor([[p]])
        row = {"context_len": L}
        for W, name in ((C.SLIDING_WINDOW, "window_W"), (C.SLIDING_WINDOW + 1, "window_W_plus_1")):
            e, hid_hf, hid_m = emb[:, p: p + 1], h[:, p - 1: p], h[:, p - 1: p]
            diffs = []
            for step in range(2):
                o = drafter_hf(inputs_embeds=torch.cat([e, hid_hf], -1), position_ids=pos, shared_kv_states=kv_c)
                lg_m, hid_m2 = C.drafter_step(drafter_mine, e, hid_m, pos, C.drafter_masks(pos[0], p, W), kv_c)
                diffs.append(float((o.logits[0, -1] - lg_m[0, -1]).abs().max()))
                diffs.append(float((o.last_hidden_state[0, -1] - hid_m2[0, -1]).abs().max()))
                tok = int(o.logits[0, -1].argmax())
                e = target.model.embed_tokens(torch.tensor([[tok]]))
                hid_hf, hid_m = o.last_hidden_state[:, -1:], hid_m2
            row[name + "_max_abs_diff"] = max(diffs)
        res.append(row)
    return res


@torch.no_grad()
def acceptance(models, he_stream, he_starts, quick):
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    target, drafter = load(models, dev, "sdpa")
    P, n, new = 48, (16 if quick else 128), (32 if quick else 128)
    prompts = []
    for s in he_starts:
        if s + P - 1 <= len(he_stream):
            prompts.append([C.BOS] + he_stream[s: s + P - 1])
        if len(prompts) == n:
            break
    pr = torch.tensor(prompts, device=dev)
    seq = target.generate(input_ids=pr, attention_mask=torch.ones_like(pr), do_sample=False,
                          max_new_tokens=new + C.DRAFT_DEPTH + 1, min_new_tokens=new + C.DRAFT_DEPTH + 1,
                          pad_token_id=C.PAD)
    R = A = 0
    per = []
    for i in range(0, seq.shape[0], 16):
        drafts, arg = C.draft_all_rows(target, drafter, seq[i: i + 16])
        for b in range(drafts.shape[0]):
            r, a, _ = C.simulate_greedy_rounds(seq[i + b].tolist(), drafts[b].tolist(), P, new)
            R, A = R + r, A + a
            per.append(round(1 + a / r, 3))
    greedy = {"method": "batched rounds along the target's greedy continuation (equivalent to sequential greedy "
                        "speculative decoding)", "device": dev, "dtype": "float32",
              "prompts": len(prompts), "prompt_tokens": P, "new_tokens": new, "draft_depth": C.DRAFT_DEPTH,
              "rounds": R, "accepted": A, "acceptance_length": round(1 + A / R, 4),
              "acceptance_length_per_prompt": per}
    # cross-check: sequential clean implementation on a few prompts must give the same rounds
    R2 = A2 = 0
    same = []
    for b in range(4):
        out, r, a, _ = C.speculative_decode(target, drafter, prompts[b], new)
        same.append(out == seq[b, P: P + new].tolist())
        R2, A2 = R2 + r, A2 + a
    Rb = Ab = 0
    drafts, _ = C.draft_all_rows(target, drafter, seq[:4])
    for b in range(4):
        r, a, _ = C.simulate_greedy_rounds(seq[b].tolist(), drafts[b].tolist(), P, new)
        Rb, Ab = Rb + r, Ab + a
    greedy["sequential_crosscheck_first4"] = {"sequential_rounds_accepted": [R2, A2],
                                             "batched_rounds_accepted": [Rb, Ab],
                                             "sequential_output_equals_generate": same}
    log("greedy acceptance", {k: v for k, v in greedy.items() if k != "acceptance_length_per_prompt"})

    gen = torch.Generator(device=dev).manual_seed(1234)
    ns = 8 if quick else 32
    R = A = 0
    for b in range(ns):
        _, r, a, _ = C.speculative_decode(target, drafter, prompts[b], new, temperature=0.8, gen=gen)
        R, A = R + r, A + a
    sampled = {"method": "sequential speculative sampling (drafts sampled from the drafter at temperature 0.8, "
                         "accepted with probability min(1, p/q), residual resampling, bonus token)",
               "device": dev, "dtype": "float32", "temperature": 0.8, "seed": 1234, "prompts": ns,
               "prompt_tokens": P, "new_tokens": new, "draft_depth": C.DRAFT_DEPTH, "rounds": R, "accepted": A,
               "acceptance_length": round(1 + A / R, 4)}
    log("sampled acceptance", sampled)
    return greedy, sampled


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(os.cpu_count() or 4)
    import tokenizers
    import transformers
    from transformers import AutoTokenizer

    tdir = os.path.join(args.models, "gemma4-demo")
    tok = tokenizers.Tokenizer.from_file(os.path.join(tdir, "tokenizer.json"))
    try:
        hf_tok = AutoTokenizer.from_pretrained(tdir)
    except Exception as e:  # noqa: BLE001
        hf_tok = None
        log("AutoTokenizer failed:", repr(e))
    train, heldout = C.load_corpus()
    he_stream, he_starts = [], []
    for n in C.NOVELS:
        for p in heldout[n]:
            he_starts.append(len(he_stream))
            he_stream.extend(tok.encode(p + "\n\n", add_special_tokens=False).ids)

    ref = {
        "description": "Greedy references and measured acceptance of the bundled demo pair (models/demo). Prompts "
                       "are plain text from held-out paragraphs (not trained on), encoded with BOS by the "
                       "target's tokenizer.json.",
        "target": "models/demo/gemma4-demo", "assistant": "models/demo/gemma4-demo-assistant",
        "transformers": transformers.__version__, "torch": torch.__version__, "tokenizers": tokenizers.__version__,
        "greedy_compute": "transformers generate, float32 on the CPU from the bf16 weights, eager attention",
        "drafter_semantics": "round with context L: the target has processed tokens 0..L-2, token L-1 is its "
                             "last choice; every draft step queries at position L-1 over the target's donor K/V "
                             "of positions < L-1 (sliding layer: the last sliding_window of them, positions "
                             "L-1-W..L-2); step 0 input = concat(target scaled embedding of token L-1, target "
                             "final-normed hidden at L-2); step j>0 feeds back its own draft and post-projected "
                             "hidden. rounds[].drafts are the argmax drafts; accepted = matching prefix length.",
        "max_new_tokens": NEW_TOKENS, "draft_depth": C.DRAFT_DEPTH,
    }
    ref["tokenizer_samples"] = []
    for s in TOKENIZER_SAMPLES:
        enc = tok.encode(s)
        row = {"text": s, "ids_with_bos": enc.ids, "decoded": tok.decode(enc.ids, skip_special_tokens=False)}
        if hf_tok is not None:
            row["autotokenizer_agrees"] = hf_tok(s)["input_ids"] == enc.ids
        ref["tokenizer_samples"].append(row)

    t_eager, d_eager = load(args.models, "cpu", "eager")
    t_sdpa, d_sdpa = load(args.models, "cpu", "sdpa")
    cases = []
    for text in pick_prompts(heldout, 10, 7):
        ids = tok.encode(text).ids
        if hf_tok is not None:
            assert hf_tok(text)["input_ids"] == ids, "AutoTokenizer disagrees with tokenizer.json"
        x = torch.tensor([ids])
        plain = t_eager.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=False,
                                 max_new_tokens=NEW_TOKENS, pad_token_id=C.PAD)[0, len(ids):].tolist()
        try:
            assisted = t_eager.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=False,
                                        max_new_tokens=NEW_TOKENS, pad_token_id=C.PAD,
                                        assistant_model=d_eager)[0, len(ids):].tolist()
            assisted_ok = assisted == plain
        except Exception as e:  # noqa: BLE001
            assisted, assisted_ok = None, "error: " + repr(e)
        spec, r, a, rounds = C.speculative_decode(t_sdpa, d_sdpa, ids, NEW_TOKENS)
        full = torch.tensor([ids + plain])
        _, _, _, lg = C.target_pass(t_eager, full)
        lg = lg[0, len(ids) - 1: -1]
        top2 = lg.topk(2, -1).values
        margins = (top2[:, 0] - top2[:, 1]).tolist()
        fwd_agrees = lg.argmax(-1).tolist() == plain
        cases.append({"prompt_text": text, "prompt_ids": ids, "greedy": plain,
                      "greedy_text": tok.decode(plain), "assisted_generate_agrees": assisted_ok,
                      "clean_speculative_agrees": spec == plain, "single_forward_argmax_agrees": fwd_agrees,
                      "min_margin": min(margins), "greedy_margins": [round(m, 5) for m in margins],
                      "rounds": rounds, "acceptance_length": round(1 + a / r, 4)})
        log(f"case: {text!r} -> {tok.decode(plain)!r} assisted={assisted_ok} spec={spec == plain} "
            f"acc={1 + a / r:.3f} min_margin={min(margins):.4f}")
    ref["cases"] = cases
    R = sum(len(c["rounds"]) for c in cases)
    A = sum(sum(x["accepted"] for x in c["rounds"]) for c in cases)
    ref["reference_prompts_greedy_acceptance_length"] = round(1 + A / R, 4)

    long_seq = torch.tensor([[C.BOS] + he_stream[1000: 1000 + 319]])
    ref["hf_assistant_forward_check"] = {
        "what": "max |difference| of logits and post-projected hidden between transformers' "
                "Gemma4AssistantForCausalLM.forward (shared_kv_states cropped to the L-1 processed tokens, no "
                "attention mask) and common.drafter_step with W or W+1 sliding keys, two draft steps, float32 CPU",
        "rows": hf_forward_check(t_sdpa, d_eager, d_sdpa, long_seq)}
    log("hf check", ref["hf_assistant_forward_check"]["rows"])

    greedy, sampled = acceptance(args.models, he_stream, he_starts, args.quick)
    ref["acceptance"] = {"greedy": greedy, "sampled": sampled}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(ref, f, indent=1, ensure_ascii=False)
    log("wrote", args.out)


if __name__ == "__main__":
    main()
