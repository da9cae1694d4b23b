#include "models/forward_graphs.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "ops/ops.h"

namespace vatic {

namespace {
constexpr size_t kMaxGraphs = 16;

Tensor copy_of(const Tensor& t) {
  if (!t.defined()) return t;
  Tensor c = ops::empty_like(t, t.shape(), t.dtype());
  ops::copy_into(t, c);
  return c;
}
}  // namespace

bool graphs_enabled(Device device) {
  if (device.is_cpu()) return false;
  const char* e = std::getenv("VATIC_GRAPHS");
  return !(e && std::strcmp(e, "0") == 0);
}

ForwardGraphs::ForwardGraphs(Device device) : device_(device), enabled_(graphs_enabled(device)) {}
ForwardGraphs::~ForwardGraphs() = default;

void ForwardGraphs::fill_inputs(const Graph& g, const std::vector<int32_t>& tokens, int64_t start) {
  // One upload of ids and positions side by side, copied into the graph's fixed buffers.
  const int64_t T = static_cast<int64_t>(tokens.size());
  std::vector<int32_t> both(tokens);
  both.resize(static_cast<size_t>(2 * T));
  std::iota(both.begin() + T, both.end(), static_cast<int32_t>(start));
  Tensor up = ops::ids(both, device_);
  ops::copy_into(up.slice(0, 0, T), g.inputs.ids);
  ops::copy_into(up.slice(0, T, 2 * T), g.inputs.positions);
}

ForwardGraphs::Graph* ForwardGraphs::record(const Key& key, KvState& state, const std::vector<int32_t>& tokens,
                                            int64_t n_out, bool all_hidden, const Forward& forward) {
  // Graphs of this state's earlier layouts read buffers that are gone; the least recently used go when full.
  for (auto it = graphs_.begin(); it != graphs_.end();) {
    const bool stale = std::get<0>(it->first) == &state && std::get<1>(it->first) != std::get<1>(key);
    it = stale ? graphs_.erase(it) : std::next(it);
  }
  while (graphs_.size() >= kMaxGraphs) {
    auto oldest = graphs_.begin();
    for (auto it = graphs_.begin(); it != graphs_.end(); ++it)
      if (it->second.last_use < oldest->second.last_use) oldest = it;
    graphs_.erase(oldest);
  }
  const int64_t T = static_cast<int64_t>(tokens.size()), start = state.length();
  Graph g;
  g.inputs.ids = backend_for(device_).empty({T}, DType::I32);
  g.inputs.positions = backend_for(device_).empty({T}, DType::I32);
  fill_inputs(g, tokens, start);
  try {
    g.graph = ops::record(device_, [&] {
      StepInputsOverride use(g.inputs);
      g.outputs = forward(state, tokens, n_out, all_hidden);
    });
  } catch (const DeviceError&) {
    throw;
  } catch (const std::exception& e) {
    // Something in the forward cannot be recorded (it reads device memory on the host, or uploads): undo the
    // caches' bookkeeping of the unfinished recording and run eagerly from now on.
    std::fprintf(stderr, "vatic: device graphs are off for this model: %s\n", e.what());
    broken_ = true;
    g.outputs = ForwardResult{};
    if (state.length() != start) state.rewind(start);
    return nullptr;
  }
  if (!g.graph) return nullptr;
  g.graph->replay();
  return &(graphs_[key] = std::move(g));
}

ForwardResult ForwardGraphs::run(KvState& state, const std::vector<int32_t>& tokens, int64_t n_out, bool all_hidden,
                                 const Forward& forward) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  VATIC_CHECK(T > 0, "forward over no tokens");
  VATIC_CHECK(n_out >= 0 && n_out <= T, "forward: {} outputs requested from {} tokens", n_out, T);
  if (!enabled_ || broken_ || T > kMaxTokens) return forward(state, tokens, n_out, all_hidden);
  state.reserve(T);  // any reallocation happens here, before the layout is read
  const Key key{&state, state.layout(), T, n_out, all_hidden};
  Graph* g = nullptr;
  auto it = graphs_.find(key);
  if (it != graphs_.end()) {
    g = &it->second;
    fill_inputs(*g, tokens, state.length());
    state.note_append(T);
    g->graph->replay();
  } else {
    g = record(key, state, tokens, n_out, all_hidden, forward);
    if (!g) return forward(state, tokens, n_out, all_hidden);
  }
  g->last_use = ++uses_;
  // The graph's output buffers are overwritten by its next replay: hand out copies.
  return ForwardResult{copy_of(g->outputs.logits), copy_of(g->outputs.hidden)};
}

}  // namespace vatic
