#!/usr/bin/env python3
"""Train the demo pair: tokenizer, Gemma 4 target (gemma4_text) and its gemma4_assistant drafter.

    python3 tools/demo-model/train.py --out OUTDIR

writes OUTDIR/gemma4-demo/ and OUTDIR/gemma4-demo-assistant/ (Hugging Face layout, bf16 weights) and
OUTDIR/train_metrics.json. Needs one CUDA GPU (a few minutes on an H200), torch, transformers with gemma4 and
tokenizers. Everything is seeded; see README.md.
"""
import argparse
import copy
import hashlib
import json
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402

T0 = time.time()


def log(*a):
    print(f"[{time.time() - T0:7.1f}s]", *a, flush=True)


def seed_all(seed):
    random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def lr_at(step, total, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def make_optimizer(model, lr, wd):
    decay, no_decay = [], []
    seen = set()
    for _, p in model.named_parameters():
        if not p.requires_grad or p.data_ptr() in seen:
            continue
        seen.add(p.data_ptr())
        (decay if p.dim() >= 2 else no_decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8)


class Windows:
    """Random training windows: BOS + T-1 tokens, starting at a paragraph start half of the time."""

    def __init__(self, stream, para_starts, seed):
        self.stream = torch.tensor(stream, dtype=torch.long)
        self.para_starts = torch.tensor(para_starts, dtype=torch.long)
        self.gen = torch.Generator().manual_seed(seed)

    def sample(self, bs, T):
        max_start = self.stream.numel() - (T - 1)
        ps = self.para_starts[self.para_starts < max_start]
        r = torch.randint(0, max_start, (bs,), generator=self.gen)
        pick = ps[torch.randint(0, ps.numel(), (bs,), generator=self.gen)]
        use_para = torch.rand(bs, generator=self.gen) < 0.5
        starts = torch.where(use_para, pick, r)
        w = self.stream[starts[:, None] + torch.arange(T - 1)]
        return torch.cat([torch.full((bs, 1), C.BOS, dtype=torch.long), w], 1).cuda()


def stream_with_starts(tok, paras_by_novel):
    ids, starts = [], []
    for n in C.NOVELS:
        for p in paras_by_novel[n]:
            starts.append(len(ids))
            ids.extend(tok.encode(p + "\n\n", add_special_tokens=False).ids)
    return ids, starts


def add_dropout(model, p):
    hooks = []
    for layer in model.model.layers:
        hooks.append(layer.mlp.register_forward_hook(lambda m, i, o: F.dropout(o, p, m.training)))
        hooks.append(layer.self_attn.o_proj.register_forward_hook(lambda m, i, o: F.dropout(o, p, m.training)))
    return hooks


@torch.no_grad()
def eval_target(model, val):
    model.eval()
    tot, n = 0.0, 0
    for i in range(0, val.shape[0], 16):
        b = val[i: i + 16]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            lg = model(input_ids=b).logits
        l = F.cross_entropy(lg[:, :-1].float().reshape(-1, lg.shape[-1]), b[:, 1:].reshape(-1), reduction="sum")
        tot += float(l)
        n += b[:, 1:].numel()
    model.train()
    return tot / n


def train_target(args, train_w, val, metrics):
    seed_all(args.seed)
    model = C.make_target("sdpa").cuda()
    log("target params:", C.n_params(model), "attn:", model.config._attn_implementation)
    metrics["target_params"] = C.n_params(model)
    hooks = add_dropout(model, args.dropout)
    opt = make_optimizer(model, args.target_lr, 0.1)
    best, best_state, curve = float("inf"), None, []
    model.train()
    for step in range(args.target_steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.target_steps, args.target_lr, 50)
        b = train_w.sample(args.target_bs, args.target_T)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            lg = model(input_ids=b).logits
        loss = F.cross_entropy(lg[:, :-1].float().reshape(-1, lg.shape[-1]), b[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if (step + 1) % args.eval_every == 0 or step + 1 == args.target_steps:
            vl = eval_target(model, val)
            curve.append({"step": step + 1, "train_loss": round(float(loss.detach()), 4), "val_loss": round(vl, 4)})
            log(f"target step {step + 1}: train {float(loss.detach()):.4f} val {vl:.4f}")
            if vl < best:
                best = vl
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                metrics["target_best_step"] = step + 1
    for h in hooks:
        h.remove()
    model.load_state_dict(best_state)
    metrics["target_curve"] = curve
    metrics["target_val_loss_fp32_master"] = best
    return model


@torch.no_grad()
def generate_pool(target, train_w, args, metrics):
    """Continuations written by the frozen (bf16) target: greedy and sampled, prompts from the training text."""
    pool = []
    temps = [0.0, 0.8, 1.0]
    for i in range(args.gen_batches):
        P = [64, 128, 192][i % 3]
        temp = temps[i % len(temps)]
        prompts = train_w.sample(args.gen_bs, P)
        new = args.drafter_T - P
        torch.manual_seed(args.seed + 100 + i)
        kw = dict(do_sample=False) if temp == 0 else dict(do_sample=True, temperature=temp, top_k=0, top_p=1.0)
        out = target.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=new,
                              min_new_tokens=new, pad_token_id=C.PAD, **kw)
        assert out.shape[1] == args.drafter_T, out.shape
        pool.append(out)
        log(f"generated batch {i}: prompt {P}, temperature {temp}, shape {tuple(out.shape)}")
    pool = torch.cat(pool)
    metrics["drafter_generated_sequences"] = int(pool.shape[0])
    return pool


def drafter_loss(target, drafter, ids, depth):
    """Distillation loss of the parallel teacher-forced drafting objective over every context of every row."""
    B, T = ids.shape
    with torch.no_grad():
        h, kv, emb, tlog = C.target_pass(target, ids)
        tlogp = torch.log_softmax(tlog.float(), -1)
        targ_arg = tlog.argmax(-1)
    q_pos = torch.arange(1, T, device=ids.device)  # query position p = L-1
    masks = C.drafter_masks(q_pos, T)
    pos = q_pos[None].expand(B, -1)
    hid = h[:, : T - 1]
    total, stats = 0.0, []
    for j in range(depth):
        src = (q_pos + j).clamp(max=T - 1)  # input token of step j: position p+j
        e = emb[:, src]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            lg, hid = C.drafter_step(drafter, e, hid, pos, masks, kv)
        valid = (q_pos + j + 1 <= T - 1)  # step j predicts token p+1+j, the target's distribution at p+j
        tp = tlogp[:, src][:, valid]
        dl = torch.log_softmax(lg.float()[:, valid], -1)
        kl = (tp.exp() * (tp - dl)).sum(-1).mean()
        total = total + kl
        with torch.no_grad():
            agree = (lg[:, valid].argmax(-1) == targ_arg[:, src][:, valid]).float().mean()
        stats.append((float(kl.detach()), float(agree)))
    return total / depth, stats


def train_drafter(args, target, train_w, pool, val_d, metrics):
    seed_all(args.seed + 1)
    drafter = C.make_drafter("sdpa").cuda()
    log("drafter params:", C.n_params(drafter), "attn:", drafter.config.get_text_config()._attn_implementation)
    metrics["drafter_params"] = C.n_params(drafter)
    opt = make_optimizer(drafter, args.drafter_lr, 0.01)
    gen = torch.Generator().manual_seed(args.seed + 2)
    curve = []
    half = args.drafter_bs // 2
    for step in range(args.drafter_steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.drafter_steps, args.drafter_lr, 50)
        real = train_w.sample(args.drafter_bs - half, args.drafter_T)
        synth = pool[torch.randint(0, pool.shape[0], (half,), generator=gen).cuda()]
        ids = torch.cat([real, synth])
        loss, stats = drafter_loss(target, drafter, ids, C.DRAFT_DEPTH)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if (step + 1) % args.eval_every == 0 or step + 1 == args.drafter_steps:
            with torch.no_grad():
                vloss, vstats = drafter_loss(target, drafter, val_d, C.DRAFT_DEPTH)
            row = {"step": step + 1, "train_kl": round(float(loss.detach()), 4), "val_kl": round(float(vloss), 4),
                   "val_top1_agreement_per_step": [round(a, 4) for _, a in vstats]}
            curve.append(row)
            log(f"drafter step {step + 1}: {row}")
    metrics["drafter_curve"] = curve
    return drafter


def heldout_prompts(stream, starts, n, P):
    out = []
    for s in starts:
        if s + P - 1 <= len(stream):
            out.append([C.BOS] + stream[s: s + P - 1])
        if len(out) == n:
            break
    return torch.tensor(out).cuda()


@torch.no_grad()
def greedy_acceptance(target, drafter, prompts, new):
    P = prompts.shape[1]
    seq = target.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), do_sample=False,
                          max_new_tokens=new + C.DRAFT_DEPTH + 1, min_new_tokens=new + C.DRAFT_DEPTH + 1,
                          pad_token_id=C.PAD)
    drafts, arg = C.draft_all_rows(target, drafter, seq)
    mism = (arg[:, P - 1: -1] != seq[:, P:]).float().mean().item()
    R = A = 0
    for b in range(seq.shape[0]):
        r, a, _ = C.simulate_greedy_rounds(seq[b].tolist(), drafts[b].tolist(), P, new)
        R += r
        A += a
    return {"prompts": int(seq.shape[0]), "prompt_len": P, "new_tokens": new, "rounds": R, "accepted": A,
            "acceptance_length": round(1 + A / R, 4), "generate_vs_forward_argmax_mismatch": round(mism, 5)}


def save_pair(target, drafter, tok_json, out, metrics):
    tdir = os.path.join(out, "gemma4-demo")
    ddir = os.path.join(out, "gemma4-demo-assistant")
    t = copy.deepcopy(target).to(torch.bfloat16)
    t.generation_config.bos_token_id = C.BOS
    t.generation_config.eos_token_id = [C.EOS, 106]
    t.generation_config.pad_token_id = C.PAD
    t.save_pretrained(tdir)
    with open(os.path.join(tdir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok_json, f, ensure_ascii=False, indent=2)
    with open(os.path.join(tdir, "tokenizer_config.json"), "w") as f:
        json.dump(C.TOKENIZER_CONFIG, f, indent=2)
    d = copy.deepcopy(drafter).to(torch.bfloat16)
    d.generation_config.bos_token_id = C.BOS
    d.generation_config.eos_token_id = [C.EOS, 106]
    d.generation_config.pad_token_id = C.PAD
    d.generation_config.num_assistant_tokens = C.DRAFT_DEPTH
    d.generation_config.num_assistant_tokens_schedule = "constant"
    d.save_pretrained(ddir)
    for dd in (tdir, ddir):
        for fn in sorted(os.listdir(dd)):
            pth = os.path.join(dd, fn)
            metrics.setdefault("files", {})[os.path.relpath(pth, out)] = {
                "bytes": os.path.getsize(pth),
                "sha256": hashlib.sha256(open(pth, "rb").read()).hexdigest()}
    log("saved", metrics["files"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--quick", action="store_true", help="tiny smoke run of every stage")
    ap.add_argument("--target-steps", type=int, default=300)
    ap.add_argument("--target-bs", type=int, default=32)
    ap.add_argument("--target-T", type=int, default=C.CONTEXT)
    ap.add_argument("--target-lr", type=float, default=1.5e-3)
    ap.add_argument("--dropout", type=float, default=0.15)
    ap.add_argument("--gen-batches", type=int, default=6)
    ap.add_argument("--gen-bs", type=int, default=512)
    ap.add_argument("--drafter-steps", type=int, default=1200)
    ap.add_argument("--drafter-bs", type=int, default=64)
    ap.add_argument("--drafter-T", type=int, default=512)
    ap.add_argument("--drafter-lr", type=float, default=2e-3)
    ap.add_argument("--eval-every", type=int, default=50)
    args = ap.parse_args()
    if args.quick:
        args.target_steps, args.drafter_steps, args.gen_batches, args.gen_bs, args.eval_every = 20, 20, 2, 16, 10
    os.makedirs(args.out, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = True
    import tokenizers
    import transformers
    metrics = {"args": vars(args), "torch": torch.__version__, "transformers": transformers.__version__,
               "tokenizers": tokenizers.__version__}
    log(metrics)

    train, heldout = C.load_corpus()
    train_paras = [p for n in C.NOVELS for p in train[n]]
    tok_json, _ = C.train_tokenizer(train_paras)
    tok = tokenizers.Tokenizer.from_str(json.dumps(tok_json))
    assert tok.get_vocab_size() == C.VOCAB_SIZE, tok.get_vocab_size()
    for i, s in C.GEMMA_SPECIAL_IDS.items():
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))
    # the shipped pipeline (no pre-split) must give the training pipeline's ids on whole multi-paragraph text
    _, tok_train = C.train_tokenizer(train_paras)  # trained again: also checks determinism
    assert json.loads(tok_train.to_str())["model"]["merges"] == tok_json["model"]["merges"], "not deterministic"
    held_paras = [p for n in C.NOVELS for p in heldout[n]]
    sample = "\n\n".join(held_paras[:300]) + "\n\n"
    a = tok.encode(sample, add_special_tokens=False).ids
    b = tok_train.encode(sample, add_special_tokens=False).ids
    assert a == b, "shipped tokenizer pipeline differs from the training pipeline"
    assert tok.decode(a, skip_special_tokens=False) == sample, "round trip failed"
    assert tok.encode("Hello").ids[0] == C.BOS
    metrics["tokenizer_sha256"] = hashlib.sha256(json.dumps(tok_json).encode()).hexdigest()
    log("tokenizer ok; merges:", len(tok_json["model"]["merges"]), "first merges:", tok_json["model"]["merges"][:8])

    tr_stream, tr_starts = stream_with_starts(tok, train)
    he_stream, he_starts = stream_with_starts(tok, heldout)
    metrics["train_tokens"], metrics["heldout_tokens"] = len(tr_stream), len(he_stream)
    metrics["chars_per_token"] = round(sum(len(p) + 2 for p in train_paras) / len(tr_stream), 3)
    log("tokens: train", len(tr_stream), "heldout", len(he_stream), "chars/token", metrics["chars_per_token"])
    train_w = Windows(tr_stream, tr_starts, args.seed)
    Tm1 = args.target_T - 1
    val = torch.tensor([[C.BOS] + he_stream[i: i + Tm1] for i in range(0, len(he_stream) - Tm1, Tm1)]).cuda()

    target = train_target(args, train_w, val, metrics)
    target = target.to(torch.bfloat16).eval()  # the drafter learns against the shipped (bf16) target
    for p in target.parameters():
        p.requires_grad_(False)
    metrics["target_val_loss_bf16"] = eval_target(target, val)
    target.eval()
    log("target val loss (bf16 weights):", metrics["target_val_loss_bf16"])

    pool = generate_pool(target, train_w, args, metrics)
    Td = args.drafter_T - 1
    val_d = torch.tensor([[C.BOS] + he_stream[i: i + Td] for i in range(0, len(he_stream) - Td, Td)][:32]).cuda()
    drafter = train_drafter(args, target, train_w, pool, val_d, metrics)
    drafter = drafter.to(torch.bfloat16).eval()

    prompts = heldout_prompts(he_stream, he_starts, 16 if args.quick else 128, 48)
    acc = greedy_acceptance(target, drafter, prompts, 32 if args.quick else 128)
    metrics["greedy_acceptance_bf16_gpu"] = acc
    log("greedy acceptance (bf16, batched rounds):", acc)

    save_pair(target, drafter, tok_json, args.out, metrics)
    metrics["seconds"] = round(time.time() - T0, 1)
    with open(os.path.join(args.out, "train_metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
    log("done")


if __name__ == "__main__":
    main()
