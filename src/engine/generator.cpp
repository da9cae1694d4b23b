#include "engine/generator.h"

#include <algorithm>

#include "ops/ops.h"

namespace vatic {

using Clock = std::chrono::steady_clock;
static double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

json GenerateStats::to_json() const {
  json j = {{"prompt_tokens", prompt_tokens},
            {"prompt_evaluated", prompt_evaluated},
            {"prompt_reused", prompt_reused},
            {"generated", generated},
            {"prefill_seconds", prefill_seconds},
            {"decode_seconds", decode_seconds},
            {"decode_tokens_per_second", decode_seconds > 0 ? double(generated) / decode_seconds : 0.0},
            {"done_reason", done_reason}};
  if (rounds > 0) {
    std::vector<double> rate;
    for (size_t i = 0; i < position_drafted.size(); i++)
      rate.push_back(position_drafted[i] ? double(position_accepted[i]) / double(position_drafted[i]) : 0.0);
    j["speculative"] = {{"rounds", rounds},
                        {"drafted", drafted},
                        {"accepted", accepted},
                        {"acceptance_length", acceptance_length()},
                        {"position_acceptance", rate}};
  }
  return j;
}

Generator::Generator(LanguageModel& model, Drafter* drafter, DepthController* depth)
    : model_(model), drafter_(drafter), depth_(depth) {
  clock_ = [] { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); };
}

ForwardResult Generator::prefill(SequenceState& state, const std::vector<int32_t>& tokens, int64_t chunk) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  if (chunk <= 0) chunk = T;
  const bool feed = drafter_ && drafter_->wants_hidden();
  ForwardResult r;
  for (int64_t s = 0; s < T; s += chunk) {
    const int64_t e = std::min(T, s + chunk);
    std::vector<int32_t> part(tokens.begin() + s, tokens.begin() + e);
    const int64_t start = state.length();
    r = model_.forward(state, part, e == T ? 1 : 0, feed);
    if (feed) {
      drafter_->observe(part, r.hidden, start);
      if (e == T) r.hidden = r.hidden.slice(0, e - s - 1, e - s);
    }
  }
  return r;
}

Tensor Generator::prefill_logits(SequenceState& state, const std::vector<int32_t>& tokens, int64_t chunk) {
  const int64_t T = static_cast<int64_t>(tokens.size()), V = model_.info().vocab_size;
  if (chunk <= 0) chunk = T;
  Tensor all = Tensor::empty({T, V}, DType::F32);
  for (int64_t s = 0; s < T; s += chunk) {
    const int64_t e = std::min(T, s + chunk);
    ForwardResult r = model_.forward(state, std::vector<int32_t>(tokens.begin() + s, tokens.begin() + e), e - s);
    ops::copy_into(ops::to_host(r.logits), all.slice(0, s, e));
  }
  return all;
}

bool Generator::is_stop(int32_t token, const GenerateOptions& o) const {
  if (o.ignore_eos) return false;
  const auto& eos = model_.info().eos_ids;
  return std::find(eos.begin(), eos.end(), token) != eos.end() ||
         std::find(o.extra_stop_ids.begin(), o.extra_stop_ids.end(), token) != o.extra_stop_ids.end();
}

GenerateStats Generator::generate(SequenceState& state, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                                  const TokenCallback& on_token) {
  GenerateStats stats;
  const int64_t V = model_.info().vocab_size;
  const int64_t ctx = model_.info().context_length;
  stats.prompt_tokens = static_cast<int64_t>(prompt.size());
  VATIC_CHECK(!prompt.empty(), "empty prompt");
  if (ctx > 0 && static_cast<int64_t>(prompt.size()) >= ctx)
    throw InvalidInput(fmt::format("the prompt is {} tokens, over the context length of {}", prompt.size(), ctx));
  for (int32_t t : prompt)
    if (t < 0 || t >= V) throw InvalidInput(fmt::format("token id {} is outside the vocabulary of {}", t, V));

  // The state may hold a prefix of this prompt already; keep at least one token to evaluate.
  int64_t reuse = std::min<int64_t>(state.length(), static_cast<int64_t>(prompt.size()) - 1);
  if (reuse < state.length()) state.rewind(reuse);
  if (drafter_) drafter_->rewind(reuse);
  stats.prompt_reused = reuse;
  stats.prompt_evaluated = static_cast<int64_t>(prompt.size()) - reuse;

  Sampler sampler(o.sampling, V, ctx);
  sampler.set_history(prompt);

  auto t0 = Clock::now();
  ForwardResult r = prefill(state, std::vector<int32_t>(prompt.begin() + reuse, prompt.end()), o.prefill_chunk);
  stats.prefill_seconds = since(t0);

  const int64_t budget = o.max_tokens < 0 ? (ctx > 0 ? ctx - static_cast<int64_t>(prompt.size()) : INT32_MAX)
                                          : o.max_tokens;
  auto t1 = Clock::now();
  const bool want_logprobs = o.sampling.logprobs || o.sampling.top_logprobs > 0;
  // Greedy choices without penalties, a grammar or logprobs need only each row's argmax: it is taken where the
  // logits are (on the device) and one id per row comes back instead of the whole vocabulary.
  const bool argmax_only = o.sampling.greedy() && !o.sampling.has_penalties() && !o.grammar && !want_logprobs;
  // Every other choice reads the sampler's inputs from the rows where they are (candidates from a device).
  RowSampler rows(sampler, V, o.sampling_path, o.sampling_candidates);
  Tensor hidden = r.hidden;
  // Constrained decoding: masks[i] holds the tokens allowed at the i-th position of a round.
  std::unique_ptr<grammar::Matcher> matcher;
  std::vector<std::vector<uint64_t>> masks;
  if (o.grammar) {
    VATIC_CHECK(o.grammar->vocab_size() == V, "grammar vocabulary of {} tokens for a model with {}", o.grammar->vocab_size(), V);
    std::vector<int32_t> stops = model_.info().eos_ids;
    stops.insert(stops.end(), o.extra_stop_ids.begin(), o.extra_stop_ids.end());
    matcher = std::make_unique<grammar::Matcher>(o.grammar, stops);
    masks.assign(1, std::vector<uint64_t>(matcher->mask_words()));
  }
  auto mask_at = [&](size_t i) -> const uint64_t* {
    if (!matcher) return nullptr;
    if (masks.size() <= i) masks.resize(i + 1, std::vector<uint64_t>(matcher->mask_words()));
    matcher->fill_mask(masks[i].data());
    return masks[i].data();
  };
  auto advance = [&](int32_t tok) {
    if (matcher) VATIC_CHECK(matcher->accept(tok), "token {} is outside the grammar", tok);
  };
  int32_t next = argmax_only ? ops::argmax_rows(r.logits)[0]
                             : rows.sample(rows.row_distribution(r.logits, 0, {}, mask_at(0)));
  advance(next);

  DepthController* depth = depth_;
  if (drafter_ && !depth && o.draft_depth < 0) {
    own_depth_ = std::make_unique<DepthController>(o.max_draft_depth);
    depth = own_depth_.get();
  }

  // Emits `tok` (sampled from row `row` of the raw logits `lg`); returns false when generation is over.
  auto emit = [&](int32_t tok, const Tensor* lg, int64_t row) -> bool {
    // Under a grammar a stop token always ends generation (it is only allowed once the output is complete).
    const bool grammar_stop = matcher && (std::count(model_.info().eos_ids.begin(), model_.info().eos_ids.end(), tok) ||
                                          std::count(o.extra_stop_ids.begin(), o.extra_stop_ids.end(), tok));
    if (is_stop(tok, o) || grammar_stop) {
      stats.done_reason = "stop";
      return false;
    }
    stats.generated++;
    sampler.commit(tok);
    TokenEvent ev{tok, std::nullopt, {}};
    if (want_logprobs && lg) {
      TokenLogprob chosen{};
      rows.logprobs(*lg, row, tok, o.sampling.top_logprobs, &chosen, &ev.top);
      ev.logprob = chosen;
    }
    if (!on_token(ev)) {
      stats.done_reason = "stop";
      return false;
    }
    if (stats.generated >= budget) {
      stats.done_reason = "length";
      return false;
    }
    if (ctx > 0 && state.length() + 1 >= ctx) {
      stats.done_reason = "length";
      return false;
    }
    return true;
  };

  if (budget <= 0) {
    stats.decode_seconds = since(t1);
    stats.sampling = rows.counters();
    return stats;
  }

  // The raw logits row `next` was drawn from (for logprobs).
  Tensor next_logits = r.logits;
  int64_t next_row = 0;
  while (emit(next, argmax_only ? nullptr : &next_logits, next_row)) {
    const int64_t remaining = budget - stats.generated;
    int k = 0;
    // Speculation is off when logprobs are requested (as ollama does): every token gets its own row.
    if (drafter_ && !want_logprobs) {
      k = o.draft_depth >= 0 ? o.draft_depth : depth->next();
      k = static_cast<int>(std::min<int64_t>(k, remaining - 1));
      if (ctx > 0) k = static_cast<int>(std::min<int64_t>(k, ctx - state.length() - 2));
      k = std::max(k, 0);
    }
    const double round_start = clock_();
    if (drafter_) stats.depth_trace.push_back(k);
    if (k == 0) {
      const int64_t pos = state.length();
      ForwardResult s = model_.forward(state, {next}, 1);
      if (drafter_ && drafter_->wants_hidden()) drafter_->observe({next}, s.hidden, pos);
      hidden = s.hidden;
      if (argmax_only) {
        next = ops::argmax_rows(s.logits)[0];
      } else {
        next = rows.sample(rows.row_distribution(s.logits, 0, {}, mask_at(0)));
        next_logits = s.logits;
        next_row = 0;
      }
      advance(next);
      if (drafter_ && depth) depth->record(0, 0, clock_() - round_start);
      continue;
    }
    // Draft k tokens from (next, hidden).
    const int64_t base = state.length();
    std::vector<int32_t> chain;
    std::vector<RowDistribution> q;
    if (argmax_only) {  // the drafts chained where the drafter runs, their ids brought back together
      chain = drafter_->draft_greedy(state, next, hidden, k);
      for (int32_t t : chain) q.push_back(RowDistribution{Distribution{{t}, {1.0f}}, {}, 0, {}});
    } else {
      drafter_->draft(state, next, hidden, k, [&](const Tensor& dl) {
        std::vector<int32_t> hist(chain.begin(), chain.end());
        hist.insert(hist.begin(), next);
        // Drafts come from the allowed tokens too, so a draft never leaves the grammar; the same mask is the
        // verification mask of this position.
        RowDistribution d = rows.row_distribution(dl, 0, hist, mask_at(chain.size()));
        int32_t t = sampler.options().greedy() ? d.dist.ids[0] : rows.sample(d);
        advance(t);
        chain.push_back(t);
        q.push_back(std::move(d));
        return t;
      });
    }
    // Verify [next, d1..dk] in one target forward.
    std::vector<int32_t> verify = {next};
    verify.insert(verify.end(), chain.begin(), chain.end());
    if (matcher) mask_at(chain.size());  // the bonus position
    ForwardResult vr = model_.forward(state, verify, k + 1);
    std::vector<int32_t> best;  // argmax_only: the target's choice at each verified position
    if (argmax_only) best = ops::argmax_rows(vr.logits);
    int accepted = 0;
    int32_t follow = -1;
    std::vector<int32_t> hist = {next};
    for (int i = 0; i <= k; i++) {
      RowDistribution p;
      if (argmax_only)
        p.dist = Distribution{{best[static_cast<size_t>(i)]}, {1.0f}};
      else
        p = rows.row_distribution(vr.logits, i, hist, matcher ? masks[i].data() : nullptr);
      if (i == k) {
        follow = rows.sample(p);  // bonus token
        break;
      }
      const int32_t d = chain[i];
      bool ok = sampler.options().greedy() ? p.dist.ids[0] == d : rows.accept(p, q[i], d, sampler.uniform());
      if (!ok) {
        follow = sampler.options().greedy() ? p.dist.ids[0] : rows.sample_residual(p, q[i]);
        break;
      }
      accepted++;
      hist.push_back(d);
    }
    if (matcher) {  // keep next and the accepted drafts, then the token that follows them
      matcher->rollback(k - accepted);
      advance(follow);
    }
    stats.rounds++;
    stats.drafted += k;
    stats.accepted += accepted;
    if (stats.position_drafted.size() < static_cast<size_t>(k)) {
      stats.position_drafted.resize(k, 0);
      stats.position_accepted.resize(k, 0);
    }
    for (int i = 0; i < k; i++) {
      stats.position_drafted[i]++;
      if (i < accepted) stats.position_accepted[i]++;
    }
    // Keep next and the accepted drafts; drop the rest of the verification from every cache.
    state.rewind(base + 1 + accepted);
    drafter_->rewind(base);
    if (drafter_->wants_hidden()) {
      std::vector<int32_t> kept(verify.begin(), verify.begin() + accepted + 1);
      drafter_->observe(kept, vr.hidden.slice(0, 0, accepted + 1), base);
    }
    hidden = vr.hidden.slice(0, accepted, accepted + 1);
    if (depth) depth->record(k, accepted, clock_() - round_start);
    bool go = true;
    for (int i = 0; i < accepted && go; i++) go = emit(chain[i], argmax_only ? nullptr : &vr.logits, i);
    if (!go) break;
    next = follow;
    next_logits = vr.logits;
    next_row = accepted;
  }
  stats.decode_seconds = since(t1);
  stats.sampling = rows.counters();
  return stats;
}

}  // namespace vatic
