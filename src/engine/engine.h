#pragma once
// One loaded model ready to serve: target, optional drafter, tokenizer, the live sequence and the prefix cache,
// all owned by one compute thread. Other threads call generate()/tokenize() and wait; the token callback runs on
// the compute thread (return false from it to stop generation within one decode step or speculative round).
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cache/prefix_cache.h"
#include "engine/generator.h"
#include "formats/model_source.h"
#include "models/model.h"
#include "runtime/executor.h"
#include "tokenizer/tokenizer.h"

namespace vatic {

struct EngineOptions {
  bool use_draft = true;          // attach the source's drafter when it has one
  int64_t num_ctx = 0;            // context window; 0 = min(model's context length, 8192)
  size_t prefix_cache_bytes = 0;  // 0 = a default from available memory (VATIC_PREFIX_CACHE_MB overrides)
  int max_draft_depth = 4;        // draft_num_predict
};

class Engine {
 public:
  // Loads the model (and drafter, tokenizer) onto `device` from the engine's compute thread, which binds to that
  // device for its whole life. Refuses a model whose weights (or KV cache at num_ctx) do not fit the device's free
  // memory. `log` gets progress lines (may be empty). Throws on failure.
  Engine(const ModelSource& source, Device device, EngineOptions options = {},
         std::function<void(const std::string&)> log = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const ModelTraits& info() const { return info_; }
  const ModelSource& source() const { return source_; }
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }  // null when the model ships none
  bool has_drafter() const { return has_drafter_; }
  Device device() const { return device_; }
  int64_t context_length() const { return num_ctx_; }

  // Generates after `prompt` (token ids). Reuses the longest cached prefix. Thread-safe: requests run one at a
  // time on the compute thread in arrival order.
  GenerateStats generate(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                         const TokenCallback& on_token);

  std::vector<int32_t> tokenize(const std::string& text, bool add_special_tokens) const;
  std::string detokenize(const std::vector<int32_t>& ids) const;

  // {"weights_bytes", "kv_bytes", "prefix_cache_bytes", "prefix_cache_entries", "kv_bytes_per_token", ...}
  json status() const;
  // Drops the live sequence and the prefix cache (frees their memory).
  void reset();

 private:
  ModelSource source_;
  Device device_;
  EngineOptions options_;
  Executor executor_;
  std::unique_ptr<LanguageModel> model_;
  std::unique_ptr<Drafter> drafter_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<SequenceState> live_;
  std::vector<int32_t> live_tokens_;  // what live_ holds
  std::unique_ptr<PrefixCache> prefix_;
  std::unique_ptr<DepthController> depth_;  // persists across requests
  ModelTraits info_;
  bool has_drafter_ = false;
  int64_t num_ctx_ = 0;
  std::atomic<size_t> kv_bytes_{0};
};

}  // namespace vatic
