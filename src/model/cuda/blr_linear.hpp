// A compressed linear layer on the device, run from its packed bits (SPEC §9;
// the CUDA twin of model/blr_linear.hpp). Per path:
//   t = ℓ ∘ (S_Vᵀ (g ∘ x)),  u = S_U t,  y = β·y + Σ_p h_p ∘ u_p (+ bias)
// (a sign payload: y = β·y + h ∘ (S (g ∘ x)) + bias).
// Up to 16 rows (decode of 1–16 sequences): Decode::planes (the default,
// below) multiplies the sign rows on the binary tensor cores against bit
// planes of the inputs for one or two rows, and hands three rows or more to
// Decode::f16, which expands the signs to ±1 in registers and multiplies
// them against fp16 inputs on the fp16 tensor cores, every row in one pass
// over the signs (model/cuda/sign_hmma.hpp); one or two rows:
// Decode::rows keeps the earlier two launches of a kernel that adds
// tabulated signed sums of four inputs, a block per run of whole rows
// (model/cuda/sign_rows.cu): every path's t, then y from all paths; with
// both, the layers that read the same input (q, k, v; gate, up) share the
// launches (packed_linear_group). Decode::spans keeps the first kernels, one
// per product with rows cut into 1024-column spans (sign_gemv.cu).
// A batch (prefill, scoring, calibration), per product: the activations go to
// fp16 with g (or ℓ) folded in and each row scaled by a power of two that puts
// its max in [2^14, 2^15) (rows_to_f16.cu: no overflow, whatever the
// activations' range); the signs are expanded to ±1 in fp16, exact, as many
// columns at a time as BatchOptions::tile_bytes allows (sign_tile_f16.cu); and
// cuBLAS multiplies them on the fp16 tensor cores with fp32 accumulation, the
// column chunks of S summed into one fp32 product in a fixed order
// (deterministic), every dimension padded with zeros to a multiple of 8. The row scales are undone
// exactly (powers of two) when t is converted and in the epilogue with h, β and the bias
// (blr_epilogue.cu). Rounding the activations to 11 significant bits costs ~3e-4 relative on a
// layer. BatchMath::tf32 (or CORTIQ_BLR_BATCH=tf32) keeps the earlier path,
// ±1.0f tiles through TF32 (blr_batch_tf32.cu), to compare against.
//
// Decode::planes (the default) runs the same two products on the binary
// tensor cores (model/cuda/sign_mma.hpp): x cut into bit planes of 16-bit
// integers (sign_planes), then mma .b1 AND-popc of the sign rows against the
// planes, the first product writing t straight into 24 wide planes whose
// scale a bound fixes in advance — three launches per group, no table.
//
// On the device the signs are not the payload's dense stream but rows that
// start on 16-byte boundaries (blr/sign_layout.hpp, padded): S_Vᵀ as r rows
// of n bits and S_U as m rows of r bits (the payload's S_Uᵀ transposed at
// upload), so both products are products of rows; at most 127 padding bits
// per row, and kMmaTailWords words after the last.
#pragma once

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "blr/packed.hpp"
#include "core/cuda/device.hpp"
#include "model/cuda/sign_gemv.hpp"
#include "model/cuda/sign_hmma.hpp"
#include "model/cuda/sign_mma.hpp"
#include "model/cuda/sign_rows.hpp"

namespace cortiq::model::cuda {

struct DevicePacked {
    int64_t m = 0, n = 0, r = 0;
    int paths = 0;
    bool sign = false;
    int64_t ld_v = 0, ld_u = 0;  // u32 words per row of S_Vᵀ (n bits) and of S_U (r bits), ×4
    cortiq::cuda::DeviceBuffer<uint32_t> sv;       // per path: S_Vᵀ (a sign payload: S, m rows)
    cortiq::cuda::DeviceBuffer<uint32_t> su;       // per path: S_U, m rows
    cortiq::cuda::DeviceBuffer<uint16_t> h, l, g;  // f16 scales, paths × (m | r | n)
    cortiq::cuda::DVec g32;  // g in float32 (paths × n), copied into the row kernels' shared memory
    std::vector<float> l_max;  // per path max_k |ℓ_k| (host; the bound of sign_hmma.hpp)
    SignMatrix svt(int p) const;
    SignMatrix s_u(int p) const;
    int64_t bytes() const {
        return 4 * (sv.size() + su.size() + g32.size()) + 2 * (h.size() + l.size() + g.size());
    }
};

enum class BatchMath { f16, tf32 };
enum class Decode { planes, f16, rows, spans };

struct BatchOptions {
    BatchMath math = BatchMath::f16;
    // The most bytes an expanded sign tile takes (fp16: all of S's rows, as
    // many 32-column chunks as fit; at least one chunk). Measured on the H200
    // (512 tokens, 4096/11008 shapes): all of S at once was as fast as or
    // faster than 8–64 MiB chunks (L2-sized chunks did not pay); 256 MiB
    // holds all of S up to 2 bpw at 4096×11008 (90 MB).
    int64_t tile_bytes = int64_t{256} << 20;
};

// The defaults, changed by CORTIQ_BLR_BATCH=tf32|f16 and CORTIQ_BLR_TILE_MB=N.
BatchOptions batch_options_from_env();
// Decode::planes, or CORTIQ_BLR_DECODE=planes|f16|rows|spans.
Decode decode_from_env();
// Rows from which Decode::planes hands the decode to Decode::f16. Measured
// on an H100 (bench_blr_gpu --rows, 1 bpw, µs a layer, planes / f16):
// 4096×4096 8.6 / 17.2 at 2 rows, 9.5 / 13.2 at 4; 4096×11008 9.9 / 19.4 at
// 2, 16.1 / 15.6 at 4, 46.9 / 19.7 at 16; and the 7B decode step at 4
// sequences 4.10 ms by planes, 3.82 by f16.
constexpr int kF16DecodeFromRows = 3;
// Rows from which Decode::planes hands the decode to the fp16 tensor cores
// (Decode::f16): kF16DecodeFromRows, or CORTIQ_F16_DECODE_FROM=N (17: never).
int f16_from_rows_from_env();
bool t_wide_from_env();

// Buffers one model's packed layers share (used on one stream in order).
struct PackedScratch {
    cortiq::cuda::DVec xg, t, u, tile;  // xg and tile: the TF32 path only
    cortiq::cuda::DeviceBuffer<__half> x16, t16, tile16;
    cortiq::cuda::DVec row_scale;  // 2 × rows: x's, then t's
    GemvScratch gemv;
    // Decode::planes: x's planes and t's wide planes, their chunk scales
    // (σ, σΣq, σΣ|q| of x; σ' of t) and t's tile sums
    cortiq::cuda::DeviceBuffer<uint32_t> planes;
    cortiq::cuda::DVec plane_floats;
    cortiq::cuda::DeviceBuffer<int32_t> tile_sums;
    BatchOptions batch = batch_options_from_env();
    Decode decode = decode_from_env();
    // Decode::f16: the fp16 inputs of x and of t
    cortiq::cuda::DeviceBuffer<__half> halves;
    // Decode::planes: t written as wide planes by the first product (true), or
    // cut into planes by a sign_planes launch of its own (the earlier four
    // launches a group, kept to compare; CORTIQ_T_PLANES=wide|launch)
    bool t_wide = t_wide_from_env();
    // Decode::planes: decodes of this many rows or more (up to
    // kPlaneDecodeRows) run as Decode::f16
    int f16_from_rows = f16_from_rows_from_env();
    // Device bytes of the batch buffers (the decode ones left out).
    int64_t bytes() const {
        return 4 * (xg.size() + t.size() + u.size() + tile.size() + row_scale.size()) +
               2 * (x16.size() + t16.size() + tile16.size());
    }
};

DevicePacked upload_packed(const blr::PackedWeight& w, cudaStream_t stream);

// out[i, :] = row tokens[i] of the compressed vocab × hidden weight e (rows ×
// e.n; ids already checked on the host): model::Embedding::row on the device
// (model/cuda/embed_packed.cu).
void embed_packed(const int32_t* tokens, const DevicePacked& e, int64_t rows, float* out,
                  cudaStream_t stream);

// Rows up to this many take the decode kernels: Decode::rows and
// Decode::spans; Decode::planes up to kPlaneDecodeRows (sign_mma.hpp).
constexpr int64_t kDecodeRows = 2;

// y (rows × m) = beta·y + x (rows × n) · Ŵᵀ (+ bias[m] when bias is not null).
void packed_linear(cublasHandle_t blas, cudaStream_t stream, const DevicePacked& w,
                   PackedScratch& ws, const float* x, int64_t rows, float* y, float beta,
                   const float* bias);

// One layer of a group that reads the same input.
struct PackedOut {
    const DevicePacked* w = nullptr;
    float* y = nullptr;
    float beta = 0.0f;
    const float* bias = nullptr;
};

// Every layer's y = beta·y + x Ŵᵀ (+ bias), x (rows × n) shared: Decode::planes
// (rows ≤ kPlaneDecodeRows) three launches for all of them, Decode::rows (rows
// ≤ kDecodeRows) two; otherwise one packed_linear each.
void packed_linear_group(cublasHandle_t blas, cudaStream_t stream, const PackedOut* layers,
                         int count, PackedScratch& ws, const float* x, int64_t rows);

// An RMSNorm of the input (model::rmsnorm: x_j ← w_j · (x_j · inv), inv =
// 1 / √(Σ x² / n + eps)).
struct InputNorm {
    const float* w = nullptr;
    float eps = 0.0f;
};

// Whether packed_linear_group_normed and packed_linear_swiglu can take rows
// rows with ws: the plane decode, whose first launch reads x.
bool decode_norms_input(const PackedScratch& ws, int64_t rows);

// packed_linear_group on RMSNorm(x), no normed copy of x written; only where
// decode_norms_input(ws, rows).
void packed_linear_group_normed(cublasHandle_t blas, cudaStream_t stream, const PackedOut* layers,
                                int count, PackedScratch& ws, const float* x, const InputNorm& norm,
                                int64_t rows);

// packed_linear on silu(gate) ∘ up (rows × n each, as model/cuda/swiglu.cu),
// applied as the decode reads gate: gate is left as it is; only where
// decode_norms_input(ws, rows).
void packed_linear_swiglu(cublasHandle_t blas, cudaStream_t stream, const DevicePacked& w,
                          PackedScratch& ws, const float* gate, const float* up, int64_t rows,
                          float* y, float beta, const float* bias);

}  // namespace cortiq::model::cuda
