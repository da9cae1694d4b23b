#pragma once
// The model store: content-addressed blobs plus one manifest per model name.
//
//   $VATIC_MODELS (default ~/.vatic/models)
//     blobs/sha256-<hex>            immutable files named by the SHA-256 of their bytes
//     manifests/<name>/<tag>        JSON manifest; manifests/<namespace>/<name>/<tag> for "namespace/name:tag"
//     .lock                         flock: creates hold it shared, rm / garbage collection exclusive
//
// Crash safety: a blob is written to blobs/.tmp-<pid>-<random>, fsynced, verified against its digest, then renamed;
// a manifest is written (same way) only after every blob it names exists. Temp files of dead processes are removed
// by the next create / rm. So a kill -9 at any moment leaves either the old state or the new model, never a
// manifest naming a missing or partial blob.
//
// Manifest:
//   {"schemaVersion": 2, "mediaType": "application/vnd.vatic.manifest.v1+json",
//    "config": {"mediaType": "application/vnd.vatic.config.v1+json", "digest": "sha256:<hex>", "size": N},
//    "layers": [{"mediaType": "...", "digest": "sha256:<hex>", "size": N, "name": "..."}, ...]}
// Layer media types are "application/vnd.vatic.<kind>", and "application/vnd.vatic.draft.<kind>" for the drafter's
// layers (the drafter is part of its target's manifest), kinds:
//   tensor            a safetensors file holding one tensor group (a tensor, or a quantized weight with its
//                     .scales/.biases — see quant/quantize.h for the format and the __metadata__ convention);
//                     the layer name is the group's (weight) name. Tensor names inside are the source names.
//                     With --quantize, GLM per-expert weights "mlp.experts.E.P.weight" are stacked per projection
//                     into "mlp.experts.P.weight" [E, N, K] (Gemma 4's experts are stacked in the checkpoint).
//   config            config.json as imported           tokenizer          tokenizer.json
//   tokenizer_config  tokenizer_config.json             generation_config  generation_config.json
//   chat_template     the Jinja chat template text (chat_template.jinja, or tokenizer_config's chat_template);
//                     kept, never executed
//   params (JSON object of PARAMETERs), system, template, license (one per LICENSE), messages (JSON array)
// The config blob (ModelInfo's source) records the architecture, quantization, parameter count, context and
// embedding lengths, capabilities, renderer / parser and the drafter's summary.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "formats/model_source.h"
#include "modelfile/modelfile.h"
#include "util/json.h"

namespace vatic {

// "name", "name:tag", "namespace/name:tag". Components: [A-Za-z0-9][A-Za-z0-9._-]*, at most 80 characters each
// (tag 128); nothing else (no other '/', no "..", no spaces).
struct ModelName {
  std::string space;  // empty when absent
  std::string model;
  std::string tag = "latest";

  static ModelName parse(const std::string& text);  // throws InvalidInput saying what is allowed
  std::string str() const;                          // always with the tag: "gemma4:latest"
  std::filesystem::path relative_manifest() const;  // "gemma4/latest" or "ns/gemma4/latest"
};

namespace media {
inline constexpr const char* kManifest = "application/vnd.vatic.manifest.v1+json";
inline constexpr const char* kConfig = "application/vnd.vatic.config.v1+json";
inline constexpr const char* kPrefix = "application/vnd.vatic.";
inline constexpr const char* kDraftPrefix = "application/vnd.vatic.draft.";
// Layer kinds (media type = prefix + kind).
inline constexpr const char* kTensor = "tensor";
inline constexpr const char* kModelConfig = "config";
inline constexpr const char* kTokenizer = "tokenizer";
inline constexpr const char* kTokenizerConfig = "tokenizer_config";
inline constexpr const char* kGenerationConfig = "generation_config";
inline constexpr const char* kChatTemplate = "chat_template";
inline constexpr const char* kParams = "params";
inline constexpr const char* kSystem = "system";
inline constexpr const char* kTemplate = "template";
inline constexpr const char* kLicense = "license";
inline constexpr const char* kMessages = "messages";
}  // namespace media

struct ManifestLayer {
  std::string media_type;
  std::string digest;  // "sha256:<hex>"
  uint64_t size = 0;
  std::string name;
  bool is_draft() const;
  std::string kind() const;  // media type without the (draft) prefix
};

struct Manifest {
  ManifestLayer config;
  std::vector<ManifestLayer> layers;
  json to_json() const;
  static Manifest from_json(const json& j);  // throws InvalidInput
};

struct CreateProgress {
  std::string status;      // "importing NAME", "quantizing NAME to int4", "writing manifest", "success"
  uint64_t completed = 0;  // source bytes processed so far
  uint64_t total = 0;      // source bytes in all
};
using ProgressFn = std::function<void(const CreateProgress&)>;

struct CreateOptions {
  std::string quantize;        // "" keeps the source precision; int8, int4 (aliases q8, q4)
  std::string draft_quantize;  // for the DRAFT model; "" keeps it unquantized
  int group_size = 64;         // 64 or 32
  ProgressFn progress;
  // Called after every blob exists and before the manifest is written (a test seam for crash simulation).
  std::function<void()> before_manifest;
};

struct DraftInfo {
  bool present = false;
  std::string architecture;
  int64_t parameter_count = 0;
  std::string quantization;  // "int8", "int4", or the source dtype ("bfloat16")
};

// What list / show print.
struct ModelInfo {
  std::string name;    // "name:tag"
  std::string digest;  // sha256 hex of the manifest
  uint64_t size = 0;   // bytes of all distinct blobs of the model
  std::filesystem::file_time_type modified;
  std::string architecture;
  int64_t parameter_count = 0;  // elements of the logical (unquantized) tensors
  int64_t context_length = 0;
  int64_t embedding_length = 0;
  int64_t kv_bytes_per_token = 0;  // KV cache growth per context token (full-attention layers, f32)
  std::string quantization;  // lowest-bit type used ("int4" / "int8") or the source dtype
  std::vector<std::string> capabilities;
  std::string renderer, parser;
  json params = json::object();
  std::string system, template_text;
  std::vector<std::string> licenses;
  json messages = json::array();
  DraftInfo draft;
  std::string id() const { return digest.substr(0, 12); }
};

class ModelStore {
 public:
  explicit ModelStore(std::filesystem::path root);
  // $VATIC_MODELS, else ~/.vatic/models.
  static std::filesystem::path default_root();
  const std::filesystem::path& root() const { return root_; }

  // Imports FROM (and DRAFT) per the Modelfile, quantizing as asked, and writes NAME's manifest. On any error
  // nothing of this create is left behind (no manifest, no blob that no manifest uses). Throws InvalidInput for
  // bad input, NotFound for a missing FROM/DRAFT model.
  ModelInfo create(const std::string& name, const Modelfile& modelfile, const CreateOptions& options = {});

  // The files of a stored model, in the form the engine loads (same as ModelSource::from_directory).
  ModelSource resolve(const std::string& name) const;
  ModelInfo show(const std::string& name) const;
  std::vector<ModelInfo> list() const;  // newest first
  // A Modelfile equivalent to the model (FROM the model itself, with its parameters, system, ...).
  Modelfile modelfile(const std::string& name) const;
  Manifest manifest(const std::string& name) const;  // NotFound
  bool exists(const std::string& name) const;

  void copy(const std::string& source, const std::string& destination);
  // Removes the model's manifest, then every blob no manifest uses. NotFound when absent.
  void remove(const std::string& name);
  // Removes unreferenced blobs and temp files of dead processes; returns how many files went.
  size_t garbage_collect();

  std::filesystem::path blob_path(const std::string& digest) const;  // "sha256:<hex>" or "<hex>"
  std::filesystem::path manifest_path(const ModelName& n) const;

 private:
  std::filesystem::path root_;
};

}  // namespace vatic
