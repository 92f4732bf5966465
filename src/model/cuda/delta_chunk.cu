// The gated delta rule on the device, chunkwise (the twin of
// model::gated_delta_chunked, the WY form with chunks of 64 tokens): for
// prefill and scoring, where the step form's one barrier-bound step per token
// leaves the GPU waiting. One block per (sequence, value head, slice of 32
// columns of the state S, dk × dv): the columns of U, V', O and S are
// independent, so each slice recomputes the chunk's key-side terms (L, W) and
// keeps its part of S in shared memory. Per chunk of n tokens, γ_i = Σ_{j≤i} g_j:
//   A_ij = β_i (k_i · k_j) e^{γ_i − γ_j} (j < i),  P_ij = (q̂_i · k_j) e^{γ_i − γ_j} (j ≤ i)
//   (I + A) U = [β_i v_i],  (I + A) W = [e^{γ_i} β_i k_i]   (forward substitution, per column)
//   V' = U − W S;  o_i = e^{γ_i} q̂_i S + Σ_{j≤i} P_ij V'_j
//   S ← e^{γ_{n−1}} S + Σ_j e^{γ_{n−1} − γ_j} k_j V'_jᵀ
// Shared memory: k, q̂, W (n × dk, rows padded by one float against bank
// conflicts), A and P (64 × 64), U (64 × 32), the slice of S (dk × 32): about
// 157 KB at dk = 128 (Hopper allows 227 KB per block).
#include <cmath>

#include "core/cuda/device.hpp"
#include "core/error.hpp"
#include "model/cuda/kernels.hpp"

namespace cortiq::model::cuda {

namespace {

constexpr int kChunk = 64;               // tokens per chunk (as the CPU's kDeltaChunk)
constexpr int kCols = 32;                // state columns per block (one per lane)
constexpr int kWarps = 8;                // threads: kWarps × 32
constexpr int kMaxDk = 128;
constexpr int kRowsI = kChunk / kWarps;  // chunk rows per thread in the row-parallel phases
constexpr int kRowsA = kMaxDk / kWarps;  // state rows per thread in the state update

// Offsets (in floats) of the shared arrays for key dimension dk.
struct Smem {
    int ld;  // padded row of k, q̂, W
    int k, q, w, a, p, u, s, gam, eg, kdec, beta, total;
    __host__ __device__ explicit Smem(int dk) : ld(dk + 1) {
        k = 0;
        q = k + kChunk * ld;
        w = q + kChunk * ld;
        a = w + kChunk * ld;
        p = a + kChunk * kChunk;
        u = p + kChunk * kChunk;
        s = u + kChunk * kCols;
        gam = s + dk * kCols;
        eg = gam + kChunk;
        kdec = eg + kChunk;
        beta = kdec + kChunk;
        total = beta + kChunk;
    }
};

// Phase 1: the chunk's k, q̂ rows and gates into shared memory; γ, e^γ and
// e^{γ_last − γ}; W = e^γ β k and U = β v (zero past n rows and past dv).
__device__ void load_chunk(const DeltaRuleArgs& r, const Smem& m, float* sh, int64_t row0, int n,
                           int64_t h, int64_t kh, int64_t j0, float scale) {
    const int tid = threadIdx.x, dk = static_cast<int>(r.dk);
    float *K = sh + m.k, *Q = sh + m.q;
    for (int idx = tid; idx < n * dk; idx += kWarps * 32) {
        const int i = idx / dk, a = idx % dk;
        const int64_t off = (row0 + i) * r.ld_qk + kh * dk + a;
        K[i * m.ld + a] = r.k[off];
        Q[i * m.ld + a] = r.q[off] * scale;
    }
    if (tid < 32) {  // one warp: the prefix sums of g over the chunk
        float g0 = tid < n ? r.g[(row0 + tid) * r.v_heads + h] : 0.0f;
        float g1 = tid + 32 < n ? r.g[(row0 + tid + 32) * r.v_heads + h] : 0.0f;
        for (int o = 1; o < 32; o <<= 1) {  // inclusive scans of both halves
            const float y0 = __shfl_up_sync(0xffffffffu, g0, o);
            const float y1 = __shfl_up_sync(0xffffffffu, g1, o);
            if (tid >= o) g0 += y0, g1 += y1;
        }
        g1 += __shfl_sync(0xffffffffu, g0, 31);
        sh[m.gam + tid] = g0;
        sh[m.gam + tid + 32] = g1;
    }
    for (int i = tid; i < kChunk; i += kWarps * 32)
        sh[m.beta + i] = i < n ? r.beta[(row0 + i) * r.v_heads + h] : 0.0f;
    __syncthreads();
    for (int i = tid; i < kChunk; i += kWarps * 32) {
        const float last = sh[m.gam + n - 1];
        sh[m.eg + i] = i < n ? expf(sh[m.gam + i]) : 0.0f;
        sh[m.kdec + i] = i < n ? expf(last - sh[m.gam + i]) : 0.0f;
    }
    for (int idx = tid; idx < kChunk * kCols; idx += kWarps * 32) {
        const int i = idx / kCols, c = idx % kCols;
        const int64_t j = j0 + c;
        sh[m.u + idx] =
            i < n && j < r.dv ? sh[m.beta + i] * r.v[(row0 + i) * r.ld_v + h * r.dv + j] : 0.0f;
    }
    __syncthreads();  // eg, beta ready for W
    float* W = sh + m.w;
    for (int idx = tid; idx < n * dk; idx += kWarps * 32) {
        const int i = idx / dk, a = idx % dk;
        W[i * m.ld + a] = sh[m.eg + i] * sh[m.beta + i] * K[i * m.ld + a];  // as the CPU
    }
}

// Phase 2: A (strictly lower) and P (lower with the diagonal), lane = column j.
__device__ void key_products(const Smem& m, float* sh, int n, int dk) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const float *K = sh + m.k, *Q = sh + m.q;
    for (int ii = 0; ii < kRowsI; ++ii) {
        const int i = warp + kWarps * ii;
        for (int jj = 0; jj < kChunk / 32; ++jj) {
            const int j = lane + 32 * jj;
            float dkk = 0, dqk = 0;
            if (i < n && j <= i) {
                for (int a = 0; a < dk; ++a) {
                    const float kj = K[j * m.ld + a];
                    dkk += K[i * m.ld + a] * kj;
                    dqk += Q[i * m.ld + a] * kj;
                }
            }
            const float d = i < n && j <= i ? expf(sh[m.gam + i] - sh[m.gam + j]) : 0.0f;
            sh[m.a + i * kChunk + j] = j < i ? sh[m.beta + i] * dkk * d : 0.0f;
            sh[m.p + i * kChunk + j] = dqk * d;
        }
    }
}

// Phase 3: (I + A) X = X in place, one thread per column of [U | W].
__device__ void forward_substitution(const Smem& m, float* sh, int n, int dk) {
    const float* A = sh + m.a;
    for (int col = threadIdx.x; col < kCols + dk; col += kWarps * 32) {
        float* x = col < kCols ? sh + m.u + col : sh + m.w + (col - kCols);
        const int ld = col < kCols ? kCols : m.ld;
        for (int i = 1; i < n; ++i) {
            float acc = x[i * ld];
            for (int j = 0; j < i; ++j) acc -= A[i * kChunk + j] * x[j * ld];
            x[i * ld] = acc;
        }
    }
}

__global__ void __launch_bounds__(kWarps * 32)
    delta_chunk_kernel(DeltaRuleArgs r, float* state, float* out, int64_t ld_o, float scale) {
    extern __shared__ float sh[];
    const int dk = static_cast<int>(r.dk), lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const Smem m(dk);
    const int64_t h = blockIdx.y, b = blockIdx.z, kh = h / (r.v_heads / r.k_heads);
    const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kCols, j = j0 + lane;
    const bool col = j < r.dv;
    float* S = state ? state + h * r.dk * r.dv : nullptr;  // the global state (batch 1)
    float* Ss = sh + m.s;
    for (int a = warp; a < dk; a += kWarps) Ss[a * kCols + lane] = S && col ? S[a * r.dv + j] : 0.0f;
    for (int64_t t0 = 0; t0 < r.T; t0 += kChunk) {
        const int n = static_cast<int>(r.T - t0 < kChunk ? r.T - t0 : kChunk);
        const int64_t row0 = b * r.T + t0;
        __syncthreads();  // the previous chunk is done with the shared arrays
        load_chunk(r, m, sh, row0, n, h, kh, j0, scale);
        __syncthreads();
        key_products(m, sh, n, dk);
        __syncthreads();
        forward_substitution(m, sh, n, dk);
        __syncthreads();
        // Phase 4: V' = U − W S (in U) and the inter-chunk output e^γ q̂ S.
        float o[kRowsI];
        const float *W = sh + m.w, *Q = sh + m.q;
        float* U = sh + m.u;
#pragma unroll
        for (int ii = 0; ii < kRowsI; ++ii) {
            const int i = warp + kWarps * ii;
            float ws = 0, qs = 0;
            for (int a = 0; a < dk; ++a) {
                const float s = Ss[a * kCols + lane];
                ws += W[i * m.ld + a] * s;
                qs += Q[i * m.ld + a] * s;
            }
            o[ii] = sh[m.eg + i] * qs;
            if (i < n) U[i * kCols + lane] -= ws;
        }
        __syncthreads();  // V' complete; S no longer read
        // Phase 5: o += P V' (written out); S ← e^{γ_last} S + Σ_j e^{γ_last − γ_j} k_j V'_jᵀ.
#pragma unroll
        for (int ii = 0; ii < kRowsI; ++ii) {
            const int i = warp + kWarps * ii;
            if (i >= n) continue;
            float acc = o[ii];
            for (int jj = 0; jj <= i; ++jj) acc += sh[m.p + i * kChunk + jj] * U[jj * kCols + lane];
            if (col) out[(row0 + i) * ld_o + h * r.dv + j] = acc;
        }
        const float decay = expf(sh[m.gam + n - 1]);
        const float* K = sh + m.k;
#pragma unroll
        for (int aa = 0; aa < kRowsA; ++aa) {
            const int a = warp + kWarps * aa;
            if (a >= dk) break;
            float acc = 0;
            for (int jj = 0; jj < n; ++jj)
                acc += sh[m.kdec + jj] * K[jj * m.ld + a] * U[jj * kCols + lane];
            Ss[a * kCols + lane] = decay * Ss[a * kCols + lane] + acc;
        }
    }
    __syncthreads();
    if (S && col)
        for (int a = warp; a < dk; a += kWarps) S[a * r.dv + j] = Ss[a * kCols + lane];
}

}  // namespace

void gated_delta_chunked(const DeltaRuleArgs& r, float* state, float* out, int64_t ld_o,
                         cudaStream_t stream) {
    CORTIQ_ASSERT(r.k_heads > 0 && r.v_heads % r.k_heads == 0 && r.dk > 0 && r.dv > 0,
                  "delta rule: {} key heads, {} value heads", r.k_heads, r.v_heads);
    CORTIQ_ASSERT(r.dk <= kMaxDk, "delta rule: key head dimension {} (at most {})", r.dk, kMaxDk);
    CORTIQ_ASSERT(!state || r.batch == 1, "a delta-rule state serves one sequence, not {}",
                  r.batch);
    CORTIQ_ASSERT(r.batch <= 65535 && r.v_heads <= 65535);
    if (r.batch == 0 || r.T == 0) return;
    const size_t smem = sizeof(float) * static_cast<size_t>(Smem(static_cast<int>(r.dk)).total);
    int device = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    CORTIQ_ASSERT(smem <= static_cast<size_t>(optin), "delta rule: {} bytes of shared memory, {} allowed",
                  smem, optin);
    CUDA_CHECK(cudaFuncSetAttribute(delta_chunk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
    const dim3 grid(static_cast<unsigned>((r.dv + kCols - 1) / kCols),
                    static_cast<unsigned>(r.v_heads), static_cast<unsigned>(r.batch));
    const float scale = 1.0f / std::sqrt(static_cast<float>(r.dk));  // as the CPU
    delta_chunk_kernel<<<grid, kWarps * 32, smem, stream>>>(r, state, out, ld_o, scale);
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::model::cuda
