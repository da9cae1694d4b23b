#include "formats/model_config.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "tensor/dtype.h"
#include "formats/config_fields.h"
#include "util/error.h"

namespace vatic {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------------------------
// Architecture detection and config loading

const char* architecture_name(Architecture a) {
  switch (a) {
    case Architecture::Gemma4ForConditionalGeneration: return "Gemma4ForConditionalGeneration";
    case Architecture::Gemma4ForCausalLM: return "Gemma4ForCausalLM";
    case Architecture::Gemma4AssistantForCausalLM: return "Gemma4AssistantForCausalLM";
    case Architecture::Glm4MoeLiteForCausalLM: return "Glm4MoeLiteForCausalLM";
  }
  return "?";
}

std::string supported_architectures() {
  return "Gemma4ForConditionalGeneration, Gemma4ForCausalLM, Gemma4AssistantForCausalLM, Glm4MoeLiteForCausalLM";
}

Architecture detect_architecture(const json& config, const std::string& source) {
  if (!config.is_object()) throw InvalidInput(fmt::format("invalid config {}: not a JSON object", source));
  std::string name;
  auto it = config.find("architectures");
  if (it != config.end() && !it->is_null()) {
    if (!it->is_array() || it->empty() || !(*it)[0].is_string())
      throw InvalidInput(fmt::format("invalid config {}: field architectures must be a non-empty list of names",
                                     source));
    name = (*it)[0].get<std::string>();
  }
  static const std::pair<const char*, Architecture> by_name[] = {
      {"Gemma4ForConditionalGeneration", Architecture::Gemma4ForConditionalGeneration},
      {"Gemma4ForCausalLM", Architecture::Gemma4ForCausalLM},
      {"Gemma4AssistantForCausalLM", Architecture::Gemma4AssistantForCausalLM},
      {"Glm4MoeLiteForCausalLM", Architecture::Glm4MoeLiteForCausalLM},
  };
  for (const auto& [n, a] : by_name)
    if (name == n) return a;
  if (name.empty()) {
    auto mt = config.find("model_type");
    std::string model_type = (mt != config.end() && mt->is_string()) ? mt->get<std::string>() : "";
    if (model_type == "gemma4") return Architecture::Gemma4ForConditionalGeneration;
    if (model_type == "gemma4_text") return Architecture::Gemma4ForCausalLM;
    if (model_type == "gemma4_assistant") return Architecture::Gemma4AssistantForCausalLM;
    if (model_type == "glm4_moe_lite") return Architecture::Glm4MoeLiteForCausalLM;
    throw InvalidInput(fmt::format("unsupported model in {}: no architectures field{}; supported architectures: {}",
                                   source, model_type.empty() ? "" : " and model_type \"" + model_type + "\"",
                                   supported_architectures()));
  }
  throw InvalidInput(fmt::format("unsupported architecture \"{}\" in {}; supported architectures: {}", name, source,
                                 supported_architectures()));
}

json load_config_json(const fs::path& p, fs::path* resolved) {
  std::error_code ec;
  fs::path file = fs::is_directory(p, ec) ? p / "config.json" : p;
  if (!fs::exists(file, ec)) throw NotFound(fmt::format("model config {} does not exist", file.string()));
  std::ifstream in(file, std::ios::binary);
  if (!in) throw InvalidInput(fmt::format("cannot open {}", file.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  json j;
  const std::string text = ss.str();
  if (json_depth(text) > kMaxJsonDepth)
    throw InvalidInput(fmt::format("invalid config {}: JSON nested deeper than {} levels", file.string(), kMaxJsonDepth));
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw InvalidInput(fmt::format("invalid config {}: not valid JSON ({})", file.string(), json_error_text(e)));
  }
  if (!j.is_object()) throw InvalidInput(fmt::format("invalid config {}: not a JSON object", file.string()));
  if (resolved) *resolved = file;
  return j;
}

// ---------------------------------------------------------------------------------------------------------------
// Typed field access with errors naming the file and the field.

namespace {

std::string source_of(const fs::path& file) { return file.string(); }

void append_unique(std::vector<int64_t>& dst, const std::vector<int64_t>& src) {
  for (auto id : src)
    if (std::find(dst.begin(), dst.end(), id) == dst.end()) dst.push_back(id);
}

RopeConfig parse_rope(const Fields& f, const json& v, const std::string& key, const RopeConfig& def) {
  if (!v.is_object()) f.error(key, fmt::format("expected an object, got {}{}", type_name(v), brief(v)));
  Fields r(v, f.source(), f.field(key) + ".");
  RopeConfig rc = def;
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

// ---------------------------------------------------------------------------------------------------------------
// Gemma 4

int RopeConfig::rotated_pairs(int head_dim) const {
  return static_cast<int>(partial_rotary_factor * head_dim / 2);
}

float Gemma4TextConfig::embed_scale() const { return round_bf16(std::sqrt(static_cast<float>(hidden_size))); }

namespace {

// Parses the text fields of a Gemma 4 config. `f` reads the text fields, `top` the top level (for fields that the
// multimodal wrapper also carries, like token ids and tie_word_embeddings).
Gemma4TextConfig parse_gemma4_text(const Fields& f, const Fields& top, Architecture arch, const std::string& prefix,
                                   bool assistant) {
  Gemma4TextConfig c;
  c.source = f.source();
  c.arch = arch;
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
  RopeConfig def_sliding{"default", 10000.0, 1.0};
  RopeConfig def_full{"proportional", 1000000.0, 0.25};
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
  Architecture arch = detect_architecture(config, source);
  Fields top(config, source);
  switch (arch) {
    case Architecture::Gemma4ForConditionalGeneration: {
      const json* tc = top.object("text_config");
      if (!tc) top.missing("text_config");
      return parse_gemma4_text(Fields(*tc, source, "text_config."), top, arch, "model.language_model.", false);
    }
    case Architecture::Gemma4ForCausalLM:
      return parse_gemma4_text(top, top, arch, "model.", false);
    case Architecture::Gemma4AssistantForCausalLM:
      return Gemma4AssistantConfig::parse(config, source).text;
    case Architecture::Glm4MoeLiteForCausalLM:
      break;
  }
  throw InvalidInput(fmt::format("{} describes a {} model, not Gemma 4", source, architecture_name(arch)));
}

Gemma4TextConfig Gemma4TextConfig::load(const fs::path& p) {
  fs::path file;
  json j = load_config_json(p, &file);
  return parse(j, source_of(file));
}

Gemma4AssistantConfig Gemma4AssistantConfig::parse(const json& config, const std::string& source) {
  Architecture arch = detect_architecture(config, source);
  if (arch != Architecture::Gemma4AssistantForCausalLM)
    throw InvalidInput(fmt::format("{} describes a {} model, not a Gemma 4 assistant", source,
                                   architecture_name(arch)));
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

// ---------------------------------------------------------------------------------------------------------------
// GLM4-MoE-Lite

double Glm4MoeLiteConfig::attention_scale() const { return 1.0 / std::sqrt(static_cast<double>(qk_head_dim)); }

Glm4MoeLiteConfig Glm4MoeLiteConfig::parse(const json& config, const std::string& source) {
  Architecture arch = detect_architecture(config, source);
  if (arch != Architecture::Glm4MoeLiteForCausalLM)
    throw InvalidInput(fmt::format("{} describes a {} model, not GLM4-MoE-Lite", source, architecture_name(arch)));
  Fields f(config, source);
  Glm4MoeLiteConfig c;
  c.source = source;
  c.vocab_size = f.positive_i64("vocab_size");
  c.hidden_size = f.positive_i64("hidden_size");
  c.num_layers = f.positive_int("num_hidden_layers");
  c.num_attention_heads = f.positive_int("num_attention_heads");
  c.num_key_value_heads = f.positive_int("num_key_value_heads", c.num_attention_heads);
  if (f.has("q_lora_rank")) c.q_lora_rank = f.positive_int("q_lora_rank");
  c.kv_lora_rank = f.positive_int("kv_lora_rank");
  c.qk_nope_head_dim = f.positive_int("qk_nope_head_dim");
  c.qk_rope_head_dim = f.positive_int("qk_rope_head_dim");
  if (c.qk_rope_head_dim % 2 != 0) f.error("qk_rope_head_dim", "must be even");
  c.qk_head_dim = c.qk_nope_head_dim + c.qk_rope_head_dim;
  if (f.has("qk_head_dim") && f.i64("qk_head_dim") != c.qk_head_dim)
    f.error("qk_head_dim", fmt::format("{} differs from qk_nope_head_dim + qk_rope_head_dim = {}", f.i64("qk_head_dim"),
                                       c.qk_head_dim));
  c.v_head_dim = f.positive_int("v_head_dim");

  if (const json* rp = f.object("rope_parameters")) {
    Fields r(*rp, source, "rope_parameters.");
    c.rope_type = r.str("rope_type", r.str("type", "default"));
    c.rope_theta = r.has("rope_theta") ? r.positive_num("rope_theta", 10000.0) : f.positive_num("rope_theta", 10000.0);
    if (c.rope_type != "default")
      r.error("rope_type", fmt::format("unsupported RoPE type \"{}\" (supported: default)", c.rope_type));
  } else {
    c.rope_theta = f.positive_num("rope_theta", 10000.0);
  }
  if (const json* rs = f.object("rope_scaling")) {
    Fields r(*rs, source, "rope_scaling.");
    std::string t = r.str("rope_type", r.str("type", "default"));
    if (t != "default") r.error("rope_type", fmt::format("unsupported RoPE scaling \"{}\"", t));
  }
  c.rope_interleave = f.boolean("rope_interleave", true);
  c.rms_norm_eps = f.positive_num("rms_norm_eps", 1e-5);
  c.hidden_act = f.str("hidden_act", "silu");
  if (c.hidden_act != "silu") f.error("hidden_act", fmt::format("unsupported activation \"{}\"", c.hidden_act));

  c.intermediate_size = f.positive_i64("intermediate_size");
  c.moe_intermediate_size = f.positive_i64("moe_intermediate_size");
  c.n_routed_experts = f.positive_int("n_routed_experts");
  c.n_shared_experts = f.nonneg_int("n_shared_experts", 0);
  c.num_experts_per_tok = f.positive_int("num_experts_per_tok");
  if (c.num_experts_per_tok > c.n_routed_experts)
    f.error("num_experts_per_tok", fmt::format("{} exceeds n_routed_experts {}", c.num_experts_per_tok,
                                               c.n_routed_experts));
  c.n_group = f.positive_int("n_group", 1);
  c.topk_group = f.positive_int("topk_group", 1);
  if (c.n_routed_experts % c.n_group != 0)
    f.error("n_group", fmt::format("{} does not divide n_routed_experts {}", c.n_group, c.n_routed_experts));
  if (c.topk_group > c.n_group) f.error("topk_group", fmt::format("{} exceeds n_group {}", c.topk_group, c.n_group));
  c.norm_topk_prob = f.boolean("norm_topk_prob", true);
  c.routed_scaling_factor = f.num("routed_scaling_factor", 1.0);
  c.topk_method = f.str("topk_method", "noaux_tc");
  c.scoring_func = f.str("scoring_func", "sigmoid");
  if (c.scoring_func != "sigmoid")
    f.error("scoring_func", fmt::format("unsupported scoring function \"{}\"", c.scoring_func));

  c.layer_is_moe.assign(static_cast<size_t>(c.num_layers), true);
  if (f.has("mlp_layer_types")) {
    const json& mt = f.at("mlp_layer_types");
    if (!mt.is_array()) f.error("mlp_layer_types", fmt::format("expected a list, got {}", type_name(mt)));
    if (static_cast<int64_t>(mt.size()) != c.num_layers)
      f.error("mlp_layer_types", fmt::format("has {} entries but num_hidden_layers is {}", mt.size(), c.num_layers));
    for (size_t i = 0; i < mt.size(); i++) {
      std::string t = mt[i].is_string() ? mt[i].get<std::string>() : std::string(type_name(mt[i]));
      if (t == "dense") {
        c.layer_is_moe[i] = false;
      } else if (t != "sparse") {
        f.error("mlp_layer_types", fmt::format("entry {} is \"{}\" (expected dense or sparse)", i, t));
      }
    }
    c.first_k_dense_replace = 0;
    while (c.first_k_dense_replace < c.num_layers && !c.layer_is_moe[static_cast<size_t>(c.first_k_dense_replace)])
      c.first_k_dense_replace++;
    if (f.has("first_k_dense_replace") && f.i64("first_k_dense_replace") != c.first_k_dense_replace)
      f.error("first_k_dense_replace", fmt::format("{} disagrees with mlp_layer_types (first sparse layer {})",
                                                   f.i64("first_k_dense_replace"), c.first_k_dense_replace));
  } else {
    c.first_k_dense_replace = static_cast<int>(f.ranged("first_k_dense_replace", 0, c.num_layers, 1));
    for (int i = 0; i < c.first_k_dense_replace; i++) c.layer_is_moe[static_cast<size_t>(i)] = false;
  }
  c.num_nextn_predict_layers = f.nonneg_int("num_nextn_predict_layers", 0);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  c.bos_token_id = f.opt_i64("bos_token_id");
  c.pad_token_id = f.opt_i64("pad_token_id");
  c.eos_token_ids = f.int_list("eos_token_id");
  c.max_position_embeddings = f.ranged("max_position_embeddings", 1, std::numeric_limits<int64_t>::max(), 202752);
  return c;
}

Glm4MoeLiteConfig Glm4MoeLiteConfig::load(const fs::path& p) {
  fs::path file;
  json j = load_config_json(p, &file);
  return parse(j, source_of(file));
}

}  // namespace vatic
