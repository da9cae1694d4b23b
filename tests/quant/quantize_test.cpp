#include "quant/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>

#include "formats/safetensors.h"
#include "quant/policy.h"
#include "util/error.h"

using namespace vatic;
namespace fs = std::filesystem;

namespace {

Tensor random_tensor(const Shape& shape, DType dtype, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    float v = dist(rng) + (i % 7 == 0 ? 0.5f * scale : 0.0f);  // a little asymmetry
    if (dtype == DType::F32)
      t.data<float>()[i] = v;
    else
      t.data<uint16_t>()[i] = f32_to_bf16(v);
  }
  return t;
}

float value_at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::F32 ? t.data<float>()[i] : bf16_to_f32(t.data<uint16_t>()[i]);
}

// The round-trip bound. quantize() stores b' = bf16 rounded DOWN from the group minimum and s' = bf16 rounded UP
// from (max − b') / qmax. Then for every w of the group (w − b') / s' lies in [0, qmax], so q = round((w − b')/s')
// is never clamped and, in exact arithmetic, |w − (s'·q + b')| ≤ s'/2. The stored scale s' is larger than the
// ideal s = (max − min)/qmax only through bf16 rounding: b' ≥ min − 2^-7·|min| (one bf16 ulp) and
// s' ≤ (1 + 2^-7)·(max − b')/qmax, so s'/2 ≤ (1 + 2^-7)/2 · (s + 2^-7·|min|/qmax) — the "scale/2 plus the rounding
// of the bf16 scale and bias" of the format. Dequantization evaluates s'·q + b' in float32, which adds at most
// about 2^-23 · (s'·qmax + |b'|) · 2 (a product and a sum, each rounded once); we allow 2^-21 of that magnitude.
// A constant group has s' = 0 and b' = bf16_down(w): exact for bf16 inputs, within one bf16 ulp for f32 inputs.
void check_round_trip(const Tensor& w, int bits, int group) {
  QuantizedTensor q = quantize(w, bits, group);
  ASSERT_EQ(q.logical_shape(), w.shape());
  Tensor d = dequantize(q);
  const int64_t K = w.dim(-1), groups = K / group;
  const float qmax = static_cast<float>((1 << bits) - 1);
  // w may be strided: read it through a contiguous copy made element by element.
  const int64_t rows = w.numel() / K;
  int64_t checked = 0;
  for (int64_t r = 0; r < rows; ++r) {
    // Row r of a (possibly non-contiguous) tensor: unravel r over the leading dims.
    int64_t rem = r, off = 0;
    for (int dd = w.ndim() - 2; dd >= 0; --dd) {
      off += (rem % w.dim(dd)) * w.stride(dd);
      rem /= w.dim(dd);
    }
    for (int64_t g = 0; g < groups; ++g) {
      float s = bf16_to_f32(q.scales.data<uint16_t>()[r * groups + g]);
      float b = bf16_to_f32(q.biases.data<uint16_t>()[r * groups + g]);
      float mn = INFINITY, mx = -INFINITY;
      for (int i = 0; i < group; ++i) {
        float x = value_at(w, off + (g * group + i) * w.stride(-1));
        mn = std::min(mn, x);
        mx = std::max(mx, x);
      }
      const float ideal = (mx - mn) / qmax;
      EXPECT_LE(b, mn);
      EXPECT_LE(s, (1 + 0x1p-7f) * (ideal + 0x1p-7f * std::fabs(mn) / qmax) * (1 + 1e-6f) + 1e-30f);
      const float bound = s / 2 + 0x1p-21f * (s * qmax + std::fabs(b)) + (s == 0 ? 0x1p-7f * std::fabs(mn) : 0.0f);
      for (int i = 0; i < group; ++i) {
        int64_t k = g * group + i;
        float x = value_at(w, off + k * w.stride(-1));
        float y = d.data<float>()[r * K + k];
        ASSERT_LE(std::fabs(x - y), bound) << "row " << r << " col " << k << " bits " << bits << " group " << group;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, w.numel());
}

}  // namespace

TEST(Quantize, RoundTripErrorBound) {
  for (int bits : {8, 4})
    for (int group : {64, 32})
      for (DType dt : {DType::F32, DType::BF16}) {
        SCOPED_TRACE(testing::Message() << "bits " << bits << " group " << group << " " << dtype_name(dt));
        check_round_trip(random_tensor({48, 256}, dt, 7u + bits + group, 0.2f), bits, group);
        check_round_trip(random_tensor({3, 8, 128}, dt, 11u + bits, 3.0f), bits, group);  // stacked experts
      }
}

TEST(Quantize, StridedInput) {
  Tensor w = random_tensor({128, 64}, DType::BF16, 3);
  Tensor wt = w.transpose(0, 1);  // [64, 128], last-dim stride 64
  ASSERT_FALSE(wt.is_contiguous());
  check_round_trip(wt, 4, 64);
  check_round_trip(wt, 8, 32);
}

TEST(Quantize, ErrorShrinksWithBits) {
  Tensor w = random_tensor({64, 256}, DType::F32, 5);
  auto max_err = [&](int bits) {
    Tensor d = dequantize(quantize(w, bits, 64));
    float m = 0;
    for (int64_t i = 0; i < w.numel(); ++i) m = std::max(m, std::fabs(w.data<float>()[i] - d.data<float>()[i]));
    return m;
  };
  float e8 = max_err(8), e4 = max_err(4);
  EXPECT_LT(e8 * 8, e4);  // 16x finer steps; allow for rounding of scales
  EXPECT_GT(e8, 0.0f);
}

TEST(Quantize, PackingLayoutInt4) {
  // One group of 64 with min 0 and max 15: scale 1, bias 0, q = w.
  std::vector<float> v(64);
  for (int i = 0; i < 64; ++i) v[i] = static_cast<float>(i % 16);
  QuantizedTensor q = quantize(Tensor::from_floats(v, {1, 64}), 4, 64);
  ASSERT_EQ(q.packed.shape(), (Shape{1, 8}));
  ASSERT_EQ(q.scales.shape(), (Shape{1, 1}));
  EXPECT_EQ(bf16_to_f32(q.scales.data<uint16_t>()[0]), 1.0f);
  EXPECT_EQ(bf16_to_f32(q.biases.data<uint16_t>()[0]), 0.0f);
  // Element i at bits (i % 8) * 4 of word i / 8.
  EXPECT_EQ(q.packed.data<uint32_t>()[0], 0x76543210u);
  EXPECT_EQ(q.packed.data<uint32_t>()[1], 0xFEDCBA98u);
}

TEST(Quantize, PackingLayoutInt8) {
  std::vector<float> v(64);
  for (int i = 0; i < 64; ++i) v[i] = static_cast<float>(i * 4);
  v[63] = 255;
  QuantizedTensor q = quantize(Tensor::from_floats(v, {1, 64}), 8, 64);
  ASSERT_EQ(q.packed.shape(), (Shape{1, 16}));
  EXPECT_EQ(bf16_to_f32(q.scales.data<uint16_t>()[0]), 1.0f);
  EXPECT_EQ(q.packed.data<uint32_t>()[0], 0x0C080400u);   // elements 0..3 = 0, 4, 8, 12
  EXPECT_EQ(q.packed.data<uint32_t>()[15], 0xFFF8F4F0u);  // 240, 244, 248, 255
}

TEST(Quantize, ConstantAndNegativeGroups) {
  std::vector<float> v(64, -2.5f);
  for (int i = 32; i < 64; ++i) v[i] = -0.75f - 0.01f * static_cast<float>(i);
  Tensor w = Tensor::from_floats(v, {1, 64});
  QuantizedTensor q = quantize(w, 4, 32);
  Tensor d = dequantize(q);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(d.data<float>()[i], -2.5f);  // constant group: exact
  check_round_trip(w, 4, 32);
  check_round_trip(w, 8, 32);
}

TEST(Quantize, RefusesBadInput) {
  EXPECT_THROW(quantize(Tensor::from_floats(std::vector<float>(96, 1.0f), {1, 96}), 4, 64), InvalidInput);
  EXPECT_THROW(quantize(Tensor::from_floats(std::vector<float>(64, 1.0f), {1, 64}), 3, 64), InvalidInput);
  EXPECT_THROW(quantize(Tensor::from_floats(std::vector<float>(64, 1.0f), {1, 64}), 4, 16), InvalidInput);
  EXPECT_THROW(quantize(Tensor::from_floats(std::vector<float>(64, 1.0f), {64}), 4, 64), InvalidInput);
  std::vector<float> v(64, 1.0f);
  v[5] = NAN;
  EXPECT_THROW(quantize(Tensor::from_floats(v, {1, 64}), 8, 64), InvalidInput);
  EXPECT_THROW(quantize(Tensor::from_ints(std::vector<int32_t>(64, 1), {1, 64}), 8, 64), InvalidInput);
}

TEST(Quantize, TypeNames) {
  EXPECT_EQ(parse_quant_type("int8"), QuantType::Int8);
  EXPECT_EQ(parse_quant_type("Q8"), QuantType::Int8);
  EXPECT_EQ(parse_quant_type("fp8"), QuantType::Int8);
  EXPECT_EQ(parse_quant_type("INT4"), QuantType::Int4);
  EXPECT_EQ(parse_quant_type("q4"), QuantType::Int4);
  EXPECT_EQ(parse_quant_type(""), QuantType::None);
  try {
    parse_quant_type("nvfp4", "--quantize");
    FAIL();
  } catch (const InvalidInput& e) {
    EXPECT_STREQ(e.what(), "unsupported --quantize \"nvfp4\": supported types are int8, int4 (aliases q8, fp8, q4, fp4)");
  }
}

TEST(Quantize, MetadataConvention) {
  std::map<std::string, std::string> md = {{"quantization", "int4"}, {"group_size", "64"}, {"a.weight", "int8:32"}};
  auto a = tensor_quant_from_metadata(md, "a.weight");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->type, QuantType::Int8);
  EXPECT_EQ(a->group_size, 32);
  auto b = tensor_quant_from_metadata(md, "b.weight");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->type, QuantType::Int4);
  EXPECT_EQ(b->group_size, 64);
  EXPECT_FALSE(tensor_quant_from_metadata({}, "a.weight"));
  EXPECT_THROW(tensor_quant_from_metadata({{"a.weight", "int8"}}, "a.weight"), InvalidInput);
  EXPECT_THROW(tensor_quant_from_metadata({{"a.weight", "int3:64"}}, "a.weight"), InvalidInput);
  EXPECT_THROW(tensor_quant_from_metadata({{"a.weight", "int8:48"}}, "a.weight"), InvalidInput);
  EXPECT_EQ(quant_base_name("x.y.weight"), "x.y");
  EXPECT_EQ(quant_base_name("x.experts.gate_up_proj"), "x.experts.gate_up_proj");
}

// ---------------------------------------------------------------------------------------------------------------
// Policy, on the tensor names of the real checkpoints (Gemma 4 E2B: 35 layers; GLM-4.7-Flash: 47 layers).

namespace {
QuantType decide(const std::string& name, const Shape& shape, QuantType req, const QuantPolicyContext& ctx) {
  return decide_quantization(name, shape, req, 64, ctx).type;
}
}  // namespace

TEST(QuantPolicy, Gemma4Dense) {
  QuantPolicyContext g{.gemma4 = true, .num_layers = 35, .num_experts = 0, .is_draft = false};
  const std::string L = "model.language_model.layers.";
  const auto I4 = QuantType::Int4, I8 = QuantType::Int8, NO = QuantType::None;
  // norms, scalars, small and unaligned tensors stay as they are
  EXPECT_EQ(decide(L + "0.input_layernorm.weight", {1536}, I4, g), NO);
  EXPECT_EQ(decide(L + "0.self_attn.q_norm.weight", {256}, I4, g), NO);
  EXPECT_EQ(decide(L + "0.layer_scalar", {1}, I4, g), NO);
  EXPECT_EQ(decide("model.language_model.per_layer_projection_norm.weight", {256}, I8, g), NO);
  EXPECT_EQ(decide(L + "0.self_attn.q_proj.weight", {16, 48}, I4, g), NO);     // < 1024 elements
  EXPECT_EQ(decide(L + "0.mlp.down_proj.weight", {64, 96}, I4, g), NO);        // 96 % 64 != 0
  // the tied embedding / head takes 8 bits; the PLE table stays
  EXPECT_EQ(decide("model.language_model.embed_tokens.weight", {262144, 1536}, I4, g), I8);
  EXPECT_EQ(decide("model.language_model.embed_tokens.weight", {262144, 1536}, I8, g), I8);
  EXPECT_EQ(decide("model.language_model.embed_tokens_per_layer.weight", {262144, 8960}, I4, g), NO);
  EXPECT_EQ(decide("model.embed_vision.embedding_projection.weight", {1536, 768}, I4, g), NO);
  EXPECT_EQ(decide("model.vision_tower.encoder.layers.0.self_attn.q_proj.weight", {768, 768}, I4, g), NO);
  EXPECT_EQ(decide("model.audio_tower.layers.0.self_attn.q_proj.weight", {768, 768}, I4, g), NO);
  // int4: q/o/gate/up stay int4; k stays int4 on a dense model; v/down promoted on more-bits layers only
  EXPECT_EQ(decide(L + "0.self_attn.q_proj.weight", {2048, 1536}, I4, g), I4);
  EXPECT_EQ(decide(L + "0.self_attn.k_proj.weight", {256, 1536}, I4, g), I4);
  EXPECT_EQ(decide(L + "0.self_attn.v_proj.weight", {256, 1536}, I4, g), I8);   // layer 0: first eighth
  EXPECT_EQ(decide(L + "0.mlp.down_proj.weight", {1536, 6144}, I4, g), I8);
  EXPECT_EQ(decide(L + "5.self_attn.v_proj.weight", {256, 1536}, I4, g), I4);   // (5-4)%3 != 2
  EXPECT_EQ(decide(L + "6.self_attn.v_proj.weight", {256, 1536}, I4, g), I8);   // (6-4)%3 == 2
  EXPECT_EQ(decide(L + "7.mlp.down_proj.weight", {1536, 6144}, I4, g), I4);
  EXPECT_EQ(decide(L + "34.mlp.down_proj.weight", {1536, 6144}, I4, g), I8);    // last eighth
  EXPECT_EQ(decide(L + "34.self_attn.k_proj.weight", {256, 1536}, I4, g), I4);
  EXPECT_EQ(decide(L + "3.mlp.gate_proj.weight", {6144, 1536}, I4, g), I4);
  EXPECT_EQ(decide(L + "3.self_attn.o_proj.weight", {1536, 2048}, I4, g), I4);
  EXPECT_EQ(decide(L + "3.per_layer_input_gate.weight", {256, 1536}, I4, g), I4);
  // int8 everywhere it applies; none when not requested
  EXPECT_EQ(decide(L + "5.self_attn.v_proj.weight", {256, 1536}, I8, g), I8);
  EXPECT_EQ(decide(L + "5.self_attn.v_proj.weight", {256, 1536}, NO, g), NO);
}

TEST(QuantPolicy, Gemma4MoeAndAssistant) {
  QuantPolicyContext moe{.gemma4 = true, .num_layers = 30, .num_experts = 128, .is_draft = false};
  const std::string L = "model.language_model.layers.";
  const auto I4 = QuantType::Int4, I8 = QuantType::Int8, NO = QuantType::None;
  EXPECT_EQ(decide(L + "10.self_attn.k_proj.weight", {2048, 2816}, I4, moe), I8);  // MoE: k/v always promoted
  EXPECT_EQ(decide(L + "10.self_attn.v_proj.weight", {2048, 2816}, I4, moe), I8);
  EXPECT_EQ(decide(L + "10.router.proj.weight", {128, 2816}, I4, moe), NO);
  EXPECT_EQ(decide(L + "10.router.scale", {2816}, I4, moe), NO);
  EXPECT_EQ(decide(L + "10.experts.gate_up_proj", {128, 1408, 2816}, I4, moe), I4);
  EXPECT_EQ(decide(L + "10.experts.down_proj", {128, 2816, 704}, I4, moe), I4);
  EXPECT_EQ(decide(L + "0.experts.down_proj", {128, 2816, 704}, I4, moe), I8);     // more-bits layer

  QuantPolicyContext draft{.gemma4 = true, .num_layers = 4, .num_experts = 0, .is_draft = true};
  EXPECT_EQ(decide("model.embed_tokens.weight", {262144, 256}, I4, draft), I4);  // drafter head: requested type
  EXPECT_EQ(decide("masked_embedding.centroids.weight", {2048, 256}, I4, draft), NO);
  EXPECT_EQ(decide("masked_embedding.token_ordering", {262144}, I4, draft), NO);
  EXPECT_EQ(decide("pre_projection.weight", {256, 3072}, I4, draft), I4);
  EXPECT_EQ(decide("model.layers.1.self_attn.q_proj.weight", {1024, 256}, I8, draft), I8);
}

TEST(QuantPolicy, Glm4MoeLite) {
  QuantPolicyContext glm{.gemma4 = false, .num_layers = 47, .num_experts = 64, .is_draft = false};
  const std::string L = "model.layers.";
  const auto I4 = QuantType::Int4, I8 = QuantType::Int8, NO = QuantType::None;
  EXPECT_EQ(decide("lm_head.weight", {154880, 2048}, I4, glm), I8);
  EXPECT_EQ(decide("model.embed_tokens.weight", {154880, 2048}, I4, glm), NO);
  EXPECT_EQ(decide(L + "1.mlp.gate.weight", {64, 2048}, I4, glm), NO);
  EXPECT_EQ(decide(L + "1.mlp.gate.e_score_correction_bias", {64}, I4, glm), NO);
  EXPECT_EQ(decide(L + "1.self_attn.kv_a_layernorm.weight", {512}, I4, glm), NO);
  EXPECT_EQ(decide(L + "1.self_attn.q_a_proj.weight", {768, 2048}, I4, glm), I4);
  EXPECT_EQ(decide(L + "1.self_attn.kv_b_proj.weight", {8960, 512}, I4, glm), I4);
  EXPECT_EQ(decide(L + "1.self_attn.kv_a_proj_with_mqa.weight", {576, 2048}, I4, glm), I4);
  EXPECT_EQ(decide(L + "1.mlp.experts.gate_proj.weight", {64, 1536, 2048}, I4, glm), I4);
  EXPECT_EQ(decide(L + "1.mlp.experts.down_proj.weight", {64, 2048, 1536}, I4, glm), I8);
  EXPECT_EQ(decide(L + "1.mlp.shared_experts.down_proj.weight", {2048, 1536}, I4, glm), I8);
  EXPECT_EQ(decide(L + "0.mlp.down_proj.weight", {2048, 10240}, I4, glm), I8);
  EXPECT_EQ(decide(L + "0.mlp.up_proj.weight", {10240, 2048}, I8, glm), I8);
}

// Prints the measured round-trip error per tensor type on the fixture checkpoints (docs/quantization.md).
// Asserts the bound relative to the group range, so it can fail too.
TEST(QuantReport, FixtureRoundTripError) {
  const fs::path models = fs::path(VATIC_FIXTURES_DIR) / "models";
  std::printf("%-28s %-5s %5s %-28s %7s %12s %12s %12s\n", "model", "quant", "group", "tensor type", "tensors",
              "mean |err|", "max |err|", "rel rms err");
  for (const char* model : {"gemma4-e2b-tiny", "gemma4-dense-tiny-assistant", "glm4-moe-lite-tiny"}) {
    SafetensorsFile f(models / model / "model.safetensors");
    for (int bits : {8, 4})
      for (int group : {64, 32}) {
        // Per tensor type (the name's last component).
        struct Acc {
          int n = 0;
          double sum_abs = 0, max_abs = 0, sum_sq_err = 0, sum_sq = 0;
          int64_t count = 0;
        };
        std::map<std::string, Acc> by_type;
        for (const auto& name : f.names()) {
          Tensor w = f.get(name);
          if (!name.ends_with(".weight") || w.ndim() != 2 || w.dim(-1) % group != 0 || name.find("norm") != std::string::npos)
            continue;
          Tensor d = dequantize(quantize(w, bits, group));
          std::string base = quant_base_name(name);
          std::string type = base.substr(base.rfind('.') + 1);
          Acc& a = by_type[type];
          a.n++;
          for (int64_t i = 0; i < w.numel(); ++i) {
            double x = bf16_to_f32(w.data<uint16_t>()[i]), e = std::fabs(x - d.data<float>()[i]);
            a.sum_abs += e;
            a.max_abs = std::max(a.max_abs, e);
            a.sum_sq_err += e * e;
            a.sum_sq += x * x;
            a.count++;
          }
        }
        for (const auto& [type, a] : by_type) {
          double rel = std::sqrt(a.sum_sq_err / a.sum_sq);
          std::printf("%-28s %-5s %5d %-28s %7d %12.3g %12.3g %12.3g\n", model, bits == 8 ? "int8" : "int4", group,
                      type.c_str(), a.n, a.sum_abs / static_cast<double>(a.count), a.max_abs, rel);
          EXPECT_LT(rel, bits == 8 ? 0.01 : 0.15) << model << " " << type;
        }
      }
  }
}
