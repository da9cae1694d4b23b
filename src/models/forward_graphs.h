#pragma once
// Decode-sized forwards replayed from device graphs. A decode step of a 35-layer model is several hundred small
// kernels; launched one by one, the host needs longer to queue them than the GPU to run them. The first forward
// of a shape (token count, outputs wanted, cache buffers) is recorded into a graph; later ones refill its two input
// buffers (token ids, positions), do the caches' host-side bookkeeping and replay it. A model opts in by reading
// its per-step inputs through step_inputs() (models/step_inputs.h) and its KV caches through KvCache::append with
// those positions; on the CPU, and with VATIC_GRAPHS=0, every forward runs as it is.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "models/kv_state.h"
#include "models/model.h"
#include "models/step_inputs.h"

namespace vatic {

// Whether forwards on `device` are replayed from graphs: never on the CPU, and not when VATIC_GRAPHS=0.
bool graphs_enabled(Device device);

class ForwardGraphs {
 public:
  using Forward = std::function<ForwardResult(KvState&, const std::vector<int32_t>&, int64_t, bool)>;
  static constexpr int64_t kMaxTokens = 8;  // decode steps and speculative verification widths

  explicit ForwardGraphs(Device device);
  ~ForwardGraphs();
  // Runs `forward` over `tokens` (as LanguageModel::forward: at least one token, n_out of them wanted), from a graph
  // where it can. A model's forward is this call with its eager forward.
  ForwardResult run(KvState& state, const std::vector<int32_t>& tokens, int64_t n_out, bool all_hidden,
                    const Forward& forward);
  size_t graphs() const { return graphs_.size(); }

 private:
  struct Graph {
    std::unique_ptr<DeviceGraph> graph;
    StepInputs inputs;
    ForwardResult outputs;  // where the replays leave their results
    uint64_t last_use = 0;
  };
  using Key = std::tuple<const KvState*, uint64_t, int64_t, int64_t, bool>;  // state, layout, T, n_out, all_hidden

  Graph* record(const Key& key, KvState& state, const std::vector<int32_t>& tokens, int64_t n_out, bool all_hidden,
                const Forward& forward);
  void fill_inputs(const Graph& g, const std::vector<int32_t>& tokens, int64_t start);

  Device device_;
  bool enabled_;
  bool broken_ = false;  // a recording failed: this model runs eagerly from then on
  uint64_t uses_ = 0;
  std::map<Key, Graph> graphs_;
};

}  // namespace vatic
