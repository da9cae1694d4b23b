// Reading and checking the inputs of `vatic create`: Hugging Face directories and stored models.
#include "store/model_input.h"

#include "util/error.h"
#include "util/files.h"

namespace vatic::store_detail {
namespace fs = std::filesystem;

namespace {

json parse_json_text(const std::string& text, const std::string& what) {
  return parse_json(text, what);
}

}  // namespace

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
    in.family = &family_of(in.config, (dir / "config.json").string());
    in.arch = config_architecture(in.config, (dir / "config.json").string());
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
  in.family = &family_of(in.config, in.label);
  in.arch = config_architecture(in.config, in.label);
  json cfg = parse_json_text(read_file(store.blob_path(m.config.digest)), in.label + " config blob");
  if (!draft_part) {
    in.renderer = cfg.value("renderer", "");
    in.parser = cfg.value("parser", "");
  }
  return in;
}


// ---------------------------------------------------------------------------------------------------------------
// Pre-quantized tensors (MLX layout / our own blobs) and logical shapes

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

namespace {

std::vector<ExpectedTensor> expected_tensors(const ModelInput& in) {
  return in.family->expected_tensors(in.config, in.label + " config.json",
                                     [&in](const std::string& n) { return in.has(n); });
}

}  // namespace

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

namespace {

// The "model" part of a tokenizer.json (vocabulary, merges) and its added tokens: what must agree for a draft
// model's tokens to mean the target's.
json tokenizer_identity(const ModelInput& in) {
  auto it = in.extras.find(media::kTokenizer);
  if (it == in.extras.end()) return nullptr;
  json t = parse_json_text(it->second, in.label + " tokenizer.json");
  json id = json::object();
  for (const char* k : {"model", "added_tokens"})
    if (t.is_object() && t.contains(k)) id[k] = t[k];
  return id;
}

}  // namespace

void validate_draft_fit(const ModelInput& target, const ModelInput& draft) {
  if (draft.family->drafter_only(draft.config)) {
    draft.family->check_drafter_fit(target.config, target.label, draft.config, draft.label);
    return;
  }
  // A model of its own drafting with its own cache: it must speak the target's tokens.
  ConfigSummary t = target.family->summary(target.config, target.label);
  ConfigSummary d = draft.family->summary(draft.config, draft.label);
  if (d.vocab_size != t.vocab_size)
    throw InvalidInput(fmt::format("{} cannot draft for {}: its vocabulary has {} tokens, the target's {} (a draft "
                                   "model needs the target's tokenizer)",
                                   draft.label, target.label, d.vocab_size, t.vocab_size));
  json ti = tokenizer_identity(target), di = tokenizer_identity(draft);
  if (ti.is_null() || di.is_null())
    throw InvalidInput(fmt::format("{} cannot draft for {}: {} has no tokenizer.json to compare (a draft model needs "
                                   "the target's tokenizer)",
                                   draft.label, target.label, ti.is_null() ? target.label : draft.label));
  if (ti != di)
    throw InvalidInput(fmt::format("{} cannot draft for {}: their tokenizers differ (a draft model needs the "
                                   "target's tokenizer: the same vocabulary, merges and special tokens)",
                                   draft.label, target.label));
}


}  // namespace vatic::store_detail
