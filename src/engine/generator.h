#pragma once
// The generation loop for one sequence: chunked prefill, decode, and speculative rounds (draft, verify, accept,
// rewind), with stop conditions and statistics.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "engine/depth_controller.h"
#include "engine/row_sampler.h"
#include "grammar/matcher.h"
#include "models/model.h"
#include "sample/sampler.h"
#include "util/json.h"

namespace vatic {

struct GenerateOptions {
  int max_tokens = 128;           // < 0: until EOS or the context is full
  SamplerOptions sampling;
  int draft_depth = -1;           // fixed depth K when >= 0; adaptive otherwise
  int max_draft_depth = 4;        // upper bound of the adaptive depth (draft_num_predict)
  int64_t prefill_chunk = 512;
  bool ignore_eos = false;
  std::vector<int32_t> extra_stop_ids;
  // Constrained decoding: every token (drafts and verified positions included) comes from the tokens the grammar
  // allows next; a stop token is allowed once the grammar is complete.
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  // Where sampled rows are read (see engine/row_sampler.h): Auto brings only candidates back from a device.
  SamplingPath sampling_path = SamplingPath::Auto;
  int sampling_candidates = 0;  // tokens brought back without top_k (0 = RowSampler::kDefaultCandidates)
};

struct GenerateStats {
  int64_t prompt_tokens = 0;      // whole prompt
  int64_t prompt_evaluated = 0;   // prompt tokens run through the model (the rest came from the prefix cache)
  int64_t prompt_reused = 0;
  int64_t generated = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t rounds = 0, drafted = 0, accepted = 0;
  std::vector<int64_t> position_drafted, position_accepted;  // per draft position
  std::vector<int> depth_trace;   // draft depth of every decode step / round (0 = plain decode)
  std::string done_reason = "length";  // "stop" (EOS / stop request), "length", "cancel"
  RowSampler::Counters sampling;  // how sampled rows were read (not in to_json)

  double acceptance_length() const { return rounds ? 1.0 + double(accepted) / double(rounds) : 0.0; }
  json to_json() const;
};

struct TokenEvent {
  int32_t token;
  std::optional<TokenLogprob> logprob;  // when SamplerOptions::logprobs (from the raw logits)
  std::vector<TokenLogprob> top;        // SamplerOptions::top_logprobs alternatives
};
// Called with each generated token (in order); return false to stop (stop string found, client gone).
using TokenCallback = std::function<bool(const TokenEvent& event)>;

class Generator {
 public:
  Generator(LanguageModel& model, Drafter* drafter, DepthController* depth = nullptr);

  // Logits [T, V] of every prompt token, prefilling in chunks of `chunk` (0 = one pass).
  Tensor prefill_logits(SequenceState& state, const std::vector<int32_t>& tokens, int64_t chunk);

  // Generates after `prompt`. The state may already hold a prefix of the prompt (prefix cache): only the rest is
  // evaluated. On return the state holds the prompt and every emitted token except the last.
  GenerateStats generate(SequenceState& state, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                         const TokenCallback& on_token);

  // The clock the draft-depth policy measures round costs with (seconds). Tests substitute a deterministic one.
  void set_clock(std::function<double()> clock) { clock_ = std::move(clock); }

 private:
  ForwardResult prefill(SequenceState& state, const std::vector<int32_t>& tokens, int64_t chunk);
  bool is_stop(int32_t token, const GenerateOptions& o) const;

  LanguageModel& model_;
  Drafter* drafter_;
  DepthController* depth_;
  std::unique_ptr<DepthController> own_depth_;
  std::function<double()> clock_;
};

}  // namespace vatic
