// vatic create: import a Hugging Face directory (or an existing model) into the store, quantizing as asked.
#include <algorithm>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include "formats/model_config.h"
#include "formats/safetensors.h"
#include "quant/policy.h"
#include "quant/quantize.h"
#include "store/blobs.h"
#include "store/store.h"
#include "util/error.h"
#include "util/files.h"

namespace vatic {
namespace fs = std::filesystem;
using namespace store_detail;

namespace {

bool is_gemma_target(Architecture a) {
  return a == Architecture::Gemma4ForConditionalGeneration || a == Architecture::Gemma4ForCausalLM;
}

// One model to import: a directory, or the target or draft part of a stored model.
struct ModelInput {
  std::string label;  // "FROM /path", "DRAFT name:tag", for messages
  std::string config_bytes;
  json config;
  Architecture arch = Architecture::Gemma4ForCausalLM;
  std::map<std::string, std::string> extras;  // layer kind -> bytes (tokenizer, generation_config, ...)
  std::vector<std::shared_ptr<SafetensorsFile>> files;
  std::map<std::string, size_t> where;  // tensor -> index in files
  // Inherited from a stored model (FROM name).
  bool from_store = false;
  json params = json::object();
  std::string system, template_text, renderer, parser;
  std::vector<std::string> licenses;
  json messages = json::array();

  Tensor get(const std::string& n) const { return files[where.at(n)]->get(n); }
  bool has(const std::string& n) const { return where.count(n) != 0; }
  const std::map<std::string, std::string>& metadata_of(const std::string& n) const {
    return files[where.at(n)]->metadata();
  }
};

json parse_json_text(const std::string& text, const std::string& what) {
  return parse_json(text, what);
}

ModelInput load_directory(const fs::path& dir, const std::string& role) {
  ModelInput in;
  in.label = role + " " + dir.string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw InvalidInput(fmt::format("{}: no such directory (expected a Hugging Face model directory)", in.label));
  if (!fs::is_regular_file(dir / "config.json", ec))
    throw InvalidInput(fmt::format("{}: config.json is missing (expected a Hugging Face model directory with "
                                   "config.json and model.safetensors)",
                                   in.label));
  in.config_bytes = read_file(dir / "config.json");
  in.config = parse_json_text(in.config_bytes, (dir / "config.json").string());
  try {
    in.arch = detect_architecture(in.config, (dir / "config.json").string());
  } catch (const InvalidInput& e) {
    throw InvalidInput(fmt::format("{}: {}", in.label, e.what()));
  }
  std::unique_ptr<TensorStore> ts;
  try {
    ts = std::make_unique<TensorStore>(dir);
  } catch (const NotFound& e) {
    throw InvalidInput(fmt::format("{}: {}", in.label, e.what()));
  }
  std::map<fs::path, size_t> index;
  for (const auto& f : ts->files()) {
    index[f] = in.files.size();
    in.files.push_back(std::make_shared<SafetensorsFile>(f));
  }
  for (const auto& n : ts->names()) in.where[n] = index.at(ts->file_of(n));
  auto extra = [&](const char* file, const char* kind) {
    if (!fs::is_regular_file(dir / file, ec)) return;
    in.extras[kind] = read_file(dir / file);
    // JSON side files are stored as they are, so a broken one would only fail later, at load time.
    if (std::string_view(file).ends_with(".json")) parse_json_text(in.extras[kind], in.label + ": " + file);
  };
  extra("tokenizer.json", media::kTokenizer);
  extra("tokenizer_config.json", media::kTokenizerConfig);
  extra("generation_config.json", media::kGenerationConfig);
  extra("chat_template.jinja", media::kChatTemplate);
  if (!in.extras.count(media::kChatTemplate) && in.extras.count(media::kTokenizerConfig)) {
    json tc = parse_json_text(in.extras[media::kTokenizerConfig], (dir / "tokenizer_config.json").string());
    if (tc.contains("chat_template") && tc["chat_template"].is_string())
      in.extras[media::kChatTemplate] = tc["chat_template"].get<std::string>();
  }
  return in;
}

ModelInput load_stored(const ModelStore& store, const std::string& name, bool draft_part, const std::string& role) {
  Manifest m = store.manifest(name);  // NotFound
  ModelInput in;
  in.label = role + " " + ModelName::parse(name).str();
  in.from_store = true;
  bool any = false;
  for (const auto& l : m.layers) {
    if (l.is_draft() != draft_part) continue;
    any = true;
    fs::path p = store.blob_path(l.digest);
    const std::string k = l.kind();
    if (k == media::kTensor) {
      auto f = std::make_shared<SafetensorsFile>(p);
      for (const auto& n : f->names()) in.where[n] = in.files.size();
      in.files.push_back(f);
    } else if (k == media::kModelConfig) {
      in.config_bytes = read_file(p);
    } else if (k == media::kParams) {
      in.params = parse_json_text(read_file(p), p.string());
    } else if (k == media::kSystem) {
      in.system = read_file(p);
    } else if (k == media::kTemplate) {
      in.template_text = read_file(p);
    } else if (k == media::kLicense) {
      in.licenses.push_back(read_file(p));
    } else if (k == media::kMessages) {
      in.messages = parse_json_text(read_file(p), p.string());
    } else {
      in.extras[k] = read_file(p);
    }
  }
  if (!any && draft_part) throw InvalidInput(fmt::format("{}: that model has no draft model", in.label));
  if (in.config_bytes.empty()) throw InvalidInput(fmt::format("{}: the stored model has no config", in.label));
  in.config = parse_json_text(in.config_bytes, in.label + " config");
  in.arch = detect_architecture(in.config, in.label);
  json cfg = parse_json_text(read_file(store.blob_path(m.config.digest)), in.label + " config blob");
  if (!draft_part) {
    in.renderer = cfg.value("renderer", "");
    in.parser = cfg.value("parser", "");
  }
  return in;
}

// ---------------------------------------------------------------------------------------------------------------
// Pre-quantized tensors (MLX layout / our own blobs) and logical shapes

struct PreQuant {
  std::string weight, scales, biases;
  TensorQuant q;
};

// Finds quantized weights (U32 + .scales): their names and parameters.
std::map<std::string, PreQuant> find_prequantized(const ModelInput& in) {
  std::map<std::string, PreQuant> out;
  for (const auto& [name, idx] : in.where) {
    if (!name.ends_with(".scales")) continue;
    std::string base = name.substr(0, name.size() - 7);
    std::string w = in.has(base + ".weight") ? base + ".weight" : base;
    if (!in.has(w) || in.files[in.where.at(w)]->entry(w).dtype != DType::U32) continue;
    PreQuant p{w, name, base + ".biases", {}};
    if (!in.has(p.biases))
      throw InvalidInput(fmt::format("{}: quantized tensor {} has scales but no {} (only affine quantization is "
                                     "supported)",
                                     in.label, w, p.biases));
    auto q = tensor_quant_from_metadata(in.metadata_of(w), w);
    if (!q) {
      const json* qc = nullptr;
      for (const char* key : {"quantization", "quantization_config"})
        if (in.config.contains(key) && in.config[key].is_object()) qc = &in.config[key];
      if (qc && qc->contains("bits") && qc->contains("group_size")) {
        int bits = (*qc)["bits"].get<int>();
        q = TensorQuant{bits == 8 ? QuantType::Int8 : bits == 4 ? QuantType::Int4 : QuantType::None,
                        (*qc)["group_size"].get<int>()};
      }
      if (!q || q->type == QuantType::None || !valid_group_size(q->group_size))
        throw InvalidInput(fmt::format("{}: cannot tell the bit width and group size of quantized tensor {}",
                                       in.label, w));
    }
    p.q = *q;
    out[w] = p;
  }
  return out;
}

std::optional<Shape> logical_shape(const ModelInput& in, const std::map<std::string, PreQuant>& pq,
                                   const std::string& name) {
  if (!in.has(name)) return std::nullopt;
  Shape s = in.files[in.where.at(name)]->entry(name).shape;
  if (auto it = pq.find(name); it != pq.end() && !s.empty()) s.back() = s.back() * 32 / quant_bits(it->second.q.type);
  return s;
}

// ---------------------------------------------------------------------------------------------------------------
// Expected tensors, from the config classes

struct Expect {
  std::string name;
  Shape shape;
  bool optional = false;
};

void expect_gemma_layers(const Gemma4TextConfig& c, std::vector<Expect>& e, bool assistant) {
  const int64_t H = c.hidden_size;
  for (int i = 0; i < c.num_layers; ++i) {
    const auto& L = c.layer(i);
    const std::string p = c.layer_prefix(i);
    for (const char* n : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                          "post_feedforward_layernorm"})
      e.push_back({p + n + ".weight", {H}});
    e.push_back({p + "layer_scalar", {1}, true});
    const int64_t q = int64_t{c.num_attention_heads} * L.head_dim;
    e.push_back({p + "self_attn.q_proj.weight", {q, H}});
    e.push_back({p + "self_attn.q_norm.weight", {L.head_dim}});
    e.push_back({p + "self_attn.o_proj.weight", {H, q}});
    if (!L.kv_shared && !assistant) {
      const int64_t kv = int64_t{L.num_kv_heads} * L.head_dim;
      e.push_back({p + "self_attn.k_proj.weight", {kv, H}});
      e.push_back({p + "self_attn.k_norm.weight", {L.head_dim}});
      if (!L.k_eq_v) e.push_back({p + "self_attn.v_proj.weight", {kv, H}});
    }
    e.push_back({p + "mlp.gate_proj.weight", {L.intermediate_size, H}});
    e.push_back({p + "mlp.up_proj.weight", {L.intermediate_size, H}});
    e.push_back({p + "mlp.down_proj.weight", {H, L.intermediate_size}});
    if (c.hidden_size_per_layer_input > 0 && !assistant) {
      e.push_back({p + "per_layer_input_gate.weight", {c.hidden_size_per_layer_input, H}});
      e.push_back({p + "per_layer_projection.weight", {H, c.hidden_size_per_layer_input}});
      e.push_back({p + "post_per_layer_input_norm.weight", {H}});
    }
    if (c.enable_moe_block) {
      const int64_t E = c.num_experts, I = c.moe_intermediate_size;
      e.push_back({p + "router.proj.weight", {E, H}});
      e.push_back({p + "router.scale", {H}});
      e.push_back({p + "router.per_expert_scale", {E}});
      e.push_back({p + "experts.gate_up_proj", {E, 2 * I, H}});
      e.push_back({p + "experts.down_proj", {E, H, I}});
      for (const char* n : {"pre_feedforward_layernorm_2", "post_feedforward_layernorm_1", "post_feedforward_layernorm_2"})
        e.push_back({p + n + ".weight", {H}});
    }
  }
}

std::vector<Expect> expected_tensors(const ModelInput& in) {
  std::vector<Expect> e;
  const std::string src = in.label + " config.json";
  if (is_gemma_target(in.arch)) {
    Gemma4TextConfig c = Gemma4TextConfig::parse(in.config, src);
    const std::string P = c.tensor_prefix;
    e.push_back({P + "embed_tokens.weight", {c.vocab_size, c.hidden_size}});
    e.push_back({P + "norm.weight", {c.hidden_size}});
    if (c.hidden_size_per_layer_input > 0) {
      const int64_t lp = int64_t{c.num_layers} * c.hidden_size_per_layer_input;
      e.push_back({P + "embed_tokens_per_layer.weight", {c.vocab_size_per_layer_input, lp}});
      e.push_back({P + "per_layer_model_projection.weight", {lp, c.hidden_size}});
      e.push_back({P + "per_layer_projection_norm.weight", {c.hidden_size_per_layer_input}});
    }
    if (!c.tie_word_embeddings) e.push_back({"lm_head.weight", {c.vocab_size, c.hidden_size}});
    expect_gemma_layers(c, e, false);
  } else if (in.arch == Architecture::Gemma4AssistantForCausalLM) {
    Gemma4AssistantConfig a = Gemma4AssistantConfig::parse(in.config, src);
    const auto& c = a.text;
    const int64_t H = c.hidden_size;
    e.push_back({"model.embed_tokens.weight", {c.vocab_size, H}});
    e.push_back({"model.norm.weight", {H}});
    e.push_back({"pre_projection.weight", {H, 2 * a.backbone_hidden_size}});
    e.push_back({"post_projection.weight", {a.backbone_hidden_size, H}});
    if (a.use_ordered_embeddings) {
      e.push_back({"masked_embedding.centroids.weight", {a.num_centroids, H}});
      e.push_back({"masked_embedding.token_ordering", {c.vocab_size}});
    }
    expect_gemma_layers(c, e, true);
  } else {
    Glm4MoeLiteConfig c = Glm4MoeLiteConfig::parse(in.config, src);
    const int64_t H = c.hidden_size, V = c.vocab_size, nh = c.num_attention_heads;
    e.push_back({"model.embed_tokens.weight", {V, H}});
    e.push_back({"model.norm.weight", {H}});
    if (!c.tie_word_embeddings) e.push_back({"lm_head.weight", {V, H}});
    for (int i = 0; i < c.num_layers; ++i) {
      const std::string p = c.layer_prefix(i);
      e.push_back({p + "input_layernorm.weight", {H}});
      e.push_back({p + "post_attention_layernorm.weight", {H}});
      if (c.q_lora_rank) {
        e.push_back({p + "self_attn.q_a_proj.weight", {*c.q_lora_rank, H}});
        e.push_back({p + "self_attn.q_a_layernorm.weight", {*c.q_lora_rank}});
        e.push_back({p + "self_attn.q_b_proj.weight", {nh * c.qk_head_dim, *c.q_lora_rank}});
      } else {
        e.push_back({p + "self_attn.q_proj.weight", {nh * c.qk_head_dim, H}});
      }
      e.push_back({p + "self_attn.kv_a_proj_with_mqa.weight", {c.kv_lora_rank + c.qk_rope_head_dim, H}});
      e.push_back({p + "self_attn.kv_a_layernorm.weight", {c.kv_lora_rank}});
      e.push_back({p + "self_attn.kv_b_proj.weight", {nh * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank}});
      e.push_back({p + "self_attn.o_proj.weight", {H, nh * c.v_head_dim}});
      if (!c.is_moe(i)) {
        e.push_back({p + "mlp.gate_proj.weight", {c.intermediate_size, H}});
        e.push_back({p + "mlp.up_proj.weight", {c.intermediate_size, H}});
        e.push_back({p + "mlp.down_proj.weight", {H, c.intermediate_size}});
        continue;
      }
      const int64_t E = c.n_routed_experts, I = c.moe_intermediate_size, S = I * c.n_shared_experts;
      e.push_back({p + "mlp.gate.weight", {E, H}});
      e.push_back({p + "mlp.gate.e_score_correction_bias", {E}});
      for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
        Shape one = std::string(proj) == "down_proj" ? Shape{H, I} : Shape{I, H};
        std::string stacked = p + "mlp.experts." + proj + ".weight";
        if (in.has(stacked)) {
          Shape s = one;
          s.insert(s.begin(), E);
          e.push_back({stacked, s});
        } else {
          for (int x = 0; x < E; ++x) e.push_back({p + "mlp.experts." + std::to_string(x) + "." + proj + ".weight", one});
        }
      }
      if (c.n_shared_experts > 0) {
        e.push_back({p + "mlp.shared_experts.gate_proj.weight", {S, H}});
        e.push_back({p + "mlp.shared_experts.up_proj.weight", {S, H}});
        e.push_back({p + "mlp.shared_experts.down_proj.weight", {H, S}});
      }
    }
  }
  return e;
}

void validate_tensors(const ModelInput& in, const std::map<std::string, PreQuant>& pq) {
  std::vector<std::string> problems;
  for (const auto& x : expected_tensors(in)) {
    auto s = logical_shape(in, pq, x.name);
    if (!s) {
      if (!x.optional) problems.push_back(fmt::format("tensor {} is missing", x.name));
    } else if (*s != x.shape) {
      problems.push_back(fmt::format("tensor {} has shape {} but config.json implies {}", x.name, shape_str(*s),
                                     shape_str(x.shape)));
    }
  }
  if (problems.empty()) return;
  std::string msg = fmt::format("{}: {} tensor{} missing or mis-shaped:", in.label, problems.size(),
                                problems.size() == 1 ? "" : "s");
  for (size_t i = 0; i < problems.size() && i < 10; ++i) msg += "\n  " + problems[i];
  if (problems.size() > 10) msg += fmt::format("\n  ... and {} more", problems.size() - 10);
  throw InvalidInput(msg);
}

void validate_draft_fit(const ModelInput& target, const ModelInput& draft) {
  if (draft.arch != Architecture::Gemma4AssistantForCausalLM)
    throw InvalidInput(fmt::format("{} is a {}, not a drafter (expected Gemma4AssistantForCausalLM)", draft.label,
                                   architecture_name(draft.arch)));
  if (!is_gemma_target(target.arch))
    throw InvalidInput(fmt::format("{}: a Gemma 4 assistant drafts only for Gemma 4 models, not for {} ({})",
                                   draft.label, architecture_name(target.arch), target.label));
  Gemma4TextConfig t = Gemma4TextConfig::parse(target.config, target.label);
  Gemma4AssistantConfig a = Gemma4AssistantConfig::parse(draft.config, draft.label);
  std::vector<std::string> why;
  auto check = [&](const char* what, int64_t d, int64_t tv) {
    if (d != tv) why.push_back(fmt::format("{}: draft {} vs target {}", what, d, tv));
  };
  check("backbone_hidden_size / hidden_size", a.backbone_hidden_size, t.hidden_size);
  check("vocab_size", a.text.vocab_size, t.vocab_size);
  check("head_dim (sliding layers)", a.text.head_dim, t.head_dim);
  check("head_dim (full layers)", a.text.global_head_dim, t.global_head_dim);
  check("key/value heads (sliding layers)", a.text.num_key_value_heads, t.num_key_value_heads);
  check("key/value heads (full layers)", a.text.num_global_key_value_heads, t.num_global_key_value_heads);
  if (!why.empty()) {
    std::string msg = fmt::format("{} does not fit {}:", draft.label, target.label);
    for (const auto& w : why) msg += "\n  " + w;
    throw InvalidInput(msg);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Plan: the tensor groups (one blob each)

struct Group {
  std::string name;
  uint64_t source_bytes = 0;
  int64_t params = 0;
  QuantType type = QuantType::None;
  std::string status;
  std::function<void(std::vector<NamedTensor>&, std::map<std::string, std::string>&)> build;
};

struct Plan {
  std::vector<Group> groups;
  int64_t params = 0;
  uint64_t bytes = 0;
  std::set<QuantType> types;
  int group_size = 0;
};

uint64_t entry_bytes(const ModelInput& in, const std::string& n) {
  const auto& e = in.files[in.where.at(n)]->entry(n);
  return e.end - e.begin;
}

void add_quant_metadata(std::map<std::string, std::string>& md, const std::string& tensor, QuantType t, int g) {
  md[tensor] = fmt::format("{}:{}", quant_type_name(t), g);
  auto it = md.find("quantization");
  if (it == md.end()) {
    md["quantization"] = quant_type_name(t);
    md["group_size"] = std::to_string(g);
  } else if (it->second != quant_type_name(t) || md["group_size"] != std::to_string(g)) {
    // mixed file: the per-tensor keys are authoritative; drop the file-wide pair
    md.erase("quantization");
    md.erase("group_size");
  }
}

Plan make_plan(const ModelInput& in, QuantType requested, int group_size, bool is_draft) {
  Plan plan;
  plan.group_size = group_size;
  auto pq = find_prequantized(in);
  bool any4 = std::any_of(pq.begin(), pq.end(), [](const auto& kv) { return kv.second.q.type == QuantType::Int4; });
  if (!pq.empty() && requested != QuantType::None)
    throw InvalidInput(fmt::format("{} is already quantized ({}); it cannot be quantized again: leave out {}",
                                   in.label, any4 ? "int4" : "int8",
                                   is_draft ? "--draft-quantize" : "--quantize"));
  validate_tensors(in, pq);

  QuantPolicyContext ctx;
  ctx.is_draft = is_draft;
  if (is_gemma_target(in.arch)) {
    Gemma4TextConfig c = Gemma4TextConfig::parse(in.config, in.label);
    ctx = {true, c.num_layers, c.enable_moe_block ? c.num_experts : 0, is_draft};
  } else if (in.arch == Architecture::Gemma4AssistantForCausalLM) {
    Gemma4AssistantConfig a = Gemma4AssistantConfig::parse(in.config, in.label);
    ctx = {true, a.text.num_layers, 0, is_draft};
  } else {
    Glm4MoeLiteConfig c = Glm4MoeLiteConfig::parse(in.config, in.label);
    ctx = {false, c.num_layers, c.n_routed_experts, is_draft};
  }

  std::set<std::string> consumed;
  for (const auto& [w, p] : pq) {
    consumed.insert(w);
    consumed.insert(p.scales);
    consumed.insert(p.biases);
    Group g;
    g.name = w;
    g.type = p.q.type;
    g.status = "copying " + w;
    g.source_bytes = entry_bytes(in, w) + entry_bytes(in, p.scales) + entry_bytes(in, p.biases);
    g.params = shape_numel(*logical_shape(in, pq, w));
    g.build = [&in, p](std::vector<NamedTensor>& out, std::map<std::string, std::string>& md) {
      out.push_back({p.weight, in.get(p.weight)});
      out.push_back({p.scales, in.get(p.scales)});
      out.push_back({p.biases, in.get(p.biases)});
      add_quant_metadata(md, p.weight, p.q.type, p.q.group_size);
    };
    plan.types.insert(p.q.type);
    plan.groups.push_back(std::move(g));
  }

  // One blob for a (possibly stacked) weight, quantized per the policy.
  auto add_weight = [&](const std::string& name, Shape shape, DType dtype, uint64_t bytes,
                        std::function<Tensor()> source) {
    QuantDecision d = decide_quantization(name, shape, requested, group_size, ctx);
    if (d.type != QuantType::None && dtype != DType::F32 && dtype != DType::BF16 && dtype != DType::F16)
      d.type = QuantType::None;  // integer / fp8 tensors are copied as they are
    Group g;
    g.name = name;
    g.type = d.type;
    g.source_bytes = bytes;
    g.params = shape_numel(shape);
    g.status = d.type == QuantType::None ? "importing " + name
                                         : fmt::format("quantizing {} to {}", name, quant_type_name(d.type));
    g.build = [name, d, source, label = in.label](std::vector<NamedTensor>& out,
                                                  std::map<std::string, std::string>& md) {
      Tensor t = source();
      if (d.type == QuantType::None) {
        out.push_back({name, t});
        return;
      }
      QuantizedTensor q;
      try {
        q = quantize(t, quant_bits(d.type), d.group_size);
      } catch (const InvalidInput& e) {
        throw InvalidInput(fmt::format("{}: tensor {}: {}", label, name, e.what()));
      }
      const std::string base = quant_base_name(name);
      out.push_back({name, q.packed});
      out.push_back({base + ".scales", q.scales});
      out.push_back({base + ".biases", q.biases});
      add_quant_metadata(md, name, d.type, d.group_size);
    };
    if (d.type != QuantType::None) plan.types.insert(d.type);
    plan.groups.push_back(std::move(g));
  };

  // GLM per-expert weights are stacked per projection when quantizing.
  if (requested != QuantType::None && !ctx.gemma4) {
    static const std::regex expert_re(R"((.*\.experts)\.(\d+)\.([A-Za-z0-9_]+)\.weight)");
    std::map<std::string, std::map<int, std::string>> stacks;  // stacked name -> expert -> source name
    for (const auto& [name, idx] : in.where) {
      std::smatch m;
      if (consumed.count(name) || !std::regex_match(name, m, expert_re)) continue;
      stacks[m[1].str() + "." + m[3].str() + ".weight"][std::stoi(m[2].str())] = name;
    }
    for (const auto& [stacked, experts] : stacks) {
      const int E = static_cast<int>(experts.size());
      std::vector<std::string> names;
      for (int x = 0; x < E; ++x) {
        auto it = experts.find(x);
        if (it == experts.end())
          throw InvalidInput(fmt::format("{}: expert {} of {} is missing", in.label, x, stacked));
        names.push_back(it->second);
      }
      const auto& e0 = in.files[in.where.at(names[0])]->entry(names[0]);
      uint64_t bytes = 0;
      for (const auto& n : names) {
        const auto& e = in.files[in.where.at(n)]->entry(n);
        if (e.shape != e0.shape || e.dtype != e0.dtype)
          throw InvalidInput(fmt::format("{}: experts of {} differ in shape or dtype ({} is {} {})", in.label, stacked,
                                         n, dtype_name(e.dtype), shape_str(e.shape)));
        bytes += e.end - e.begin;
        consumed.insert(n);
      }
      Shape shape = e0.shape;
      shape.insert(shape.begin(), E);
      add_weight(stacked, shape, e0.dtype, bytes, [&in, names, shape, dt = e0.dtype]() {
        Tensor out = Tensor::empty(shape, dt);
        auto* dst = static_cast<uint8_t*>(out.raw());
        for (const auto& n : names) {
          Tensor t = in.get(n);
          std::memcpy(dst, t.raw(), t.nbytes());
          dst += t.nbytes();
        }
        return out;
      });
    }
  }

  for (const auto& [name, idx] : in.where) {
    if (consumed.count(name)) continue;
    const auto& e = in.files[idx]->entry(name);
    add_weight(name, e.shape, e.dtype, e.end - e.begin, [&in, name]() { return in.get(name); });
  }
  std::sort(plan.groups.begin(), plan.groups.end(), [](const Group& a, const Group& b) { return a.name < b.name; });
  for (const auto& g : plan.groups) {
    plan.params += g.params;
    plan.bytes += g.source_bytes;
  }
  return plan;
}

// Serializes a tensor group as safetensors (deterministically: metadata first, tensors in name order) and stores
// it as a blob.
BlobRef write_tensor_blob(const fs::path& root, std::vector<NamedTensor> tensors,
                          const std::map<std::string, std::string>& md) {
  std::sort(tensors.begin(), tensors.end(), [](const NamedTensor& a, const NamedTensor& b) { return a.first < b.first; });
  ordered_json header = ordered_json::object();
  if (!md.empty()) {
    ordered_json m = ordered_json::object();
    for (const auto& [k, v] : md) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  uint64_t off = 0;
  std::vector<Tensor> keep;
  for (auto& [name, t] : tensors) {
    if (!t.is_contiguous()) fail("tensor {} is not contiguous", name);
    ordered_json e = ordered_json::object();
    e["dtype"] = dtype_name(t.dtype());
    e["shape"] = t.shape();
    e["data_offsets"] = {off, off + t.nbytes()};
    off += t.nbytes();
    header[name] = std::move(e);
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(h.size()) >> (8 * i));
  std::vector<Chunk> chunks{{len, 8}, {h.data(), h.size()}};
  for (const auto& [name, t] : tensors) chunks.push_back({t.raw(), t.nbytes()});
  return write_blob(root, chunks);
}

std::string dtype_label(const json& config) {
  for (const json* c : {&config, config.contains("text_config") ? &config["text_config"] : nullptr}) {
    if (!c || !c->is_object()) continue;
    for (const char* k : {"dtype", "torch_dtype"})
      if (c->contains(k) && (*c)[k].is_string()) return (*c)[k].get<std::string>();
  }
  return "bfloat16";
}

std::string quant_label(const Plan& p, const json& config) {
  if (p.types.count(QuantType::Int4)) return "int4";
  if (p.types.count(QuantType::Int8)) return "int8";
  return dtype_label(config);
}

// The chat format by architecture; mirrors chat::default_chat_format (the store layer does not link src/chat).
std::pair<std::string, std::string> default_chat_names(const ModelInput& in) {
  if (is_gemma_target(in.arch)) {
    const json& t = in.config.contains("text_config") ? in.config["text_config"] : in.config;
    bool ple = t.is_object() && t.value("hidden_size_per_layer_input", 0) > 0;
    return {ple ? "gemma4-small" : "gemma4-large", "gemma4"};
  }
  return {"glm-4.7", "glm-4.7"};
}

}  // namespace

ModelInfo ModelStore::create(const std::string& name, const Modelfile& mf, const CreateOptions& opt) {
  const ModelName target_name = ModelName::parse(name);
  const QuantType qt = parse_quant_type(opt.quantize, "--quantize");
  const QuantType dqt = parse_quant_type(opt.draft_quantize, "--draft-quantize");
  if (dqt != QuantType::None && mf.draft.empty())
    throw InvalidInput("--draft-quantize requires a DRAFT model in the Modelfile");
  if (!valid_group_size(opt.group_size))
    throw InvalidInput(fmt::format("unsupported quantization group size {}: use 64 or 32", opt.group_size));
  if (mf.from.empty()) throw InvalidInput("the Modelfile has no FROM");
  {
    std::error_code ec;
    fs::path mp = manifest_path(target_name);
    for (fs::path p = mp.parent_path(); p != root_ / "manifests" && p != root_; p = p.parent_path())
      if (fs::exists(p, ec) && !fs::is_directory(p, ec))
        throw InvalidInput(fmt::format("cannot create {}: it conflicts with the model stored at {}",
                                       target_name.str(), p.lexically_relative(root_ / "manifests").string()));
    if (fs::is_directory(mp, ec))
      throw InvalidInput(fmt::format("cannot create {}: a namespace of that name exists", target_name.str()));
  }

  // Inputs and every check come before anything is written.
  ModelInput target = mf.from.is_path() ? load_directory(mf.from.path, "FROM")
                                        : load_stored(*this, mf.from.text, false, "FROM");
  if (target.arch == Architecture::Gemma4AssistantForCausalLM)
    throw InvalidInput(fmt::format("{} is a drafter (Gemma4AssistantForCausalLM); use it as DRAFT under its target "
                                   "model",
                                   target.label));
  std::optional<ModelInput> draft;
  if (!mf.draft.empty()) {
    draft = mf.draft.is_path() ? load_directory(mf.draft.path, "DRAFT")
                               : load_stored(*this, mf.draft.text, true, "DRAFT");
  } else if (target.from_store) {
    Manifest base = manifest(mf.from.text);
    if (std::any_of(base.layers.begin(), base.layers.end(), [](const ManifestLayer& l) { return l.is_draft(); }))
      draft = load_stored(*this, mf.from.text, true, "draft of " + mf.from.text);
  }
  if (draft) validate_draft_fit(target, *draft);
  Plan tplan = make_plan(target, qt, opt.group_size, false);
  std::optional<Plan> dplan;
  if (draft) dplan = make_plan(*draft, dqt, opt.group_size, true);

  // Modelfile settings over inherited ones.
  json params = target.params.is_object() ? target.params : json::object();
  for (const auto& [k, v] : mf.params.items()) params[k] = v;
  std::string system = !mf.system.empty() ? mf.system : target.system;
  std::string template_text = !mf.template_text.empty() ? mf.template_text : target.template_text;
  std::vector<std::string> licenses = !mf.licenses.empty() ? mf.licenses : target.licenses;
  json messages = json::array();
  if (!mf.messages.empty()) {
    for (const auto& m : mf.messages) messages.push_back({{"role", m.role}, {"content", m.content}});
  } else {
    messages = target.messages;
  }
  auto [def_renderer, def_parser] = default_chat_names(target);
  std::string renderer = !mf.renderer.empty() ? mf.renderer : !target.renderer.empty() ? target.renderer : def_renderer;
  std::string parser = !mf.parser.empty() ? mf.parser : !target.parser.empty() ? target.parser : def_parser;

  // Writing.
  const uint64_t total = tplan.bytes + (dplan ? dplan->bytes : 0);
  uint64_t done = 0;
  auto report = [&](const std::string& status) {
    if (opt.progress) opt.progress({status, done, total});
  };
  std::vector<std::string> fresh;
  std::unique_ptr<store_detail::StoreLock> lock = std::make_unique<store_detail::StoreLock>(root_, false);
  remove_stale_temps(root_ / "blobs");
  remove_stale_temps(root_ / "manifests");
  Manifest m;
  try {
    auto add = [&](const std::string& kind, bool is_draft, const std::string& lname, const BlobRef& b) {
      if (b.fresh) fresh.push_back(b.digest);
      m.layers.push_back({std::string(is_draft ? media::kDraftPrefix : media::kPrefix) + kind, b.digest, b.size, lname});
    };
    auto add_text = [&](const std::string& kind, bool is_draft, const std::string& lname, const std::string& bytes) {
      add(kind, is_draft, lname, write_blob(root_, bytes));
    };
    auto add_model = [&](const ModelInput& in, const Plan& plan, bool is_draft) {
      add_text(media::kModelConfig, is_draft, "config.json", in.config_bytes);
      static const std::vector<std::pair<const char*, const char*>> extras = {
          {media::kTokenizer, "tokenizer.json"},
          {media::kTokenizerConfig, "tokenizer_config.json"},
          {media::kGenerationConfig, "generation_config.json"},
          {media::kChatTemplate, "chat_template.jinja"}};
      for (const auto& [kind, file] : extras)
        if (auto it = in.extras.find(kind); it != in.extras.end()) add_text(kind, is_draft, file, it->second);
      for (const auto& g : plan.groups) {
        report(g.status);
        std::vector<NamedTensor> tensors;
        std::map<std::string, std::string> md;
        g.build(tensors, md);
        add(media::kTensor, is_draft, g.name, write_tensor_blob(root_, std::move(tensors), md));
        done += g.source_bytes;
      }
    };
    add_model(target, tplan, false);
    if (!params.empty()) add_text(media::kParams, false, "params", params.dump());
    if (!template_text.empty()) add_text(media::kTemplate, false, "template", template_text);
    if (!system.empty()) add_text(media::kSystem, false, "system", system);
    for (const auto& l : licenses) add_text(media::kLicense, false, "license", l);
    if (!messages.empty()) add_text(media::kMessages, false, "messages", messages.dump());
    if (draft) add_model(*draft, *dplan, true);

    // The config blob: what show / list print without opening tensors.
    json cfg = json::object();
    cfg["model_format"] = "safetensors";
    cfg["architecture"] = architecture_name(target.arch);
    cfg["quantization"] = quant_label(tplan, target.config);
    if (!tplan.types.empty()) cfg["group_size"] = opt.group_size;
    cfg["parameter_count"] = tplan.params;
    if (is_gemma_target(target.arch)) {
      Gemma4TextConfig c = Gemma4TextConfig::parse(target.config, target.label);
      cfg["context_length"] = c.max_position_embeddings;
      cfg["embedding_length"] = c.hidden_size;
      // K and V (f32) of every KV-owning full-attention layer; sliding layers stop growing at the window.
      int64_t kv = 0;
      for (const auto& l : c.layers)
        if (!l.kv_shared && !l.is_sliding) kv += 2 * int64_t{l.num_kv_heads} * l.head_dim * 4;
      cfg["kv_bytes_per_token"] = kv;
    } else {
      Glm4MoeLiteConfig c = Glm4MoeLiteConfig::parse(target.config, target.label);
      cfg["context_length"] = c.max_position_embeddings;
      cfg["embedding_length"] = c.hidden_size;
      // MLA caches only the latent and the shared rotary key (f32).
      cfg["kv_bytes_per_token"] = int64_t{c.num_layers} * (c.kv_lora_rank + c.qk_rope_head_dim) * 4;
    }
    std::vector<std::string> caps{"completion"};
    if (parser == "gemma4" || parser == "glm-4.7") caps.insert(caps.end(), {"tools", "thinking"});
    cfg["capabilities"] = caps;
    cfg["renderer"] = renderer;
    cfg["parser"] = parser;
    if (draft) {
      cfg["draft"] = {{"architecture", architecture_name(draft->arch)},
                      {"parameter_count", dplan->params},
                      {"quantization", quant_label(*dplan, draft->config)},
                      {"config", "draft config.json layer"}};
    }
    BlobRef cb = write_blob(root_, cfg.dump());
    if (cb.fresh) fresh.push_back(cb.digest);
    m.config = {media::kConfig, cb.digest, cb.size, ""};

    report("writing manifest");
    if (opt.before_manifest) opt.before_manifest();
    std::error_code ec;
    for (const auto& l : m.layers)
      if (!fs::is_regular_file(blob_path(l.digest), ec))
        fail("blob {} of layer {} vanished before the manifest was written", l.digest, l.name);
    write_atomic(manifest_path(target_name), m.to_json().dump());
  } catch (...) {
    // Roll back: remove the blobs this create wrote that no manifest uses. Waiting for the exclusive lock lets
    // concurrent creates (which may have found these blobs and be about to reference them) finish first.
    lock.reset();
    try {
      store_detail::StoreLock ex(root_, true);
      std::set<std::string> used;
      std::error_code ec;
      fs::path mdir = root_ / "manifests";
      if (fs::is_directory(mdir, ec))
        for (auto it = fs::recursive_directory_iterator(mdir, ec); !ec && it != fs::recursive_directory_iterator();
             it.increment(ec)) {
          if (!it->is_regular_file(ec) || is_temp_name(it->path().filename().string())) continue;
          Manifest other = Manifest::from_json(json::parse(read_file(it->path())));
          used.insert(other.config.digest);
          for (const auto& l : other.layers) used.insert(l.digest);
        }
      for (const auto& d : fresh)
        if (!used.count(d)) fs::remove(blob_path(d), ec);
    } catch (...) {
      // best effort: garbage_collect() removes what is left
    }
    throw;
  }
  done = total;
  report("success");
  lock.reset();
  return show(target_name.str());
}

}  // namespace vatic
