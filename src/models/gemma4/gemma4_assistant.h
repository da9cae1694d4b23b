#pragma once
// The Gemma 4 MTP drafter (`-assistant` checkpoints): a small all-KV-shared Gemma 4 stack that reads the target's
// K/V (its last KV-owning sliding and full layers), queries at one constant position for every draft step, and
// feeds back its own post-projected hidden state. See tests/fixtures/README.md for the exact semantics.
#include <memory>
#include <vector>

#include "models/gemma4/gemma4_config.h"
#include "models/gemma4/gemma4_model.h"

namespace vatic {

class Gemma4Assistant final : public Drafter {
 public:
  Gemma4Assistant(Gemma4Model& target, Gemma4AssistantConfig config, std::shared_ptr<const Weights> weights);

  std::vector<Tensor> draft(SequenceState& target_state, int32_t last_token, const Tensor& last_hidden, int steps,
                            const std::function<int32_t(const Tensor& logits)>& choose) override;
  std::string name() const override { return "gemma4_assistant"; }
  const Gemma4AssistantConfig& config() const { return cfg_; }

 private:
  Tensor head(const Tensor& y);  // [1, V] logits (centroid-masked entries are -inf)

  Gemma4Model& target_;
  Gemma4AssistantConfig cfg_;
  std::shared_ptr<const Weights> weights_;
  std::vector<Gemma4Layer> layers_;
  std::vector<int> donors_;  // target layer whose cache each layer reads
  Linear pre_projection_, post_projection_;
  Tensor final_norm_;
  Linear embed_;  // [V, Ha] tied LM head
  Linear centroids_;
  Tensor token_groups_;  // I32 [num_centroids, V / num_centroids]: the token ids of each cluster, on the device
};

}  // namespace vatic
