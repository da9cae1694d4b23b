#pragma once
// What the engine sees of a model: a target that runs forwards over a sequence state (its KV caches), and an
// optional drafter that proposes tokens for speculative decoding.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "tensor/tensor.h"

namespace vatic {

struct ModelTraits {
  std::string architecture;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t context_length = 0;
  std::vector<int32_t> eos_ids;
  int32_t bos_id = -1;
  int64_t parameter_count = 0;
  size_t weight_bytes = 0;          // bytes of weights held in memory
  size_t kv_bytes_per_token = 0;    // KV cache bytes one more context token costs (full-attention layers)
  std::string quantization;         // "bf16", "int8", ...
};

// The per-sequence state of a model: its caches. length() tokens have been processed.
class SequenceState {
 public:
  virtual ~SequenceState() = default;
  virtual int64_t length() const = 0;
  virtual bool can_rewind_to(int64_t n) const = 0;
  virtual void rewind(int64_t n) = 0;
  virtual size_t bytes() const = 0;
  // A copy of everything needed to continue from length() later (prefix cache).
  virtual std::shared_ptr<const void> snapshot() const = 0;
  virtual size_t snapshot_bytes(const std::shared_ptr<const void>& s) const = 0;
  virtual void restore(const std::shared_ptr<const void>& s) = 0;
};

struct ForwardResult {
  Tensor logits;  // [n_out, V] F32: logits of the last n_out tokens of the forward
  Tensor hidden;  // [n_out, H] F32: final-normed hidden states of the same tokens (all T rows with all_hidden)
};

class LanguageModel {
 public:
  virtual ~LanguageModel() = default;
  virtual const ModelTraits& info() const = 0;
  virtual Device device() const = 0;  // where its weights and caches live
  virtual std::unique_ptr<SequenceState> new_state() const = 0;
  // Runs `tokens` at positions state.length() ..; appends to the caches; returns the last n_out rows.
  // With all_hidden, `hidden` holds every row of the forward (drafters with their own caches consume them).
  virtual ForwardResult forward(SequenceState& state, const std::vector<int32_t>& tokens, int64_t n_out,
                                bool all_hidden = false) = 0;
  // Device graphs recorded for decode-sized forwards and alive now (0 on the CPU and for eager-only models).
  virtual size_t recorded_graphs() const { return 0; }
};

// Proposes draft tokens. The target has processed `state.length()` tokens and chose `last_token` (not yet run);
// `last_hidden` is the target's final-normed hidden state of the last processed token.
struct DraftStep {
  int32_t token;
  std::vector<float> probs;  // the drafter's distribution q (filled when sampling; empty for greedy)
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Logits [V] of each of `steps` draft steps; `choose` picks the token fed to the next step.
  // The drafter may keep its own state for the sequence (GLM MTP keeps a KV cache); reset/rewind with the target.
  virtual std::vector<Tensor> draft(SequenceState& target_state, int32_t last_token, const Tensor& last_hidden,
                                    int steps, const std::function<int32_t(const Tensor& logits)>& choose) = 0;
  virtual std::string name() const = 0;
  // Greedy drafting: `steps` tokens, each the argmax of its step's logits (as ops::topk with k = 1 picks it) fed to
  // the next step. Drafters that can chain the steps on the device (each argmax feeding the next step there, the ids
  // brought back together at the end) do; the default runs draft() and brings each argmax back on its own.
  virtual std::vector<int32_t> draft_greedy(SequenceState& target_state, int32_t last_token, const Tensor& last_hidden,
                                            int steps);

  // Drafters that keep state of their own (GLM's MTP layer has a KV cache) follow the target through these;
  // the Gemma 4 assistant reads the target's caches and needs none of them.
  virtual bool wants_hidden() const { return false; }
  // The target committed `tokens` at positions start.. with final-normed hidden rows `hidden` [n, H].
  virtual void observe(const std::vector<int32_t>& tokens, const Tensor& hidden, int64_t start) {}
  // The target's sequence was rewound to n tokens (or reset when n == 0).
  virtual void rewind(int64_t n) {}
};

}  // namespace vatic
