#pragma once
// The next-token-prediction (MTP) layer of a GLM4-MoE-Lite checkpoint as a drafter (model.layers.L.* with
// L = num_hidden_layers): x = eh_proj · [RMSNorm(E[t_{i+1}]; enorm) | RMSNorm(h_i; hnorm)] → MLA + MoE block with its
// own latent KV cache → shared_head.norm → LM head (shared_head.head, else the target's).
//
// Cache slot i fuses token i+1 with the target's final-normed hidden state i, at RoPE position i. The generator
// feeds committed tokens and hidden rows through observe(); draft() appends speculative slots after them, which the
// generator's rewind() drops again. Draft steps after the first feed back the MTP block's own output (before
// shared_head.norm), as vLLM does.
#include <memory>
#include <vector>

#include "models/glm4_moe_lite/glm4_moe_lite_model.h"

namespace vatic {

class Glm4MtpDrafter final : public Drafter {
 public:
  // The MTP layer `layer` (>= num_hidden_layers) of the target's checkpoint.
  Glm4MtpDrafter(const Glm4MoeLiteModel& target, int layer);

  std::vector<Tensor> draft(SequenceState& target_state, int32_t last_token, const Tensor& last_hidden, int steps,
                            const std::function<int32_t(const Tensor& logits)>& choose) override;
  std::string name() const override { return "glm4-mtp"; }
  bool wants_hidden() const override { return true; }
  void observe(const std::vector<int32_t>& tokens, const Tensor& hidden, int64_t start) override;
  void rewind(int64_t n) override;

  // Introspection for tests: target positions i of the cached slots, and how many target tokens were observed.
  const std::vector<int64_t>& slot_positions() const { return slot_pos_; }
  int64_t observed() const { return observed_; }
  size_t cache_bytes() const { return cache_->bytes(); }

 private:
  // Runs the block over rows fusing tokens[j] with hidden row j of `h` [n, H] at RoPE positions pos[j]; appends
  // n slots. Returns the block output [n, H] (pre shared_head.norm).
  Tensor run(const std::vector<int32_t>& tokens, const Tensor& h, const std::vector<int64_t>& pos);
  Tensor logits(const Tensor& out) const;
  void remember_hidden(int64_t pos, const Tensor& row);
  Tensor recall_hidden(int64_t pos) const;  // undefined when not kept

  const Glm4MoeLiteModel& target_;
  Glm4LayerWeights block_;
  Tensor enorm_, hnorm_, head_norm_;  // F32 [H]
  Linear eh_proj_;                    // [H, 2H]
  Tensor embed_;                      // [V, H]
  Linear head_;
  std::unique_ptr<KvCache> cache_;
  std::vector<int64_t> slot_pos_;  // target position i of each slot, increasing
  int64_t observed_ = 0;           // target tokens 0 .. observed_-1 were observed
  // The last few target hidden rows (ring by position): slot i needs h_i when token i+1 arrives later.
  static constexpr int64_t kRing = 64;
  Tensor ring_;  // [kRing, H]
  std::vector<int64_t> ring_pos_;
};

}  // namespace vatic
