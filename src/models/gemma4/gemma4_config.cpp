#include "models/gemma4/gemma4_config.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "formats/config_fields.h"
#include "formats/config_json.h"
#include "tensor/dtype.h"
#include "util/error.h"

namespace vatic {

namespace fs = std::filesystem;

std::vector<std::string> gemma4_architectures() { return {kGemma4ConditionalGeneration, kGemma4CausalLM, kGemma4Assistant}; }
std::vector<std::string> gemma4_model_types() { return {"gemma4", "gemma4_text", "gemma4_assistant"}; }

std::string gemma4_architecture(const json& config, const std::string& source) {
  return family_architecture(config, source, gemma4_architectures(), gemma4_model_types(), "Gemma 4");
}

namespace {

std::string source_of(const fs::path& file) { return file.string(); }

void append_unique(std::vector<int64_t>& dst, const std::vector<int64_t>& src) {
  for (auto id : src)
    if (std::find(dst.begin(), dst.end(), id) == dst.end()) dst.push_back(id);
}

Gemma4RopeConfig parse_rope(const Fields& f, const json& v, const std::string& key, const Gemma4RopeConfig& def) {
  if (!v.is_object()) f.error(key, fmt::format("expected an object, got {}{}", type_name(v), brief(v)));
  Fields r(v, f.source(), f.field(key) + ".");
  Gemma4RopeConfig rc = def;
  rc.type = r.str("rope_type", r.str("type", def.type));
  if (rc.type != "default" && rc.type != "proportional")
    r.error("rope_type", fmt::format("unsupported RoPE type \"{}\" (supported: default, proportional)", rc.type));
  rc.theta = r.positive_num("rope_theta", def.theta);
  rc.partial_rotary_factor = r.num("partial_rotary_factor", rc.type == "default" ? 1.0 : def.partial_rotary_factor);
  if (!(rc.partial_rotary_factor > 0 && rc.partial_rotary_factor <= 1))
    r.error("partial_rotary_factor", fmt::format("{} is not in (0, 1]", rc.partial_rotary_factor));
  return rc;
}

}  // namespace

int Gemma4RopeConfig::rotated_pairs(int head_dim) const {
  return static_cast<int>(partial_rotary_factor * head_dim / 2);
}

float Gemma4TextConfig::embed_scale() const { return round_bf16(std::sqrt(static_cast<float>(hidden_size))); }

int64_t Gemma4TextConfig::kv_bytes_per_token() const {
  int64_t n = 0;
  for (const auto& l : layers)
    if (!l.kv_shared && !l.is_sliding) n += 2 * int64_t{l.num_kv_heads} * l.head_dim * 4;
  return n;
}

namespace {

// Parses the text fields of a Gemma 4 config. `f` reads the text fields, `top` the top level (for fields that the
// multimodal wrapper also carries, like token ids and tie_word_embeddings).
Gemma4TextConfig parse_gemma4_text(const Fields& f, const Fields& top, const std::string& arch, const std::string& prefix,
                                   bool assistant) {
  Gemma4TextConfig c;
  c.source = f.source();
  c.architecture = arch;
  c.tensor_prefix = prefix;

  c.vocab_size = f.positive_i64("vocab_size");
  c.hidden_size = f.positive_i64("hidden_size");
  c.num_layers = f.positive_int("num_hidden_layers");
  c.num_attention_heads = f.positive_int("num_attention_heads");
  c.head_dim = f.positive_int("head_dim");
  c.num_key_value_heads = f.positive_int("num_key_value_heads");
  c.global_head_dim = f.positive_int("global_head_dim", c.head_dim);
  c.attention_k_eq_v = f.boolean("attention_k_eq_v", false);
  c.num_global_key_value_heads = f.positive_int("num_global_key_value_heads", c.num_key_value_heads);
  c.intermediate_size = f.positive_i64("intermediate_size");
  c.use_double_wide_mlp = f.boolean("use_double_wide_mlp", false);
  c.sliding_window = f.positive_int("sliding_window");
  c.rms_norm_eps = f.positive_num("rms_norm_eps", 1e-6);
  if (f.has("final_logit_softcapping")) {
    double s = f.num("final_logit_softcapping");
    if (s < 0) f.error("final_logit_softcapping", fmt::format("{} is negative", s));
    if (s > 0) c.final_logit_softcapping = s;
  }
  c.hidden_activation = f.str("hidden_activation", "gelu_pytorch_tanh");
  if (c.hidden_activation != "gelu_pytorch_tanh" && c.hidden_activation != "gelu")
    f.error("hidden_activation", fmt::format("unsupported activation \"{}\"", c.hidden_activation));
  c.hidden_size_per_layer_input = f.nonneg_int("hidden_size_per_layer_input", 0);
  c.vocab_size_per_layer_input = f.ranged("vocab_size_per_layer_input", 0, std::numeric_limits<int32_t>::max(), 0);
  if (c.hidden_size_per_layer_input > 0 && c.vocab_size_per_layer_input <= 0)
    f.error("vocab_size_per_layer_input", "must be positive when hidden_size_per_layer_input is set");
  c.enable_moe_block = f.boolean("enable_moe_block", false);
  if (c.enable_moe_block) {
    c.num_experts = f.positive_int("num_experts");
    c.top_k_experts = f.positive_int("top_k_experts");
    c.moe_intermediate_size = f.positive_i64("moe_intermediate_size");
    if (c.top_k_experts > c.num_experts)
      f.error("top_k_experts", fmt::format("{} exceeds num_experts {}", c.top_k_experts, c.num_experts));
  }
  c.num_kv_shared_layers = static_cast<int>(f.ranged("num_kv_shared_layers", 0, c.num_layers, 0));
  c.first_shared = c.num_layers - c.num_kv_shared_layers;
  c.max_position_embeddings = f.ranged("max_position_embeddings", 1, std::numeric_limits<int64_t>::max(), 131072);

  // Token ids and tying: the text config first, then the wrapper.
  c.tie_word_embeddings = f.has("tie_word_embeddings") ? f.boolean("tie_word_embeddings", true)
                                                        : top.boolean("tie_word_embeddings", true);
  c.bos_token_id = f.has("bos_token_id") ? f.opt_i64("bos_token_id") : top.opt_i64("bos_token_id");
  c.pad_token_id = f.has("pad_token_id") ? f.opt_i64("pad_token_id") : top.opt_i64("pad_token_id");
  append_unique(c.eos_token_ids, f.int_list("eos_token_id"));
  if (&f.obj() != &top.obj()) append_unique(c.eos_token_ids, top.int_list("eos_token_id"));

  // RoPE: rope_parameters {sliding_attention: {...}, full_attention: {...}}; older configs: rope_theta (full) and
  // rope_local_base_freq (sliding) with partial_rotary_factor at the top.
  Gemma4RopeConfig def_sliding{"default", 10000.0, 1.0};
  Gemma4RopeConfig def_full{"proportional", 1000000.0, 0.25};
  if (const json* rp = f.object("rope_parameters")) {
    Fields r(*rp, f.source(), f.field("rope_parameters") + ".");
    if (!rp->contains("sliding_attention") || !rp->contains("full_attention"))
      f.error("rope_parameters", "expected sub-objects sliding_attention and full_attention");
    c.rope_sliding = parse_rope(r, r.at("sliding_attention"), "sliding_attention", def_sliding);
    c.rope_full = parse_rope(r, r.at("full_attention"), "full_attention", def_full);
  } else {
    c.rope_sliding = def_sliding;
    c.rope_full = def_full;
    c.rope_sliding.theta = f.positive_num("rope_local_base_freq", def_sliding.theta);
    c.rope_full.theta = f.positive_num("rope_theta", def_full.theta);
    c.rope_full.partial_rotary_factor = f.num("partial_rotary_factor", def_full.partial_rotary_factor);
    if (!(c.rope_full.partial_rotary_factor > 0 && c.rope_full.partial_rotary_factor <= 1))
      f.error("partial_rotary_factor", "must be in (0, 1]");
  }

  // Layer types (HF: default period 6; the last layer is always full).
  std::vector<bool> sliding(static_cast<size_t>(c.num_layers));
  if (f.has("layer_types")) {
    const json& lt = f.at("layer_types");
    if (!lt.is_array()) f.error("layer_types", fmt::format("expected a list, got {}", type_name(lt)));
    if (static_cast<int64_t>(lt.size()) != c.num_layers)
      f.error("layer_types", fmt::format("has {} entries but num_hidden_layers is {}", lt.size(), c.num_layers));
    for (size_t i = 0; i < lt.size(); i++) {
      std::string t = lt[i].is_string() ? lt[i].get<std::string>() : std::string(type_name(lt[i]));
      if (t == "sliding_attention") {
        sliding[i] = true;
      } else if (t == "full_attention") {
        sliding[i] = false;
      } else {
        f.error("layer_types", fmt::format("entry {} is \"{}\" (expected sliding_attention or full_attention)", i, t));
      }
    }
  } else {
    int period = f.positive_int("sliding_window_pattern", 6);
    for (int i = 0; i < c.num_layers; i++) sliding[static_cast<size_t>(i)] = ((i + 1) % period) != 0;
  }
  sliding.back() = false;

  // Per-layer head geometry: per_layer_config {"<layer>": {head_dim, num_key_value_heads}} when present (newer
  // transformers), otherwise global_head_dim / num_global_key_value_heads on full layers.
  const json* plc = f.object("per_layer_config");
  if (plc) {
    for (auto it = plc->begin(); it != plc->end(); ++it) {
      const std::string key = "per_layer_config." + it.key();
      char* end = nullptr;
      long idx = std::strtol(it.key().c_str(), &end, 10);
      if (it.key().empty() || *end != '\0' || idx < 0 || idx >= c.num_layers)
        f.error(key, fmt::format("\"{}\" is not a layer index in [0, {})", it.key(), c.num_layers));
      if (!it.value().is_object()) f.error(key, "expected an object");
      for (auto k = it.value().begin(); k != it.value().end(); ++k)
        if (k.key() != "head_dim" && k.key() != "num_key_value_heads")
          f.error(key + "." + k.key(), "unsupported per-layer setting");
    }
  }

  c.layers.resize(static_cast<size_t>(c.num_layers));
  for (int i = 0; i < c.num_layers; i++) {
    Gemma4LayerConfig& L = c.layers[static_cast<size_t>(i)];
    L.is_sliding = sliding[static_cast<size_t>(i)];
    L.rope = L.is_sliding ? c.rope_sliding : c.rope_full;
    if (plc) {
      L.head_dim = c.head_dim;
      L.num_kv_heads = c.num_key_value_heads;
      auto it = plc->find(std::to_string(i));
      if (it != plc->end()) {
        Fields pf(*it, f.source(), f.field("per_layer_config." + std::to_string(i)) + ".");
        L.head_dim = pf.positive_int("head_dim", L.head_dim);
        L.num_kv_heads = pf.positive_int("num_key_value_heads", L.num_kv_heads);
      }
    } else {
      L.head_dim = L.is_sliding ? c.head_dim : c.global_head_dim;
      L.num_kv_heads = L.is_sliding ? c.num_key_value_heads : c.num_global_key_value_heads;
    }
    if (c.num_attention_heads % L.num_kv_heads != 0)
      f.error("num_key_value_heads", fmt::format("layer {} has {} KV heads, which do not divide num_attention_heads {}",
                                                 i, L.num_kv_heads, c.num_attention_heads));
    L.k_eq_v = c.attention_k_eq_v && !L.is_sliding;
    L.kv_shared = i >= c.first_shared;
    L.intermediate_size = c.intermediate_size * ((L.kv_shared && c.use_double_wide_mlp) ? 2 : 1);
  }
  // Resolved full-layer values, for callers that want one number.
  for (const auto& L : c.layers) {
    if (!L.is_sliding) {
      c.global_head_dim = L.head_dim;
      c.num_global_key_value_heads = L.num_kv_heads;
      break;
    }
  }
  // KV donors: owners read themselves; shared layers read the last owner of the same type before first_shared.
  for (int i = 0; i < c.first_shared; i++) {
    c.layers[static_cast<size_t>(i)].kv_donor = i;
    (c.layers[static_cast<size_t>(i)].is_sliding ? c.last_owner_sliding : c.last_owner_full) = i;
  }
  for (int i = c.first_shared; i < c.num_layers; i++) {
    Gemma4LayerConfig& L = c.layers[static_cast<size_t>(i)];
    L.kv_donor = L.is_sliding ? c.last_owner_sliding : c.last_owner_full;
    if (L.kv_donor < 0 && !assistant)
      f.error("num_kv_shared_layers",
              fmt::format("layer {} ({}) shares KV but no earlier non-shared {} layer exists", i,
                          L.is_sliding ? "sliding" : "full", L.is_sliding ? "sliding" : "full"));
    if (L.kv_donor >= 0) {
      const auto& D = c.layers[static_cast<size_t>(L.kv_donor)];
      if (D.head_dim != L.head_dim || D.num_kv_heads != L.num_kv_heads)
        f.error("num_kv_shared_layers", fmt::format("layer {} reads the KV of layer {} but their head geometry differs "
                                                    "({}x{} vs {}x{})",
                                                    i, L.kv_donor, L.num_kv_heads, L.head_dim, D.num_kv_heads,
                                                    D.head_dim));
    }
  }
  return c;
}

}  // namespace

Gemma4TextConfig Gemma4TextConfig::parse(const json& config, const std::string& source) {
  const std::string arch = gemma4_architecture(config, source);
  if (arch == kGemma4Assistant) return Gemma4AssistantConfig::parse(config, source).text;
  Fields top(config, source);
  if (arch == kGemma4CausalLM) return parse_gemma4_text(top, top, arch, "model.", false);
  const json* tc = top.object("text_config");
  if (!tc) top.missing("text_config");
  return parse_gemma4_text(Fields(*tc, source, "text_config."), top, arch, "model.language_model.", false);
}

Gemma4TextConfig Gemma4TextConfig::load(const fs::path& p) {
  fs::path file;
  json j = load_config_json(p, &file);
  return parse(j, source_of(file));
}

Gemma4AssistantConfig Gemma4AssistantConfig::parse(const json& config, const std::string& source) {
  const std::string arch = gemma4_architecture(config, source);
  if (arch != kGemma4Assistant)
    throw InvalidInput(fmt::format("{} describes a {} model, not a Gemma 4 assistant ({})", source, arch,
                                   kGemma4Assistant));
  Fields top(config, source);
  const json* tc = top.object("text_config");
  if (!tc) top.missing("text_config");
  Gemma4AssistantConfig a;
  a.text = parse_gemma4_text(Fields(*tc, source, "text_config."), top, arch, "model.", true);
  a.backbone_hidden_size = top.positive_i64("backbone_hidden_size");
  a.use_ordered_embeddings = top.boolean("use_ordered_embeddings", false);
  if (a.use_ordered_embeddings) {
    a.num_centroids = top.positive_int("num_centroids");
    a.centroid_intermediate_top_k = top.positive_int("centroid_intermediate_top_k");
    if (a.centroid_intermediate_top_k > a.num_centroids)
      top.error("centroid_intermediate_top_k",
                fmt::format("{} exceeds num_centroids {}", a.centroid_intermediate_top_k, a.num_centroids));
  } else {
    a.num_centroids = top.nonneg_int("num_centroids", 0);
    a.centroid_intermediate_top_k = top.nonneg_int("centroid_intermediate_top_k", 0);
  }
  a.tie_word_embeddings = top.boolean("tie_word_embeddings", a.text.tie_word_embeddings);
  return a;
}

Gemma4AssistantConfig Gemma4AssistantConfig::load(const fs::path& p) {
  fs::path file;
  json j = load_config_json(p, &file);
  return parse(j, source_of(file));
}

}  // namespace vatic
