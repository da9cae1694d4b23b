#pragma once
// The model families vatic knows, by architecture name. Each family (src/models/<family>/) says everything
// the rest of vatic needs about it: how its config reads, which tensors a checkpoint must hold and their
// shapes, what the quantization policy keeps in higher precision, how many KV bytes a token costs, its
// default chat format, and how to build its forward and its drafter. The store, the loader and the server ask
// here and know no family.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "formats/model_source.h"
#include "models/model.h"
#include "models/weights.h"
#include "quant/policy.h"
#include "tensor/tensor.h"
#include "util/json.h"

namespace vatic {

struct ExpectedTensor {
  std::string name;
  Shape shape;
  bool optional = false;
};

// What `vatic show` prints without opening tensors.
struct ConfigSummary {
  int64_t context_length = 0;
  int64_t hidden_size = 0;
  int64_t vocab_size = 0;
  int num_layers = 0;
  int num_experts = 0;             // routed experts (0 = dense)
  int experts_per_token = 0;       // routed experts each token uses
  int64_t kv_bytes_per_token = 0;  // f32 K/V of the layers whose cache grows with the context
};

struct ChatDefaults {
  std::string renderer;  // chat::make_renderer name; empty = no chat format (raw prompts)
  std::string parser;    // chat::make_parser name
  bool tools = false;
  bool thinking = false;
};

class ModelFamily {
 public:
  virtual ~ModelFamily() = default;
  virtual std::string name() const = 0;                        // "llama", "qwen3", ...
  virtual std::vector<std::string> architectures() const = 0;  // config.json `architectures[0]` values
  virtual std::vector<std::string> model_types() const { return {}; }  // `model_type` fallbacks
  // An architecture of this family that only drafts (the Gemma 4 assistant): never a FROM model.
  virtual bool drafter_only(const json& config) const { return false; }

  // Parses and validates the config (InvalidInput naming `source` and the field).
  virtual ConfigSummary summary(const json& config, const std::string& source) const = 0;
  // The tensors a checkpoint must hold. `has` says whether a tensor exists, for families whose layout varies.
  virtual std::vector<ExpectedTensor> expected_tensors(
      const json& config, const std::string& source,
      const std::function<bool(const std::string&)>& has) const = 0;
  // Quantization policy inputs (which tensors stay in higher precision follows from these).
  virtual QuantPolicyContext quant_context(const json& config, const std::string& source,
                                           bool is_draft) const = 0;
  // Per-expert weights (".experts.N.proj.weight") are stacked into [E, N, K] tensors when quantizing.
  virtual bool stacks_experts_when_quantizing() const { return true; }
  virtual ChatDefaults chat_defaults(const json& config) const = 0;
  // Tokens that end a turn in the family's chat format (generation stops there besides the eos ids).
  virtual std::vector<std::string> turn_end_tokens() const = 0;

  // The model over `weights` (the source's tensors, placed on the device the model runs on).
  virtual std::unique_ptr<LanguageModel> load(const json& config, const ModelSource& source,
                                              std::shared_ptr<const Weights> weights) const = 0;
  // A drafter the target's own checkpoint carries (GLM's MTP layers), or null.
  virtual std::unique_ptr<Drafter> builtin_drafter(LanguageModel& target) const { return nullptr; }
  // For drafter-only architectures: checks that `draft_config` fits `target_config` (InvalidInput listing
  // why) and builds the drafter for a loaded target.
  virtual void check_drafter_fit(const json& target_config, const std::string& target_label,
                                 const json& draft_config, const std::string& draft_label) const {}
  virtual std::unique_ptr<Drafter> load_drafter_for(LanguageModel& target, const json& draft_config,
                                                    const ModelSource& draft,
                                                    std::shared_ptr<const Weights> weights) const {
    return nullptr;
  }
};

// Every registered family.
const std::vector<const ModelFamily*>& model_families();
// `architectures[0]` of a config (or its model_type when there is none).
std::string config_architecture(const json& config, const std::string& source);
// The family of a config; InvalidInput naming `source` and listing the supported architectures otherwise.
const ModelFamily& family_of(const json& config, const std::string& source);
const ModelFamily* find_family(const std::string& architecture);
std::string supported_architecture_list();

// Reads a ModelSource's config.json.
json read_model_config(const ModelSource& source);

// The families (defined in models/<family>/).
const ModelFamily& llama_family();
const ModelFamily& qwen3_family();
const ModelFamily& qwen3_moe_family();
const ModelFamily& gemma3_family();
const ModelFamily& gemma4_family();
const ModelFamily& glm4_moe_lite_family();

}  // namespace vatic
