#include "cli/bench_random.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <system_error>
#include <vector>

#include "models/registry.h"
#include "ops/ops.h"
#include "quant/policy.h"
#include "util/error.h"

namespace vatic::cli {
namespace {

namespace fs = std::filesystem;

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

Tensor constant_bf16(const Shape& shape, float v) {
  Tensor t = Tensor::empty(shape, DType::BF16);
  std::fill(t.data<uint16_t>(), t.data<uint16_t>() + t.numel(), f32_to_bf16(v));
  return t;
}

fs::path cache_root() {
  if (const char* c = std::getenv("VATIC_CACHE"); c && *c) return fs::path(c) / "bench";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "vatic" / "bench";
  return fs::temp_directory_path() / "vatic-bench";
}

void write_json(const fs::path& p, const json& j) {
  std::ofstream f(p);
  f << j.dump(2) << "\n";
  if (!f) throw InvalidInput(fmt::format("cannot write {}", p.string()));
}

// Writes a checkpoint into a fresh folder beside `dir` and renames it into place, so that an interrupted run
// leaves no half-written checkpoint that a later run would take for a complete one.
void publish(const fs::path& dir, const std::vector<NamedTensor>& tensors, const std::map<std::string, std::string>& meta,
             const json& config) {
  fs::create_directories(dir.parent_path());
  const fs::path tmp = dir.parent_path() / (dir.filename().string() + ".partial");
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  write_safetensors(tmp / "model.safetensors", tensors, meta);
  write_json(tmp / "config.json", config);
  fs::remove_all(dir);
  fs::rename(tmp, dir);
}

json& text_of(json& config) { return config.contains("text_config") ? config["text_config"] : config; }
const json& text_of(const json& config) { return config.contains("text_config") ? config["text_config"] : config; }

}  // namespace

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

Tensor random_bf16(const Shape& shape, float std, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::BF16);
  uint16_t* p = t.data<uint16_t>();
  const int64_t n = t.numel();
  const float a = std * 1.7320508f;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    const uint64_t r = splitmix(seed * 0x100000001b3ull + static_cast<uint64_t>(i));
    p[i] = f32_to_bf16((static_cast<float>(r >> 40) / 16777216.0f * 2.0f - 1.0f) * a);
  }
  return t;
}

namespace {

// Whether a tensor of a random checkpoint is a random matrix (the others are constants or a permutation).
bool random_matrix(const ExpectedTensor& e) { return !e.name.ends_with("token_ordering") && e.shape.size() != 1; }

// One tensor of a random checkpoint (`seed` advances for each random matrix).
Tensor random_tensor(const ExpectedTensor& e, uint64_t& seed) {
  if (random_matrix(e)) return random_bf16(e.shape, 0.02f, ++seed);
  if (e.name.ends_with("token_ordering")) {  // the assistant's vocabulary order: a permutation
    const int64_t V = e.shape.at(0);
    std::vector<int64_t> order(static_cast<size_t>(V));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(7));
    Tensor t = Tensor::empty({V}, DType::I64);
    std::copy(order.begin(), order.end(), t.data<int64_t>());
    return t;
  }
  // norms, scales and scalars at 1; biases at 0
  return constant_bf16(e.shape, e.name.find("bias") != std::string::npos ? 0.0f : 1.0f);
}

// Tensor `name` as the quantization policy stores it: itself, or its packed codes, scales and biases (`spec`
// gets "type:group"). A tied embedding table (embedding and LM head at once) stays as it is.
std::vector<NamedTensor> quantize_for_policy(const std::string& name, const Tensor& t, QuantType type, int group,
                                             const QuantPolicyContext& ctx, bool tied, std::string& spec) {
  QuantDecision d = decide_quantization(name, t.shape(), type, group, ctx);
  if (d.type == QuantType::None || (tied && name.ends_with("embed_tokens.weight"))) return {{name, t}};
  QuantizedTensor q = quantize(t, quant_bits(d.type), d.group_size);
  const std::string base = quant_base_name(name);
  spec = fmt::format("{}:{}", quant_type_name(d.type), d.group_size);
  return {{name, q.packed}, {base + ".scales", q.scales}, {base + ".biases", q.biases}};
}

// A checkpoint's metadata for the quantization specs of its tensors (name -> "type:group").
std::map<std::string, std::string> quant_metadata(const std::map<std::string, std::string>& specs) {
  std::map<std::string, std::string> meta{{"format", "pt"}};
  std::string uniform;
  bool mixed = false;
  for (const auto& [name, spec] : specs) {
    meta[name] = spec;
    if (uniform.empty()) uniform = spec;
    mixed = mixed || uniform != spec;
  }
  if (!uniform.empty() && !mixed) {
    meta["quantization"] = uniform.substr(0, uniform.find(':'));
    meta["group_size"] = uniform.substr(uniform.find(':') + 1);
  }
  return meta;
}

}  // namespace

json cut_to_layers(json config, int layers) {
  json& t = text_of(config);
  const int total = t.value("num_hidden_layers", 0);
  if (layers <= 0 || layers == total) return config;
  if (layers > total)
    throw InvalidInput(fmt::format("--layers {}: the model has {} layers", layers, total));
  t["num_hidden_layers"] = layers;
  if (t.contains("first_k_dense_replace") && t["first_k_dense_replace"].is_number_integer())
    t["first_k_dense_replace"] = std::min(t["first_k_dense_replace"].get<int>(), layers);
  // Per-layer settings of the layers that go.
  if (t.contains("per_layer_config") && t["per_layer_config"].is_object()) {
    json kept = json::object();
    for (auto& [key, value] : t["per_layer_config"].items())
      if (std::atoi(key.c_str()) < layers) kept[key] = value;
    t["per_layer_config"] = kept;
  }
  // Per-layer lists (layer_types, mlp_layer_types, ...): their first `layers` entries.
  for (auto& [key, value] : t.items())
    if (value.is_array() && value.size() == static_cast<size_t>(total))
      value.erase(value.begin() + layers, value.end());
  if (!t.contains("layer_types") || !t["layer_types"].is_array()) return config;
  // The last layer attends to the whole context whatever its listed type (as transformers runs Gemma 4); say so.
  std::vector<std::string> types = t["layer_types"].get<std::vector<std::string>>();
  if (config_architecture(config, "config.json").starts_with("Gemma4") && !types.empty()) {
    types.back() = "full_attention";
    t["layer_types"] = types;
  }
  const int shared = t.value("num_kv_shared_layers", 0);
  if (shared > 0) {
    // The same share of KV-shared layers, after at least one layer of each type that owns its cache.
    int s = static_cast<int>(std::lround(static_cast<double>(shared) * layers / total));
    const std::set<std::string> all(types.begin(), types.end());
    for (; s > 0; s--) {
      const std::set<std::string> owners(types.begin(), types.end() - s);
      if (owners == all) break;
    }
    t["num_kv_shared_layers"] = s;
  }
  return config;
}

json gemma4_assistant_config_for(const json& target) {
  const json& t = text_of(target);
  const json ple = t.contains("hidden_size_per_layer_input") ? t["hidden_size_per_layer_input"] : json();
  const bool small = ple.is_number_integer() && ple.get<int>() > 0;
  json tc;
  // What the assistant's layers share with the target's cache, and the target's vocabulary and output.
  for (const char* k : {"head_dim", "global_head_dim", "num_key_value_heads", "num_global_key_value_heads",
                        "attention_k_eq_v", "attention_bias", "sliding_window", "rope_parameters",
                        "final_logit_softcapping", "vocab_size", "rms_norm_eps", "hidden_activation",
                        "max_position_embeddings", "bos_token_id", "eos_token_id", "pad_token_id"})
    if (t.contains(k)) tc[k] = t[k];
  tc["model_type"] = "gemma4_text";
  tc["hidden_size"] = small ? 256 : 1024;
  tc["intermediate_size"] = small ? 2048 : 8192;
  tc["num_attention_heads"] = small ? 4 : t.value("num_attention_heads", 8);
  tc["num_hidden_layers"] = 4;
  tc["layer_types"] = {"sliding_attention", "sliding_attention", "sliding_attention", "full_attention"};
  tc["num_kv_shared_layers"] = 4;
  tc["enable_moe_block"] = false;
  tc["use_double_wide_mlp"] = false;
  tc["hidden_size_per_layer_input"] = 0;
  tc["vocab_size_per_layer_input"] = 0;
  tc["tie_word_embeddings"] = true;
  // Per-layer head geometry (configs that set it per layer): each assistant layer reads the cache of the target's
  // last layer of its type, so it takes that layer's.
  if (t.contains("per_layer_config") && t["per_layer_config"].is_object() && t.contains("layer_types")) {
    const auto target_types = t["layer_types"].get<std::vector<std::string>>();
    const auto types = tc["layer_types"].get<std::vector<std::string>>();
    json plc = json::object();
    for (size_t i = 0; i < types.size(); i++)
      for (size_t j = target_types.size(); j-- > 0;)
        if (target_types[j] == types[i]) {
          if (t["per_layer_config"].contains(std::to_string(j)))
            plc[std::to_string(i)] = t["per_layer_config"][std::to_string(j)];
          break;
        }
    if (!plc.empty()) tc["per_layer_config"] = plc;
  }
  // The centroid head: 2048 clusters of the vocabulary, 32 taken (fewer for small vocabularies, 8 tokens or more
  // per cluster).
  const int64_t V = t.value("vocab_size", 0);
  int64_t clusters = 2048;
  while (clusters > 1 && (V % clusters != 0 || V / clusters < 8)) clusters /= 2;
  json c;
  c["architectures"] = {"Gemma4AssistantForCausalLM"};
  c["model_type"] = "gemma4_assistant";
  c["backbone_hidden_size"] = t.value("hidden_size", 0);
  c["use_ordered_embeddings"] = small;
  c["num_centroids"] = small ? clusters : 0;
  c["centroid_intermediate_top_k"] = small ? std::max<int64_t>(1, clusters / 64) : 0;
  c["tie_word_embeddings"] = true;
  c["text_config"] = tc;
  return c;
}

fs::path ensure_random_checkpoint(const json& config, const std::string& label) {
  const fs::path dir = cache_root() / fmt::format("{}-{:016x}", label, fnv1a(config.dump()));
  if (fs::exists(dir / "model.safetensors") && fs::exists(dir / "config.json")) return dir;
  const ModelFamily& family = family_of(config, label);
  // One layout of each tensor: families that accept several (stacked or per-expert weights) get their first.
  const std::vector<ExpectedTensor> expected =
      family.expected_tensors(config, label, [](const std::string&) { return false; });
  std::fprintf(stderr, "writing a random-weight %s checkpoint (%zu tensors) to %s ...\n", label.c_str(),
               expected.size(), dir.c_str());
  std::vector<NamedTensor> ts;
  uint64_t seed = fnv1a(label);
  for (const ExpectedTensor& e : expected) ts.push_back({e.name, random_tensor(e, seed)});
  publish(dir, ts, {{"format", "pt"}}, config);
  return dir;
}

fs::path quantized_copy(const fs::path& src, QuantType type, int group, bool draft) {
  const fs::path dir =
      src.parent_path() / fmt::format("{}-{}-g{}", src.filename().string(), quant_type_name(type), group);
  if (fs::exists(dir / "model.safetensors")) return dir;
  std::fprintf(stderr, "quantizing %s to %s ...\n", src.c_str(), quant_type_name(type));
  const json cj = json::parse(std::ifstream(src / "config.json"));
  const TensorStore store(src);
  const QuantPolicyContext ctx = family_of(cj, src.string()).quant_context(cj, src.string(), draft);
  const bool tied = text_of(cj).value("tie_word_embeddings", cj.value("tie_word_embeddings", false));
  std::vector<std::string> names = store.names();
  std::vector<std::vector<NamedTensor>> parts(names.size());
  std::vector<std::string> specs(names.size());
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < names.size(); i++)
    parts[i] = quantize_for_policy(names[i], store.get(names[i]), type, group, ctx, tied, specs[i]);
  std::vector<NamedTensor> all;
  std::map<std::string, std::string> spec_of;
  for (size_t i = 0; i < names.size(); i++) {
    for (auto& nt : parts[i]) all.push_back(std::move(nt));
    if (!specs[i].empty()) spec_of[names[i]] = specs[i];
  }
  const std::map<std::string, std::string> meta = quant_metadata(spec_of);
  publish(dir, all, meta, cj);
  return dir;
}

ModelSource random_model_in_memory(const json& config, const std::string& label, Device device, QuantType type,
                                   int group, bool draft) {
  const fs::path dir = cache_root() / fmt::format("{}-{:016x}-config", label, fnv1a(config.dump()));
  fs::create_directories(dir);
  write_json(dir / "config.json", config);
  const ModelFamily& family = family_of(config, label);
  const std::vector<ExpectedTensor> expected =
      family.expected_tensors(config, label, [](const std::string&) { return false; });
  const QuantPolicyContext ctx = family.quant_context(config, label, draft);
  const bool tied = text_of(config).value("tie_word_embeddings", config.value("tie_word_embeddings", false));
  std::fprintf(stderr, "making a random-weight %s model (%zu tensors) in memory on %s ...\n", label.c_str(),
               expected.size(), device.str().c_str());
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> specs;
  // Each tensor's seed as the checkpoint writer advances it, so that both make the same weights; then the tensors
  // are made and quantized a batch at a time, in parallel (a 31B model quantizes one tensor at a time in minutes),
  // and moved to the device in order. A batch bounds the host memory held at once.
  std::vector<uint64_t> seeds(expected.size());
  uint64_t seed = fnv1a(label);
  for (size_t i = 0; i < expected.size(); i++) {
    seeds[i] = seed;
    if (random_matrix(expected[i])) ++seed;
  }
  constexpr size_t kBatch = 64;
  for (size_t b0 = 0; b0 < expected.size(); b0 += kBatch) {
    const size_t b1 = std::min(expected.size(), b0 + kBatch);
    std::vector<std::vector<NamedTensor>> parts(b1 - b0);
    std::vector<std::string> part_specs(b1 - b0);
    std::vector<std::string> errors(b1 - b0);
#pragma omp parallel for schedule(dynamic)
    for (size_t i = b0; i < b1; i++) {
      try {
        uint64_t s = seeds[i];
        const Tensor t = random_tensor(expected[i], s);
        parts[i - b0] = quantize_for_policy(expected[i].name, t, type, group, ctx, tied, part_specs[i - b0]);
      } catch (const std::exception& ex) {
        errors[i - b0] = ex.what();
      }
    }
    for (size_t i = b0; i < b1; i++) {
      if (!errors[i - b0].empty()) throw InvalidInput(errors[i - b0]);
      for (auto& [name, part] : parts[i - b0]) tensors.emplace(name, ops::to_device(part, device));
      if (!part_specs[i - b0].empty()) specs[expected[i].name] = part_specs[i - b0];
    }
  }
  ModelSource src;
  src.name = label + " (random weights in memory)";
  src.config = dir / "config.json";
  src.tensors = std::make_shared<const TensorStore>(std::move(tensors), quant_metadata(specs), src.name);
  return src;
}

namespace {

// The layer a tensor name belongs to (…layers.N.…), or -1.
int layer_of(const std::string& n) {
  const size_t at = n.find("layers.");
  if (at == std::string::npos || (at > 0 && n[at - 1] != '.')) return -1;
  return std::atoi(n.c_str() + at + 7);
}

// Bytes one step reads: the model's own decode step, or (`mtp`) a step of the drafter it carries, which reads the
// layers past the model's own, the LM head and a row of the token embedding.
double step_bytes(const TensorStore& store, const json& config, bool mtp) {
  const ConfigSummary s = family_of(config, "config.json").summary(config, "config.json");
  const double expert_share = s.num_experts > 0 ? static_cast<double>(s.experts_per_token) / s.num_experts : 1.0;
  const bool untied_head = store.has("lm_head.weight");
  double b = 0;
  for (const auto& n : store.names()) {
    const int layer = layer_of(n);
    if (layer >= 0 && (layer >= s.num_layers) != mtp) continue;  // each step reads its own layers
    const bool embedding = layer < 0 && n.find("embed_tokens") != std::string::npos;
    if (mtp && layer < 0 && !embedding && !n.starts_with("lm_head")) continue;
    const Tensor t = store.get(n);
    const double bytes = static_cast<double>(t.nbytes());
    if (n.find("embed_tokens_per_layer") != std::string::npos || (untied_head && embedding))
      b += bytes / static_cast<double>(t.dim(0));  // read by row
    else if (n.find(".experts.") != std::string::npos)
      b += bytes * expert_share;
    else
      b += bytes;
  }
  return b;
}

}  // namespace

double decode_weight_bytes(const TensorStore& store, const json& config) { return step_bytes(store, config, false); }

double prompt_matmul_flops(const TensorStore& store, const json& config, int64_t tokens) {
  const ConfigSummary s = family_of(config, "config.json").summary(config, "config.json");
  const double expert_share = s.num_experts > 0 ? static_cast<double>(s.experts_per_token) / s.num_experts : 1.0;
  double per_token = 0, once = 0;
  for (const auto& n : store.names()) {
    const int layer = layer_of(n);
    if (layer >= s.num_layers || !n.ends_with(".weight")) continue;  // the model's own layers; no scales
    const Tensor t = store.get(n);
    if (t.ndim() < 2 || n.find("embed_tokens") != std::string::npos) continue;  // norms; tables read by row
    if (t.dtype() != DType::BF16 && t.dtype() != DType::F16 && t.dtype() != DType::F32) return 0;
    const double macs = static_cast<double>(t.numel()) * (n.find(".experts.") != std::string::npos ? expert_share : 1);
    (n.starts_with("lm_head") ? once : per_token) += macs;
  }
  // A tied LM head (the token table) multiplies the last row only, as an untied one.
  if (!store.has("lm_head.weight"))
    for (const auto& n : store.names())
      if (layer_of(n) < 0 && n.ends_with("embed_tokens.weight")) once += static_cast<double>(store.get(n).numel());
  return 2 * (per_token * static_cast<double>(tokens) + once);
}

double builtin_drafter_step_bytes(const TensorStore& store, const json& config) {
  return step_bytes(store, config, true);
}

double drafter_step_bytes(const TensorStore& store, const json& config) {
  double b = 0;
  for (const auto& n : store.names()) {
    const Tensor t = store.get(n);
    if (n.ends_with("embed_tokens.weight")) {
      const int64_t nc = config.value("num_centroids", 0), k = config.value("centroid_intermediate_top_k", 0);
      const bool centroids = config.value("use_ordered_embeddings", nc > 0) && nc > 0;
      b += centroids ? static_cast<double>(t.nbytes()) * k / nc : static_cast<double>(t.nbytes());
    } else if (n != "masked_embedding.token_ordering") {
      b += static_cast<double>(t.nbytes());
    }
  }
  return b;
}

}  // namespace vatic::cli
