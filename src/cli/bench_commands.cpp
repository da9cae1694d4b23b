// `vatic bench`: decode / prefill speed, effective weight bandwidth next to the machine's measured memory
// bandwidth, quantized vs bf16 decode, verify-forward and drafter-step costs, and matmul kernel throughput.
//
// Random-weight models: `--random e2b` writes (once, into a cache folder) a Gemma 4 checkpoint with E2B's widths
// (hidden 1536, 8 q / 1 kv heads, head dims 256 / 512, MLP 6144 doubled on KV-shared layers, PLE 256, vocab
// 262144, 4 sliding : 1 full) but fewer layers (--layers, default 10 with the last 4 KV-shared, like the 10-layer
// fixture) so it fits small machines; and an assistant drafter of E2B-assistant size (hidden 256, 4 layers,
// I 2048, centroid head 2048 / top-32). `--quantize int8|int4` makes a quantized copy with the quantization
// policy (src/quant/policy.h) and the store's metadata convention (src/quant/quantize.h).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cli/cli.h"
#include "cli/model_arg.h"
#include "formats/model_source.h"
#include "formats/safetensors.h"
#include "models/gemma4/gemma4_config.h"
#include "models/loader.h"
#include "models/forward_graphs.h"
#include "ops/ops.h"
#include "quant/policy.h"
#include "quant/quantize.h"
#include "sample/sampler.h"
#include "util/json.h"

namespace vatic::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ---- random-weight checkpoints ----

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform values with standard deviation `std` (or the constant `std` when constant), as BF16.
Tensor random_bf16(const Shape& shape, float std, uint64_t seed, bool constant = false) {
  Tensor t = Tensor::empty(shape, DType::BF16);
  uint16_t* p = t.data<uint16_t>();
  const int64_t n = t.numel();
  const float a = std * 1.7320508f;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    float v = constant ? std
                       : (static_cast<float>(splitmix(seed * 0x100000001b3ull + static_cast<uint64_t>(i)) >> 40) /
                              16777216.0f * 2.0f - 1.0f) * a;
    p[i] = f32_to_bf16(v);
  }
  return t;
}

json e2b_like_config(int layers) {
  json tc;
  std::vector<std::string> types;
  for (int i = 0; i < layers; i++) types.push_back(i % 5 == 4 ? "full_attention" : "sliding_attention");
  tc["model_type"] = "gemma4_text";
  tc["attention_bias"] = false;
  tc["attention_k_eq_v"] = false;
  tc["bos_token_id"] = 2;
  tc["eos_token_id"] = 1;
  tc["pad_token_id"] = 0;
  tc["enable_moe_block"] = false;
  tc["final_logit_softcapping"] = 30.0;
  tc["head_dim"] = 256;
  tc["global_head_dim"] = 512;
  tc["hidden_activation"] = "gelu_pytorch_tanh";
  tc["hidden_size"] = 1536;
  tc["hidden_size_per_layer_input"] = 256;
  tc["intermediate_size"] = 6144;
  tc["layer_types"] = types;
  tc["max_position_embeddings"] = 131072;
  tc["num_attention_heads"] = 8;
  tc["num_hidden_layers"] = layers;
  tc["num_key_value_heads"] = 1;
  tc["num_kv_shared_layers"] = layers * 2 / 5;  // E2B: 20 of 35 (4/7); 4 of 10 keeps an owner of each type
  tc["rms_norm_eps"] = 1e-6;
  tc["rope_parameters"] = {
      {"full_attention", {{"partial_rotary_factor", 0.25}, {"rope_theta", 1000000.0}, {"rope_type", "proportional"}}},
      {"sliding_attention", {{"rope_theta", 10000.0}, {"rope_type", "default"}}}};
  tc["sliding_window"] = 512;
  tc["tie_word_embeddings"] = true;
  tc["use_cache"] = true;
  tc["use_double_wide_mlp"] = true;
  tc["vocab_size"] = 262144;
  tc["vocab_size_per_layer_input"] = 262144;
  json c;
  c["architectures"] = {"Gemma4ForConditionalGeneration"};
  c["model_type"] = "gemma4";
  c["tie_word_embeddings"] = true;
  c["text_config"] = tc;
  return c;
}

json e2b_assistant_config() {
  json tc;
  tc["model_type"] = "gemma4_text";
  tc["attention_k_eq_v"] = false;
  tc["bos_token_id"] = 2;
  tc["eos_token_id"] = 1;
  tc["pad_token_id"] = 0;
  tc["enable_moe_block"] = false;
  tc["final_logit_softcapping"] = 30.0;
  tc["head_dim"] = 256;
  tc["global_head_dim"] = 512;
  tc["hidden_activation"] = "gelu_pytorch_tanh";
  tc["hidden_size"] = 256;
  tc["hidden_size_per_layer_input"] = 0;
  tc["intermediate_size"] = 2048;
  tc["layer_types"] = {"sliding_attention", "sliding_attention", "sliding_attention", "full_attention"};
  tc["max_position_embeddings"] = 131072;
  tc["num_attention_heads"] = 4;
  tc["num_hidden_layers"] = 4;
  tc["num_key_value_heads"] = 1;
  tc["num_kv_shared_layers"] = 4;
  tc["rms_norm_eps"] = 1e-6;
  tc["rope_parameters"] = {
      {"full_attention", {{"partial_rotary_factor", 0.25}, {"rope_theta", 1000000.0}, {"rope_type", "proportional"}}},
      {"sliding_attention", {{"rope_theta", 10000.0}, {"rope_type", "default"}}}};
  tc["sliding_window"] = 512;
  tc["tie_word_embeddings"] = true;
  tc["use_double_wide_mlp"] = false;
  tc["vocab_size"] = 262144;
  tc["vocab_size_per_layer_input"] = 0;
  json c;
  c["architectures"] = {"Gemma4AssistantForCausalLM"};
  c["model_type"] = "gemma4_assistant";
  c["backbone_hidden_size"] = 1536;
  c["num_centroids"] = 2048;
  c["centroid_intermediate_top_k"] = 32;
  c["use_ordered_embeddings"] = true;
  c["tie_word_embeddings"] = true;
  c["text_config"] = tc;
  return c;
}

void write_json(const fs::path& p, const json& j) {
  std::ofstream f(p);
  f << j.dump(2) << "\n";
  if (!f) throw InvalidInput(fmt::format("cannot write {}", p.string()));
}

// Layer tensors shared by target and assistant layers.
void add_layer(std::vector<NamedTensor>& out, const std::string& p, const Gemma4LayerConfig& lc, int64_t H, int64_t nh,
               int64_t PL, uint64_t& seed) {
  const int64_t d = lc.head_dim, nkv = lc.num_kv_heads, I = lc.intermediate_size;
  const float ws = 0.02f;
  for (const char* n : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                        "post_feedforward_layernorm"})
    out.push_back({p + n + ".weight", random_bf16({H}, 1.0f, 0, true)});
  out.push_back({p + "layer_scalar", random_bf16({1}, 1.0f, 0, true)});
  out.push_back({p + "self_attn.q_proj.weight", random_bf16({nh * d, H}, ws, ++seed)});
  out.push_back({p + "self_attn.o_proj.weight", random_bf16({H, nh * d}, ws, ++seed)});
  out.push_back({p + "self_attn.q_norm.weight", random_bf16({d}, 1.0f, 0, true)});
  if (!lc.kv_shared) {
    out.push_back({p + "self_attn.k_proj.weight", random_bf16({nkv * d, H}, ws, ++seed)});
    out.push_back({p + "self_attn.v_proj.weight", random_bf16({nkv * d, H}, ws, ++seed)});
    out.push_back({p + "self_attn.k_norm.weight", random_bf16({d}, 1.0f, 0, true)});
  }
  out.push_back({p + "mlp.gate_proj.weight", random_bf16({I, H}, ws, ++seed)});
  out.push_back({p + "mlp.up_proj.weight", random_bf16({I, H}, ws, ++seed)});
  out.push_back({p + "mlp.down_proj.weight", random_bf16({H, I}, ws, ++seed)});
  if (PL > 0) {
    out.push_back({p + "per_layer_input_gate.weight", random_bf16({PL, H}, ws, ++seed)});
    out.push_back({p + "per_layer_projection.weight", random_bf16({H, PL}, ws, ++seed)});
    out.push_back({p + "post_per_layer_input_norm.weight", random_bf16({H}, 1.0f, 0, true)});
  }
}

fs::path cache_root() {
  if (const char* c = std::getenv("VATIC_CACHE"); c && *c) return fs::path(c) / "bench";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "vatic" / "bench";
  return fs::temp_directory_path() / "vatic-bench";
}

fs::path ensure_random_e2b(int layers) {
  fs::path dir = cache_root() / fmt::format("gemma4-e2b-like-{}l", layers);
  if (fs::exists(dir / "model.safetensors")) return dir;
  fs::create_directories(dir);
  std::fprintf(stderr, "writing a random-weight E2B-like model (%d layers) to %s ...\n", layers, dir.c_str());
  json cj = e2b_like_config(layers);
  Gemma4TextConfig cfg = Gemma4TextConfig::parse(cj, "bench config");
  const std::string P = cfg.tensor_prefix;
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size, PL = cfg.hidden_size_per_layer_input;
  uint64_t seed = 1;
  std::vector<NamedTensor> ts;
  ts.push_back({P + "embed_tokens.weight", random_bf16({V, H}, 0.02f, ++seed)});
  ts.push_back({P + "embed_tokens_per_layer.weight", random_bf16({cfg.vocab_size_per_layer_input, layers * PL}, 0.02f, ++seed)});
  ts.push_back({P + "per_layer_model_projection.weight", random_bf16({layers * PL, H}, 0.02f, ++seed)});
  ts.push_back({P + "per_layer_projection_norm.weight", random_bf16({PL}, 1.0f, 0, true)});
  ts.push_back({P + "norm.weight", random_bf16({H}, 1.0f, 0, true)});
  for (int i = 0; i < layers; i++) add_layer(ts, cfg.layer_prefix(i), cfg.layer(i), H, cfg.num_attention_heads, PL, seed);
  write_safetensors(dir / "model.safetensors", ts, {{"format", "pt"}});
  write_json(dir / "config.json", cj);
  return dir;
}

fs::path ensure_random_e2b_assistant() {
  fs::path dir = cache_root() / "gemma4-e2b-like-assistant";
  if (fs::exists(dir / "model.safetensors")) return dir;
  fs::create_directories(dir);
  json cj = e2b_assistant_config();
  Gemma4AssistantConfig cfg = Gemma4AssistantConfig::parse(cj, "bench assistant config");
  const auto& tc = cfg.text;
  const int64_t Ha = tc.hidden_size, V = tc.vocab_size, BH = cfg.backbone_hidden_size;
  uint64_t seed = 1000;
  std::vector<NamedTensor> ts;
  ts.push_back({tc.tensor_prefix + "embed_tokens.weight", random_bf16({V, Ha}, 0.02f, ++seed)});
  ts.push_back({tc.tensor_prefix + "norm.weight", random_bf16({Ha}, 1.0f, 0, true)});
  ts.push_back({"pre_projection.weight", random_bf16({Ha, 2 * BH}, 0.02f, ++seed)});
  ts.push_back({"post_projection.weight", random_bf16({BH, Ha}, 0.02f, ++seed)});
  ts.push_back({"masked_embedding.centroids.weight", random_bf16({cfg.num_centroids, Ha}, 0.02f, ++seed)});
  std::vector<int64_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(7));
  Tensor ord = Tensor::empty({V}, DType::I64);
  std::copy(order.begin(), order.end(), ord.data<int64_t>());
  ts.push_back({"masked_embedding.token_ordering", ord});
  for (int i = 0; i < tc.num_layers; i++)
    add_layer(ts, tc.layer_prefix(i), tc.layer(i), Ha, tc.num_attention_heads, 0, seed);
  write_safetensors(dir / "model.safetensors", ts, {{"format", "pt"}});
  write_json(dir / "config.json", cj);
  return dir;
}

// A quantized copy of a checkpoint directory, following the quantization policy. Gemma 4's tied embed_tokens
// (embedding table and LM head at once) stays BF16: the model reads it as an embedding table.
fs::path quantized_copy(const fs::path& src, QuantType type, int group, bool draft) {
  fs::path dir = src.parent_path() / fmt::format("{}-{}-g{}", src.filename().string(), quant_type_name(type), group);
  if (fs::exists(dir / "model.safetensors")) return dir;
  fs::create_directories(dir);
  std::fprintf(stderr, "quantizing %s to %s ...\n", src.c_str(), quant_type_name(type));
  json cj = json::parse(std::ifstream(src / "config.json"));
  TensorStore store(src);
  QuantPolicyContext ctx;
  ctx.gemma4 = true;
  ctx.is_draft = draft;
  const json& tc = cj.contains("text_config") ? cj["text_config"] : cj;
  ctx.num_layers = tc.value("num_hidden_layers", 0);
  std::vector<std::string> names = store.names();
  std::vector<std::vector<NamedTensor>> parts(names.size());
  std::vector<std::string> specs(names.size());
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < names.size(); i++) {
    const std::string& name = names[i];
    Tensor t = store.get(name);
    QuantDecision d = decide_quantization(name, t.shape(), type, group, ctx);
    const bool tied_table = name.ends_with("embed_tokens.weight");
    if (d.type == QuantType::None || tied_table) {
      parts[i].push_back({name, t});
      continue;
    }
    QuantizedTensor q = quantize(t, quant_bits(d.type), d.group_size);
    const std::string base = quant_base_name(name);
    parts[i].push_back({name, q.packed});
    parts[i].push_back({base + ".scales", q.scales});
    parts[i].push_back({base + ".biases", q.biases});
    specs[i] = fmt::format("{}:{}", quant_type_name(d.type), d.group_size);
  }
  std::vector<NamedTensor> all;
  std::map<std::string, std::string> meta{{"format", "pt"}};
  std::string uniform;
  bool mixed = false;
  for (size_t i = 0; i < names.size(); i++) {
    for (auto& nt : parts[i]) all.push_back(std::move(nt));
    if (!specs[i].empty()) {
      meta[names[i]] = specs[i];
      if (uniform.empty()) uniform = specs[i];
      mixed = mixed || uniform != specs[i];
    }
  }
  if (!uniform.empty() && !mixed) {
    meta["quantization"] = uniform.substr(0, uniform.find(':'));
    meta["group_size"] = uniform.substr(uniform.find(':') + 1);
  }
  write_safetensors(dir / "model.safetensors", all, meta);
  write_json(dir / "config.json", cj);
  return dir;
}

// Bytes of weights one decode step reads: every tensor of the checkpoint except the per-layer embedding table, of
// which only one row is read (the tied token embedding is read in full as the LM head).
double decode_weight_bytes(const TensorStore& ts) {
  double b = 0;
  for (const auto& n : ts.names()) {
    Tensor t = ts.get(n);
    if (n.find("embed_tokens_per_layer") != std::string::npos)
      b += static_cast<double>(t.nbytes()) / static_cast<double>(t.dim(0));
    else
      b += static_cast<double>(t.nbytes());
  }
  return b;
}

// Bytes of weights one assistant step reads: its layers and projections, the centroid table, the chosen
// top-k clusters' rows of its embedding (not the whole table) and one row of the target's embedding.
double drafter_step_bytes(const TensorStore& ts, const json& cfg) {
  double b = 0;
  for (const auto& n : ts.names()) {
    Tensor t = ts.get(n);
    if (n.ends_with("embed_tokens.weight")) {
      const int64_t nc = cfg.value("num_centroids", 0), k = cfg.value("centroid_intermediate_top_k", 0);
      b += nc > 0 ? static_cast<double>(t.nbytes()) * k / nc : static_cast<double>(t.nbytes());
    } else if (n != "masked_embedding.token_ordering") {
      b += static_cast<double>(t.nbytes());
    }
  }
  return b;
}

struct Options {
  std::string model, draft, random, quantize, device;
  int layers = 10;
  int tokens = 32;
  int prompt = 128;
  int reps = 3;
  int max_verify = 8;
  int forced_depth = 0;
  bool bandwidth = false, kernels = false, no_verify = false;
  size_t bw_mib = 1024;
};

std::vector<int32_t> random_tokens(int n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; i++) t[i] = static_cast<int32_t>(3 + splitmix(seed + i) % static_cast<uint64_t>(vocab - 3));
  return t;
}

template <typename F>
double best_of(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; r++) best = std::min(best, f());
  return best;
}

void print_bandwidth(const MemoryBandwidth& bw, Device dev) {
  if (!dev.is_cpu()) {
    std::printf("device: %s, copy bandwidth %.0f GB/s (read + write, %zu MiB arrays)\n", bw.machine.c_str(),
                bw.copy_gbs, bw.bytes >> 20);
    return;
  }
  std::printf("machine: %s\n", bw.machine.c_str());
  std::printf("memory bandwidth (%zu MiB arrays, best of runs): read %.1f GB/s (dot sweep), %.1f GB/s (f32 matvec "
              "with prefetch), copy %.1f GB/s (read+write)\n",
              bw.bytes >> 20, bw.read_gbs, bw.matvec_gbs, bw.copy_gbs);
}
// The greedy choice from a logits row, taken where the logits are (as the generator does for greedy decoding).
int32_t best_token(const Tensor& logits) {
  Tensor values, ids;
  ops::topk(logits, 1, &values, &ids);
  return ops::to_host(ids).data<int32_t>()[0];
}


void bench_model(const Options& o, const MemoryBandwidth& bw, Device dev) {
  fs::path target_dir, draft_dir;
  ModelSource src;
  std::unique_ptr<ModelSource> dsrc;
  if (!o.random.empty()) {
    if (o.random != "e2b") throw InvalidInput(fmt::format("--random: unknown shape \"{}\" (supported: e2b)", o.random));
    if (o.layers < 5 || o.layers % 5) throw InvalidInput("--layers: a multiple of 5 (4 sliding + 1 full)");
    target_dir = ensure_random_e2b(o.layers);
    draft_dir = ensure_random_e2b_assistant();
  } else if (!o.model.empty()) {
    src = resolve_model_arg(o.model);
    if (!o.draft.empty()) dsrc = std::make_unique<ModelSource>(resolve_model_arg(o.draft));
  } else {
    throw InvalidInput("vatic bench: give --model DIR|NAME, --random e2b, --bandwidth or --kernels");
  }
  QuantType qt = parse_quant_type(o.quantize, "--quantize");
  if (!target_dir.empty()) {
    if (qt != QuantType::None) target_dir = quantized_copy(target_dir, qt, kDefaultGroupSize, false);
    src = ModelSource::from_directory(target_dir);
    if (o.draft != "none") dsrc = std::make_unique<ModelSource>(ModelSource::from_directory(draft_dir));
  } else if (qt != QuantType::None) {
    throw InvalidInput("--quantize applies to --random models; quantize store models with `vatic create -q`");
  }

  auto t_load = Clock::now();
  auto lm = load_language_model(src, dev);
  const double load_s = seconds_since(t_load);
  auto weights = open_weights(src);
  const double wbytes = decode_weight_bytes(*weights);
  const int64_t V = lm->info().vocab_size;
  std::printf("model: %s (%s), %.2f GB of weights, %.2f GB read per decoded token, loaded in %.2f s\n",
              src.name.c_str(), lm->info().quantization.c_str(), weights->total_bytes() / 1e9, wbytes / 1e9, load_s);
  if (!dev.is_cpu())
    std::printf("device: %s, graphs %s\n", backend_for(dev).description().c_str(), graphs_enabled(dev) ? "on" : "off (VATIC_GRAPHS=0)");

  // Prefill.
  auto prompt = random_tokens(o.prompt, V, 11);
  double t_prefill = best_of(o.reps, [&] {
    auto st = lm->new_state();
    auto t0 = Clock::now();
    lm->forward(*st, prompt, 1);
    backend_for(dev).synchronize();
    return seconds_since(t0);
  });
  std::printf("%-10s %8s %10s %10s %12s %10s\n", "test", "t/s", "ms/token", "GB/s", "floor ms", "% of bw");
  std::printf("%-10s %8.1f %10.2f %10s %12s %10s\n", fmt::format("pp{}", o.prompt).c_str(), o.prompt / t_prefill,
              1e3 * t_prefill / o.prompt, "-", "-", "-");

  // Decode from the prefilled state.
  auto st = lm->new_state();
  ForwardResult r = lm->forward(*st, prompt, 1);
  auto snap = st->snapshot();
  const int32_t first = best_token(r.logits);
  double t_decode = best_of(o.reps, [&] {
    st->restore(snap);
    int32_t tok = first;
    auto t0 = Clock::now();
    for (int i = 0; i < o.tokens; i++) {
      ForwardResult d = lm->forward(*st, {tok}, 1);
      tok = best_token(d.logits);
    }
    return seconds_since(t0) / o.tokens;
  });
  const double floor_ms = wbytes / (bw.best() * 1e9) * 1e3;
  std::printf("%-10s %8.2f %10.2f %10.1f %12.2f %9.0f%%\n", fmt::format("tg{}", o.tokens).c_str(), 1.0 / t_decode,
              1e3 * t_decode, wbytes / t_decode / 1e9, floor_ms, 100.0 * floor_ms / (1e3 * t_decode));

  if (!dev.is_cpu()) {
    // Where one decode step's device time goes, operation by operation (launch gaps excluded). A state of its own,
    // so that the step runs op by op rather than replaying the graph recorded for `st`.
    auto pst = lm->new_state();
    pst->restore(snap);
    Backend& be = backend_for(dev);
    be.set_profiling(true);
    ForwardResult d = lm->forward(*pst, {first}, 1);
    best_token(d.logits);
    be.set_profiling(false);
    auto prof = be.take_profile();
    std::sort(prof.begin(), prof.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    double total = 0;
    for (const auto& [name, secs] : prof) total += secs;
    std::printf("one decode step by operation (device time: %.2f ms in all):\n", 1e3 * total);
    for (const auto& [name, secs] : prof) std::printf("  %-24s %8.3f ms %5.1f%%\n", name.c_str(), 1e3 * secs, 100 * secs / total);
  }

  // One-token step and verify forwards over K+1 tokens, each from the same prefilled state.
  auto step_time = [&](int n) {
    auto toks = random_tokens(n, V, 99 + n);
    return best_of(std::max(o.reps, 3), [&] {
      st->restore(snap);
      auto t0 = Clock::now();
      lm->forward(*st, toks, n);
      backend_for(dev).synchronize();
      return seconds_since(t0);
    });
  };
  const double t1 = step_time(1);
  if (!o.no_verify) {
    std::printf("verify forward over K+1 tokens (all K+1 logits) vs one decode step (%.2f ms):\n", 1e3 * t1);
    for (int K = 1; K <= o.max_verify; K++) {
      double tk = step_time(K + 1);
      std::printf("  K=%d  %.2f ms  ratio %.2f\n", K, 1e3 * tk, tk / t1);
    }
  }

  if (dsrc) {
    auto drafter = load_drafter(*lm, dsrc.get());
    auto dweights = open_weights(*dsrc);
    json dcfg = json::parse(std::ifstream(dsrc->config));
    const double dbytes = drafter_step_bytes(*dweights, dcfg);
    st->restore(snap);
    auto choose = [&](const Tensor& logits) { return best_token(logits); };
    double t_draft1 = best_of(std::max(o.reps, 5), [&] {
      auto t0 = Clock::now();
      drafter->draft(*st, first, r.hidden, 1, choose);
      return seconds_since(t0);
    });
    double t_draft4 = best_of(std::max(o.reps, 3), [&] {
      auto t0 = Clock::now();
      drafter->draft(*st, first, r.hidden, 4, choose);
      return seconds_since(t0) / 4;
    });
    std::printf("drafter step (%s): %.3f ms (1 step), %.3f ms/step over 4; %.1f MB read/step; "
                "ratio to a target step %.3f\n",
                drafter->name().c_str(), 1e3 * t_draft1, 1e3 * t_draft4, dbytes / 1e6, t_draft1 / t1);

    // Random weights are never accepted, so speculation's speed at a given acceptance is measured by forcing it:
    // real rounds (K draft steps, one verification over K+1 tokens, cache rewind) that keep n drafts, i.e. emit
    // n + 1 tokens per round.
    if (o.forced_depth > 0 && !drafter->wants_hidden()) {
      const int K = o.forced_depth, rounds = std::max(8, o.tokens / 4);
      std::printf("speculative rounds at depth %d with n drafts forced accepted (plain decode %.1f tok/s):\n", K,
                  1.0 / t_decode);
      for (int n = 1; n <= std::min(K, 5); n++) {
        double t = best_of(o.reps, [&] {
          st->restore(snap);
          int32_t tok = first;
          Tensor hidden = r.hidden;
          auto t0 = Clock::now();
          for (int i = 0; i < rounds; i++) {
            const int64_t base = st->length();
            std::vector<int32_t> verify = {tok};
            drafter->draft(*st, tok, hidden, K, [&](const Tensor& logits) {
              verify.push_back(best_token(logits));
              return verify.back();
            });
            ForwardResult vr = lm->forward(*st, verify, K + 1);
            const int32_t bonus = best_token(vr.logits.slice(0, n, n + 1));
            st->rewind(base + 1 + n);
            hidden = vr.hidden.slice(0, n, n + 1);
            tok = bonus;
          }
          return seconds_since(t0);
        });
        const double tps = rounds * (n + 1) / t;
        std::printf("  acceptance length %d: %8.1f tok/s  %.2fx plain  (round %.2f ms)\n", n + 1, tps,
                    tps * t_decode, 1e3 * t / rounds);
      }
    }
  }
}

// ---- matmul kernels ----

void bench_kernels(const Options& o, const MemoryBandwidth& bw, Device dev) {
  Backend& be = backend_for(dev);
  struct Shape2 {
    const char* what;
    int64_t N, K;
  };
  const std::vector<Shape2> shapes = {{"2048x8192", 2048, 8192},     {"8192x2048", 8192, 2048},
                                      {"e2b q_proj", 2048, 1536},    {"e2b gate/up", 6144, 1536},
                                      {"e2b down", 1536, 6144},      {"e2b lm_head", 262144, 1536}};
  std::printf("%-12s %-6s %6s %10s %10s %10s %9s\n", "weight", "type", "T", "ms", "GB/s", "GFLOP/s", "% of bw");
  for (const auto& s : shapes) {
    Tensor wb = random_bf16({s.N, s.K}, 0.02f, 5);
    for (const char* type : {"bf16", "int8", "int4"}) {
      Linear lin;
      if (std::string(type) == "bf16") {
        lin.weight = wb;
      } else {
        QuantizedTensor q = quantize(wb, type[3] == '8' ? 8 : 4, 64);
        lin.weight = q.packed;
        lin.scales = q.scales;
        lin.biases = q.biases;
        lin.bits = q.bits;
        lin.group = q.group_size;
      }
      const double bytes = static_cast<double>(lin.nbytes());
      for (int64_t T : {1, 2, 5, 9, 64, 256, 512}) {
        if (s.N * T > (int64_t{1} << 26) || (s.N > 100000 && T > 9)) continue;  // LM head: decode/verify only
        Tensor x = random_bf16({T, s.K}, 1.0f, 9);
        Tensor xf = ops::to_device(ops::to_f32(x), dev);
        Tensor y = be.empty({T, s.N}, DType::F32);
        Linear dl = lin;
        dl.weight = ops::to_device(lin.weight, dev);
        if (lin.quantized()) {
          dl.scales = ops::to_device(lin.scales, dev);
          dl.biases = ops::to_device(lin.biases, dev);
        }
        be.matmul(xf, dl, y, false);  // warm
        be.synchronize();
        const int reps = T >= 64 ? std::max(2, o.reps) : std::max(5, o.reps * 2);
        // On an accelerator one call is microseconds: time a burst of them, queued back to back.
        const int burst = dev.is_cpu() ? 1 : 50;
        double t = best_of(reps, [&] {
          auto t0 = Clock::now();
          for (int b = 0; b < burst; b++) be.matmul(xf, dl, y, false);
          be.synchronize();
          return seconds_since(t0) / burst;
        });
        std::printf("%-12s %-6s %6lld %10.3f %10.1f %10.1f %8.0f%%\n", s.what, type, static_cast<long long>(T), t * 1e3,
                    bytes / t / 1e9, 2.0 * s.N * s.K * T / t / 1e9, 100.0 * bytes / t / 1e9 / bw.best());
      }
    }
  }
}

}  // namespace

void register_bench_commands(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Measure decode / prefill speed, weight bandwidth and kernel throughput");
  auto o = std::make_shared<Options>();
  cmd->add_option("--model", o->model, "Model directory or store name");
  cmd->add_option("--draft", o->draft, "Drafter directory or store name (\"none\": skip the random assistant)");
  cmd->add_option("--random", o->random, "Random-weight model of a released width: e2b");
  cmd->add_option("--layers", o->layers, "Layers of the --random model (multiple of 5; default 10)");
  cmd->add_option("--quantize", o->quantize, "Quantize the --random model: int8 | int4");
  cmd->add_option("--tokens", o->tokens, "Decode tokens per run (default 32)");
  cmd->add_option("--prompt", o->prompt, "Prompt tokens for prefill (default 128)");
  cmd->add_option("--reps", o->reps, "Runs per measurement; the best is reported (default 3)");
  cmd->add_option("--max-verify", o->max_verify, "Largest K of the verify-cost table (default 8)");
  cmd->add_flag("--no-verify", o->no_verify, "Skip the verify-cost table");
  cmd->add_option("--forced-acceptance", o->forced_depth,
                  "Speculative rounds at this draft depth with 1..5 drafts forced accepted (tok/s at acceptance "
                  "lengths 2..6)");
  cmd->add_flag("--bandwidth", o->bandwidth, "Only measure memory bandwidth");
  cmd->add_flag("--kernels", o->kernels, "Matmul kernel throughput (bf16 / int8 / int4, decode to prefill sizes)");
  cmd->add_option("--bandwidth-mib", o->bw_mib, "Array size of the bandwidth test in MiB (default 1024)");
  cmd->add_option("--device", o->device, "cpu, cuda or cuda:N (default: VATIC_DEVICE, else the first GPU, else the CPU)");
  cmd->callback([o] {
    // Refuse bad options before the (seconds-long) bandwidth test.
    if (!o->random.empty() && o->random != "e2b")
      throw InvalidInput(fmt::format("--random: unknown shape \"{}\" (supported: e2b)", o->random));
    parse_quant_type(o->quantize, "--quantize");
    const Device dev = resolve_device(o->device);
    backend_for(dev).bind_thread();
    const MemoryBandwidth bw = backend_for(dev).measure_bandwidth(o->bw_mib << 20, 10);
    print_bandwidth(bw, dev);
    if (o->bandwidth) return;
    if (o->kernels) {
      return bench_kernels(*o, bw, dev);
    }
    bench_model(*o, bw, dev);
  });
}

}  // namespace vatic::cli
