#!/usr/bin/env python3
"""Writes a random-weight Gemma 4 text checkpoint (config.json + one bf16 model.safetensors) at a released width,
cut to fewer layers, for import and speed benchmarks. Python standard library only (no numpy, no torch).

Usage: make_random_gemma4.py CONFIG.json LAYERS OUTDIR [TOKENIZER_DIR]
  CONFIG.json    a released config (for example tests/fixtures/configs/gemma-4-E2B-it.json)
  LAYERS         number of decoder layers to keep (layer types repeat the 4 sliding : 1 full pattern; no KV sharing)
  TOKENIZER_DIR  optional: tokenizer.json / tokenizer_config.json copied next to the weights

Values are random bf16 numbers of magnitude 2^-11 .. 2^-4 with random signs (finite, so they quantize), drawn from
os.urandom: the checkpoint is different on every run, which is what an import benchmark wants (no dedup).
"""
import json, os, shutil, struct, sys

cfg_path, layers, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
tok_dir = sys.argv[4] if len(sys.argv) > 4 else None
full = json.load(open(cfg_path))
t = dict(full.get("text_config", full))
S, F = "sliding_attention", "full_attention"
t["num_hidden_layers"] = layers
t["layer_types"] = [F if (i + 1) % 5 == 0 else S for i in range(layers)]
t["num_kv_shared_layers"] = 0
t["use_double_wide_mlp"] = False
cfg = {"architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text", **t}
cfg["model_type"] = "gemma4_text"

H, V = t["hidden_size"], t["vocab_size"]
hd, ghd = t["head_dim"], t.get("global_head_dim") or t["head_dim"]
nh, nkv = t["num_attention_heads"], t["num_key_value_heads"]
ngkv = t.get("num_global_key_value_heads") or nkv
I = t["intermediate_size"]
P = t.get("hidden_size_per_layer_input") or 0
tensors = [("model.embed_tokens.weight", [V, H]), ("model.norm.weight", [H])]
if P:
    tensors += [("model.embed_tokens_per_layer.weight", [t.get("vocab_size_per_layer_input") or V, layers * P]),
                ("model.per_layer_model_projection.weight", [layers * P, H]),
                ("model.per_layer_projection_norm.weight", [P])]
for i in range(layers):
    p = f"model.layers.{i}."
    full_layer = t["layer_types"][i] == F
    d, kv = (ghd, ngkv) if full_layer else (hd, nkv)
    for n in ["input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"]:
        tensors.append((p + n + ".weight", [H]))
    tensors.append((p + "layer_scalar", [1]))
    tensors += [(p + "self_attn.q_proj.weight", [nh * d, H]), (p + "self_attn.q_norm.weight", [d]),
                (p + "self_attn.o_proj.weight", [H, nh * d]), (p + "self_attn.k_proj.weight", [kv * d, H]),
                (p + "self_attn.k_norm.weight", [d]), (p + "self_attn.v_proj.weight", [kv * d, H]),
                (p + "mlp.gate_proj.weight", [I, H]), (p + "mlp.up_proj.weight", [I, H]),
                (p + "mlp.down_proj.weight", [H, I])]
    if P:
        tensors += [(p + "per_layer_input_gate.weight", [P, H]), (p + "per_layer_projection.weight", [H, P]),
                    (p + "post_per_layer_input_norm.weight", [H])]

header, off = {}, 0
for name, shape in tensors:
    n = 2
    for s in shape:
        n *= s
    header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + n]}
    off += n
h = json.dumps(header, separators=(",", ":")).encode()
h += b" " * ((8 - len(h) % 8) % 8)

# High byte of a bf16: random sign, exponent 116..123 (with the low exponent bit from the low byte).
hi_table = bytes((x & 0x80) | (0x3A + (x & 3)) for x in range(256))
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    chunk = 1 << 24
    left = off
    while left:
        n = min(chunk, left)
        b = bytearray(os.urandom(n))
        b[1::2] = bytes(b[1::2]).translate(hi_table)
        f.write(b)
        left -= n
json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)
if tok_dir:
    for fn in ["tokenizer.json", "tokenizer_config.json"]:
        if os.path.exists(os.path.join(tok_dir, fn)):
            shutil.copy(os.path.join(tok_dir, fn), out)
print(f"{out}: {len(tensors)} tensors, {off / 1e9:.2f} GB of bf16 weights")
