// The gated delta rule on the device, step by step over the tokens (the twin
// of model::gated_delta_recurrent; the CPU's chunkwise form gives the same
// outputs). One block per (sequence, value head, slice of 32 columns of the
// state S, dk × dv): lane j of every warp owns column j of the slice, warp w
// the rows a ≡ w (mod kWarps), held in registers for the whole sequence. Per
// token, with q, k of the head's key head in shared memory:
//   kv_j = Σ_a S_aj k_a                      (partial sums per warp, then summed)
//   δ_j  = β (v_j − e^g kv_j)
//   S_aj ← e^g S_aj + k_a δ_j;   o_j = Σ_a S_aj q_a / sqrt(dk)
// Three block barriers per token; the sequences, heads and slices run in
// parallel, the tokens of one sequence in order.
#include <cmath>

#include "core/cuda/device.hpp"
#include "core/error.hpp"
#include "model/cuda/kernels.hpp"

namespace cortiq::model::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kCols = 32;                        // state columns per block (one per lane)
constexpr int kMaxDk = 128;                      // key head dimension at most
constexpr int kRowsPerThread = kMaxDk / kWarps;  // state rows in each thread's registers

__global__ void __launch_bounds__(kWarps * 32)
    delta_rule_kernel(DeltaRuleArgs r, float* state, float* out, int64_t ld_o, float scale) {
    __shared__ float ks[kMaxDk], qs[kMaxDk];
    __shared__ float part_kv[kWarps][kCols], part_o[kWarps][kCols];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t h = blockIdx.y, b = blockIdx.z, H = r.v_heads, dk = r.dk, dv = r.dv;
    const int64_t kh = h / (H / r.k_heads);
    const int64_t j = static_cast<int64_t>(blockIdx.x) * kCols + lane;  // this thread's column
    const bool col = j < dv;
    float* S = state ? state + (b * H + h) * dk * dv : nullptr;  // sequence b's, head h

    float s[kRowsPerThread];
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
        const int64_t a = warp + kWarps * i;
        s[i] = S && col && a < dk ? S[a * dv + j] : 0.0f;
    }
    for (int64_t t = 0; t < r.T; ++t) {
        const int64_t row = b * r.T + t;
        if (threadIdx.x < dk) {
            ks[threadIdx.x] = r.k[row * r.ld_qk + kh * dk + threadIdx.x];
            qs[threadIdx.x] = r.q[row * r.ld_qk + kh * dk + threadIdx.x] * scale;
        }
        const float decay = expf(r.g[row * H + h]), beta = r.beta[row * H + h];
        const float v = col ? r.v[row * r.ld_v + h * dv + j] : 0.0f;
        __syncthreads();  // k, q loaded
        float kv = 0;
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) {
            const int a = warp + kWarps * i;
            if (a < dk) kv += s[i] * ks[a];
        }
        part_kv[warp][lane] = kv;
        __syncthreads();  // partial S^T k of every warp written
        kv = 0;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) kv += part_kv[w][lane];
        const float delta = beta * (v - decay * kv);
        float o = 0;
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) {
            const int a = warp + kWarps * i;
            if (a < dk) {
                s[i] = decay * s[i] + ks[a] * delta;
                o += qs[a] * s[i];
            }
        }
        part_o[warp][lane] = o;
        __syncthreads();  // partial outputs written; k, q and part_kv free again
        if (warp == 0 && col) {
            float sum = 0;
#pragma unroll
            for (int w = 0; w < kWarps; ++w) sum += part_o[w][lane];
            out[row * ld_o + h * dv + j] = sum;
        }
    }
    if (!S || !col) return;
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
        const int64_t a = warp + kWarps * i;
        if (a < dk) S[a * dv + j] = s[i];
    }
}

}  // namespace

void gated_delta_rule(const DeltaRuleArgs& r, float* state, float* out, int64_t ld_o,
                      cudaStream_t stream) {
    CORTIQ_ASSERT(r.k_heads > 0 && r.v_heads % r.k_heads == 0 && r.dk > 0 && r.dv > 0,
                  "delta rule: {} key heads, {} value heads", r.k_heads, r.v_heads);
    CORTIQ_ASSERT(r.dk <= kMaxDk, "delta rule: key head dimension {} (at most {})", r.dk, kMaxDk);
    CORTIQ_ASSERT(r.batch <= 65535 && r.v_heads <= 65535);
    if (r.batch == 0 || r.T == 0) return;
    const dim3 grid(static_cast<unsigned>((r.dv + kCols - 1) / kCols),
                    static_cast<unsigned>(r.v_heads), static_cast<unsigned>(r.batch));
    const float scale = 1.0f / std::sqrt(static_cast<float>(r.dk));  // as the CPU
    delta_rule_kernel<<<grid, kWarps * 32, 0, stream>>>(r, state, out, ld_o, scale);
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::model::cuda
