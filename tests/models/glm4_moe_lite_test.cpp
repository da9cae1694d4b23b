// GLM4-MoE-Lite against transformers (prompt logits, per-step decode logits, greedy tokens), cache behaviour
// (chunked prefill, rewind, snapshot), the expert layouts, and the MTP drafter built from random weights.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "engine/generator.h"
#include "formats/model_source.h"
#include "models/fixture_util.h"
#include "models/glm4_moe_lite/glm4_moe_lite_model.h"
#include "models/glm4_moe_lite/glm4_mtp_drafter.h"
#include "models/loader.h"
#include "quant/quantize.h"
#include "sample/sampler.h"
#include "test_device.h"

namespace vatic {
namespace {

namespace fs = std::filesystem;
using namespace vatic::testing;

const char* kTiny = "glm4-moe-lite-tiny";

std::unique_ptr<LanguageModel> load(const fs::path& dir) {
  return load_language_model(ModelSource::from_directory(dir), test_device());
}

std::vector<float> logits_of(LanguageModel& lm, SequenceState& st, const std::vector<int32_t>& toks, int64_t n_out) {
  return ops::to_vector(lm.forward(st, toks, n_out).logits);
}

double max_rel(const std::vector<float>& a, const std::vector<float>& b, int64_t V) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t r = 0; r * V < a.size() && r * V < b.size(); r++)
    m = std::max(m, rel_error(a.data() + r * V, b.data() + r * V, V));
  return m;
}

// A scratch copy of a fixture directory, removed at the end of the test.
struct TempModel {
  fs::path dir;
  explicit TempModel(const std::string& fixture, const std::string& tag) {
    dir = fs::temp_directory_path() / ("vatic-glm4-" + tag + "-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (const auto& e : fs::directory_iterator(model_dir(fixture))) fs::copy_file(e.path(), dir / e.path().filename());
  }
  ~TempModel() { fs::remove_all(dir); }
  json config() const { return json::parse(read_file(dir / "config.json")); }
  void set_config(const json& j) const {
    std::ofstream(dir / "config.json") << j.dump(2);
  }
  // Rewrites model.safetensors with `tensors` (host tensors).
  void write_weights(const std::vector<NamedTensor>& tensors, const std::map<std::string, std::string>& md = {}) {
    fs::remove(dir / "model.safetensors");
    write_safetensors(dir / "model.safetensors", tensors, md);
  }
};

// ---------------------------------------------------------------------------------------------------------------
// Parity with the fixtures.

class Glm4Parity : public ::testing::TestWithParam<std::string> {};

TEST_P(Glm4Parity, PromptAndStepLogitsAndGreedyTokens) {
  const std::string name = GetParam();
  auto lm = load(model_dir(name));
  TensorStore ref(fixtures() / "models" / (name + ".reference.safetensors"));
  const auto& cases = fixture_index()["models"][name]["cases"];
  const int64_t V = lm->info().vocab_size;
  double worst_prompt = 0, worst_step = 0;
  for (size_t c = 0; c < cases.size(); c++) {
    SCOPED_TRACE("case " + std::to_string(c));
    auto prompt = ints(cases[c]["prompt"]);
    auto greedy = ints(cases[c]["greedy"]);
    auto st = lm->new_state();
    std::vector<float> got = logits_of(*lm, *st, prompt, static_cast<int64_t>(prompt.size()));
    Tensor want = ops::to_f32(ref.get("prompt" + std::to_string(c) + ".logits"));
    ASSERT_EQ(static_cast<int64_t>(got.size()), want.numel());
    for (size_t r = 0; r < prompt.size(); r++) {
      double e = rel_error(got.data() + r * V, want.data<float>() + r * V, V);
      worst_prompt = std::max(worst_prompt, e);
      EXPECT_LT(e, 1e-4) << "prompt row " << r;
    }
    Tensor steps = ops::to_f32(ref.get("prompt" + std::to_string(c) + ".step_logits"));
    std::vector<float> last(got.end() - V, got.end());
    std::vector<int32_t> out;
    for (size_t s = 0; s < greedy.size(); s++) {
      double e = rel_error(last.data(), steps.data<float>() + s * V, V);
      worst_step = std::max(worst_step, e);
      EXPECT_LT(e, 1e-4) << "step " << s;
      int32_t t = argmax(last.data(), V);
      out.push_back(t);
      last = logits_of(*lm, *st, {t}, 1);
    }
    EXPECT_EQ(out, greedy);
  }
  std::printf("[glm4 parity] %s: max rel error prompt rows %.3g, decode steps %.3g\n", name.c_str(), worst_prompt,
              worst_step);
}

TEST_P(Glm4Parity, ChunkedPrefillEqualsOnePass) {
  auto lm = load(model_dir(GetParam()));
  const int64_t V = lm->info().vocab_size;
  const auto& cases = fixture_index()["models"][GetParam()]["cases"];
  auto prompt = ints(cases[2]["prompt"]);
  Generator gen(*lm, nullptr);
  auto s1 = lm->new_state();
  std::vector<float> one = ops::to_vector(gen.prefill_logits(*s1, prompt, 0));
  for (int64_t chunk : {1, 5, 16}) {
    auto s2 = lm->new_state();
    std::vector<float> chunked = ops::to_vector(gen.prefill_logits(*s2, prompt, chunk));
    EXPECT_LT(max_rel(chunked, one, V), 1e-5) << "chunk " << chunk;
    EXPECT_EQ(s2->length(), static_cast<int64_t>(prompt.size()));
  }
}

TEST_P(Glm4Parity, RewindAndSnapshotEqualRecompute) {
  auto lm = load(model_dir(GetParam()));
  const int64_t V = lm->info().vocab_size;
  const auto& c = fixture_index()["models"][GetParam()]["cases"][1];
  auto prompt = ints(c["prompt"]);
  auto greedy = ints(c["greedy"]);
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), greedy.begin(), greedy.begin() + 10);
  const int64_t cut = static_cast<int64_t>(prompt.size()) + 3;
  std::vector<int32_t> tail(seq.begin() + cut, seq.end());
  // Reference: a fresh state over the whole sequence.
  auto fresh = lm->new_state();
  std::vector<float> want = logits_of(*lm, *fresh, seq, static_cast<int64_t>(tail.size()));

  auto st = lm->new_state();
  logits_of(*lm, *st, seq, 1);
  auto snap = st->snapshot();
  // Rewind into the middle, replay a different continuation, rewind again and replay the real tail.
  st->rewind(cut);
  logits_of(*lm, *st, {7, 9, 11, 13}, 4);
  ASSERT_TRUE(st->can_rewind_to(cut));
  st->rewind(cut);
  EXPECT_LT(max_rel(logits_of(*lm, *st, tail, static_cast<int64_t>(tail.size())), want, V), 1e-5);
  // Restore the snapshot of the full sequence into a new state and continue.
  auto st2 = lm->new_state();
  st2->restore(snap);
  EXPECT_EQ(st2->length(), static_cast<int64_t>(seq.size()));
  std::vector<float> cont = logits_of(*lm, *st2, {greedy[10]}, 1);
  std::vector<int32_t> seq11 = seq;
  seq11.push_back(greedy[10]);
  auto fresh2 = lm->new_state();
  EXPECT_LT(max_rel(cont, logits_of(*lm, *fresh2, seq11, 1), V), 1e-5);
}

TEST_P(Glm4Parity, GraphReplaysEqualEagerForwards) { expect_graph_replays_equal_eager(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Fixtures, Glm4Parity, ::testing::Values("glm4-moe-lite-tiny", "glm4-moe-lite-grouped-tiny"));

TEST(Glm4MoeLite, InfoAndKvBytes) {
  auto lm = load(model_dir(kTiny));
  const auto& info = lm->info();
  EXPECT_EQ(info.architecture, "Glm4MoeLiteForCausalLM");
  EXPECT_EQ(info.vocab_size, 512);
  EXPECT_EQ(info.kv_bytes_per_token, 3u * (16 + 8) * 4);
  EXPECT_EQ(info.eos_ids, std::vector<int32_t>{1});
  auto st = lm->new_state();
  logits_of(*lm, *st, {5, 6, 7}, 1);
  EXPECT_EQ(st->length(), 3);
  EXPECT_EQ(load_builtin_drafter(*lm), nullptr);  // no MTP layers in the fixture
}

// ---------------------------------------------------------------------------------------------------------------
// Expert layouts: per expert (fixture), stacked per projection (the store's), fused gate_up (transformers v5),
// and quantized stacked experts.

std::vector<float> tiny_logits(const fs::path& dir) {
  auto lm = load(dir);
  auto st = lm->new_state();
  auto prompt = ints(fixture_index()["models"][kTiny]["cases"][1]["prompt"]);
  return logits_of(*lm, *st, prompt, static_cast<int64_t>(prompt.size()));
}

// Regroups the per-expert tensors of a fixture: fn(layer prefix, per-projection stacks [E, N, K]) adds tensors.
std::vector<NamedTensor> restack(const TensorStore& ts, int E,
                                 const std::function<void(const std::string&, std::map<std::string, Tensor>&,
                                                          std::vector<NamedTensor>&)>& fn) {
  std::vector<NamedTensor> out;
  std::map<std::string, std::map<std::string, Tensor>> stacks;  // layer prefix -> proj -> [E, N, K]
  for (const auto& n : ts.names()) {
    auto p = n.find(".mlp.experts.");
    if (p == std::string::npos) {
      out.push_back({n, ops::to_host(ts.get(n))});
      continue;
    }
    std::string prefix = n.substr(0, p + 5);  // "...mlp."
    std::string rest = n.substr(p + 13);       // "E.proj.weight"
    int e = std::stoi(rest.substr(0, rest.find('.')));
    std::string proj = rest.substr(rest.find('.') + 1);
    proj = proj.substr(0, proj.find('.'));
    Tensor t = ts.get(n);
    auto& s = stacks[prefix][proj];
    if (!s.defined()) s = Tensor::empty({E, t.dim(0), t.dim(1)}, t.dtype());
    ops::copy_into(t, s.select(0, e));
  }
  for (auto& [prefix, projs] : stacks) fn(prefix, projs, out);
  return out;
}

TEST(Glm4MoeLite, ExpertLayoutsGiveTheSameLogits) {
  const int E = 8;
  std::vector<float> want = tiny_logits(model_dir(kTiny));
  TensorStore ts(model_dir(kTiny));
  {
    TempModel m(kTiny, "stacked");
    m.write_weights(restack(ts, E, [](const std::string& p, auto& projs, auto& out) {
      for (auto& [proj, t] : projs) out.push_back({p + "experts." + proj + ".weight", t});
    }));
    EXPECT_LT(max_rel(tiny_logits(m.dir), want, 512), 1e-6);
  }
  {
    TempModel m(kTiny, "fused");
    m.write_weights(restack(ts, E, [](const std::string& p, auto& projs, auto& out) {
      Tensor g = projs["gate_proj"], u = projs["up_proj"];
      const int64_t I = g.dim(1);
      Tensor gu = Tensor::empty({g.dim(0), 2 * I, g.dim(2)}, g.dtype());
      ops::copy_into(g, gu.slice(1, 0, I));
      ops::copy_into(u, gu.slice(1, I, 2 * I));
      out.push_back({p + "experts.gate_up_proj", gu});
      out.push_back({p + "experts.down_proj", projs["down_proj"]});
    }));
    EXPECT_LT(max_rel(tiny_logits(m.dir), want, 512), 1e-6);
  }
  {
    // int8 stacked experts (scales/biases under the name without ".weight", as the store writes them).
    TempModel m(kTiny, "int8");
    m.write_weights(restack(ts, E, [](const std::string& p, auto& projs, auto& out) {
      for (auto& [proj, t] : projs) {
        const std::string base = p + "experts." + proj;
        if (t.dim(2) % 64 != 0) {  // down_proj (K = 24) stays dense, as the policy would leave it
          out.push_back({base + ".weight", t});
          continue;
        }
        QuantizedTensor q = quantize(t, 8, 64);
        out.push_back({base + ".weight", q.packed});
        out.push_back({base + ".scales", q.scales});
        out.push_back({base + ".biases", q.biases});
      }
    }), {{"quantization", "int8"}, {"group_size", "64"}});
    std::vector<float> got = tiny_logits(m.dir);
    EXPECT_LT(max_rel(got, want, 512), 3e-2);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// MTP drafter from random weights for model.layers.L.* (L = num_hidden_layers).

struct MtpModel {
  std::unique_ptr<TempModel> tmp;
  explicit MtpModel(const std::string& fixture, uint32_t seed = 7) {
    tmp = std::make_unique<TempModel>(fixture, "mtp");
    json cfg = tmp->config();
    cfg["num_nextn_predict_layers"] = 1;
    tmp->set_config(cfg);
    TensorStore ts(model_dir(fixture));
    const int L = cfg["num_hidden_layers"].get<int>();
    const std::string src = "model.layers." + std::to_string(L - 1) + ".";  // a MoE layer to copy shapes from
    const std::string dst = "model.layers." + std::to_string(L) + ".";
    const int64_t H = cfg["hidden_size"].get<int64_t>();
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 0.2f);
    auto random = [&](const Shape& s, bool norm) {
      Tensor t = Tensor::empty(s, DType::F32);
      for (int64_t i = 0; i < t.numel(); i++) t.data<float>()[i] = norm ? 1.0f + nd(rng) : nd(rng);
      return t;
    };
    std::vector<NamedTensor> mtp;
    for (const auto& n : ts.names()) {
      if (n.rfind(src, 0) != 0) continue;
      const std::string leaf = n.substr(src.size());
      Tensor t = ts.get(n);
      mtp.push_back({dst + leaf, random(t.shape(), leaf.find("norm") != std::string::npos)});
    }
    mtp.push_back({dst + "enorm.weight", random({H}, true)});
    mtp.push_back({dst + "hnorm.weight", random({H}, true)});
    mtp.push_back({dst + "eh_proj.weight", random({H, 2 * H}, false)});
    mtp.push_back({dst + "shared_head.norm.weight", random({H}, true)});
    write_safetensors(tmp->dir / "model-mtp.safetensors", mtp);
    // Shard index over the original file and the MTP file.
    json wm = json::object();
    for (const auto& n : ts.names()) wm[n] = "model.safetensors";
    for (const auto& [n, t] : mtp) wm[n] = "model-mtp.safetensors";
    std::ofstream(tmp->dir / "model.safetensors.index.json") << json{{"weight_map", wm}}.dump();
  }
  const fs::path& dir() const { return tmp->dir; }
};

std::vector<int32_t> run_generate(LanguageModel& lm, Drafter* d, const std::vector<int32_t>& prompt, int depth,
                                  int n, GenerateStats* stats = nullptr, int64_t chunk = 512) {
  Generator gen(lm, d);
  auto st = lm.new_state();
  if (d) d->rewind(0);
  GenerateOptions o;
  o.max_tokens = n;
  o.ignore_eos = true;
  o.draft_depth = depth;
  o.prefill_chunk = chunk;
  std::vector<int32_t> out;
  GenerateStats s = gen.generate(*st, prompt, o, [&](const TokenEvent& ev) {
    out.push_back(ev.token);
    return true;
  });
  if (stats) *stats = s;
  return out;
}

TEST(Glm4Mtp, SpeculativeGreedyEqualsPlainGreedy) {
  for (const char* fixture : {"glm4-moe-lite-tiny", "glm4-moe-lite-grouped-tiny"}) {
    SCOPED_TRACE(fixture);
    MtpModel m(fixture);
    auto lm = load(m.dir());
    auto drafter = load_drafter(*lm, nullptr);
    ASSERT_NE(drafter, nullptr);
    EXPECT_EQ(drafter->name(), "glm4-mtp");
    EXPECT_TRUE(drafter->wants_hidden());
    const auto& cases = fixture_index()["models"][fixture]["cases"];
    for (size_t c = 0; c < cases.size(); c++) {
      SCOPED_TRACE("case " + std::to_string(c));
      auto prompt = ints(cases[c]["prompt"]);
      std::vector<int32_t> plain = run_generate(*lm, nullptr, prompt, -1, 24);
      EXPECT_EQ(plain, ints(cases[c]["greedy"]));
      for (int depth : {1, 2, 3, 4, -1}) {
        GenerateStats st;
        std::vector<int32_t> spec = run_generate(*lm, drafter.get(), prompt, depth, 24, &st, 7);
        EXPECT_EQ(spec, plain) << "depth " << depth;
        EXPECT_GT(st.rounds, 0) << "depth " << depth;
        auto* mtp = dynamic_cast<Glm4MtpDrafter*>(drafter.get());
        ASSERT_NE(mtp, nullptr);
        // The drafter followed the committed sequence: one slot per token pair, no speculative leftovers.
        EXPECT_EQ(mtp->slot_positions().size(), static_cast<size_t>(mtp->observed() - 1));
        for (size_t i = 0; i < mtp->slot_positions().size(); i++) ASSERT_EQ(mtp->slot_positions()[i], int64_t(i));
      }
    }
  }
}

// Drafts (logits and tokens) of a drafter for the frontier after `seq` (target state over seq minus its last token).
struct DraftOut {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};
DraftOut draft_after(LanguageModel& lm, Drafter& d, const std::vector<int32_t>& seq, int steps) {
  auto st = lm.new_state();
  std::vector<int32_t> ctx(seq.begin(), seq.end() - 1);
  ForwardResult r = lm.forward(*st, ctx, 1);
  DraftOut out;
  d.draft(*st, seq.back(), r.hidden, steps, [&](const Tensor& l) {
    out.logits.push_back(ops::to_vector(l));
    out.tokens.push_back(argmax(out.logits.back().data(), l.dim(-1)));
    return out.tokens.back();
  });
  return out;
}

TEST(Glm4Mtp, RewoundCacheEqualsFreshHistory) {
  MtpModel m(kTiny);
  auto lm = load(m.dir());
  const int64_t V = lm->info().vocab_size;
  const auto& c = fixture_index()["models"][kTiny]["cases"][2];
  std::vector<int32_t> seq = ints(c["prompt"]);
  auto greedy = ints(c["greedy"]);
  seq.insert(seq.end(), greedy.begin(), greedy.end());  // 33 + 24 tokens

  // Feeds tokens [0, n) of seq to drafter d as the generator would (prefill chunks, then speculative-style rounds
  // with random acceptance: draft, rewind to the frontier, observe the kept rows).
  auto feed = [&](Drafter& d, int64_t n, std::mt19937& rng, int64_t chunk) {
    auto st = lm->new_state();
    d.rewind(0);
    int64_t pos = 0;
    const int64_t prefill = std::min<int64_t>(n, 20);
    Tensor last_h;
    while (pos < prefill) {
      int64_t e = std::min(prefill, pos + chunk);
      std::vector<int32_t> part(seq.begin() + pos, seq.begin() + e);
      ForwardResult r = lm->forward(*st, part, 1, true);
      d.observe(part, r.hidden, pos);
      last_h = r.hidden.slice(0, e - pos - 1, e - pos);
      pos = e;
    }
    while (pos < n) {
      int k = static_cast<int>(rng() % 4) + 1;
      int64_t kept = std::min<int64_t>(n - pos, static_cast<int64_t>(rng() % (k + 1)) + 1);
      // Draft from the frontier (the drafts themselves are thrown away, as rejected ones would be).
      d.draft(*st, seq[pos], last_h, k, [&](const Tensor&) { return static_cast<int32_t>(rng() % V); });
      d.rewind(pos);
      std::vector<int32_t> part(seq.begin() + pos, seq.begin() + pos + kept);
      ForwardResult r = lm->forward(*st, part, kept);
      d.observe(part, r.hidden, pos);
      last_h = r.hidden.slice(0, kept - 1, kept);
      pos += kept;
    }
  };

  auto a = load_builtin_drafter(*lm);
  auto b = load_builtin_drafter(*lm);
  ASSERT_NE(a, nullptr);
  std::mt19937 rng(3);
  for (int64_t n : {int64_t(40), int64_t(56)}) {
    for (int64_t rewind_to : {n - 1, n - 5, int64_t(25), int64_t(21)}) {
      SCOPED_TRACE(fmt::format("n {} rewind to {}", n, rewind_to));
      // a: fed up to n the speculative way, then rewound; b: a fresh history of exactly rewind_to tokens.
      feed(*a, n, rng, 6);
      a->rewind(rewind_to);
      feed(*b, rewind_to, rng, 20);
      std::vector<int32_t> upto(seq.begin(), seq.begin() + rewind_to + 1);
      DraftOut da = draft_after(*lm, *a, upto, 4), db = draft_after(*lm, *b, upto, 4);
      EXPECT_EQ(da.tokens, db.tokens);
      for (size_t s = 0; s < da.logits.size(); s++) EXPECT_LT(rel_error(da.logits[s].data(), db.logits[s].data(), V), 1e-5);
      // Drafting left speculative slots; they must not change a second draft from the same frontier.
      DraftOut again = draft_after(*lm, *a, upto, 4);
      EXPECT_EQ(again.tokens, da.tokens);
    }
  }
}

}  // namespace
}  // namespace vatic
