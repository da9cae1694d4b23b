#pragma once
// The Gemma 4 MTP drafter (`-assistant` checkpoints): a small all-KV-shared Gemma 4 stack that reads the target's
// K/V (its last KV-owning sliding and full layers), queries at one constant position for every draft step, and
// feeds back its own post-projected hidden state. See tests/fixtures/README.md for the exact semantics.
#include <map>
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
  // The steps recorded as one device graph per depth: each step's argmax is the next step's token on the device.
  std::vector<int32_t> draft_greedy(SequenceState& target_state, int32_t last_token, const Tensor& last_hidden,
                                    int steps) override;
  std::string name() const override { return "gemma4_assistant"; }
  const Gemma4AssistantConfig& config() const { return cfg_; }

 private:
  Tensor head(const Tensor& y);  // [1, V] logits (centroid-masked entries are -inf)
  // One draft step: token [1] and position [1] (I32) -> logits [1, V]. io [1, 2·BH] holds the step's input row,
  // [embedding | h]: the step writes the token's embedding into its first half, reads the row, and leaves the next
  // step's h in its second half (so a chain of steps passes h on without a copy).
  Tensor step(KvState& st, const Tensor& token, const Tensor& position, const Tensor& io);
  Tensor io_hidden(const Tensor& io) const;  // the second half of io, [1, BH]

  // The step recorded as a device graph for one layout of the target's caches (see models/forward_graphs.h).
  struct StepGraph {
    std::unique_ptr<DeviceGraph> graph;
    const KvState* state = nullptr;
    uint64_t layout = 0;
    Tensor token, position, io;  // inputs, refilled before each replay (io: see step)
    Tensor logits;               // output, overwritten by each replay
  };
  StepGraph graph_;
  // Readies `g` for the target's caches in `st`: when it has no graph or those caches moved, allocates its inputs
  // and records `work` (which reads them) into it. False when recording fails: graphs are then off for the drafter.
  bool ready(StepGraph& g, KvState& st, const std::function<void()>& work);
  // Fills a graph's inputs: the query position, the first step's token and hidden row.
  void feed(StepGraph& g, int32_t position, int32_t token, const Tensor& h);
  // Greedy chains by depth: `token` holds the first step's token, `ids` [depth] the chosen ids.
  struct ChainGraph : StepGraph {
    Tensor ids;
  };
  std::map<int, ChainGraph> chains_;
  bool graphs_ = false;

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
