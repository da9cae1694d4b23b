// Register-tiled matmul kernels, written once over a vector-traits type and instantiated per instruction set.
// Included (inside an anonymous namespace) by gemm_generic.cpp, gemm_avx2.cpp and gemm_avx512.cpp after they
// define `struct V` and select the target ISA. Not a normal header: no include guard on purpose.
//
// V provides: vec; W (lanes); NR (weight rows per tile); TR_DENSE / TR_QUANT (max tokens per tile); TR_ROW (max
// tokens per one-row dense tile, dense_row_tile); PC / PT
// (vectors of outputs × tokens per prefill panel tile);
// zero(), set1(f), loadx(const float*), load_w(const uint16_t*) (bf16 -> f32), load_w(const float*),
// add(a, b), fma(a, b, c) = a·b + c, load_w2(p, even, odd) (2W bf16 -> the even and the odd ones), deinterleave(p, out) (the same for 2W floats), reduce(v) (sum of lanes), transpose(v[W]) (a W × W block: lane i of v[j] <-> lane j of v[i]), q8(p) (W bytes -> W floats), q4lo(p) / q4hi(p) (low / high
// nibbles of W bytes -> W floats); LUT4 (W == 16 only): lut4(s, b) (the 16 values fma(q, s, b), q = 0..15, in
// one vector) and q4lo_lut(p, lut) / q4hi_lut(p, lut) (W weights looked up by their low / high nibbles).
//
// Tiling. A tile is NR weight rows × TR tokens: per step of W inputs it loads NR weight vectors (converted or
// dequantized in registers) and TR activation vectors and does NR·TR FMAs into NR·TR accumulators, so a weight
// vector is used TR times and an activation vector NR times. Decode (T = 1) streams NR rows at once; verify
// (T = 2..9) reads each weight once for all tokens (two tiles at most); prefill blocks tokens (TB) and inputs (KB)
// so the activation block stays in L2 while the NR-row weight tile stays in L1 across all token tiles. Longer
// prefills (T >= kPanelMinT) use the broadcast form instead (panel_gemm below): no horizontal sums at all.
// Accumulation is f32; weights are never rounded below their stored precision and activations are not rounded.

inline float bf16f(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
inline float wval(uint16_t h) { return bf16f(h); }
inline float wval(float f) { return f; }

constexpr int64_t kTokenBlock = 64;

constexpr int64_t kInputBlock = 1024;  // a multiple of every group size and of every W

// The end of a tile: inputs [k, k_end) that fill no vector added one by one to the row sums s, then the sums
// written (or added) to y.
template <int NR, int TR, class WT>
inline void finish_tile(float (&s)[NR][TR], const float* x, int64_t ldx, const WT* w, int64_t ldw, int64_t k,
                        int64_t k_end, float* y, int64_t ldy, bool acc) {
  for (; k < k_end; k++)
    for (int r = 0; r < NR; r++) {
      const float wk = wval(w[r * ldw + k]);
      for (int t = 0; t < TR; t++) s[r][t] += x[t * ldx + k] * wk;
    }
  for (int t = 0; t < TR; t++)
    for (int r = 0; r < NR; r++) {
      float& o = y[t * ldy + r];
      o = acc ? o + s[r][t] : s[r][t];
    }
}

template <int NR, int TR, class WT>
inline void dense_tile(const float* x, int64_t ldx, const WT* w, int64_t ldw, int64_t k0, int64_t k1, float* y,
                       int64_t ldy, bool acc) {
  typename V::vec a[NR][TR];
#pragma GCC unroll 8
  for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
    for (int t = 0; t < TR; t++) a[r][t] = V::zero();
  int64_t k = k0;
  for (; k + V::W <= k1; k += V::W) {
    typename V::vec wv[NR];
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) wv[r] = V::load_w(w + r * ldw + k);
    if constexpr (V::W > 1 && TR <= 2) {
      // Decode / short verify: prefetch the same inputs of the next tile's rows so DRAM streams stay busy across
      // short rows (hardware prefetchers ramp up too slowly on 1.5–3 KB rows). A prefetch never faults. Into every
      // cache level (T0): a non-temporal prefetch skips L2 on Intel cores and made decode up to 2x slower there.
#pragma GCC unroll 8
      for (int r = 0; r < NR; r++)
        __builtin_prefetch(reinterpret_cast<const char*>(w + (r + NR) * ldw + k) + 256, 0, 3);
    }
#pragma GCC unroll 8
    for (int t = 0; t < TR; t++) {
      typename V::vec xv = V::loadx(x + t * ldx + k);
#pragma GCC unroll 8
      for (int r = 0; r < NR; r++) a[r][t] = V::fma(wv[r], xv, a[r][t]);
    }
  }
  float s[NR][TR];
#pragma GCC unroll 8
  for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
    for (int t = 0; t < TR; t++) s[r][t] = V::reduce(a[r][t]);
  finish_tile<NR, TR>(s, x, ldx, w, ldw, k, k1, y, ldy, acc);
}

template <int NR, class WT>
inline void dense_tiles(int64_t tr, const float* x, int64_t ldx, const WT* w, int64_t ldw, int64_t k0, int64_t k1,
                        float* y, int64_t ldy, bool acc) {
  switch (tr) {
    case 1: return dense_tile<NR, 1>(x, ldx, w, ldw, k0, k1, y, ldy, acc);
    case 2: return dense_tile<NR, 2>(x, ldx, w, ldw, k0, k1, y, ldy, acc);
    case 3: return dense_tile<NR, 3>(x, ldx, w, ldw, k0, k1, y, ldy, acc);
    case 4: if constexpr (V::TR_DENSE >= 4) return dense_tile<NR, 4>(x, ldx, w, ldw, k0, k1, y, ldy, acc); break;
    case 5: if constexpr (V::TR_DENSE >= 5) return dense_tile<NR, 5>(x, ldx, w, ldw, k0, k1, y, ldy, acc); break;
    case 6: if constexpr (V::TR_DENSE >= 6) return dense_tile<NR, 6>(x, ldx, w, ldw, k0, k1, y, ldy, acc); break;
    default: break;
  }
}

// Splits T tokens into tiles of at most `max` with sizes as even as possible (9 -> 5 + 4 rather than 6 + 3).
inline int64_t token_tile(int64_t remaining, int max) {
  if (remaining <= max) return remaining;
  const int64_t tiles = (remaining + max - 1) / max;
  return (remaining + tiles - 1) / tiles;
}

// ---- Prefill in the broadcast form -------------------------------------------------------------------------
// For T >= kPanelMinT tokens. The weight rows [n, n + NC) of an input block [k0, k1) are packed once per token
// block into an f32 panel, transposed (panel[k·NC + j] = w[n + j][k]: bf16 widened, f32 copied, quantized
// weights dequantized with the same fma(q, s, b) as every other path, so the same f32 values), and a tile of TR
// tokens × NC outputs keeps its sums in TR·PC vectors: per input k it loads PC panel vectors and broadcasts TR
// activations, then TR·PC FMAs. Unlike the dot form above (which ends every tile with NR·TR horizontal sums,
// as many instructions as its FMAs when K is 256), nothing is reduced. Each output is summed in input order;
// only the order of the f32 sum differs from the other paths, no value is rounded differently.
// kPanelMinT (simd.h): from this many tokens on.
constexpr int64_t kPanelK = 256;        // inputs per panel (NC · 256 floats: 32 KB on AVX-512)
constexpr int64_t kPanelTokens = 256;   // the activation block [256 tokens × 256 inputs] stays in L2

// PERM: the panel holds its inputs in the int4 order (per 32 inputs the even ones, then the odd ones; see
// pack_panel_codes) and x in the natural one, so panel row k is multiplied with activation perm(k) (kn a multiple of
// 32). The products and their order are those of a permuted copy of x; reading x this way spares making the copy
// (a prompt's permutation was 1 % of its time on one thread and 4.5 % on two, the copy's lines moving between cores).
template <int TR, bool PERM>
inline void panel_tile(const float* x, int64_t ldx, const float* p, int64_t kn, float* y, int64_t ldy,
                       int64_t ncols, bool load) {
  constexpr int PC = V::PC, NC = V::PC * V::W;
  typename V::vec a[TR][PC];
  alignas(64) float edge[NC];
  if (load) {
#pragma GCC unroll 16
    for (int t = 0; t < TR; t++) {
      const float* yr = y + t * ldy;
      if (ncols < NC) {
        for (int j = 0; j < NC; j++) edge[j] = j < ncols ? yr[j] : 0.0f;
        yr = edge;
      }
#pragma GCC unroll 8
      for (int c = 0; c < PC; c++) a[t][c] = V::loadx(yr + c * V::W);
    }
  } else {
#pragma GCC unroll 16
    for (int t = 0; t < TR; t++)
#pragma GCC unroll 8
      for (int c = 0; c < PC; c++) a[t][c] = V::zero();
  }
  // Panel row k times activation kx.
  auto step = [&](int64_t k, int64_t kx) __attribute__((always_inline)) {
    typename V::vec wv[PC];
#pragma GCC unroll 8
    for (int c = 0; c < PC; c++) wv[c] = V::load_w(p + k * NC + c * V::W);
#pragma GCC unroll 16
    for (int t = 0; t < TR; t++) {
      const typename V::vec xv = V::set1(x[t * ldx + kx]);
#pragma GCC unroll 8
      for (int c = 0; c < PC; c++) a[t][c] = V::fma(wv[c], xv, a[t][c]);
    }
  };
  if constexpr (PERM) {
    for (int64_t k = 0; k < kn; k += 32)
      for (int h = 0; h < 2; h++)
        for (int j = 0; j < 16; j++) step(k + 16 * h + j, k + 2 * j + h);
  } else {
    for (int64_t k = 0; k < kn; k++) step(k, k);
  }
#pragma GCC unroll 16
  for (int t = 0; t < TR; t++) {
    float* yr = y + t * ldy;
    if (ncols < NC) {
#pragma GCC unroll 8
      for (int c = 0; c < PC; c++) V::store(edge + c * V::W, a[t][c]);
      for (int64_t j = 0; j < ncols; j++) yr[j] = edge[j];
      continue;
    }
#pragma GCC unroll 8
    for (int c = 0; c < PC; c++) V::store(yr + c * V::W, a[t][c]);
  }
}

template <bool PERM, int TR = V::PT>
inline void panel_tiles(int64_t tr, const float* x, int64_t ldx, const float* p, int64_t kn, float* y, int64_t ldy,
                        int64_t ncols, bool load) {
  if constexpr (TR > 1)
    if (tr < TR) return panel_tiles<PERM, TR - 1>(tr, x, ldx, p, kn, y, ldy, ncols, load);
  panel_tile<TR, PERM>(x, ldx, p, kn, y, ldy, ncols, load);
}

// Rows [0, ncols) of a row-major f32 or bf16 block (row stride ld, kn inputs) -> panel (zero columns after ncols).
// Whole W × W blocks are transposed in registers (V::transpose), the edges one value at a time.
// bf16 rows take 2W inputs per transpose: the W × W block is of 32-bit words (a pair of inputs each), and after it
// each word splits into its even and its odd input (V::split_pairs, the same f32 values as widening first). Half the
// permutes of widening, then transposing; packing was 16 % of a 128-token bf16 prompt.
template <class WT>
inline void pack_panel(const WT* w, int64_t ld, int64_t ncols, int64_t kn, float* p) {
  constexpr int NC = V::PC * V::W;
  int64_t j = 0;
  for (; j + V::W <= ncols; j += V::W) {
    int64_t k = 0;
    if constexpr (std::is_same_v<WT, uint16_t>) {
      for (; k + 2 * V::W <= kn; k += 2 * V::W) {
        typename V::vec r[V::W];
#pragma GCC unroll 16
        for (int i = 0; i < V::W; i++) {
          r[i] = V::load_pairs(w + (j + i) * ld + k);
          __builtin_prefetch(w + (j + V::W + i) * ld + k, 0, 3);
        }
        V::transpose(r);
#pragma GCC unroll 16
        for (int i = 0; i < V::W; i++) {
          typename V::vec even, odd;
          V::split_pairs(r[i], even, odd);
          V::store(p + (k + 2 * i) * NC + j, even);
          V::store(p + (k + 2 * i + 1) * NC + j, odd);
        }
      }
    }
    for (; k + V::W <= kn; k += V::W) {
      typename V::vec r[V::W];
#pragma GCC unroll 16
      for (int i = 0; i < V::W; i++) r[i] = V::load_w(w + (j + i) * ld + k);
      V::transpose(r);
#pragma GCC unroll 16
      for (int i = 0; i < V::W; i++) V::store(p + (k + i) * NC + j, r[i]);
    }
    for (; k < kn; k++)
      for (int i = 0; i < V::W; i++) p[k * NC + j + i] = wval(w[(j + i) * ld + k]);
  }
  for (; j < ncols; j++)
    for (int64_t k = 0; k < kn; k++) p[k * NC + j] = wval(w[j * ld + k]);
  for (; j < NC; j++)
    for (int64_t k = 0; k < kn; k++) p[k * NC + j] = 0.0f;
}

// pack(n, ncols, k0, k1, panel) fills the panel of rows [n, n + ncols) and inputs [k0, k1); KB divides into the
// input blocks (a multiple of the quantization group). PERM: panels in the int4 order, x natural (panel_tile).
template <bool PERM = false, class Pack>
void panel_gemm(const float* x, int64_t ldx, int64_t T, int64_t K, int64_t KB, float* y, int64_t ldy,
                bool accumulate, int64_t n0, int64_t n1, Pack&& pack) {
  constexpr int NC = V::PC * V::W;
  thread_local std::vector<float> buf;
  buf.resize(static_cast<size_t>(NC * KB));
  float* panel = buf.data();
  for (int64_t t0 = 0; t0 < T; t0 += kPanelTokens) {
    const int64_t t1 = std::min(T, t0 + kPanelTokens);
    for (int64_t k0 = 0; k0 < K; k0 += KB) {
      const int64_t k1 = std::min(K, k0 + KB);
      const bool load = accumulate || k0 > 0;
      for (int64_t n = n0; n < n1; n += NC) {
        const int64_t ncols = std::min<int64_t>(NC, n1 - n);
        pack(n, ncols, k0, k1, panel);
        for (int64_t t = t0; t < t1;) {
          const int64_t tr = token_tile(t1 - t, V::PT);
          panel_tiles<PERM>(tr, x + t * ldx + k0, ldx, panel, k1 - k0, y + t * ldy + n, ldy, ncols, load);
          t += tr;
        }
      }
    }
  }
}

// NR weight rows × TR tokens (gemm_dense uses NR = 1: two interleaved rows slowed the DRAM stream of a decode pass
// by 10-40 %), for dense decode, verification and short prompts (T < kPanelMinT). Four accumulators
// per token (vector v of the row goes to accumulator v % 4; they meet as (a0 + a1) + (a2 + a3) before the horizontal
// sum): a row of 256 inputs is then four FMA chains of 4 instead of one of 16, which the FMA latency bounded (a
// 768 × 256 bf16 matrix from L2 took 3.4 cycles per vector of 16 weights). The row is read once per token tile, in
// memory order; gemm_dense runs each token tile over a block of 16 rows in one call (per row, a call with its
// prologue and pointer set-up had cost as much as a quarter of a verification's tile). Each token's sum depends
// only on the row and the token, so any T < kPanelMinT gives a decode step's sums bit for bit.
template <int NR, int TR, class WT>
__attribute__((always_inline)) inline void dense_row_tile_one(const float* x, int64_t ldx, const WT* w, int64_t ldw,
                                                              int64_t K, float* y, int64_t ldy, bool acc) {
  constexpr int A = 4;
  typename V::vec a[NR][TR][A];
#pragma GCC unroll 4
  for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
    for (int t = 0; t < TR; t++)
#pragma GCC unroll 4
      for (int i = 0; i < A; i++) a[r][t][i] = V::zero();
  int64_t k = 0;
  if constexpr (std::is_same_v<WT, uint16_t>) {
    // bf16: x is in pair order (pair_order_x); each load of 2W weights gives the even and the odd ones.
    auto step = [&](int64_t kk, int i) {
#pragma GCC unroll 4
      for (int r = 0; r < NR; r++) {
        typename V::vec we, wo;
        V::load_w2(w + r * ldw + kk, we, wo);
        // Verification (two tokens or more) spends several FMAs per weight vector, and the hardware prefetchers
        // then fell behind the stream of rows: the demo's 23 MB at T = 5 took about compute plus transfer time.
        // 8 KB ahead (16 rows at the demo's K = 256), into L2 only (locality 2: prefetcht1): 2 KB ahead into L1
        // as well left a verification of two tokens at 1.4-1.5 decode steps, now about one (docs/performance.md,
        // seventeenth round). A prefetch never faults. Decode (T = 1) keeps its stream as it was (prefetching it
        // was slower).
        if constexpr (V::W > 1 && TR >= 2)
          __builtin_prefetch(reinterpret_cast<const char*>(w + r * ldw + kk) + 8192, 0, 2);
#pragma GCC unroll 8
        for (int t = 0; t < TR; t++) {
          a[r][t][i] = V::fma(we, V::loadx(x + t * ldx + kk), a[r][t][i]);
          a[r][t][i + 1] = V::fma(wo, V::loadx(x + t * ldx + kk + V::W), a[r][t][i + 1]);
        }
      }
    };
    for (; k + 4 * V::W <= K; k += 4 * V::W) {
      step(k, 0);
      step(k + 2 * V::W, 2);
    }
    if (k + 2 * V::W <= K) {
      step(k, 0);
      k += 2 * V::W;
    }
  } else {
    auto step = [&](int64_t kk, int i) {
#pragma GCC unroll 4
      for (int r = 0; r < NR; r++) {
        const typename V::vec wv = V::load_w(w + r * ldw + kk);
#pragma GCC unroll 8
        for (int t = 0; t < TR; t++) a[r][t][i] = V::fma(wv, V::loadx(x + t * ldx + kk), a[r][t][i]);
      }
    };
    for (; k + A * V::W <= K; k += A * V::W)
#pragma GCC unroll 4
      for (int i = 0; i < A; i++) step(k + i * V::W, i);
    for (int i = 0; k + V::W <= K; k += V::W, i++) step(k, i);
  }
  float s[NR][TR];
#pragma GCC unroll 4
  for (int r = 0; r < NR; r++) {
    typename V::vec v[TR];
#pragma GCC unroll 8
    for (int t = 0; t < TR; t++) v[t] = V::add(V::add(a[r][t][0], a[r][t][1]), V::add(a[r][t][2], a[r][t][3]));
    // Three tokens or more: the horizontal sums four at a time (V::reduce4, the same additions as V::reduce; a
    // group of three repeats its last vector). A verification of four drafts is five tokens in one tile: one
    // shuffle tree and one reduction instead of five reductions.
    int t = 0;
    if constexpr (TR >= 3) {
#pragma GCC unroll 2
      for (; t + 3 <= TR; t += 4) {
        float o[4];
        V::reduce4(v[t], v[t + 1], v[t + 2], v[t + 3 < TR ? t + 3 : t + 2], o);
        s[r][t] = o[0];
        s[r][t + 1] = o[1];
        s[r][t + 2] = o[2];
        if (t + 3 < TR) s[r][t + 3] = o[3];
      }
    }
#pragma GCC unroll 8
    for (; t < TR; t++) s[r][t] = V::reduce(v[t]);
  }
  finish_tile<NR, TR>(s, x, ldx, w, ldw, k, K, y, ldy, acc);
}

// `rows` tiles one after the other (rows · NR weight rows, outputs y[0 .. rows · NR)): one call, the pointers to the
// tokens' activations set up once, for a block of rows.
template <int NR, int TR, class WT>
inline void dense_row_tile(const float* x, int64_t ldx, const WT* w, int64_t ldw, int64_t K, float* y, int64_t ldy,
                           bool acc, int64_t rows = 1) {
  for (int64_t n = 0; n < rows; n++, w += NR * ldw, y += NR) dense_row_tile_one<NR, TR>(x, ldx, w, ldw, K, y, ldy, acc);
}

// x [T, K] (row stride ldx) -> out [T, K] in the order dense_row_tile reads against bf16 rows: within each chunk
// of 2W inputs the even ones, then the odd ones (how a load of 2W bf16 splits into two vectors); the last K % 2W
// inputs as they are.
inline void pair_order_x(const float* x, int64_t ldx, int64_t T, int64_t K, float* out) {
  constexpr int64_t C = 2 * V::W;
  for (int64_t t = 0; t < T; t++) {
    const float* xr = x + t * ldx;
    float* o = out + t * K;
    int64_t c = 0;
    for (; c + C <= K; c += C) V::deinterleave(xr + c, o + c);
    for (; c < K; c++) o[c] = xr[c];
  }
}

template <int NR, class WT, int TR = V::TR_ROW>
inline void dense_row_tiles(int64_t tr, const float* x, int64_t ldx, const WT* w, int64_t ldw, int64_t K, float* y,
                            int64_t ldy, bool acc, int64_t rows = 1) {
  if constexpr (TR > 1)
    if (tr < TR) return dense_row_tiles<NR, WT, TR - 1>(tr, x, ldx, w, ldw, K, y, ldy, acc, rows);
  dense_row_tile<NR, TR>(x, ldx, w, ldw, K, y, ldy, acc, rows);
}

// Four bf16 rows of a decode step (one token, K a multiple of 2W), one after the other in memory order with the
// sums of dense_row_tile<1, 1>, whose four horizontal sums then run as one (V::reduce4, the same additions). At the
// demo's K = 256 a row is eight multiply-adds, and the per-row reduction and store were as many instructions again.
inline typename V::vec bf16_row_partial(const float* x, const uint16_t* w, int64_t K) {
  typename V::vec a0 = V::zero(), a1 = V::zero(), a2 = V::zero(), a3 = V::zero(), we, wo;
  int64_t k = 0;
  for (; k + 4 * V::W <= K; k += 4 * V::W) {
    V::load_w2(w + k, we, wo);
    a0 = V::fma(we, V::loadx(x + k), a0);
    a1 = V::fma(wo, V::loadx(x + k + V::W), a1);
    V::load_w2(w + k + 2 * V::W, we, wo);
    a2 = V::fma(we, V::loadx(x + k + 2 * V::W), a2);
    a3 = V::fma(wo, V::loadx(x + k + 3 * V::W), a3);
  }
  if (k < K) {
    V::load_w2(w + k, we, wo);
    a0 = V::fma(we, V::loadx(x + k), a0);
    a1 = V::fma(wo, V::loadx(x + k + V::W), a1);
  }
  return V::add(V::add(a0, a1), V::add(a2, a3));
}

inline void decode_rows4(const float* x, const uint16_t* w, int64_t ldw, int64_t K, float* y, bool acc) {
  const typename V::vec r0 = bf16_row_partial(x, w, K), r1 = bf16_row_partial(x, w + ldw, K);
  const typename V::vec r2 = bf16_row_partial(x, w + 2 * ldw, K), r3 = bf16_row_partial(x, w + 3 * ldw, K);
  float s[4];
  V::reduce4(r0, r1, r2, r3, s);
  for (int r = 0; r < 4; r++) y[r] = acc ? y[r] + s[r] : s[r];
}

// decode_rows4's sums for four rows that need not be neighbours, S of them read side by side (S = 4: sixteen
// accumulators, for 32-register vector sets; S = 2 within sixteen registers): each row's four accumulators take the
// multiply-adds bf16_row_partial gives them, in its order, and one V::reduce4 ends the four rows. (With S = 1 over
// neighbour rows it is decode_rows4, sums and all, but on the cache-resident demo model that was 5-15 % slower.)
template <int S>
inline void decode_rows4_apart(const float* x, const uint16_t* const (&w)[4], int64_t K, float* const (&y)[4],
                               bool acc) {
  typename V::vec t[4];
#pragma GCC unroll 2
  for (int g = 0; g < 4; g += S) {
    typename V::vec a[S][4], we, wo;
    for (int r = 0; r < S; r++)
      for (int j = 0; j < 4; j++) a[r][j] = V::zero();
    int64_t k = 0;
    for (; k + 4 * V::W <= K; k += 4 * V::W) {
      const typename V::vec x0 = V::loadx(x + k), x1 = V::loadx(x + k + V::W);
      const typename V::vec x2 = V::loadx(x + k + 2 * V::W), x3 = V::loadx(x + k + 3 * V::W);
#pragma GCC unroll 4
      for (int r = 0; r < S; r++) {
        const char* ahead = reinterpret_cast<const char*>(w[g + r] + k) + kDecodePrefetchBytes;
        __builtin_prefetch(ahead, 0, 3);  // the two cache lines this step reads, kDecodePrefetchBytes on
        if constexpr (V::W >= 16) __builtin_prefetch(ahead + 64, 0, 3);
        V::load_w2(w[g + r] + k, we, wo);
        a[r][0] = V::fma(we, x0, a[r][0]);
        a[r][1] = V::fma(wo, x1, a[r][1]);
        V::load_w2(w[g + r] + k + 2 * V::W, we, wo);
        a[r][2] = V::fma(we, x2, a[r][2]);
        a[r][3] = V::fma(wo, x3, a[r][3]);
      }
    }
    if (k < K) {
      const typename V::vec x0 = V::loadx(x + k), x1 = V::loadx(x + k + V::W);
#pragma GCC unroll 4
      for (int r = 0; r < S; r++) {
        V::load_w2(w[g + r] + k, we, wo);
        a[r][0] = V::fma(we, x0, a[r][0]);
        a[r][1] = V::fma(wo, x1, a[r][1]);
      }
    }
    for (int r = 0; r < S; r++) t[g + r] = V::add(V::add(a[r][0], a[r][1]), V::add(a[r][2], a[r][3]));
  }
  float s[4];
  V::reduce4(t[0], t[1], t[2], t[3], s);
  for (int r = 0; r < 4; r++) *y[r] = acc ? *y[r] + s[r] : s[r];
}

// Two tokens (the verification of one draft) against bf16 rows, K a multiple of 2W: two rows at a time, each row
// and token summed in the accumulators and order of dense_row_tile<1, 2> (x in pair order; the same loads, FMAs,
// prefetches and (a0 + a1) + (a2 + a3)), and the four horizontal sums in one V::reduce4 (the additions of V::reduce)
// instead of four reductions. At the demo's K = 256 a row is sixteen multiply-adds a token, and its two reductions
// were about a fifth of its instructions.
inline void verify2_rows2(const float* x, int64_t ldx, const uint16_t* w, int64_t ldw, int64_t K, float* y,
                          int64_t ldy, bool acc) {
  typename V::vec v[4];
#pragma GCC unroll 2
  for (int r = 0; r < 2; r++) {
    const uint16_t* wr = w + r * ldw;
    typename V::vec a[2][4];
#pragma GCC unroll 2
    for (int t = 0; t < 2; t++)
#pragma GCC unroll 4
      for (int i = 0; i < 4; i++) a[t][i] = V::zero();
    auto step = [&](int64_t kk, int i) __attribute__((always_inline)) {
      typename V::vec we, wo;
      V::load_w2(wr + kk, we, wo);
      if constexpr (V::W > 1) __builtin_prefetch(reinterpret_cast<const char*>(wr + kk) + 8192, 0, 2);
#pragma GCC unroll 2
      for (int t = 0; t < 2; t++) {
        a[t][i] = V::fma(we, V::loadx(x + t * ldx + kk), a[t][i]);
        a[t][i + 1] = V::fma(wo, V::loadx(x + t * ldx + kk + V::W), a[t][i + 1]);
      }
    };
    int64_t k = 0;
    for (; k + 4 * V::W <= K; k += 4 * V::W) {
      step(k, 0);
      step(k + 2 * V::W, 2);
    }
    if (k + 2 * V::W <= K) step(k, 0);
#pragma GCC unroll 2
    for (int t = 0; t < 2; t++) v[2 * r + t] = V::add(V::add(a[t][0], a[t][1]), V::add(a[t][2], a[t][3]));
  }
  float s[4];
  V::reduce4(v[0], v[1], v[2], v[3], s);  // row 0 token 0, row 0 token 1, row 1 token 0, row 1 token 1
  const float out[2][2] = {{s[0], s[2]}, {s[1], s[3]}};  // [token][row]
  for (int t = 0; t < 2; t++)
    for (int r = 0; r < 2; r++) {
      float& o = y[t * ldy + r];
      o = acc ? o + out[t][r] : out[t][r];
    }
}

template <class WT>
void gemm_dense(const cpu::GemmArgs& a, int64_t n0, int64_t n1) {
  const WT* W = static_cast<const WT*>(a.w);
  if (a.T >= kPanelMinT && a.K > 0) {
    return panel_gemm(a.x, a.ldx, a.T, a.K, kPanelK, a.y, a.ldy, a.accumulate, n0, n1,
                      [&](int64_t n, int64_t ncols, int64_t k0, int64_t k1, float* p) {
                        pack_panel(W + n * a.ldw + k0, a.ldw, ncols, k1 - k0, p);
                      });
  }
  // Decode, verification and short prompts read the rows one at a time: a dense weight matrix of a decode step is
  // usually read from DRAM (the demo model's 23 MB of bf16 do not stay in a shared L3), and long sequential streams
  // keep the hardware prefetchers ahead where several interleaved neighbouring 0.5–3 KB rows do not.
  const float* x = a.x;
  int64_t ldx = a.ldx;
  if constexpr (std::is_same_v<WT, uint16_t>) {
    thread_local std::vector<float> paired;
    paired.resize(static_cast<size_t>(a.T * a.K + 16));
    float* px = paired.data();
    px += (64 - reinterpret_cast<uintptr_t>(px) % 64) % 64 / sizeof(float);
    pair_order_x(a.x, a.ldx, a.T, a.K, px);
    x = px;
    ldx = a.K;
  }
  int64_t n = n0;
  if constexpr (std::is_same_v<WT, uint16_t>)
    if (a.T == 1 && a.K % (2 * V::W) == 0) {
      // A thread's rows as S equal parts, one row of each read side by side: several sequential streams far apart
      // keep more of DRAM's latency covered than one does (S = decode_streams(), simd.h: four on a Zen 5 core,
      // whose read sweep gave 20 GB/s as one stream, 31 as two, 35-39 as four; two on Zen 4 and on AVX2). Each row's
      // sums are the same whichever rows it is read beside. (A part below kDecodeStreamsMinBytes, likely in a cache
      // already, keeps one stream: on the cache-resident demo model four streams were 5-14 % slower over parts of
      // 384 KB, and 5-10 % faster from 768 KB on.)
      if constexpr (V::W >= 8) {
        auto streams = [&](auto count) {
          constexpr int S = decltype(count)::value, G = 4 / S;  // streams; rows of each per call
          static_assert(S * G == 4, "decode_rows4_apart takes four rows");
          const int64_t per = (n1 - n0) * a.K * 2 >= kDecodeStreamsMinBytes ? (n1 - n0) / S / G * G : 0;
          for (int64_t i = 0; i < per; i += G) {
            const uint16_t* w[4];
            float* y[4];
            for (int j = 0; j < 4; j++) {
              const int64_t r = n0 + (j % S) * per + i + j / S;  // streams side by side, then the next row of each
              w[j] = W + r * a.ldw;
              y[j] = a.y + r;
            }
            decode_rows4_apart<S>(x, w, a.K, y, a.accumulate);
          }
          n += S * per;
        };
        with_decode_streams<V::W >= 16 ? 4 : 2>(streams);
      }
      for (; n + 4 <= n1; n += 4) decode_rows4(x, W + n * a.ldw, a.ldw, a.K, a.y + n, a.accumulate);
    }
  if constexpr (std::is_same_v<WT, uint16_t>)
    if (a.T == 2 && a.K % (2 * V::W) == 0)
      for (; n + 2 <= n1; n += 2) verify2_rows2(x, ldx, W + n * a.ldw, a.ldw, a.K, a.y + n, a.ldy, a.accumulate);
  // Blocks of 16 rows, each token tile over the whole block (the block's rows stay in L1 or L2 for the next tile).
  for (; n < n1; n += 16) {
    const int64_t rows = std::min<int64_t>(16, n1 - n);
    for (int64_t t = 0; t < a.T;) {
      const int64_t tr = token_tile(a.T - t, V::TR_ROW);
      dense_row_tiles<1, WT>(tr, x + t * ldx, ldx, W + n * a.ldw, a.ldw, a.K, a.y + t * a.ldy + n, a.ldy,
                             a.accumulate, rows);
      t += tr;
    }
  }
}

// n bf16 values -> f32 (exact); whole vectors when n == kScaleBlock, one at a time otherwise (never reads past
// the n values: the last row's scales end the tensor).
constexpr int kScaleBlock = 16;
inline void widen_bf16(const uint16_t* p, int64_t n, float* out) {
  if (n == kScaleBlock) {
    for (int i = 0; i < kScaleBlock; i += V::W) V::store(out + i, V::load_w(p + i));
    return;
  }
  for (int64_t i = 0; i < n; i++) out[i] = bf16f(p[i]);
}

template <int NR, int TR, int BITS>
inline void quant_tile(const cpu::QGemmArgs& A, const float* x, const uint8_t* q, const uint16_t* s,
                       const uint16_t* b, int64_t k0, int64_t k1, float* y, bool acc) {
  constexpr int NV = 32 / V::W;  // vectors per 32-input chunk
  const int64_t ldx = A.ldx, ldq = A.ldq, lds = A.lds, ldy = A.ldy;
  const int group = A.group;
  typename V::vec a[NR][TR];
#pragma GCC unroll 8
  for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
    for (int t = 0; t < TR; t++) a[r][t] = V::zero();
  // Scales and biases of up to kScaleBlock groups per row are widened to f32 in vector registers first, so that
  // each group's broadcast is a plain load instead of a scalar bf16 -> f32 conversion (which cost as much as
  // the arithmetic of a 64-input group in decode).
  alignas(64) float sf[NR][kScaleBlock], bf[NR][kScaleBlock];
  int64_t gb = -1;
  for (int64_t g0 = k0; g0 < k1; g0 += group) {
    const int64_t gi = g0 / group;
    if (gb < 0 || gi >= gb + kScaleBlock) {
      gb = gi;
      const int64_t ng = std::min<int64_t>(kScaleBlock, (k1 - g0) / group);
#pragma GCC unroll 8
      for (int r = 0; r < NR; r++) {
        widen_bf16(s + r * lds + gb, ng, sf[r]);
        widen_bf16(b + r * lds + gb, ng, bf[r]);
      }
    }
    typename V::vec sv[NR], bv[NR];
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) {
      sv[r] = V::set1(sf[r][gi - gb]);
      bv[r] = V::set1(bf[r][gi - gb]);
      if constexpr (BITS == 4 && V::LUT4) sv[r] = V::lut4(sv[r], bv[r]);
    }
    for (int64_t c = g0; c < g0 + group; c += 32) {
      const uint8_t* qc = q + c * BITS / 8;
      if constexpr (V::W > 1 && TR <= 2) {
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) __builtin_prefetch(qc + (r + NR) * ldq + 128, 0, 3);
      }
#pragma GCC unroll 32
      for (int v = 0; v < NV; v++) {
        typename V::vec wv[NR];
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
          const uint8_t* p = qc + r * ldq;
          typename V::vec qv;
          if constexpr (BITS == 4 && V::LUT4) {
            // The 16 values fma(q, s, b) of this row's group sit in one register: a lane permute looks the
            // weight up by its nibble (the same f32 value the two lines below compute, one instruction).
            wv[r] = v < NV / 2 ? V::q4lo_lut(p + v * V::W, sv[r]) : V::q4hi_lut(p + (v - NV / 2) * V::W, sv[r]);
            continue;
          }
          if constexpr (BITS == 8)
            qv = V::q8(p + v * V::W);
          else
            qv = v < NV / 2 ? V::q4lo(p + v * V::W) : V::q4hi(p + (v - NV / 2) * V::W);
          wv[r] = V::fma(qv, sv[r], bv[r]);
        }
#pragma GCC unroll 8
        for (int t = 0; t < TR; t++) {
          typename V::vec xv = V::loadx(x + t * ldx + c + v * V::W);
#pragma GCC unroll 8
          for (int r = 0; r < NR; r++) a[r][t] = V::fma(wv[r], xv, a[r][t]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < TR; t++)
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) {
      float v = V::reduce(a[r][t]);
      float& o = y[t * ldy + r];
      o = acc ? o + v : v;
    }
}

template <int NR, int BITS>
inline void quant_tiles(int64_t tr, const cpu::QGemmArgs& A, const float* x, const uint8_t* q, const uint16_t* s,
                        const uint16_t* b, int64_t k0, int64_t k1, float* y, bool acc) {
  switch (tr) {
    case 1: return quant_tile<NR, 1, BITS>(A, x, q, s, b, k0, k1, y, acc);
    case 2: return quant_tile<NR, 2, BITS>(A, x, q, s, b, k0, k1, y, acc);
    case 3: if constexpr (V::TR_QUANT >= 3) return quant_tile<NR, 3, BITS>(A, x, q, s, b, k0, k1, y, acc); break;
    case 4: if constexpr (V::TR_QUANT >= 4) return quant_tile<NR, 4, BITS>(A, x, q, s, b, k0, k1, y, acc); break;
    default: break;
  }
}

// Dequantizes NR rows × inputs [k0, k1) into `out` (row stride k1 - k0), in the order the register kernels use
// (int4: low nibbles of each 16 bytes, then high nibbles, matching the pre-permuted activations), with the same
// w = fma(q, s, b) in f32: a dense tile over this buffer computes exactly what quant_tile computes.
template <int NR, int BITS>
inline void dequant_tile(const cpu::QGemmArgs& A, const uint8_t* q, const uint16_t* s, const uint16_t* b, int64_t k0,
                         int64_t k1, float* out) {
  const int64_t ld = k1 - k0;
  for (int r = 0; r < NR; r++) {
    const uint8_t* qr = q + r * A.ldq;
    float* o = out + r * ld - k0;
    for (int64_t g0 = k0; g0 < k1; g0 += A.group) {
      const typename V::vec sv = V::set1(bf16f(s[r * A.lds + g0 / A.group]));
      const typename V::vec bv = V::set1(bf16f(b[r * A.lds + g0 / A.group]));
      [[maybe_unused]] typename V::vec lut = sv;
      if constexpr (BITS == 4 && V::LUT4) lut = V::lut4(sv, bv);
      for (int64_t c = g0; c < g0 + A.group; c += 32) {
        const uint8_t* p = qr + c * BITS / 8;
        constexpr int NV = 32 / V::W;
#pragma GCC unroll 32
        for (int v = 0; v < NV; v++) {
          if constexpr (BITS == 4 && V::LUT4) {
            V::store(o + c + v * V::W,
                     v < NV / 2 ? V::q4lo_lut(p + v * V::W, lut) : V::q4hi_lut(p + (v - NV / 2) * V::W, lut));
            continue;
          }
          typename V::vec qv;
          if constexpr (BITS == 8)
            qv = V::q8(p + v * V::W);
          else
            qv = v < NV / 2 ? V::q4lo(p + v * V::W) : V::q4hi(p + (v - NV / 2) * V::W);
          V::store(o + c + v * V::W, V::fma(qv, sv, bv));
        }
      }
    }
  }
}

// The panel of W rows [n, n + W) × inputs [k0, k1) (a whole number of KS-input steps) straight from the codes: per
// step, W words of each row (W·32/BITS codes) are transposed as 32-bit words in registers, so that vector i holds
// word i of every row, and each of its codes is shifted down, masked, converted and dequantized with the row's
// (lane's) scale and bias: the same fma(q, s, b) as dequant_tile. A quarter (int8) or an eighth (int4) of the
// permutes of dequantizing rows and then transposing floats (pack_panel), and no row buffer. int4 weights go to the
// rows of the panel in the order of the permuted activations (per 32 inputs the even ones, then the odd ones).
template <int BITS>
inline void pack_panel_codes(const cpu::QGemmArgs& a, int64_t n, int64_t k0, int64_t k1, float* p) {
  constexpr int NC = V::PC * V::W;
  constexpr int CW = 32 / BITS, KS = V::W * CW;
  constexpr uint32_t mask = (1u << BITS) - 1;
  alignas(64) float sf[V::W], bf[V::W];
  int64_t gcur = -1;
  typename V::vec sv = V::zero(), bv = V::zero();
  for (int64_t k = k0; k < k1; k += KS) {
    typename V::vec r[V::W];
#pragma GCC unroll 16
    for (int i = 0; i < V::W; i++) {
      r[i] = V::load_words(a.q + (n + i) * a.ldq + k * BITS / 8);
      // The same words of the next W rows (the next call's block), as pack_panel does: the W strided loads that
      // start a block waited for memory, a row's first line is too far apart for the hardware to stream.
      __builtin_prefetch(a.q + (n + V::W + i) * a.ldq + k * BITS / 8, 0, 3);
    }
    V::transpose(r);
#pragma GCC unroll 16
    for (int i = 0; i < V::W; i++) {
      const int64_t kw = k + CW * i;  // the word's first input
      if (const int64_t g = kw / a.group; g != gcur) {
        gcur = g;
        for (int l = 0; l < V::W; l++) {
          sf[l] = bf16f(a.scales[(n + l) * a.lds + g]);
          bf[l] = bf16f(a.biases[(n + l) * a.lds + g]);
        }
        sv = V::loadx(sf);
        bv = V::loadx(bf);
      }
#pragma GCC unroll 8
      for (int m = 0; m < CW; m++) {
        const typename V::vec w = V::fma(V::code(r[i], BITS * m, mask), sv, bv);
        int64_t pos = kw + m - k0;
        if constexpr (BITS == 4) {
          const int64_t e = (kw + m) % 32;
          pos = kw + m - e + (e % 2 == 0 ? e / 2 : 16 + e / 2) - k0;
        }
        V::store(p + pos * NC, w);
      }
    }
  }
}

// Prefill: the panels of panel_gemm, dequantized: whole blocks of W rows straight from the codes (pack_panel_codes);
// the other rows (and input blocks that are not a whole number of its steps) dequantized one row at a time
// (dequant_tile, in the order the int4 activations were permuted to) and then placed.
template <int BITS>
void qgemm_prefill(const cpu::QGemmArgs& a, int64_t n0, int64_t n1) {
  constexpr int NC = V::PC * V::W;
  constexpr int64_t KS = V::W * 32 / BITS;
  const int64_t KB = std::max<int64_t>(1, kPanelK / a.group) * a.group;
  thread_local std::vector<float> rows;
  rows.resize(static_cast<size_t>(NC * KB));
  // int4: x as it is (qgemm_x leaves prompts unpermuted), the panels in the permuted order.
  panel_gemm<BITS == 4>(a.x, a.ldx, a.T, a.K, KB, a.y, a.ldy, a.accumulate, n0, n1,
             [&](int64_t n, int64_t ncols, int64_t k0, int64_t k1, float* p) {
               const int64_t kn = k1 - k0;
               int64_t j = 0;
               if (kn % KS == 0)
                 for (; j + V::W <= ncols; j += V::W) pack_panel_codes<BITS>(a, n + j, k0, k1, p + j);
               if (j == 0) {
                 for (; j + V::NR <= ncols; j += V::NR)
                   dequant_tile<V::NR, BITS>(a, a.q + (n + j) * a.ldq, a.scales + (n + j) * a.lds,
                                             a.biases + (n + j) * a.lds, k0, k1, rows.data() + j * kn);
                 for (; j < ncols; j++)
                   dequant_tile<1, BITS>(a, a.q + (n + j) * a.ldq, a.scales + (n + j) * a.lds,
                                         a.biases + (n + j) * a.lds, k0, k1, rows.data() + j * kn);
                 return pack_panel(rows.data(), kn, ncols, kn, p);
               }
               for (; j < ncols; j++) {
                 dequant_tile<1, BITS>(a, a.q + (n + j) * a.ldq, a.scales + (n + j) * a.lds, a.biases + (n + j) * a.lds,
                                       k0, k1, rows.data());
                 for (int64_t k = 0; k < kn; k++) p[k * NC + j] = rows[k];
               }
               for (; j < NC; j++)
                 for (int64_t k = 0; k < kn; k++) p[k * NC + j] = 0.0f;
             });
}

// Short prefill (8 <= T < kPanelMinT): each NR-row weight tile of an input block is dequantized once into an f32 buffer (16 KB, in L1/L2) and
// then multiplied with every token tile of the token block by the dense kernel, so the dequantization is paid
// once per 64 tokens instead of once per 4.
template <int BITS>
void qgemm_dequant_dense(const cpu::QGemmArgs& a, int64_t n0, int64_t n1) {
  const int64_t KB = (kInputBlock / a.group) * a.group;
  alignas(64) float buf[V::NR * kInputBlock];
  for (int64_t t0 = 0; t0 < a.T; t0 += kTokenBlock) {
    const int64_t t1 = std::min(a.T, t0 + kTokenBlock);
    for (int64_t k0 = 0; k0 < a.K; k0 += KB) {
      const int64_t k1 = std::min(a.K, k0 + KB);
      const bool acc = a.accumulate || k0 > 0;
      auto run = [&](auto nr, int64_t n) {
        constexpr int NR = decltype(nr)::value;
        dequant_tile<NR, BITS>(a, a.q + n * a.ldq, a.scales + n * a.lds, a.biases + n * a.lds, k0, k1, buf);
        for (int64_t t = t0; t < t1;) {
          const int64_t tr = token_tile(t1 - t, V::TR_DENSE);
          dense_tiles<NR, float>(tr, a.x + t * a.ldx + k0, a.ldx, buf, k1 - k0, 0, k1 - k0, a.y + t * a.ldy + n,
                                 a.ldy, acc);
          t += tr;
        }
      };
      int64_t n = n0;
      for (; n + V::NR <= n1; n += V::NR) run(std::integral_constant<int, V::NR>{}, n);
      for (; n < n1; n++) run(std::integral_constant<int, 1>{}, n);
    }
  }
}

template <int BITS>
void qgemm_bits(const cpu::QGemmArgs& a, int64_t n0, int64_t n1) {
  if (a.T >= kPanelMinT && a.K > 0) return qgemm_prefill<BITS>(a, n0, n1);
  // The dequantized buffer holds one input block: longer rows take the register tiles, whole rows at once, so that a
  // verification's rows equal decode's bit for bit at any K.
  if (a.T >= 8 && a.K > 0 && a.K <= kInputBlock) return qgemm_dequant_dense<BITS>(a, n0, n1);
  const int64_t KB = a.K;
  for (int64_t t0 = 0; t0 < a.T; t0 += kTokenBlock) {
    const int64_t t1 = std::min(a.T, t0 + kTokenBlock);
    for (int64_t k0 = 0; k0 < a.K; k0 += KB) {
      const int64_t k1 = std::min(a.K, k0 + KB);
      const bool acc = a.accumulate || k0 > 0;
      auto run = [&](auto nr, int64_t n) {
        constexpr int NR = decltype(nr)::value;
        for (int64_t t = t0; t < t1;) {
          const int64_t tr = token_tile(t1 - t, V::TR_QUANT);
          quant_tiles<NR, BITS>(tr, a, a.x + t * a.ldx, a.q + n * a.ldq, a.scales + n * a.lds, a.biases + n * a.lds,
                                k0, k1, a.y + t * a.ldy + n, acc);
          t += tr;
        }
      };
      int64_t n = n0;
      for (; n + V::NR <= n1; n += V::NR) run(std::integral_constant<int, V::NR>{}, n);
      for (; n < n1; n++) run(std::integral_constant<int, 1>{}, n);
    }
  }
  if (a.K == 0)
    for (int64_t t = 0; t < a.T; t++)
      for (int64_t n = n0; n < n1; n++)
        if (!a.accumulate) a.y[t * a.ldy + n] = 0.0f;
}

void qgemm(const cpu::QGemmArgs& a, int64_t n0, int64_t n1) {
  if (a.bits == 4)
    qgemm_bits<4>(a, n0, n1);
  else
    qgemm_bits<8>(a, n0, n1);
}

void gemm_bf16(const cpu::GemmArgs& a, int64_t n0, int64_t n1) { gemm_dense<uint16_t>(a, n0, n1); }
void gemm_f32(const cpu::GemmArgs& a, int64_t n0, int64_t n1) { gemm_dense<float>(a, n0, n1); }
