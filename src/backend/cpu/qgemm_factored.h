#pragma once
// Quantized matmul for decode and verification in the factored form (AVX-512: qgemm_factored_avx512.cpp; AVX2:
// qgemm_factored_avx2.cpp, whose blocks and activation layout are its own, described there).
//
// Per weight row and group of inputs, s·Σ(x·q) + b·Σx instead of Σ x·(s·q + b): the codes are multiplied with the
// activations as they are and the scale is applied once per 32-input half-block, so no weight is dequantized. The
// activations are prepared once per matmul (factored_x): reordered to match how codes sit in the 32-bit words,
// multiplied by the power of two that undoes each code's bit position (a code is read in place, masked but not
// shifted: q·2^p), and followed by the sums of each group's activations for the bias term. Nothing is rounded
// differently from the per-weight form except the order and grouping of the f32 sums.
#include <cstdint>
#include <type_traits>

#include "backend/cpu/simd.h"

namespace vatic::cpu {

constexpr int64_t kFactoredBlock = 64;  // inputs per block: 4 vectors of 16 lanes
constexpr int64_t kFactoredMaxT = 32;   // from 32 tokens on, prefill panels (gemm_impl.h) take over

// Whether a quantized matmul of T tokens and K inputs runs in the factored form.
inline bool factored_layout(int64_t T, int64_t K) {
  return T > 0 && T < kFactoredMaxT && K > 0 && K % kFactoredBlock == 0;
}
// Floats per prepared activation row: K reordered activations, then the group sums padded to 16.
inline int64_t factored_width(int64_t K, int group) { return K + (K / group + 15) / 16 * 16; }

// x [T, K] (row stride ldx) -> out [T, factored_width(K, group)].
void factored_x(const float* x, int64_t ldx, int64_t T, int64_t K, int bits, int group, float* out);
// Rows [n0, n1) of a matmul whose a.x was prepared by factored_x (a.ldx its row width).
void qgemm_factored_avx512(const QGemmArgs& a, int64_t n0, int64_t n1);
// The same on AVX2, with activations prepared by factored_x_avx2 (also factored_width(K, group) floats per row).
void factored_x_avx2(const float* x, int64_t ldx, int64_t T, int64_t K, int bits, int group, float* out);
void qgemm_factored_avx2(const QGemmArgs& a, int64_t n0, int64_t n1);

// AVX-512: input index (within its block) of lane i of vector j, and the bit position of its code in the lane's word.
// int8: a block is 16 words of 4 codes; lane i of vector j is byte j of word i (input 4i + j).
// int4: a block is 8 words of 8 codes, loaded twice (lanes 8..15 see words 0..7 again); lane i of vector j is nibble
// j + 4·(i / 8) of word i % 8 (input 8·(i % 8) + j + 4·(i / 8)).
// int4 on AVX-512 VNNI (qgemm_digits_avx512.cpp): the activations as three signed 8-bit digits per input, with one
// exponent per group, multiplied with the codes in 32-bit integers. Blocks of kDigitsBlock inputs.
constexpr int64_t kDigitsBlock = 128;
// Whether a quantized matmul of T tokens, K inputs and this group size runs in the digits form (its qgemm_x and
// qgemm decide alike).
inline bool digits_layout(int64_t T, int64_t K, int bits, int group) {
  return bits == 4 && T > 0 && T < kFactoredMaxT && K > 0 && K % kDigitsBlock == 0 && group % 64 == 0;
}
// Floats per prepared activation row: 3 digit bytes per input, 16 floats (2^e) per block, the group sums padded to
// 16.
inline int64_t digits_width(int64_t K, int group) {
  return 3 * K / 4 + K / kDigitsBlock * 16 + (K / group + 15) / 16 * 16;
}
// x [T, K] (row stride ldx) -> out [T, digits_width(K, group)].
void digits_x(const float* x, int64_t ldx, int64_t T, int64_t K, int group, float* out);
// Rows [n0, n1) of a matmul whose a.x was prepared by digits_x (a.ldx its row width).
void qgemm_digits_avx512(const QGemmArgs& a, int64_t n0, int64_t n1);

// The tiles of an AVX-512 quantized kernel (factored or digits) after its decode streams: rows [n, n1) in tiles of 4
// rows, then single rows, each over the T tokens in pairs and then one. tile(rows, tokens, m, t), the counts as
// std::integral_constant, computes rows m .. m + rows - 1 for tokens t .. t + tokens - 1. Which rows and tokens share
// a tile changes no row's sum.
template <class Tile>
inline void quant_tiles(int64_t T, int64_t n, int64_t n1, Tile&& tile) {
  auto rows = [&](auto nr, int64_t m) {
    int64_t t = 0;
    for (; t + 2 <= T; t += 2) tile(nr, std::integral_constant<int, 2>{}, m, t);
    if (t < T) tile(nr, std::integral_constant<int, 1>{}, m, t);
  };
  for (; n + 4 <= n1; n += 4) rows(std::integral_constant<int, 4>{}, n);
  for (; n < n1; n++) rows(std::integral_constant<int, 1>{}, n);
}

constexpr int factored_input(int bits, int j, int i) { return bits == 8 ? 4 * i + j : 8 * (i % 8) + j + 4 * (i / 8); }
constexpr int factored_shift(int bits, int j, int i) { return bits == 8 ? 8 * j : 4 * (j + 4 * (i / 8)); }

}  // namespace vatic::cpu
