#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "blr/sign_layout.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "model/cuda/blr_batch.hpp"
#include "model/cuda/blr_linear.hpp"
#include "model/cuda/knob.hpp"

namespace cortiq::model::cuda {

namespace ec = cortiq::cuda;

namespace {

template <class T>
void ensure(ec::DeviceBuffer<T>& b, int64_t n, cudaStream_t stream) {
    if (b.size() < n) b = ec::DeviceBuffer<T>(n, stream);
}

// Decode with Decode::spans: sign_gemv per product, g and the scales folded
// in; the first product of a path writes t, the second adds into y (β and the
// bias once).
void decode_spans(const DevicePacked& w, PackedScratch& ws, const float* x, int rows, float* y,
                  float beta, const float* bias, cudaStream_t stream) {
    const auto* hs = reinterpret_cast<const __half*>(w.h.get());
    const auto* ls = reinterpret_cast<const __half*>(w.l.get());
    const auto* gs = reinterpret_cast<const __half*>(w.g.get());
    if (w.sign) {
        sign_gemv(w.svt(0), {x, w.n, gs, hs, y, w.m, beta, bias}, rows, ws.gemv, stream);
        return;
    }
    ensure(ws.t, rows * w.r, stream);
    for (int p = 0; p < w.paths; ++p) {
        sign_gemv(w.svt(p), {x, w.n, gs + p * w.n, ls + p * w.r, ws.t.get(), w.r, 0.0f, nullptr},
                  rows, ws.gemv, stream);
        sign_gemv(w.s_u(p),
                  {ws.t.get(), w.r, nullptr, hs + p * w.m, y, w.m, p == 0 ? beta : 1.0f,
                   p == 0 ? bias : nullptr},
                  rows, ws.gemv, stream);
    }
}

// The product that writes a layer's y (SignProduct or MmaProduct): its
// paths as pieces (filled in by the caller), y, β and the bias.
template <class Product>
Product product_into(const PackedOut& layer, const DevicePacked& w) {
    Product out;
    out.pieces = w.paths;
    out.out = layer.y;
    out.ld_out = w.m;
    out.beta = layer.beta;
    out.bias = layer.bias;
    return out;
}

// Decode with Decode::rows: the products of every layer of the group in two
// launches of sign_rows, t_p = ℓ_p ∘ S_V,pᵀ (g_p ∘ x) for every layer and
// path, then y = β·y + bias + Σ_p h_p ∘ S_U,p t_p per layer (a sign payload's
// one product, y = β·y + bias + h ∘ S (g ∘ x), in the first). False (nothing
// run) when a product does not fit the kernel, or for a lone one-path layer
// with rows longer than kLongRowCols (below).
constexpr int64_t kLongRowCols = 8192;

bool decode_rows(const PackedOut* layers, int count, PackedScratch& ws, const float* x, int rows,
                 cudaStream_t stream) {
    // A lone one-path layer with long input rows is left to the span kernels:
    // there the row kernel's table per stripe per block costs more than the
    // spans' meeting through global memory (H200, 1 bpw, 4096×11008: 16.5 µs
    // by rows, also with t by spans and y by rows; 14.3 by spans).
    if (count == 1 && !layers[0].w->sign && layers[0].w->paths == 1 &&
        layers[0].w->n > kLongRowCols)
        return false;
    int64_t t_words = 0;
    for (int l = 0; l < count; ++l)
        if (!layers[l].w->sign) t_words += layers[l].w->paths * rows * layers[l].w->r;
    ensure(ws.t, t_words, stream);
    std::vector<SignProduct> first, second;
    int64_t off = 0;
    for (int l = 0; l < count; ++l) {
        const DevicePacked& w = *layers[l].w;
        const auto* hs = reinterpret_cast<const __half*>(w.h.get());
        const auto* ls = reinterpret_cast<const __half*>(w.l.get());
        if (w.sign) {
            SignProduct pr;
            pr.piece[0] = {w.svt(0), x, w.n, w.g32.get(), hs};
            pr.out = layers[l].y;
            pr.ld_out = w.m;
            pr.beta = layers[l].beta;
            pr.bias = layers[l].bias;
            first.push_back(pr);
            continue;
        }
        auto out = product_into<SignProduct>(layers[l], w);
        for (int p = 0; p < w.paths; ++p) {
            float* t = ws.t.get() + off + p * rows * w.r;
            SignProduct pr;
            pr.piece[0] = {w.svt(p), x, w.n, w.g32.get() + p * w.n, ls + p * w.r};
            pr.out = t;
            pr.ld_out = w.r;
            first.push_back(pr);
            out.piece[p] = {w.s_u(p), t, w.r, nullptr, hs + p * w.m};
        }
        second.push_back(out);
        off += w.paths * rows * w.r;
    }
    for (const auto* v : {&first, &second})
        for (const auto& pr : *v)
            if (!sign_rows_fits(pr, rows)) return false;
    sign_rows(first.data(), static_cast<int>(first.size()), rows, stream);
    sign_rows(second.data(), static_cast<int>(second.size()), rows, stream);
    return true;
}

int64_t round_up(int64_t v, int64_t k) {
    return (v + k - 1) / k * k;
}

// Which decode takes `rows` rows: the binary tensor cores (Decode::planes
// below ws.f16_from_rows), the fp16 ones (Decode::f16, or Decode::planes from
// ws.f16_from_rows), or neither (the earlier kernels, or the batch path).
bool decodes_by_halves(const PackedScratch& ws, int64_t rows) {
    return rows > 0 && rows <= kPlaneDecodeRows &&
           (ws.decode == Decode::f16 || (ws.decode == Decode::planes && rows >= ws.f16_from_rows));
}

// Decode with Decode::f16: the products of every layer of the group in three
// launches, as decode_planes: the fp16 inputs of g_p ∘ x for every layer and
// path; t_p = ℓ_p ∘ S_V,pᵀ (g_p ∘ x) on the fp16 tensor cores, written as the
// fp16 inputs of the second product (sign_hmma.hpp) by the same kernel, and
// in float to ws.t; then y = β·y + bias + Σ_p h_p ∘ S_U,p t_p (a sign
// payload: y = β·y + bias + h ∘ S (g ∘ x) in the first product launch).
void decode_halves(const PackedOut* layers, int count, PackedScratch& ws, const float* x, int rows,
                   cudaStream_t stream, const InputNorm* norm, const float* swiglu_up) {
    int64_t t_words = 0, half_total = 0, float_total = 0;
    for (int l = 0; l < count; ++l) {
        const DevicePacked& w = *layers[l].w;
        half_total += w.paths * half_len(w.n, rows);
        float_total += w.paths * 2 * rows * plane_chunks(w.n);
        if (w.sign) continue;
        t_words += w.paths * rows * w.r;
        half_total += w.paths * half_len(w.r, rows);
        float_total += w.paths * rows * plane_chunks(w.r);
    }
    ensure(ws.t, t_words, stream);
    ensure(ws.halves, half_total, stream);
    ensure(ws.plane_floats, float_total, stream);
    __half* halves = ws.halves.get();
    float* floats = ws.plane_floats.get();
    auto take_floats = [&](int64_t n) {
        float* f = floats;
        floats += n;
        return f;
    };
    std::vector<HalfJob> jobs;
    std::vector<HalfProduct> first, second;
    float* t_next = ws.t.get();
    for (int l = 0; l < count; ++l) {
        const DevicePacked& w = *layers[l].w;
        const auto* hs = reinterpret_cast<const __half*>(w.h.get());
        const auto* ls = reinterpret_cast<const __half*>(w.l.get());
        auto out = product_into<HalfProduct>(layers[l], w);
        for (int p = 0; p < w.paths; ++p) {
            HalfJob jx{x, w.n, w.g32.get() + p * w.n, w.n, halves};
            halves += half_len(w.n, rows);
            jx.sigma = take_floats(rows * plane_chunks(w.n));
            jx.abs_info = take_floats(rows * plane_chunks(w.n));
            if (norm) {
                jx.norm_w = norm->w;
                jx.norm_eps = norm->eps;
            }
            jx.up = swiglu_up;
            jobs.push_back(jx);
            const HalfInput hx{jx.q, jx.sigma, w.n, jx.abs_info};
            if (w.sign) {
                out.piece[0] = {w.svt(0), hx, hs};
                continue;
            }
            HalfProduct pr;
            pr.piece[0] = {w.svt(p), hx, ls + p * w.r};
            pr.out = t_next;
            pr.ld_out = w.r;
            t_next += rows * w.r;
            pr.t_out = {halves, take_floats(rows * plane_chunks(w.r)), w.l_max[p]};
            halves += half_len(w.r, rows);
            first.push_back(pr);
            out.piece[p] = {w.s_u(p), HalfInput{pr.t_out.q, pr.t_out.sigma, w.r}, hs + p * w.m};
        }
        (w.sign ? first : second).push_back(out);
    }
    half_inputs(jobs.data(), static_cast<int>(jobs.size()), rows, stream);
    sign_hmma(first.data(), static_cast<int>(first.size()), rows, stream);
    if (!second.empty()) sign_hmma(second.data(), static_cast<int>(second.size()), rows, stream);
}

// Decode with Decode::planes: the products of every layer of the group in
// three launches: the planes of g_p ∘ x for every layer and path; t_p = ℓ_p ∘
// S_V,pᵀ (g_p ∘ x) on the binary tensor cores, written as wide planes
// (sign_mma.hpp) by the same kernel; then y = β·y + bias + Σ_p h_p ∘ S_U,p t_p
// from them (a sign payload: y = β·y + bias + h ∘ S (g ∘ x) in the first
// product launch).
// Decode::planes takes up to kPlaneDecodeRows rows; the earlier decode
// kernels two.
bool decodes_by_planes(const PackedScratch& ws, int64_t rows) {
    return rows > 0 && rows <= kPlaneDecodeRows && ws.decode == Decode::planes &&
           rows < ws.f16_from_rows;
}

void decode_planes(const PackedOut* layers, int count, PackedScratch& ws, const float* x, int rows,
                   cudaStream_t stream, const InputNorm* norm = nullptr,
                   const float* swiglu_up = nullptr) {
    // floats of the chunk scales, each array from an even float (float2)
    auto even = [](int64_t n) { return (n + 1) / 2 * 2; };
    int64_t t_words = 0, plane_total = 0, float_total = 0, tile_total = 0;
    for (int l = 0; l < count; ++l) {
        const DevicePacked& w = *layers[l].w;
        plane_total += w.paths * rows * plane_words(w.n);
        float_total += w.paths * (2 * rows * plane_chunks(w.n) + even(rows * plane_chunks(w.n)));
        if (w.sign) continue;
        t_words += w.paths * rows * w.r;
        plane_total += w.paths * rows * wide_plane_words(w.r);  // ≥ plane_words
        float_total += w.paths * (even(rows * plane_chunks(w.r)) + 2 * rows * plane_chunks(w.r));
        tile_total += w.paths * rows * wide_tiles(w.r);
    }
    ensure(ws.t, t_words, stream);
    ensure(ws.planes, plane_total, stream);
    ensure(ws.plane_floats, float_total, stream);
    ensure(ws.tile_sums, tile_total, stream);
    uint32_t* planes = ws.planes.get();
    int32_t* tile_sums = ws.tile_sums.get();
    float* floats = ws.plane_floats.get();
    auto take_floats = [&](int64_t n) {
        float* f = floats;
        floats += even(n);
        return f;
    };
    std::vector<PlaneJob> jobs_x, jobs_t;
    std::vector<MmaProduct> first, second;
    float* t_next = ws.t.get();
    for (int l = 0; l < count; ++l) {
        const DevicePacked& w = *layers[l].w;
        const auto* hs = reinterpret_cast<const __half*>(w.h.get());
        const auto* ls = reinterpret_cast<const __half*>(w.l.get());
        auto out = product_into<MmaProduct>(layers[l], w);
        for (int p = 0; p < w.paths; ++p) {
            PlaneJob jx{x, w.n, w.g32.get() + p * w.n, w.n, planes, nullptr, nullptr};
            if (norm) {
                jx.norm_w = norm->w;
                jx.norm_eps = norm->eps;
            }
            jx.up = swiglu_up;
            planes += rows * plane_words(w.n);
            jx.info = reinterpret_cast<float2*>(take_floats(2 * rows * plane_chunks(w.n)));
            jx.abs_info = take_floats(rows * plane_chunks(w.n));
            jobs_x.push_back(jx);
            const PlaneInput px{jx.planes, jx.info, w.n, jx.abs_info};
            if (w.sign) {
                out.piece[0] = {w.svt(0), px, {}, hs};
                continue;
            }
            MmaProduct pr;
            pr.piece[0] = {w.svt(p), px, {}, ls + p * w.r};
            pr.out = t_next;  // t in float too: cheap, and what the tests read
            pr.ld_out = w.r;
            t_next += rows * w.r;
            if (!ws.t_wide) {  // the four-launch route: t's planes by a launch of their own
                PlaneJob jt{pr.out, w.r, nullptr, w.r, planes, nullptr, nullptr};
                planes += rows * plane_words(w.r);
                jt.info = reinterpret_cast<float2*>(take_floats(2 * rows * plane_chunks(w.r)));
                jobs_t.push_back(jt);
                first.push_back(pr);
                out.piece[p] = {w.s_u(p), PlaneInput{jt.planes, jt.info, w.r}, {}, hs + p * w.m};
                continue;
            }
            pr.planes_out = {planes, take_floats(rows * plane_chunks(w.r)), tile_sums};
            planes += rows * wide_plane_words(w.r);
            tile_sums += rows * wide_tiles(w.r);
            first.push_back(pr);
            const WidePlanes& po = pr.planes_out;
            out.piece[p] = {
                w.s_u(p), {}, WideInput{po.planes, po.sigma, po.tile_sum, w.r}, hs + p * w.m};
        }
        (w.sign ? first : second).push_back(out);
    }
    sign_planes(jobs_x.data(), static_cast<int>(jobs_x.size()), rows, stream);
    sign_mma(first.data(), static_cast<int>(first.size()), rows, stream);
    if (second.empty()) return;
    if (!ws.t_wide) {
        sign_planes(jobs_t.data(), static_cast<int>(jobs_t.size()), rows, stream);
        sign_mma(second.data(), static_cast<int>(second.size()), rows, stream);
        return;
    }
    sign_mma_wide(second.data(), static_cast<int>(second.size()), rows, stream);
}

// The decode on either kind of tensor core, where one takes `rows` rows.
bool decode_tensor_cores(const PackedOut* layers, int count, PackedScratch& ws, const float* x,
                         int64_t rows, cudaStream_t stream, const InputNorm* norm = nullptr,
                         const float* swiglu_up = nullptr) {
    if (decodes_by_halves(ws, rows))
        decode_halves(layers, count, ws, x, static_cast<int>(rows), stream, norm, swiglu_up);
    else if (decodes_by_planes(ws, rows))
        decode_planes(layers, count, ws, x, static_cast<int>(rows), stream, norm, swiglu_up);
    else
        return false;
    return true;
}

// Columns of S per expanded fp16 tile: all (rounded up to 32) when the tile
// fits tile_bytes, else the most multiples of 32 that do (at least 32).
int64_t chunk_cols(const SignMatrix& s, int64_t tile_bytes) {
    const int64_t all = 32 * s.ld, fit = tile_bytes / (2 * std::max<int64_t>(s.rows, 1));
    return std::clamp<int64_t>(fit / 32 * 32, 32, all);
}

// C (col-major, fp32) = op(A)·B + beta·C, A and B fp16, on the tensor cores
// with fp32 accumulation.
void gemm_f16(cublasHandle_t blas, int64_t M, int64_t N, int64_t K, const __half* a, int64_t lda,
              const __half* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    const float one = 1.0f;
    CUBLAS_CHECK(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(M),
                              static_cast<int>(N), static_cast<int>(K), &one, a, CUDA_R_16F,
                              static_cast<int>(lda), b, CUDA_R_16F, static_cast<int>(ldb), &beta, c,
                              CUDA_R_32F, static_cast<int>(ldc), CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
}

// out (rows × s.rows, fp32, leading dimension round_up(s.rows, 8)) = in (rows
// × s.cols, fp16, leading dimension ld_in ≥ round_up(s.cols, 8), zero past
// s.cols) · Sᵀ: chunks of S's columns expanded to fp16 and summed in order.
// cuBLAS gets dimensions in multiples of 8 (the fp16 kernels' alignment;
// r = 2966 ran 1.7× slower than r = 4096): zero rows of the tile give the
// padding rows of out, the inputs' zero columns the padding of K.
void product_f16(cublasHandle_t blas, cudaStream_t stream, const SignMatrix& s, PackedScratch& ws,
                 const __half* in, int64_t ld_in, int64_t rows, float* out) {
    const int64_t kc = chunk_cols(s, ws.batch.tile_bytes), m8 = round_up(s.rows, 8);
    CORTIQ_ASSERT(ld_in >= round_up(s.cols, 8), "product_f16: ld_in {} < {} columns", ld_in,
                  s.cols);
    ensure(ws.tile16, m8 * kc, stream);
    for (int64_t c0 = 0; c0 < s.cols; c0 += kc) {
        const int64_t k = std::min(kc, s.cols - c0);
        sign_tile_f16(s, c0, round_up(k, 32), kc, m8, ws.tile16.get(), stream);
        // col-major: out (m8 × rows, ld m8) (+)= tileᵀ · inᵀ
        gemm_f16(blas, m8, rows, round_up(k, 8), ws.tile16.get(), kc, in + c0, ld_in,
                 c0 == 0 ? 0.0f : 1.0f, out, m8);
    }
}

// The fp16 batch path (blr_linear.hpp): per path, x → fp16 (g, row scale),
// t = S_Vᵀ x, t → fp16 (ℓ, x's scale undone, a new row scale), u = S_U t, and
// y from u (h, t's scale undone); a sign payload: u = S x, y from u.
void batch_path_f16(cublasHandle_t blas, cudaStream_t stream, const DevicePacked& w,
                    PackedScratch& ws, const float* x, int64_t rows, float* y, float beta,
                    const float* bias) {
    const auto* hs = reinterpret_cast<const __half*>(w.h.get());
    const auto* ls = reinterpret_cast<const __half*>(w.l.get());
    const auto* gs = reinterpret_cast<const __half*>(w.g.get());
    const int64_t ld_x = round_up(w.n, 8), ld_t = round_up(w.r, 8), ld_u = round_up(w.m, 8);
    ensure(ws.x16, rows * ld_x, stream);
    ensure(ws.u, rows * ld_u, stream);
    ensure(ws.row_scale, 2 * rows, stream);
    float* sx = ws.row_scale.get();
    float* st = sx + rows;
    for (int p = 0; p < w.paths; ++p) {
        rows_to_f16(x, w.n, gs + p * w.n, nullptr, rows, w.n, ws.x16.get(), ld_x, sx, stream);
        const float* su = sx;
        if (w.sign) {
            product_f16(blas, stream, w.svt(0), ws, ws.x16.get(), ld_x, rows, ws.u.get());
        } else {
            ensure(ws.t, rows * ld_t, stream);
            ensure(ws.t16, rows * ld_t, stream);
            product_f16(blas, stream, w.svt(p), ws, ws.x16.get(), ld_x, rows, ws.t.get());
            rows_to_f16(ws.t.get(), ld_t, ls + p * w.r, sx, rows, w.r, ws.t16.get(), ld_t, st,
                        stream);
            product_f16(blas, stream, w.s_u(p), ws, ws.t16.get(), ld_t, rows, ws.u.get());
            su = st;
        }
        blr_epilogue({.y = y,
                      .u = ws.u.get(),
                      .h = hs + p * w.m,
                      .row_scale = su,
                      .bias = bias,
                      .rows = rows,
                      .m = w.m,
                      .beta = beta,
                      .first = p == 0,
                      .last = p + 1 == w.paths,
                      .ld_u = ld_u},
                     stream);
    }
}

}  // namespace

BatchOptions batch_options_from_env() {
    BatchOptions o;
    if (const char* m = std::getenv("CORTIQ_BLR_BATCH")) {
        const std::string v = m;
        CORTIQ_ASSERT(v == "f16" || v == "tf32", "CORTIQ_BLR_BATCH={}: f16 or tf32", v);
        o.math = v == "tf32" ? BatchMath::tf32 : BatchMath::f16;
    }
    if (const char* t = std::getenv("CORTIQ_BLR_TILE_MB")) {
        const int64_t mb = std::atoll(t);
        CORTIQ_ASSERT(mb > 0, "CORTIQ_BLR_TILE_MB={}: a positive number of MiB", t);
        o.tile_bytes = mb << 20;
    }
    return o;
}

// Measured on the H200 side by side (bench_blr_gpu, 1 bpw, one token): the
// 32-layer model's linears 1.140 ms with the wide planes against 1.226 with
// the four launches, 4096×11008 8.3 against 9.0 µs, but 11008×4096 9.2
// against 8.3 (the second product's six mmas a chunk and its Σq term).
constexpr bool kTWideDefault = true;

bool t_wide_from_env() {
    const char* d = std::getenv("CORTIQ_T_PLANES");
    if (!d) return kTWideDefault;
    const std::string v = d;
    CORTIQ_ASSERT(v == "wide" || v == "launch", "CORTIQ_T_PLANES={}: wide or launch", v);
    return v == "wide";
}

Decode decode_from_env() {
    const char* d = std::getenv("CORTIQ_BLR_DECODE");
    if (!d) return Decode::planes;
    const std::string v = d;
    CORTIQ_ASSERT(v == "planes" || v == "f16" || v == "rows" || v == "spans",
                  "CORTIQ_BLR_DECODE={}: planes, f16, rows or spans", v);
    return v == "planes" ? Decode::planes
           : v == "f16"  ? Decode::f16
           : v == "rows" ? Decode::rows
                         : Decode::spans;
}

int f16_from_rows_from_env() {
    return knob("CORTIQ_F16_DECODE_FROM", kF16DecodeFromRows, 1, kPlaneDecodeRows + 1);
}

SignMatrix DevicePacked::svt(int p) const {
    const int64_t rows = sign ? m : r;
    return {sv.get() + p * rows * ld_v, ld_v, rows, n};
}
SignMatrix DevicePacked::s_u(int p) const {
    return {su.get() + p * m * ld_u, ld_u, m, r};
}

DevicePacked upload_packed(const blr::PackedWeight& w, cudaStream_t stream) {
    DevicePacked d;
    d.m = w.m;
    d.n = w.n;
    d.r = w.r;
    d.paths = w.paths;
    d.sign = w.sign;
    // rows on 16-byte boundaries, and kMmaTailWords readable words after the
    // last (sign_mma's 16-byte loads of a row's last chunk)
    d.ld_v = round_up(blr::words32_for(w.n), 4);
    d.ld_u = w.sign ? 0 : round_up(blr::words32_for(w.r), 4);
    std::vector<uint32_t> sv, su;
    auto append = [](std::vector<uint32_t>& dst, const std::vector<uint32_t>& rows_words,
                     int64_t words, int64_t ld) {
        for (size_t k = 0; k * words < rows_words.size(); ++k) {
            dst.insert(dst.end(), rows_words.begin() + static_cast<int64_t>(k) * words,
                       rows_words.begin() + static_cast<int64_t>(k + 1) * words);
            dst.resize(dst.size() + static_cast<size_t>(ld - words), 0u);
        }
    };
    for (int p = 0; p < w.paths; ++p) {
        append(sv, blr::aligned_rows(w.svt(p)), blr::words32_for(w.n), d.ld_v);
        if (w.sign) continue;
        append(su, blr::transposed_rows(w.sut(p)), blr::words32_for(w.r), d.ld_u);
    }
    sv.resize(sv.size() + kMmaTailWords, 0u);
    if (!w.sign) su.resize(su.size() + kMmaTailWords, 0u);
    auto up = [&](auto& dst, const auto* src, int64_t count) {
        using T = std::remove_pointer_t<decltype(dst.get())>;
        dst = ec::DeviceBuffer<T>(count, stream);
        if (count > 0)
            CUDA_CHECK(cudaMemcpyAsync(dst.get(), src, sizeof(T) * static_cast<size_t>(count),
                                       cudaMemcpyHostToDevice, stream));
    };
    up(d.sv, sv.data(), static_cast<int64_t>(sv.size()));
    up(d.su, su.data(), static_cast<int64_t>(su.size()));
    up(d.h, w.h.data(), static_cast<int64_t>(w.h.size()));
    up(d.l, w.l.data(), static_cast<int64_t>(w.l.size()));
    up(d.g, w.g.data(), static_cast<int64_t>(w.g.size()));
    for (int p = 0; p < w.paths && !w.sign; ++p) {
        float mx = 0.0f;
        for (int64_t k = 0; k < w.r; ++k)
            mx = std::max(mx, std::fabs(half_to_float(w.l[static_cast<size_t>(p * w.r + k)])));
        d.l_max.push_back(mx);
    }
    std::vector<float> g32(w.g.size());
    for (size_t i = 0; i < g32.size(); ++i) g32[i] = half_to_float(w.g[i]);
    up(d.g32, g32.data(), static_cast<int64_t>(g32.size()));
    CUDA_CHECK(cudaStreamSynchronize(stream));  // the host vectors may go
    return d;
}

void packed_linear(cublasHandle_t blas, cudaStream_t stream, const DevicePacked& w,
                   PackedScratch& ws, const float* x, int64_t rows, float* y, float beta,
                   const float* bias) {
    if (rows == 0) return;
    static_assert(kDecodeRows == 2, "sign_gemv takes 1 or 2 rows");
    const PackedOut one{&w, y, beta, bias};
    if (decode_tensor_cores(&one, 1, ws, x, rows, stream)) return;
    if (rows <= kDecodeRows) {
        if (ws.decode == Decode::rows &&
            decode_rows(&one, 1, ws, x, static_cast<int>(rows), stream))
            return;
        return decode_spans(w, ws, x, static_cast<int>(rows), y, beta, bias, stream);
    }
    if (ws.batch.math == BatchMath::tf32)
        return batch_path_tf32(blas, stream, w, ws, x, rows, y, beta, bias);
    return batch_path_f16(blas, stream, w, ws, x, rows, y, beta, bias);
}

void packed_linear_group(cublasHandle_t blas, cudaStream_t stream, const PackedOut* layers,
                         int count, PackedScratch& ws, const float* x, int64_t rows) {
    if (decode_tensor_cores(layers, count, ws, x, rows, stream)) return;
    if (rows > 0 && rows <= kDecodeRows && ws.decode == Decode::rows &&
        decode_rows(layers, count, ws, x, static_cast<int>(rows), stream))
        return;
    for (int l = 0; l < count; ++l)
        packed_linear(blas, stream, *layers[l].w, ws, x, rows, layers[l].y, layers[l].beta,
                      layers[l].bias);
}

bool decode_norms_input(const PackedScratch& ws, int64_t rows) {
    return decodes_by_planes(ws, rows) || decodes_by_halves(ws, rows);
}

void packed_linear_group_normed(cublasHandle_t, cudaStream_t stream, const PackedOut* layers,
                                int count, PackedScratch& ws, const float* x, const InputNorm& norm,
                                int64_t rows) {
    CORTIQ_ASSERT(decode_norms_input(ws, rows), "packed_linear_group_normed: {} rows", rows);
    decode_tensor_cores(layers, count, ws, x, rows, stream, &norm);
}

void packed_linear_swiglu(cublasHandle_t, cudaStream_t stream, const DevicePacked& w,
                          PackedScratch& ws, const float* gate, const float* up, int64_t rows,
                          float* y, float beta, const float* bias) {
    CORTIQ_ASSERT(decode_norms_input(ws, rows), "packed_linear_swiglu: {} rows", rows);
    const PackedOut one{&w, y, beta, bias};
    decode_tensor_cores(&one, 1, ws, gate, rows, stream, nullptr, up);
}

}  // namespace cortiq::model::cuda
