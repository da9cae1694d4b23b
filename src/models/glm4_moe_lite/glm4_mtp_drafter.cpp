#include "models/glm4_moe_lite/glm4_mtp_drafter.h"

#include <algorithm>

#include "models/weights.h"
#include "ops/ops.h"

namespace vatic {

Glm4MtpDrafter::Glm4MtpDrafter(const Glm4MoeLiteModel& target, int layer) : target_(target) {
  const auto& cfg = target.config();
  const Weights& ts = *target.weights();
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size;
  const std::string p = cfg.layer_prefix(layer);
  enorm_ = load_f32(ts, p + "enorm.weight", {H});
  hnorm_ = load_f32(ts, p + "hnorm.weight", {H});
  eh_proj_ = load_linear(ts, p + "eh_proj", H, 2 * H);
  head_norm_ = load_f32(ts, p + "shared_head.norm.weight", {H});
  embed_ = ts.has(p + "embed_tokens.weight") ? ts.require(p + "embed_tokens.weight", {V, H}) : target.embed_tokens();
  head_ = ts.has(p + "shared_head.head.weight") ? load_linear(ts, p + "shared_head.head", V, H) : target.lm_head();
  block_ = target.load_layer(p);
  cache_ = std::make_unique<FullKvCache>(1, cfg.kv_lora_rank + cfg.qk_rope_head_dim, 0, target.device(), 64);
  ring_ = ops::zeros({kRing, H}, target.device());
  ring_pos_.assign(kRing, -1);
}

void Glm4MtpDrafter::remember_hidden(int64_t pos, const Tensor& row) {
  const int64_t s = pos % kRing;
  ops::copy_into(row, ring_.slice(0, s, s + 1));
  ring_pos_[static_cast<size_t>(s)] = pos;
}

Tensor Glm4MtpDrafter::recall_hidden(int64_t pos) const {
  if (pos < 0) return Tensor();
  const int64_t s = pos % kRing;
  if (ring_pos_[static_cast<size_t>(s)] != pos) return Tensor();
  return ring_.slice(0, s, s + 1);
}

Tensor Glm4MtpDrafter::run(const std::vector<int32_t>& tokens, const Tensor& h, const std::vector<int64_t>& pos) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const float eps = static_cast<float>(target_.config().rms_norm_eps);
  const Device dev = target_.device();
  Tensor e = ops::embedding(embed_, ops::ids(tokens, dev));
  for (int64_t j = 0; j < n; j++)  // as vLLM: no token embedding at position 0
    if (pos[static_cast<size_t>(j)] == 0) ops::copy_into(ops::zeros({1, e.dim(1)}, dev), e.slice(0, j, j + 1));
  Tensor x = ops::matmul(ops::concat_cols(ops::rms_norm(e, enorm_, eps), ops::rms_norm(h, hnorm_, eps)), eh_proj_);
  std::vector<int32_t> rp(static_cast<size_t>(n)), sp(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; j++) {
    rp[static_cast<size_t>(j)] = static_cast<int32_t>(pos[static_cast<size_t>(j)]);
    sp[static_cast<size_t>(j)] = static_cast<int32_t>(cache_->length() + j);  // masking by slot (gaps allowed)
  }
  Tensor out = target_.layer_forward(block_, x, ops::ids(rp, dev), ops::ids(sp, dev), *cache_);
  slot_pos_.insert(slot_pos_.end(), pos.begin(), pos.end());
  return out;
}

Tensor Glm4MtpDrafter::logits(const Tensor& out) const {
  const float eps = static_cast<float>(target_.config().rms_norm_eps);
  return ops::matmul(ops::rms_norm(out, head_norm_, eps), head_);
}

void Glm4MtpDrafter::observe(const std::vector<int32_t>& tokens, const Tensor& hidden, int64_t start) {
  const int64_t n = static_cast<int64_t>(tokens.size()), H = target_.config().hidden_size;
  if (n == 0) return;
  VATIC_CHECK(hidden.ndim() == 2 && hidden.dim(0) == n && hidden.dim(1) == H,
              "MTP observe: hidden {} for {} tokens of width {}", hidden.describe(), n, H);
  if (start < observed_) rewind(start);
  // Slot start+j-1 fuses tokens[j] with h_{start+j-1}: the first needs the hidden row observed last time.
  Tensor prev = recall_hidden(start - 1);
  const int64_t first = prev.defined() ? 0 : 1;
  const int64_t m = n - first;
  Tensor h_in;
  if (m > 0) {
    if (prev.defined()) {
      h_in = ops::zeros({m, H}, hidden.device());
      ops::copy_into(prev, h_in.slice(0, 0, 1));
      if (n > 1) ops::copy_into(hidden.slice(0, 0, n - 1), h_in.slice(0, 1, n));
    } else {
      h_in = ops::contiguous(hidden.slice(0, 0, n - 1));
    }
  }
  for (int64_t j = std::max<int64_t>(0, n - kRing); j < n; j++) remember_hidden(start + j, hidden.slice(0, j, j + 1));
  observed_ = start + n;
  if (m == 0) return;
  std::vector<int32_t> toks(tokens.begin() + first, tokens.end());
  std::vector<int64_t> pos(static_cast<size_t>(m));
  for (int64_t j = 0; j < m; j++) pos[static_cast<size_t>(j)] = start + first + j - 1;
  run(toks, h_in, pos);
}

void Glm4MtpDrafter::rewind(int64_t n) {
  if (n <= 0) {
    cache_->clear();
    slot_pos_.clear();
    observed_ = 0;
    std::fill(ring_pos_.begin(), ring_pos_.end(), -1);
    return;
  }
  // Slot i needs token i+1: it survives when i + 1 < n.
  const auto keep = std::lower_bound(slot_pos_.begin(), slot_pos_.end(), n - 1) - slot_pos_.begin();
  cache_->rewind(keep);
  slot_pos_.resize(static_cast<size_t>(keep));
  observed_ = std::min(observed_, n);
  for (auto& p : ring_pos_)
    if (p >= n) p = -1;
}

std::vector<Tensor> Glm4MtpDrafter::draft(SequenceState& target_state, int32_t last_token, const Tensor& last_hidden,
                                          int steps, const std::function<int32_t(const Tensor& logits)>& choose) {
  const int64_t base = target_state.length(), H = target_.config().hidden_size;
  VATIC_CHECK(base > 0, "MTP draft before the target processed any token");
  // Drop speculative slots a previous round may have left (slots for positions >= base-1).
  const auto keep = std::lower_bound(slot_pos_.begin(), slot_pos_.end(), base - 1) - slot_pos_.begin();
  cache_->rewind(keep);
  slot_pos_.resize(static_cast<size_t>(keep));

  std::vector<Tensor> out;
  Tensor h = ops::contiguous(last_hidden).reshape({1, H});
  int32_t tok = last_token;
  for (int s = 0; s < steps; s++) {
    Tensor o = run({tok}, h, {base - 1 + s});
    Tensor lg = logits(o);
    out.push_back(lg.reshape({lg.dim(1)}));
    tok = choose(out.back());
    h = o;
  }
  return out;
}

}  // namespace vatic
