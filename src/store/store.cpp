#include "store/store.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <set>

#include "store/blobs.h"
#include "store/sha256.h"
#include "util/error.h"
#include "util/files.h"

namespace vatic {
namespace fs = std::filesystem;
using namespace store_detail;

namespace {

bool valid_component(const std::string& s, size_t max_len) {
  if (s.empty() || s.size() > max_len) return false;
  if (!std::isalnum(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return false;
  return s.find("..") == std::string::npos;
}

std::string hex_of(const std::string& digest) {
  std::string hex = digest.starts_with("sha256:") ? digest.substr(7) : digest;
  if (hex.size() != 64 || !std::all_of(hex.begin(), hex.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f');
      }))
    throw InvalidInput(fmt::format("invalid blob digest \"{}\"", digest));
  return hex;
}

json read_json_file(const fs::path& p) {
  try {
    return json::parse(read_file(p));
  } catch (const json::exception& e) {
    throw InvalidInput(fmt::format("{} is not valid JSON: {}", p.string(), e.what()));
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// Names

ModelName ModelName::parse(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return InvalidInput(fmt::format("invalid model name \"{}\": {} (expected name[:tag] or namespace/name[:tag]; "
                                    "letters, digits, '.', '_', '-', starting with a letter or digit)",
                                    text, why));
  };
  if (text.empty()) throw bad("empty");
  if (text.size() > 200) throw bad("longer than 200 characters");
  ModelName n;
  std::string rest = text;
  size_t colon = rest.find(':');
  if (colon != std::string::npos) {
    n.tag = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
    if (!valid_component(n.tag, 128)) throw bad("bad tag \"" + n.tag + "\"");
  }
  size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    n.space = rest.substr(0, slash);
    rest = rest.substr(slash + 1);
    if (rest.find('/') != std::string::npos) throw bad("more than one '/'");
    if (!valid_component(n.space, 80)) throw bad("bad namespace \"" + n.space + "\"");
  }
  n.model = rest;
  if (!valid_component(n.model, 80)) throw bad("bad name \"" + n.model + "\"");
  return n;
}

std::string ModelName::str() const { return (space.empty() ? "" : space + "/") + model + ":" + tag; }

fs::path ModelName::relative_manifest() const {
  return space.empty() ? fs::path(model) / tag : fs::path(space) / model / tag;
}

// ---------------------------------------------------------------------------------------------------------------
// Manifests

bool ManifestLayer::is_draft() const { return media_type.starts_with(media::kDraftPrefix); }

std::string ManifestLayer::kind() const {
  if (is_draft()) return media_type.substr(std::string(media::kDraftPrefix).size());
  if (media_type.starts_with(media::kPrefix)) return media_type.substr(std::string(media::kPrefix).size());
  return media_type;
}

json Manifest::to_json() const {
  auto layer = [](const ManifestLayer& l, bool with_name) {
    ordered_json j = ordered_json::object();
    j["mediaType"] = l.media_type;
    j["digest"] = l.digest;
    j["size"] = l.size;
    if (with_name) j["name"] = l.name;
    return j;
  };
  ordered_json j = ordered_json::object();
  j["schemaVersion"] = 2;
  j["mediaType"] = media::kManifest;
  j["config"] = layer(config, false);
  j["layers"] = ordered_json::array();
  for (const auto& l : layers) j["layers"].push_back(layer(l, true));
  return json::parse(j.dump());  // key order is fixed by to_bytes() below
}

Manifest Manifest::from_json(const json& j) {
  try {
    Manifest m;
    auto layer = [](const json& l) {
      ManifestLayer out;
      out.media_type = l.at("mediaType").get<std::string>();
      out.digest = l.at("digest").get<std::string>();
      out.size = l.at("size").get<uint64_t>();
      if (l.contains("name")) out.name = l["name"].get<std::string>();
      hex_of(out.digest);
      return out;
    };
    if (j.value("mediaType", "") != media::kManifest) throw InvalidInput("not a vatic manifest");
    m.config = layer(j.at("config"));
    for (const auto& l : j.at("layers")) m.layers.push_back(layer(l));
    return m;
  } catch (const json::exception& e) {
    throw InvalidInput(fmt::format("malformed manifest: {}", e.what()));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Store

ModelStore::ModelStore(fs::path root) : root_(std::move(root)) {}

fs::path ModelStore::default_root() {
  if (const char* env = std::getenv("VATIC_MODELS"); env && *env) return env;
  const char* home = std::getenv("HOME");
  if (!home) throw Error("neither VATIC_MODELS nor HOME is set: cannot locate the model store");
  return fs::path(home) / ".vatic" / "models";
}

fs::path ModelStore::blob_path(const std::string& digest) const {
  return root_ / "blobs" / ("sha256-" + hex_of(digest));
}

fs::path ModelStore::manifest_path(const ModelName& n) const { return root_ / "manifests" / n.relative_manifest(); }

Manifest ModelStore::manifest(const std::string& name) const {
  ModelName n = ModelName::parse(name);
  fs::path p = manifest_path(n);
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) throw NotFound(fmt::format("model \"{}\" not found", n.str()));
  try {
    return Manifest::from_json(read_json_file(p));
  } catch (const InvalidInput& e) {
    throw InvalidInput(fmt::format("model {}: {}", n.str(), e.what()));
  }
}

bool ModelStore::exists(const std::string& name) const {
  std::error_code ec;
  return fs::is_regular_file(manifest_path(ModelName::parse(name)), ec);
}

ModelSource ModelStore::resolve(const std::string& name) const {
  ModelName n = ModelName::parse(name);
  Manifest m = manifest(name);
  json cfg = read_json_file(blob_path(m.config.digest));
  ModelSource src;
  src.name = n.str();
  auto draft = std::make_shared<ModelSource>();
  draft->name = n.str() + " (draft)";
  bool has_draft = false;
  for (const auto& l : m.layers) {
    ModelSource& s = l.is_draft() ? *draft : src;
    has_draft |= l.is_draft();
    fs::path p = blob_path(l.digest);
    const std::string k = l.kind();
    if (k == media::kTensor) s.weights.push_back(p);
    else if (k == media::kModelConfig) s.config = p;
    else if (k == media::kTokenizer) s.tokenizer = p;
    else if (k == media::kGenerationConfig) s.generation_config = p;
    else if (k == media::kParams && !l.is_draft()) s.params = read_json_file(p);
    else if (k == media::kSystem && !l.is_draft()) s.system = read_file(p);
  }
  src.renderer = cfg.value("renderer", "");
  src.parser = cfg.value("parser", "");
  if (has_draft) src.draft = draft;
  if (src.config.empty()) throw InvalidInput(fmt::format("model {} has no config layer", n.str()));
  return src;
}

ModelInfo ModelStore::show(const std::string& name) const {
  ModelName n = ModelName::parse(name);
  Manifest m = manifest(name);
  fs::path mp = manifest_path(n);
  ModelInfo info;
  info.name = n.str();
  info.digest = sha256_file(mp);
  std::error_code ec;
  info.modified = fs::last_write_time(mp, ec);
  std::set<std::string> seen{m.config.digest};
  info.size = m.config.size;
  for (const auto& l : m.layers)
    if (seen.insert(l.digest).second) info.size += l.size;
  json cfg = read_json_file(blob_path(m.config.digest));
  info.architecture = cfg.value("architecture", "");
  info.parameter_count = cfg.value("parameter_count", int64_t{0});
  info.context_length = cfg.value("context_length", int64_t{0});
  info.embedding_length = cfg.value("embedding_length", int64_t{0});
  info.kv_bytes_per_token = cfg.value("kv_bytes_per_token", int64_t{0});
  info.quantization = cfg.value("quantization", "");
  info.capabilities = cfg.value("capabilities", std::vector<std::string>{});
  info.renderer = cfg.value("renderer", "");
  info.parser = cfg.value("parser", "");
  if (cfg.contains("draft") && cfg["draft"].is_object()) {
    const json& d = cfg["draft"];
    info.draft.present = true;
    info.draft.architecture = d.value("architecture", "");
    info.draft.parameter_count = d.value("parameter_count", int64_t{0});
    info.draft.quantization = d.value("quantization", "");
  }
  for (const auto& l : m.layers) {
    if (l.is_draft()) continue;
    const std::string k = l.kind();
    if (k == media::kParams) info.params = read_json_file(blob_path(l.digest));
    else if (k == media::kSystem) info.system = read_file(blob_path(l.digest));
    else if (k == media::kTemplate) info.template_text = read_file(blob_path(l.digest));
    else if (k == media::kLicense) info.licenses.push_back(read_file(blob_path(l.digest)));
    else if (k == media::kMessages) info.messages = read_json_file(blob_path(l.digest));
  }
  return info;
}

std::vector<ModelInfo> ModelStore::list() const {
  std::vector<ModelInfo> out;
  fs::path dir = root_ / "manifests";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file(ec) || is_temp_name(it->path().filename().string())) continue;
    fs::path rel = it->path().lexically_relative(dir);
    std::vector<std::string> parts;
    for (const auto& p : rel) parts.push_back(p.string());
    std::string name;
    if (parts.size() == 2) name = parts[0] + ":" + parts[1];
    else if (parts.size() == 3) name = parts[0] + "/" + parts[1] + ":" + parts[2];
    else continue;
    try {
      out.push_back(show(name));
    } catch (const Error&) {
      // an unreadable manifest is skipped by list; show NAME reports it
    }
  }
  std::sort(out.begin(), out.end(), [](const ModelInfo& a, const ModelInfo& b) {
    return a.modified != b.modified ? a.modified > b.modified : a.name < b.name;
  });
  return out;
}

Modelfile ModelStore::modelfile(const std::string& name) const {
  ModelInfo info = show(name);
  Modelfile mf;
  mf.from.text = info.name;
  mf.params = info.params;
  mf.system = info.system;
  mf.template_text = info.template_text;
  mf.renderer = info.renderer;
  mf.parser = info.parser;
  mf.licenses = info.licenses;
  for (const auto& m : info.messages)
    mf.messages.push_back({m.value("role", ""), m.value("content", "")});
  return mf;
}

void ModelStore::copy(const std::string& source, const std::string& destination) {
  ModelName dst = ModelName::parse(destination);
  Manifest m = manifest(source);  // NotFound
  StoreLock lock(root_, false);
  fs::path from = manifest_path(ModelName::parse(source));
  fs::path to = manifest_path(dst);
  std::error_code ec;
  for (fs::path p = to.parent_path(); p != root_ / "manifests" && !p.empty(); p = p.parent_path())
    if (fs::exists(p, ec) && !fs::is_directory(p, ec))
      throw InvalidInput(fmt::format("cannot create {}: it conflicts with the model at {}", dst.str(),
                                     p.lexically_relative(root_ / "manifests").string()));
  if (fs::is_directory(to, ec))
    throw InvalidInput(fmt::format("cannot create {}: a namespace of that name exists", dst.str()));
  write_atomic(to, read_file(from));
}

void ModelStore::remove(const std::string& name) {
  ModelName n = ModelName::parse(name);
  fs::path p = manifest_path(n);
  {
    StoreLock lock(root_, true);
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) throw NotFound(fmt::format("model \"{}\" not found", n.str()));
    fs::remove(p);
    for (fs::path d = p.parent_path(); d != root_ / "manifests" && fs::is_empty(d, ec); d = d.parent_path())
      fs::remove(d, ec);
  }
  garbage_collect();
}

size_t ModelStore::garbage_collect() {
  std::error_code ec;
  if (!fs::is_directory(root_, ec)) return 0;
  StoreLock lock(root_, true);
  size_t removed = remove_stale_temps(root_ / "blobs") + remove_stale_temps(root_ / "manifests");
  std::set<std::string> used;
  fs::path mdir = root_ / "manifests";
  if (fs::is_directory(mdir, ec)) {
    for (auto it = fs::recursive_directory_iterator(mdir, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      if (!it->is_regular_file(ec) || is_temp_name(it->path().filename().string())) continue;
      Manifest m;
      try {
        m = Manifest::from_json(read_json_file(it->path()));
      } catch (const Error& e) {
        // A manifest we cannot read might still own blobs: keep everything rather than guess.
        return removed;
      }
      used.insert(hex_of(m.config.digest));
      for (const auto& l : m.layers) used.insert(hex_of(l.digest));
    }
  }
  fs::path bdir = root_ / "blobs";
  if (!fs::is_directory(bdir, ec)) return removed;
  std::vector<fs::path> doomed;
  for (const auto& e : fs::directory_iterator(bdir, ec)) {
    std::string f = e.path().filename().string();
    if (f.starts_with("sha256-") && !used.count(f.substr(7))) doomed.push_back(e.path());
  }
  for (const auto& p : doomed)
    if (fs::remove(p, ec)) ++removed;
  return removed;
}

}  // namespace vatic
