"""Shared pieces of the demo-model scripts: corpus, tokenizer, model configs and the drafter's forward.

The drafter semantics implemented here are the ones the engine uses (see the fixtures README): for a context of
L tokens, the target has processed tokens 0..L-2 and token L-1 is the one it just chose. Draft step j (j = 0..K-1)
queries at position L-1, attends to the target's donor K/V of positions < L-1 (full layer: all of them; sliding
layer: the last W of them, positions L-1-W..L-2), and takes as input concat(target scaled embedding of its input
token, hidden), where hidden is the target's final-normed hidden state at L-2 for j = 0 and the drafter's own
post-projected output of step j-1 afterwards. Step j predicts token L+j.
"""
import json
import lzma
import os

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
NOVELS = ["sensesensibility", "prideprejudice", "mansfieldpark", "emma", "northangerabbey", "persuasion"]
HELDOUT_FRACTION = 0.05  # the last 5% (by characters) of every novel is held out

VOCAB_SIZE = 4096
SLIDING_WINDOW = 128
CONTEXT = 1024
DRAFT_DEPTH = 4
BOS, EOS, PAD = 2, 1, 0


# ---------------------------------------------------------------------------------------------- corpus

def load_corpus():
    """Returns (train, heldout): dicts novel -> list of paragraphs."""
    train, heldout = {}, {}
    for n in NOVELS:
        with lzma.open(os.path.join(HERE, "corpus", n + ".txt.xz"), "rt", encoding="utf-8") as f:
            paras = f.read().strip("\n").split("\n\n")
        cut = sum(len(p) for p in paras) * (1.0 - HELDOUT_FRACTION)
        acc, k = 0, len(paras)
        for i, p in enumerate(paras):
            acc += len(p)
            if acc > cut:
                k = i
                break
        train[n], heldout[n] = paras[:k], paras[k:]
    return train, heldout


# ---------------------------------------------------------------------------------------------- tokenizer

# Gemma 4's ids for its special and chat tokens; the gaps are filled with <unusedN> like the real vocabulary.
GEMMA_SPECIAL_IDS = {
    0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 4: "<mask>",
    46: "<|tool>", 47: "<tool|>", 48: "<|tool_call>", 49: "<tool_call|>", 50: "<|tool_response>",
    51: "<tool_response|>", 52: '<|"|>', 98: "<|think|>", 100: "<|channel>", 101: "<channel|>",
    105: "<|turn>", 106: "<turn|>",
}


def special_token_list():
    out, unused = [], 0
    for i in range(max(GEMMA_SPECIAL_IDS) + 1):
        if i in GEMMA_SPECIAL_IDS:
            out.append(GEMMA_SPECIAL_IDS[i])
        else:
            out.append(f"<unused{unused}>")
            unused += 1
    out += [f"<0x{b:02X}>" for b in range(256)]  # byte-fallback tokens, ids 107..362
    return out


def train_tokenizer(paragraphs):
    """SentencePiece-style BPE with byte fallback, laid out like the fixture (and Gemma's) tokenizer.json.

    Training splits the normalized text into newline runs and '▁'-prefixed words so that no merge crosses a word
    or newline boundary (as SentencePiece does). The shipped file then uses the fixture's pipeline (normalizer
    ' '->'▁', a Split pre-tokenizer on ' ' that is a no-op after normalization), under which BPE over the whole text
    gives the same ids because no learned merge spans such a boundary (checked by the caller).
    """
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex("\n+"), behavior="isolated"),
        pre_tokenizers.Split("\u2581", behavior="merged_with_next"),
    ])
    specials = special_token_list()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=specials, min_frequency=2,
                                  limit_alphabet=1000, show_progress=False)
    tok.train_from_iterator((p + "\n\n" for p in paragraphs), trainer=trainer)
    d = json.loads(tok.to_str())
    d["added_tokens"] = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, s in enumerate(specials)]
    d["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
    d["pre_tokenizer"] = {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                          "invert": False}
    d["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 0}}],
        "special_tokens": {"<bos>": {"id": "<bos>", "ids": [BOS], "tokens": ["<bos>"]}},
    }
    d["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"}]}
    m = d["model"]
    m.update({"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False})
    d["model"] = {k: m[k] for k in ["type", "dropout", "unk_token", "continuing_subword_prefix",
                                    "end_of_word_suffix", "fuse_unk", "byte_fallback", "ignore_merges",
                                    "vocab", "merges"]}
    ordered = {k: d[k] for k in ["version", "truncation", "padding", "added_tokens", "normalizer",
                                 "pre_tokenizer", "post_processor", "decoder", "model"]}
    return ordered, tok


TOKENIZER_CONFIG = {
    "tokenizer_class": "PreTrainedTokenizerFast",
    "bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>",
    "model_max_length": CONTEXT, "padding_side": "left", "clean_up_tokenization_spaces": False,
}


def encode_paragraphs(tok, paragraphs):
    """Token stream of paragraphs each followed by a blank line (equal to encoding the joined text)."""
    ids = []
    for enc in tok.encode_batch([p + "\n\n" for p in paragraphs], add_special_tokens=False):
        ids.extend(enc.ids)
    return ids


# ---------------------------------------------------------------------------------------------- configs

ROPE = {
    "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
    "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
}
HEAD_DIM, GLOBAL_HEAD_DIM, N_HEADS, N_KV_HEADS = 64, 128, 4, 1

TARGET_TEXT = {
    "attention_bias": False, "attention_dropout": 0.0, "attention_k_eq_v": False,
    "bos_token_id": BOS, "eos_token_id": EOS, "pad_token_id": PAD,
    "enable_moe_block": False, "final_logit_softcapping": 30.0,
    "head_dim": HEAD_DIM, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 256,
    "hidden_size_per_layer_input": 64, "initializer_range": 0.02, "intermediate_size": 768,
    "layer_types": ["sliding_attention"] * 4 + ["full_attention"] + ["sliding_attention"] * 4 + ["full_attention"],
    "max_position_embeddings": CONTEXT, "num_attention_heads": N_HEADS, "num_hidden_layers": 10,
    "num_key_value_heads": N_KV_HEADS, "num_kv_shared_layers": 4,
    "rms_norm_eps": 1e-6, "rope_parameters": ROPE, "sliding_window": SLIDING_WINDOW,
    "tie_word_embeddings": True, "use_cache": True, "use_double_wide_mlp": True,
    "vocab_size": VOCAB_SIZE, "vocab_size_per_layer_input": VOCAB_SIZE,
}

DRAFTER_TEXT = dict(TARGET_TEXT, **{
    "hidden_size": 128, "intermediate_size": 512, "hidden_size_per_layer_input": 0,
    "layer_types": ["sliding_attention", "full_attention"], "num_hidden_layers": 2, "num_kv_shared_layers": 2,
    "use_double_wide_mlp": False, "vocab_size_per_layer_input": 0,
})


def make_text_config(d):
    """Gemma4TextConfig with the full layers' head_dim given per layer (the 5.x layout); falls back to
    global_head_dim for versions that use that name."""
    from transformers import Gemma4TextConfig

    d = dict(d)
    full = [i for i, t in enumerate(d["layer_types"]) if t == "full_attention"]
    try:
        cfg = Gemma4TextConfig(**d, per_layer_config={str(i): {"head_dim": GLOBAL_HEAD_DIM} for i in full})
        if _full_head_dim(cfg, full[0]) == GLOBAL_HEAD_DIM:
            return cfg
    except Exception as e:  # noqa: BLE001
        print("per_layer_config not accepted:", repr(e))
    cfg = Gemma4TextConfig(**d, global_head_dim=GLOBAL_HEAD_DIM)
    assert _full_head_dim(cfg, full[0]) == GLOBAL_HEAD_DIM, "cannot express the full layers' head_dim"
    return cfg


def _full_head_dim(cfg, layer):
    from transformers.models.gemma4 import modeling_gemma4 as mg
    return mg.Gemma4TextAttention(cfg, layer).head_dim


def _set_attn(model, impl):
    try:
        model.set_attn_implementation(impl)
    except Exception as e:  # noqa: BLE001
        print("set_attn_implementation failed:", repr(e))


def _init_qk_norms(model):
    # Gemma 4 attends with scale 1.0 after QK-norm; starting the norm weights at d^-1/4 gives unit-variance
    # attention logits at initialization instead of std sqrt(d).
    with torch.no_grad():
        for layer in model.model.layers:
            att = layer.self_attn
            att.q_norm.weight.fill_(att.head_dim ** -0.25)
            if hasattr(att, "k_norm"):
                att.k_norm.weight.fill_(att.head_dim ** -0.25)


def make_target(impl="sdpa"):
    from transformers import Gemma4ForCausalLM

    cfg = make_text_config(TARGET_TEXT)
    cfg._attn_implementation = impl
    model = Gemma4ForCausalLM(cfg)
    _set_attn(model, impl)
    _init_qk_norms(model)
    if model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        model.lm_head.weight = model.model.embed_tokens.weight
    return model


def make_drafter(impl="sdpa"):
    from transformers import Gemma4AssistantConfig, Gemma4AssistantForCausalLM

    text = make_text_config(DRAFTER_TEXT)
    cfg = Gemma4AssistantConfig(text_config=text, backbone_hidden_size=TARGET_TEXT["hidden_size"],
                                use_ordered_embeddings=False, tie_word_embeddings=True)
    cfg._attn_implementation = impl
    model = Gemma4AssistantForCausalLM(cfg)
    _set_attn(model, impl)
    _init_qk_norms(model)
    if model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        model.lm_head.weight = model.model.embed_tokens.weight
    return model


def n_params(model):
    seen, n = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            n += p.numel()
    return n


# ---------------------------------------------------------------------------------------------- forward pieces

def softcap(logits, cap):
    return torch.tanh(logits / cap) * cap if cap else logits


def target_pass(target, ids, want_logits=True):
    """One causal forward of the target over ids [B, T]. Returns (final-normed hidden [B,T,H], donor K/V
    {layer_type: (K [B,nkv,T,d], V)}, scaled embeddings of ids [B,T,H], softcapped logits [B,T,V] or None)."""
    kv = {}
    out = target.model(input_ids=ids, shared_kv_states=kv, use_cache=False)
    if "full_attention" not in kv:
        out = target.model(input_ids=ids, use_cache=False, return_shared_kv_states=True)
        kv = dict(out.shared_kv_states)
    kv = {k: (v[0], v[1]) for k, v in kv.items()}
    h = out.last_hidden_state
    logits = None
    if want_logits:
        logits = softcap(target.lm_head(h), target.config.final_logit_softcapping)
    emb = target.model.embed_tokens(ids)
    return h, kv, emb, logits


def drafter_masks(q_pos, n_keys, window=SLIDING_WINDOW):
    """Boolean masks (True = attend) for drafter queries at positions q_pos [Tq] over n_keys target keys."""
    k = torch.arange(n_keys, device=q_pos.device)[None, :]
    p = q_pos[:, None]
    full = k < p
    sliding = full & (k >= p - window)
    return {"full_attention": full[None, None], "sliding_attention": sliding[None, None]}


def drafter_step(drafter, emb, hidden, pos, masks, kv):
    """One draft step for a batch of queries. emb, hidden [B,Tq,H_target]; pos [B,Tq]. Returns (logits, next
    hidden [B,Tq,H_target])."""
    x = torch.cat([emb, hidden.to(emb.dtype)], dim=-1)
    z = drafter.pre_projection(x)
    out = drafter.model(inputs_embeds=z, attention_mask=masks, position_ids=pos, shared_kv_states=kv,
                        use_cache=False)
    y = out.last_hidden_state
    return drafter.lm_head(y), drafter.post_projection(y)


@torch.no_grad()
def draft_all_rows(target, drafter, seq, depth=DRAFT_DEPTH):
    """Greedy drafts for every possible round of one greedy decode, in parallel.

    seq [B,T]: prompt + the target's greedy continuation. Row p (1..T-1) is the round whose context is
    L = p+1 tokens (the target processed 0..p-1; token p is its last choice). Returns drafts [B, T-1, depth]
    (row index p-1) produced with the drafter's own argmax fed back, and the target's full-forward argmax [B,T].
    """
    B, T = seq.shape
    h, kv, emb, logits = target_pass(target, seq)
    q_pos = torch.arange(1, T, device=seq.device)
    masks = drafter_masks(q_pos, T)
    pos = q_pos[None].expand(B, -1)
    hid = h[:, : T - 1]
    tok_emb = emb[:, 1:]
    drafts = []
    for _ in range(depth):
        lg, hid = drafter_step(drafter, tok_emb, hid, pos, masks, kv)
        d = lg.float().argmax(-1)
        drafts.append(d)
        tok_emb = target.model.embed_tokens(d)
    return torch.stack(drafts, -1), logits.float().argmax(-1)


def simulate_greedy_rounds(seq, drafts, prompt_len, new_tokens, depth=DRAFT_DEPTH):
    """Rounds of greedy speculative decoding along the greedy sequence seq (1D list); drafts[p-1] are the drafts
    of the round with context p+1. Returns (rounds, accepted, per-round list)."""
    L = prompt_len + 1  # the prefill produced the first new token
    rounds, accepted, log = 0, 0, []
    while L - prompt_len < new_tokens:
        p = L - 1
        d = drafts[p - 1]
        a = 0
        while a < depth and p + 1 + a < len(seq) and d[a] == seq[p + 1 + a]:
            a += 1
        log.append({"context_len": L, "drafts": [int(x) for x in d], "accepted": a})
        rounds += 1
        accepted += a
        L += a + 1
    return rounds, accepted, log


@torch.no_grad()
def speculative_decode(target, drafter, prompt, new_tokens, depth=DRAFT_DEPTH, temperature=0.0, gen=None):
    """Clean sequential speculative decoding (one target forward per round, no caches: every forward recomputes
    the whole sequence, so there is nothing to rewind). temperature 0: greedy drafts and exact-match acceptance;
    otherwise drafts sampled from the drafter at that temperature and speculative-sampling acceptance against the
    target at the same temperature. Returns (new token ids, rounds, accepted, per-round log)."""
    dev = next(target.parameters()).device
    seq = list(prompt)
    P = len(prompt)

    def probs(lg):
        return torch.softmax(lg.float() / temperature, -1)

    def pick(lg):
        if temperature == 0:
            return int(lg.float().argmax())
        return int(torch.multinomial(probs(lg), 1, generator=gen))

    ids = torch.tensor([seq], device=dev)
    h, kv, emb, logits = target_pass(target, ids)
    seq.append(pick(logits[0, -1]))
    rounds, accepted, log = 0, 0, []
    while len(seq) - P < new_tokens:
        L = len(seq)
        p = L - 1
        kv_c = {k: (v[0][:, :, :p], v[1][:, :, :p]) for k, v in kv.items()}
        masks = drafter_masks(torch.tensor([p], device=dev), p)
        pos = torch.tensor([[p]], device=dev)
        hid = h[:, p - 1: p]
        tok = seq[-1]
        drafts, qs = [], []
        for _ in range(depth):
            e = target.model.embed_tokens(torch.tensor([[tok]], device=dev))
            lg, hid = drafter_step(drafter, e, hid, pos, masks, kv_c)
            lg = lg[0, -1]
            tok = pick(lg)
            drafts.append(tok)
            if temperature:
                qs.append(probs(lg))
        ids = torch.tensor([seq + drafts], device=dev)
        h, kv, emb, logits = target_pass(target, ids)
        ver = logits[0, p: p + depth + 1]  # ver[j] is the target's distribution for token L+j
        a, extra = 0, None
        for j in range(depth):
            if temperature == 0:
                t = int(ver[j].float().argmax())
                if t == drafts[j]:
                    a += 1
                    continue
                extra = t
                break
            pj, qj = probs(ver[j]), qs[j]
            d = drafts[j]
            r = float(torch.rand(1, generator=gen, device=gen.device if gen is not None else "cpu"))
            if r < min(1.0, float(pj[d] / qj[d])):
                a += 1
                continue
            resid = torch.clamp(pj - qj, min=0)
            extra = int(torch.multinomial(resid / resid.sum(), 1, generator=gen))
            break
        if extra is None:
            extra = pick(ver[depth])
        log.append({"context_len": L, "drafts": drafts, "accepted": a})
        rounds += 1
        accepted += a
        seq += drafts[:a] + [extra]
    return seq[P: P + new_tokens], rounds, accepted, log
