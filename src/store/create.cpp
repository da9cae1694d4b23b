// vatic create: import a Hugging Face directory (or an existing model) into the store, quantizing as asked.
// The stages: check the request, read and check the inputs (model_input.h), plan the tensor blobs
// (create_plan.h), then write the blobs and, last, the manifest.
#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "chat/format.h"
#include "chat/renderer.h"
#include "models/registry.h"
#include "formats/safetensors.h"
#include "quant/quantize.h"
#include "store/blobs.h"
#include "store/create_plan.h"
#include "store/import_pipeline.h"
#include "store/model_input.h"
#include "store/store.h"
#include "util/error.h"
#include "util/files.h"

namespace vatic {
namespace fs = std::filesystem;
using namespace store_detail;

namespace {

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

// The family's chat format, unless the checkpoint's own chat template is one vatic has no renderer for.
std::pair<std::string, std::string> default_chat_names(const ModelInput& in, const ChatDefaults& d) {
  auto tmpl = in.extras.find(media::kChatTemplate);
  if (tmpl != in.extras.end() && !chat::template_matches_renderer(d.renderer, tmpl->second)) {
    std::string names;
    for (const auto& n : chat::renderer_names()) names += (names.empty() ? "" : ", ") + n;
    throw InvalidInput(fmt::format("{}: its chat template is not one vatic has a renderer for (renderers: {}); add "
                                   "RENDERER and PARSER lines to the Modelfile naming the format it follows, or "
                                   "RENDERER raw to serve prompts as they are",
                                   in.label, names));
  }
  return {d.renderer, d.parser};
}

// The request alone, before anything is read: its options, FROM, and a name that no stored model or namespace
// stands in the way of.
void check_request(const ModelStore& store, const ModelName& target_name, const Modelfile& mf,
                   const CreateOptions& opt, QuantType draft_quant) {
  if (draft_quant != QuantType::None && mf.draft.empty())
    throw InvalidInput("--draft-quantize requires a DRAFT model in the Modelfile");
  if (!valid_group_size(opt.group_size))
    throw InvalidInput(fmt::format("unsupported quantization group size {}: use 64 or 32", opt.group_size));
  if (mf.from.empty()) throw InvalidInput("the Modelfile has no FROM");
  const fs::path& root = store.root();
  std::error_code ec;
  fs::path mp = store.manifest_path(target_name);
  for (fs::path p = mp.parent_path(); p != root / "manifests" && p != root; p = p.parent_path())
    if (fs::exists(p, ec) && !fs::is_directory(p, ec))
      throw InvalidInput(fmt::format("cannot create {}: it conflicts with the model stored at {}",
                                     target_name.str(), p.lexically_relative(root / "manifests").string()));
  if (fs::is_directory(mp, ec))
    throw InvalidInput(fmt::format("cannot create {}: a namespace of that name exists", target_name.str()));
}

bool has_draft_layers(const Manifest& m) {
  return std::any_of(m.layers.begin(), m.layers.end(), [](const ManifestLayer& l) { return l.is_draft(); });
}

struct CreateInputs {
  ModelInput target;
  std::optional<ModelInput> draft;
};

// FROM and DRAFT, read and checked. Without a DRAFT, a stored FROM passes its draft model on.
CreateInputs load_inputs(const ModelStore& store, const Modelfile& mf) {
  CreateInputs in{mf.from.is_path() ? load_directory(mf.from.path, "FROM")
                                    : load_stored(store, mf.from.text, false, "FROM"),
                  std::nullopt};
  const ModelInput& target = in.target;
  if (target.family->drafter_only(target.config))
    throw InvalidInput(fmt::format("{} is a drafter ({}); use it as DRAFT under its target model",
                                   target.label, target.arch));
  if (!mf.draft.empty()) {
    if (mf.draft.is_path()) {
      in.draft = load_directory(mf.draft.path, "DRAFT");
    } else {
      // A stored model with a drafter lends its drafter; one without drafts itself (a small model of the
      // family).
      const bool has_draft = has_draft_layers(store.manifest(mf.draft.text));
      in.draft = load_stored(store, mf.draft.text, has_draft, "DRAFT");
    }
  } else if (target.from_store) {
    if (has_draft_layers(store.manifest(mf.from.text)))
      in.draft = load_stored(store, mf.from.text, true, "draft of " + mf.from.text);
  }
  if (in.draft) validate_draft_fit(target, *in.draft);
  return in;
}

// What the manifest says besides tensors: the Modelfile's settings over those inherited from a stored FROM,
// and the chat format (the family's by default).
struct ModelSettings {
  json params;
  std::string system, template_text;
  std::vector<std::string> licenses;
  json messages;
  std::string renderer, parser;
};

ModelSettings merge_settings(const ModelInput& target, const Modelfile& mf) {
  ModelSettings s;
  s.params = target.params.is_object() ? target.params : json::object();
  for (const auto& [k, v] : mf.params.items()) s.params[k] = v;
  s.system = !mf.system.empty() ? mf.system : target.system;
  s.template_text = !mf.template_text.empty() ? mf.template_text : target.template_text;
  s.licenses = !mf.licenses.empty() ? mf.licenses : target.licenses;
  s.messages = json::array();
  if (!mf.messages.empty()) {
    for (const auto& m : mf.messages) s.messages.push_back({{"role", m.role}, {"content", m.content}});
  } else {
    s.messages = target.messages;
  }
  const ChatDefaults chat_defaults = target.family->chat_defaults(target.config);
  s.renderer = !mf.renderer.empty() ? mf.renderer : target.renderer;
  s.parser = !mf.parser.empty() ? mf.parser : target.parser;
  if (s.renderer.empty()) {
    auto [def_renderer, def_parser] = default_chat_names(target, chat_defaults);
    s.renderer = def_renderer;
    if (s.parser.empty()) s.parser = def_parser;
  } else if (s.parser.empty() && s.renderer != "raw") {
    s.parser = chat_defaults.parser;
  }
  return s;
}

// The config blob: what show / list print without opening tensors.
json config_blob(const ModelInput& target, const Plan& tplan, const ModelInput* draft, const Plan* dplan,
                 const ModelSettings& s, int group_size) {
  json cfg = json::object();
  cfg["model_format"] = "safetensors";
  cfg["architecture"] = target.arch;
  cfg["quantization"] = quant_label(tplan, target.config);
  if (!tplan.types.empty()) cfg["group_size"] = group_size;
  cfg["parameter_count"] = tplan.params;
  {
    ConfigSummary c = target.family->summary(target.config, target.label);
    cfg["context_length"] = c.context_length;
    cfg["embedding_length"] = c.hidden_size;
    cfg["kv_bytes_per_token"] = c.kv_bytes_per_token;
  }
  std::vector<std::string> caps{"completion"};
  const chat::ParserCapabilities pc = chat::parser_capabilities(s.parser);
  if (pc.tools) caps.push_back("tools");
  if (pc.thinking) caps.push_back("thinking");
  cfg["capabilities"] = caps;
  cfg["renderer"] = s.renderer;
  cfg["parser"] = s.parser;
  if (draft) {
    cfg["draft"] = {{"architecture", draft->arch},
                    {"parameter_count", dplan->params},
                    {"quantization", quant_label(*dplan, draft->config)},
                    {"config", "draft config.json layer"}};
  }
  return cfg;
}

// Writes a model's blobs and then its manifest, reporting progress, and remembers the blobs it stored that
// were not in the store before: those are what a failed create removes again.
class ModelWriter {
 public:
  ModelWriter(const ModelStore& store, const ProgressFn& progress, uint64_t total)
      : store_(store), progress_(progress), total_(total) {}

  const std::vector<std::string>& fresh() const { return fresh_; }

  void report(const std::string& status) {
    if (progress_) progress_({status, done_, total_});
  }

  void add_text(const std::string& kind, bool is_draft, const std::string& lname, const std::string& bytes) {
    add(kind, is_draft, lname, write_blob(store_.root(), bytes));
  }

  // A model's config, its side files (tokenizer, ...) and its tensor blobs.
  void add_model(const ModelInput& in, const Plan& plan, bool is_draft) {
    add_text(media::kModelConfig, is_draft, "config.json", in.config_bytes);
    static const std::vector<std::pair<const char*, const char*>> extras = {
        {media::kTokenizer, "tokenizer.json"},
        {media::kTokenizerConfig, "tokenizer_config.json"},
        {media::kGenerationConfig, "generation_config.json"},
        {media::kChatTemplate, "chat_template.jinja"}};
    for (const auto& [kind, file] : extras)
      if (auto it = in.extras.find(kind); it != in.extras.end()) add_text(kind, is_draft, file, it->second);
    add_tensors(plan, is_draft);
  }

  // The target's settings, as layers of their own.
  void add_settings(const ModelSettings& s) {
    if (!s.params.empty()) add_text(media::kParams, false, "params", s.params.dump());
    if (!s.template_text.empty()) add_text(media::kTemplate, false, "template", s.template_text);
    if (!s.system.empty()) add_text(media::kSystem, false, "system", s.system);
    for (const auto& l : s.licenses) add_text(media::kLicense, false, "license", l);
    if (!s.messages.empty()) add_text(media::kMessages, false, "messages", s.messages.dump());
  }

  void set_config(const json& cfg) {
    BlobRef cb = write_blob(store_.root(), cfg.dump());
    if (cb.fresh) fresh_.push_back(cb.digest);
    manifest_.config = {media::kConfig, cb.digest, cb.size, ""};
  }

  // The manifest, written last and atomically: until it exists, the model is not in the store.
  void commit(const ModelName& name, const std::function<void()>& before_manifest) {
    report("writing manifest");
    if (before_manifest) before_manifest();
    std::error_code ec;
    for (const auto& l : manifest_.layers)
      if (!fs::is_regular_file(store_.blob_path(l.digest), ec))
        fail("blob {} of layer {} vanished before the manifest was written", l.digest, l.name);
    write_atomic(store_.manifest_path(name), manifest_.to_json().dump());
  }

  void finish() {
    done_ = total_;
    report("success");
  }

 private:
  void add(const std::string& kind, bool is_draft, const std::string& lname, const BlobRef& b) {
    if (b.fresh) fresh_.push_back(b.digest);
    manifest_.layers.push_back(
        {std::string(is_draft ? media::kDraftPrefix : media::kPrefix) + kind, b.digest, b.size, lname});
  }

  // Tensor blobs on parallel workers (see import_pipeline.h); the manifest lists them in plan order.
  void add_tensors(const Plan& plan, bool is_draft) {
    std::vector<std::optional<BlobRef>> refs(plan.groups.size());
    std::vector<uint64_t> weights;
    for (const auto& g : plan.groups) weights.push_back(g.source_bytes);
    std::mutex mu;
    try {
      run_parallel(weights, import_threads(), [&](size_t i) {
        const Group& g = plan.groups[i];
        {
          std::lock_guard<std::mutex> l(mu);
          report(g.status);
        }
        std::vector<NamedTensor> tensors;
        std::map<std::string, std::string> md;
        g.build(tensors, md);
        BlobRef b = write_tensor_blob(store_.root(), std::move(tensors), md);
        std::lock_guard<std::mutex> l(mu);
        refs[i] = std::move(b);
        done_ += g.source_bytes;
        report(g.status);
      });
    } catch (...) {
      for (const auto& r : refs)
        if (r && r->fresh) fresh_.push_back(r->digest);
      throw;
    }
    for (size_t i = 0; i < plan.groups.size(); ++i)
      add(media::kTensor, is_draft, plan.groups[i].name, *refs[i]);
  }

  const ModelStore& store_;
  const ProgressFn& progress_;
  const uint64_t total_;
  uint64_t done_ = 0;
  Manifest manifest_;
  std::vector<std::string> fresh_;
};

// Rolls a failed create back: removes the blobs it wrote that no manifest uses. Called without the shared
// lock: waiting for the exclusive one lets concurrent creates (which may have found these blobs and be about
// to reference them) finish first.
void remove_unused(const ModelStore& store, const std::vector<std::string>& fresh) {
  const fs::path& root = store.root();
  try {
    store_detail::StoreLock ex(root, true);
    std::set<std::string> used;
    std::error_code ec;
    fs::path mdir = root / "manifests";
    if (fs::is_directory(mdir, ec))
      for (auto it = fs::recursive_directory_iterator(mdir, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (!it->is_regular_file(ec) || is_temp_name(it->path().filename().string())) continue;
        Manifest other = Manifest::from_json(json::parse(read_file(it->path())));
        used.insert(other.config.digest);
        for (const auto& l : other.layers) used.insert(l.digest);
      }
    for (const auto& d : fresh)
      if (!used.count(d)) fs::remove(store.blob_path(d), ec);
  } catch (...) {
    // best effort: garbage_collect() removes what is left
  }
}

}  // namespace

ModelInfo ModelStore::create(const std::string& name, const Modelfile& mf, const CreateOptions& opt) {
  const ModelName target_name = ModelName::parse(name);
  const QuantType qt = parse_quant_type(opt.quantize, "--quantize");
  const QuantType dqt = parse_quant_type(opt.draft_quantize, "--draft-quantize");
  check_request(*this, target_name, mf, opt, dqt);

  // Inputs and every check come before anything is written.
  const CreateInputs in = load_inputs(*this, mf);
  const Plan tplan = make_plan(in.target, qt, opt.group_size, false);
  std::optional<Plan> dplan;
  if (in.draft) dplan = make_plan(*in.draft, dqt, opt.group_size, true);
  const ModelSettings settings = merge_settings(in.target, mf);

  // Writing, under the shared lock: blobs first, the manifest last.
  ModelWriter writer(*this, opt.progress, tplan.bytes + (dplan ? dplan->bytes : 0));
  std::unique_ptr<store_detail::StoreLock> lock = std::make_unique<store_detail::StoreLock>(root_, false);
  remove_stale_temps(root_ / "blobs");
  remove_stale_temps(root_ / "manifests");
  try {
    writer.add_model(in.target, tplan, false);
    writer.add_settings(settings);
    if (in.draft) writer.add_model(*in.draft, *dplan, true);
    writer.set_config(config_blob(in.target, tplan, in.draft ? &*in.draft : nullptr,
                                  dplan ? &*dplan : nullptr, settings, opt.group_size));
    writer.commit(target_name, opt.before_manifest);
  } catch (...) {
    lock.reset();
    remove_unused(*this, writer.fresh());
    throw;
  }
  writer.finish();
  lock.reset();
  return show(target_name.str());
}

}  // namespace vatic
