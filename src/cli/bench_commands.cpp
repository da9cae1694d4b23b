// `vatic bench`: decode / prefill speed, effective weight bandwidth next to the machine's measured memory
// bandwidth, quantized vs bf16 decode, verify-forward and drafter-step costs, and matmul kernel throughput.
//
// Random-weight models (cli/bench_random.h): `--random e2b` writes (once, into a cache folder) a Gemma 4 checkpoint
// with E2B's widths (hidden 1536, 8 q / 1 kv heads, head dims 256 / 512, MLP 6144 doubled on KV-shared layers, PLE
// 256, vocab 262144, 4 sliding : 1 full) but fewer layers (--layers, default 10 with the last 4 KV-shared, like the
// 10-layer fixture) so it fits small machines; `--random CONFIG.json` does the same for any config vatic reads (the
// released configs are in tests/fixtures/configs), all layers unless --layers cuts them. A Gemma 4 target gets a
// random assistant drafter of its released assistant's size. `--quantize int8|int4` makes a quantized copy with
// the quantization policy (src/quant/policy.h) and the store's metadata convention (src/quant/quantize.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cli/bench_random.h"
#include "cli/cli.h"
#include "cli/model_arg.h"
#include "formats/model_source.h"
#include "formats/safetensors.h"
#include "models/loader.h"
#include "models/registry.h"
#include "models/forward_graphs.h"
#include "ops/ops.h"
#include "quant/policy.h"
#include "quant/quantize.h"
#include "sample/sampler.h"
#include "util/json.h"

namespace vatic::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ---- random-weight checkpoints (cli/bench_random.h) ----

// E2B's text config at `layers` layers (4 sliding : 1 full, the last 2/5 KV-shared): the `--random e2b` shape.
json e2b_like_config(int layers) {
  json tc;
  std::vector<std::string> types;
  for (int i = 0; i < layers; i++) types.push_back(i % 5 == 4 ? "full_attention" : "sliding_attention");
  tc["model_type"] = "gemma4_text";
  tc["attention_bias"] = false;
  tc["attention_k_eq_v"] = false;
  tc["bos_token_id"] = 2;
  tc["eos_token_id"] = 1;
  tc["pad_token_id"] = 0;
  tc["enable_moe_block"] = false;
  tc["final_logit_softcapping"] = 30.0;
  tc["head_dim"] = 256;
  tc["global_head_dim"] = 512;
  tc["hidden_activation"] = "gelu_pytorch_tanh";
  tc["hidden_size"] = 1536;
  tc["hidden_size_per_layer_input"] = 256;
  tc["intermediate_size"] = 6144;
  tc["layer_types"] = types;
  tc["max_position_embeddings"] = 131072;
  tc["num_attention_heads"] = 8;
  tc["num_hidden_layers"] = layers;
  tc["num_key_value_heads"] = 1;
  // 2/5 of the layers share KV (the released E2B: 20 of 35), after a full-attention layer that owns its cache.
  int shared = layers * 2 / 5;
  while (shared > 0 && layers - shared < 5) shared--;
  tc["num_kv_shared_layers"] = shared;
  tc["rms_norm_eps"] = 1e-6;
  tc["rope_parameters"] = {
      {"full_attention", {{"partial_rotary_factor", 0.25}, {"rope_theta", 1000000.0}, {"rope_type", "proportional"}}},
      {"sliding_attention", {{"rope_theta", 10000.0}, {"rope_type", "default"}}}};
  tc["sliding_window"] = 512;
  tc["tie_word_embeddings"] = true;
  tc["use_cache"] = true;
  tc["use_double_wide_mlp"] = true;
  tc["vocab_size"] = 262144;
  tc["vocab_size_per_layer_input"] = 262144;
  json c;
  c["architectures"] = {"Gemma4ForConditionalGeneration"};
  c["model_type"] = "gemma4";
  c["tie_word_embeddings"] = true;
  c["text_config"] = tc;
  return c;
}

struct Options {
  std::string model, draft, random, quantize, device;
  int layers = -1;  // -1: the shape's default
  int tokens = 32;
  int prompt = 128;
  int reps = 3;
  int max_verify = 8;
  int forced_depth = 0;
  bool bandwidth = false, kernels = false, no_verify = false;
  size_t bw_mib = 1024;
};

std::vector<int32_t> random_tokens(int n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; i++) t[i] = static_cast<int32_t>(3 + splitmix(seed + i) % static_cast<uint64_t>(vocab - 3));
  return t;
}

template <typename F>
double best_of(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; r++) best = std::min(best, f());
  return best;
}

void print_bandwidth(const MemoryBandwidth& bw, Device dev) {
  if (!dev.is_cpu()) {
    std::printf("device: %s, copy bandwidth %.0f GB/s (read + write, %zu MiB arrays)\n", bw.machine.c_str(),
                bw.copy_gbs, bw.bytes >> 20);
    return;
  }
  std::printf("machine: %s\n", bw.machine.c_str());
  std::printf("memory bandwidth (%zu MiB arrays, best of runs): read %.1f GB/s (dot sweep), %.1f GB/s (f32 matvec "
              "with prefetch), %.1f GB/s (four streams a thread), copy %.1f GB/s (read+write)\n",
              bw.bytes >> 20, bw.read_gbs, bw.matvec_gbs, bw.streams_gbs, bw.copy_gbs);
}
// Time by operation of one `what`, the largest first, with each one's share: the device's time on a GPU; on the
// CPU each op's wall time, and with `wall` (the whole `what`, host work between the ops included) what lies outside
// them.
void print_profile(const char* what, std::vector<std::pair<std::string, double>> prof, double wall = 0) {
  std::sort(prof.begin(), prof.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  double total = 0;
  for (const auto& [name, secs] : prof) total += secs;
  if (wall > 0)
    std::printf("one %s by operation (%.3f ms in the ops of %.3f ms, %.3f ms between them):\n", what, 1e3 * total,
                1e3 * wall, 1e3 * std::max(0.0, wall - total));
  else
    std::printf("one %s by operation (device time: %.3f ms in all):\n", what, 1e3 * total);
  for (const auto& [name, secs] : prof)
    std::printf("  %-24s %8.3f ms %5.1f%%\n", name.c_str(), 1e3 * secs, 100 * secs / total);
}

// The greedy choice from a logits row, taken where the logits are (as the generator does for greedy decoding).
int32_t best_token(const Tensor& logits) { return ops::argmax_rows(logits)[0]; }


void bench_model(const Options& o, const MemoryBandwidth& bw, Device dev) {
  fs::path target_dir, draft_dir;
  ModelSource src;
  std::unique_ptr<ModelSource> dsrc;
  if (!o.random.empty()) {
    // A released shape (e2b, built in) or any config.json, at `--layers` layers.
    json config;
    std::string label;
    if (o.random == "e2b") {
      const int layers = o.layers < 0 ? 10 : o.layers;
      if (layers < 5 || layers % 5) throw InvalidInput("--layers: a multiple of 5 for e2b (4 sliding + 1 full)");
      config = e2b_like_config(layers);
      label = "gemma4-e2b-like";
    } else {
      ModelSource cs;
      cs.config = o.random;
      config = cut_to_layers(read_model_config(cs), std::max(o.layers, 0));
      // The file's name, or its folder's for a checkpoint's config.json.
      const fs::path f = fs::absolute(o.random);
      label = f.stem() == "config" ? f.parent_path().filename().string() : f.stem().string();
    }
    const bool assistant = o.draft != "none" && &family_of(config, label) == &gemma4_family();
    if (!dev.is_cpu()) {
      // On a GPU the weights are made in memory and placed on it as they are made: nothing is written to disk
      // (a 31B checkpoint would not fit beside the model on a small disk) and loading reads no file.
      src = random_model_in_memory(config, label, dev, parse_quant_type(o.quantize, "--quantize"), kDefaultGroupSize,
                                   false);
      if (assistant)
        dsrc = std::make_unique<ModelSource>(random_model_in_memory(gemma4_assistant_config_for(config),
                                                                    label + "-assistant", dev, QuantType::None,
                                                                    kDefaultGroupSize, true));
    } else {
      target_dir = ensure_random_checkpoint(config, label);
      if (assistant) draft_dir = ensure_random_checkpoint(gemma4_assistant_config_for(config), label + "-assistant");
    }
  } else if (!o.model.empty()) {
    src = resolve_model_arg(o.model);
    if (!o.draft.empty()) dsrc = std::make_unique<ModelSource>(resolve_model_arg(o.draft));
  } else {
    throw InvalidInput("vatic bench: give --model DIR|NAME, --random e2b|CONFIG.json, --bandwidth or --kernels");
  }
  QuantType qt = parse_quant_type(o.quantize, "--quantize");
  if (!target_dir.empty()) {
    if (qt != QuantType::None) target_dir = quantized_copy(target_dir, qt, kDefaultGroupSize, false);
    src = ModelSource::from_directory(target_dir);
    if (!draft_dir.empty()) dsrc = std::make_unique<ModelSource>(ModelSource::from_directory(draft_dir));
  } else if (qt != QuantType::None && o.random.empty()) {
    throw InvalidInput("--quantize applies to --random models; quantize store models with `vatic create -q`");
  }

  auto t_load = Clock::now();
  auto lm = load_language_model(src, dev);
  const double load_s = seconds_since(t_load);
  auto weights = open_weights(src);
  const double wbytes = decode_weight_bytes(*weights, read_model_config(src));
  const int64_t V = lm->info().vocab_size;
  std::printf("model: %s (%s), %.2f GB of weights, %.2f GB read per decoded token, loaded in %.2f s\n",
              src.name.c_str(), lm->info().quantization.c_str(), weights->total_bytes() / 1e9, wbytes / 1e9, load_s);
  if (!dev.is_cpu())
    std::printf("device: %s, graphs %s\n", backend_for(dev).description().c_str(), graphs_enabled(dev) ? "on" : "off (VATIC_GRAPHS=0)");

  // Prefill.
  auto prompt = random_tokens(o.prompt, V, 11);
  // Each repetition also times the first token: the greedy pick from the prompt's last logits row, whose token id
  // is the first thing the host waits for.
  double t_first = 0;
  double t_prefill = best_of(o.reps, [&] {
    auto st = lm->new_state();
    auto t0 = Clock::now();
    ForwardResult r = lm->forward(*st, prompt, 1);
    backend_for(dev).synchronize();
    const double t = seconds_since(t0);
    best_token(r.logits);
    const double first = seconds_since(t0);
    t_first = t_first > 0 ? std::min(t_first, first) : first;
    return t;
  });
  std::printf("%-10s %8s %10s %10s %12s %10s\n", "test", "t/s", "ms/token", "GB/s", "floor ms", "% of bw");
  std::printf("%-10s %8.1f %10.2f %10s %12s %10s\n", fmt::format("pp{}", o.prompt).c_str(), o.prompt / t_prefill,
              1e3 * t_prefill / o.prompt, "-", "-", "-");
  const double flops = prompt_matmul_flops(*weights, read_model_config(src), o.prompt);
  std::printf("prompt of %d tokens: first token after %.2f ms", o.prompt, 1e3 * t_first);
  if (flops > 0) {
    const double rate = flops / t_prefill;
    std::printf(", matmuls by weights %.1f %s (%.1f GFLOP)", rate >= 1e12 ? rate / 1e12 : rate / 1e9,
                rate >= 1e12 ? "TFLOP/s" : "GFLOP/s", flops / 1e9);
  }
  std::printf("\n");
  if (!dev.is_cpu()) {
    // The weights and what stays allocated; blocks the pool keeps for the next forward count as free.
    const DeviceMemory m = backend_for(dev).memory();
    std::printf("device memory: %.2f GB in use of %.2f GB (the pool's free blocks not counted)\n",
                static_cast<double>(m.total - m.free) / 1e9, static_cast<double>(m.total) / 1e9);
  }

  // Decode from the prefilled state.
  auto st = lm->new_state();
  ForwardResult r = lm->forward(*st, prompt, 1);
  auto snap = st->snapshot();
  const int32_t first = best_token(r.logits);
  double t_decode = best_of(o.reps, [&] {
    st->restore(snap);
    int32_t tok = first;
    auto t0 = Clock::now();
    for (int i = 0; i < o.tokens; i++) {
      ForwardResult d = lm->forward(*st, {tok}, 1);
      tok = best_token(d.logits);
    }
    return seconds_since(t0) / o.tokens;
  });
  const double floor_ms = wbytes / (bw.best() * 1e9) * 1e3;
  std::printf("%-10s %8.2f %10.2f %10.1f %12.2f %9.0f%%\n", fmt::format("tg{}", o.tokens).c_str(), 1.0 / t_decode,
              1e3 * t_decode, wbytes / t_decode / 1e9, floor_ms, 100.0 * floor_ms / (1e3 * t_decode));

  // Where one forward's device time goes, operation by operation (launch gaps excluded), from a state of its own:
  // no graph is recorded while profiling, so it runs op by op rather than replaying the graphs recorded for `st`.
  // One step first, not counted: a state restored from a snapshot holds just its entries, so a full-attention
  // cache grows on its first step (a copy of every entry; the timed runs pay it in their first repetition only).
  // With `pick`, the greedy choice from the last logits row is part of it, as in decoding.
  auto print_breakdown = [&](const char* what, const std::vector<int32_t>& toks, int64_t n_out, bool pick) {
    auto pst = lm->new_state();
    pst->restore(snap);
    Backend& be = backend_for(dev);
    be.set_profiling(true);
    lm->forward(*pst, {first}, 1);
    be.take_profile();
    const auto t0 = Clock::now();
    ForwardResult d = lm->forward(*pst, toks, n_out);
    if (pick) best_token(d.logits);
    const double wall = seconds_since(t0);
    be.set_profiling(false);
    print_profile(what, be.take_profile(), dev.is_cpu() ? wall : 0.0);
  };
  print_breakdown("decode step", {first}, 1, true);

  // One-token step and verify forwards over K+1 tokens, each from the same prefilled state.
  auto step_time = [&](int n) {
    auto toks = random_tokens(n, V, 99 + n);
    return best_of(std::max(o.reps, 3), [&] {
      st->restore(snap);
      auto t0 = Clock::now();
      lm->forward(*st, toks, n);
      backend_for(dev).synchronize();
      return seconds_since(t0);
    });
  };
  // The distinct routed experts of a forward over the same n tokens, summed over its matmul_experts calls
  // (mixture-of-experts models on a device that counts them; 0 otherwise): one op-by-op forward from the
  // prefilled state.
  auto distinct_experts = [&](int n) -> int64_t {
    if (dev.is_cpu()) return 0;
    auto toks = random_tokens(n, V, 99 + n);
    auto cst = lm->new_state();
    cst->restore(snap);
    Backend& be = backend_for(dev);
    be.take_counts();  // what earlier profiled forwards counted
    be.set_profiling(true);
    lm->forward(*cst, toks, n);
    be.set_profiling(false);
    be.take_profile();
    int64_t distinct = 0;
    for (const auto& [name, count] : be.take_counts())
      if (name == "distinct experts") distinct = count;
    return distinct;
  };
  const double t1 = step_time(1);
  if (!o.no_verify) {
    const int64_t experts1 = distinct_experts(1);
    std::printf("verify forward over K+1 tokens (all K+1 logits) vs one decode step (%.2f ms", 1e3 * t1);
    if (experts1) std::printf(", %lld distinct experts", static_cast<long long>(experts1));
    std::printf("):\n");
    for (int K = 1; K <= o.max_verify; K++) {
      double tk = step_time(K + 1);
      std::printf("  K=%d  %.2f ms  ratio %.2f", K, 1e3 * tk, tk / t1);
      // What a verification costs against the experts its K+1 tokens touch (each token's routed rows are read
      // on their own, so the cost follows the routed rows, (K+1)·k, more than the distinct experts).
      if (experts1) {
        const int64_t experts = distinct_experts(K + 1);
        std::printf("  distinct experts %lld (%.2f of one step's)", static_cast<long long>(experts),
                    static_cast<double>(experts) / static_cast<double>(experts1));
      }
      std::printf("\n");
    }
    // Where a verification of four drafts (five tokens) goes, beside the decode step's breakdown above.
    if (o.max_verify >= 4) print_breakdown("verification of K=4", random_tokens(5, V, 104), 5, false);
  }

  // The drafter: a DRAFT model, or the one the target carries (GLM's MTP layer).
  std::unique_ptr<Drafter> drafter;
  double dbytes = 0;
  if (dsrc) {
    drafter = load_drafter(*lm, dsrc.get());
    dbytes = drafter_step_bytes(*open_weights(*dsrc), read_model_config(*dsrc));
  } else if (o.draft != "none") {
    drafter = load_drafter(*lm, nullptr);
    dbytes = builtin_drafter_step_bytes(*weights, read_model_config(src));
  }
  if (drafter) {
    const int64_t P = static_cast<int64_t>(prompt.size());
    if (drafter->wants_hidden()) {  // it keeps its own cache of the sequence: give it the prompt's hidden rows
      auto hst = lm->new_state();
      ForwardResult h = lm->forward(*hst, prompt, 1, true);
      drafter->observe(prompt, h.hidden, 0);
    }
    st->restore(snap);
    auto choose = [&](const Tensor& logits) { return best_token(logits); };
    double t_draft1 = best_of(std::max(o.reps, 5), [&] {
      auto t0 = Clock::now();
      drafter->draft(*st, first, r.hidden, 1, choose);
      const double t = seconds_since(t0);
      drafter->rewind(P);
      return t;
    });
    double t_draft4 = best_of(std::max(o.reps, 3), [&] {
      auto t0 = Clock::now();
      drafter->draft(*st, first, r.hidden, 4, choose);
      const double t = seconds_since(t0) / 4;
      drafter->rewind(P);
      return t;
    });
    // Greedy drafting chained where the drafter runs (the speculative rounds of greedy decoding take this path).
    double t_chain7 = best_of(std::max(o.reps, 3), [&] {
      auto t0 = Clock::now();
      drafter->draft_greedy(*st, first, r.hidden, 7);
      const double t = seconds_since(t0) / 7;
      drafter->rewind(P);
      return t;
    });
    std::printf("drafter step (%s): %.3f ms (1 step), %.3f ms/step over 4; %.1f MB read/step; "
                "ratio to a target step %.3f\n",
                drafter->name().c_str(), 1e3 * t_draft1, 1e3 * t_draft4, dbytes / 1e6, t_draft1 / t1);
    std::printf("drafter step, greedy chain of 7: %.3f ms/step; ratio to a target step %.3f\n", 1e3 * t_chain7,
                t_chain7 / t1);
    if (dev.is_cpu() || !graphs_enabled(dev)) {  // op by op only without graphs (on a GPU: VATIC_GRAPHS=0)
      Backend& be = backend_for(dev);
      be.set_profiling(true);
      const auto t0 = Clock::now();
      drafter->draft_greedy(*st, first, r.hidden, 1);
      const double wall = seconds_since(t0);
      be.set_profiling(false);
      drafter->rewind(P);
      print_profile("drafter step", be.take_profile(), dev.is_cpu() ? wall : 0.0);
    }

    // Random weights are never accepted, so speculation's speed at a given acceptance is measured by forcing it:
    // real rounds (K draft steps, one verification over K+1 tokens, cache rewind) that keep n drafts, i.e. emit
    // n + 1 tokens per round.
    if (o.forced_depth > 0) {
      const int K = o.forced_depth, rounds = std::max(8, o.tokens / 4);
      std::printf("speculative rounds at depth %d with n drafts forced accepted (plain decode %.1f tok/s):\n", K,
                  1.0 / t_decode);
      for (int n = 1; n <= std::min(K, 5); n++) {
        double t = best_of(o.reps, [&] {
          st->restore(snap);
          drafter->rewind(P);
          int32_t tok = first;
          Tensor hidden = r.hidden;
          auto t0 = Clock::now();
          for (int i = 0; i < rounds; i++) {
            const int64_t base = st->length();
            std::vector<int32_t> verify = {tok};
            const std::vector<int32_t> chain = drafter->draft_greedy(*st, tok, hidden, K);
            verify.insert(verify.end(), chain.begin(), chain.end());
            ForwardResult vr = lm->forward(*st, verify, K + 1);
            const int32_t bonus = best_token(vr.logits.slice(0, n, n + 1));
            st->rewind(base + 1 + n);
            drafter->rewind(base);
            if (drafter->wants_hidden())
              drafter->observe(std::vector<int32_t>(verify.begin(), verify.begin() + n + 1), vr.hidden.slice(0, 0, n + 1),
                               base);
            hidden = vr.hidden.slice(0, n, n + 1);
            tok = bonus;
          }
          return seconds_since(t0);
        });
        const double tps = rounds * (n + 1) / t;
        std::printf("  acceptance length %d: %8.1f tok/s  %.2fx plain  (round %.2f ms)\n", n + 1, tps,
                    tps * t_decode, 1e3 * t / rounds);
      }
    }
  }
}

// ---- matmul kernels ----

void bench_kernels(const Options& o, const MemoryBandwidth& bw, Device dev) {
  Backend& be = backend_for(dev);
  struct Shape2 {
    const char* what;
    int64_t N, K;
  };
  const std::vector<Shape2> shapes = {{"2048x8192", 2048, 8192},     {"8192x2048", 8192, 2048},
                                      {"e2b q_proj", 2048, 1536},    {"e2b gate/up", 6144, 1536},
                                      {"e2b down", 1536, 6144},      {"e2b lm_head", 262144, 1536}};
  std::printf("%-12s %-6s %6s %10s %10s %10s %9s\n", "weight", "type", "T", "ms", "GB/s", "GFLOP/s", "% of bw");
  for (const auto& s : shapes) {
    Tensor wb = random_bf16({s.N, s.K}, 0.02f, 5);
    for (const char* type : {"bf16", "int8", "int4"}) {
      Linear lin;
      if (std::string(type) == "bf16") {
        lin.weight = wb;
      } else {
        QuantizedTensor q = quantize(wb, type[3] == '8' ? 8 : 4, 64);
        lin.weight = q.packed;
        lin.scales = q.scales;
        lin.biases = q.biases;
        lin.bits = q.bits;
        lin.group = q.group_size;
      }
      const double bytes = static_cast<double>(lin.nbytes());
      for (int64_t T : {1, 2, 5, 9, 64, 256, 512}) {
        if (s.N * T > (int64_t{1} << 26) || (s.N > 100000 && T > 9)) continue;  // LM head: decode/verify only
        Tensor x = random_bf16({T, s.K}, 1.0f, 9);
        Tensor xf = ops::to_device(ops::to_f32(x), dev);
        Tensor y = be.empty({T, s.N}, DType::F32);
        Linear dl = lin;
        dl.weight = ops::to_device(lin.weight, dev);
        if (lin.quantized()) {
          dl.scales = ops::to_device(lin.scales, dev);
          dl.biases = ops::to_device(lin.biases, dev);
        }
        be.matmul(xf, dl, y, false);  // warm
        be.synchronize();
        const int reps = T >= 64 ? std::max(2, o.reps) : std::max(5, o.reps * 2);
        // On an accelerator one call is microseconds: time a burst of them, queued back to back.
        const int burst = dev.is_cpu() ? 1 : 50;
        double t = best_of(reps, [&] {
          auto t0 = Clock::now();
          for (int b = 0; b < burst; b++) be.matmul(xf, dl, y, false);
          be.synchronize();
          return seconds_since(t0) / burst;
        });
        std::printf("%-12s %-6s %6lld %10.3f %10.1f %10.1f %8.0f%%\n", s.what, type, static_cast<long long>(T), t * 1e3,
                    bytes / t / 1e9, 2.0 * s.N * s.K * T / t / 1e9, 100.0 * bytes / t / 1e9 / bw.best());
      }
    }
  }
}

}  // namespace

void register_bench_commands(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Measure decode / prefill speed, weight bandwidth and kernel throughput");
  auto o = std::make_shared<Options>();
  cmd->add_option("--model", o->model, "Model directory or store name");
  cmd->add_option("--draft", o->draft, "Drafter directory or store name (\"none\": skip the random assistant)");
  cmd->add_option("--random", o->random,
                  "Random-weight model: e2b (built in), or a config.json of any supported architecture (e.g. "
                  "tests/fixtures/configs/gemma-4-31B-it.json)");
  cmd->add_option("--layers", o->layers, "Layers of the --random model (e2b: a multiple of 5, default 10; a "
                                         "config: default all)");
  cmd->add_option("--quantize", o->quantize, "Quantize the --random model: int8 | int4");
  cmd->add_option("--tokens", o->tokens, "Decode tokens per run (default 32)");
  cmd->add_option("--prompt", o->prompt, "Prompt tokens for prefill (default 128)");
  cmd->add_option("--reps", o->reps, "Runs per measurement; the best is reported (default 3)");
  cmd->add_option("--max-verify", o->max_verify, "Largest K of the verify-cost table (default 8)");
  cmd->add_flag("--no-verify", o->no_verify, "Skip the verify-cost table");
  cmd->add_option("--forced-acceptance", o->forced_depth,
                  "Speculative rounds at this draft depth with 1..5 drafts forced accepted (tok/s at acceptance "
                  "lengths 2..6)");
  cmd->add_flag("--bandwidth", o->bandwidth, "Only measure memory bandwidth");
  cmd->add_flag("--kernels", o->kernels, "Matmul kernel throughput (bf16 / int8 / int4, decode to prefill sizes)");
  cmd->add_option("--bandwidth-mib", o->bw_mib, "Array size of the bandwidth test in MiB (default 1024)");
  cmd->add_option("--device", o->device, "cpu, cuda or cuda:N (default: VATIC_DEVICE, else the first GPU, else the CPU)");
  cmd->callback([o] {
    // Refuse bad options before the (seconds-long) bandwidth test.
    if (!o->random.empty() && o->random != "e2b" && !fs::is_regular_file(o->random))
      throw InvalidInput(fmt::format("--random: \"{}\" is neither e2b nor a config.json file", o->random));
    parse_quant_type(o->quantize, "--quantize");
    const Device dev = resolve_device(o->device);
    backend_for(dev).bind_thread();
    const MemoryBandwidth bw = backend_for(dev).measure_bandwidth(o->bw_mib << 20, 10);
    print_bandwidth(bw, dev);
    if (o->bandwidth) return;
    if (o->kernels) {
      return bench_kernels(*o, bw, dev);
    }
    bench_model(*o, bw, dev);
  });
}

}  // namespace vatic::cli
