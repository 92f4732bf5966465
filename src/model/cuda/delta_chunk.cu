// The gated delta rule on the device, chunkwise (the twin of
// model::gated_delta_chunked, the WY form with chunks of 64 tokens): for
// prefill and scoring, where the step form's one barrier-bound step per token
// leaves the GPU waiting. One block per (sequence, value head, slice of 32
// columns of the state S, dk × dv): the columns of U, V', O and S are
// independent, so each slice recomputes the chunk's key-side terms (A, W) and
// keeps its part of S in shared memory. Per chunk of n tokens, γ_i = Σ_{j≤i} g_j:
//   A_ij = β_i (k_i · k_j) e^{γ_i − γ_j} (j < i),  P_ij = (q̂_i · k_j) e^{γ_i − γ_j} (j ≤ i)
//   (I + A) U = [β_i v_i],  (I + A) W = [e^{γ_i} β_i k_i]   (forward substitution, per column)
//   V' = U − W S;  o_i = e^{γ_i} q̂_i S + Σ_{j≤i} P_ij V'_j
//   S ← e^{γ_{n−1}} S + Σ_j e^{γ_{n−1} − γ_j} k_j V'_jᵀ
// Shared memory: k, q̂, W (64 × dk, rows padded by one float against bank
// conflicts), A and P (64 × 64), U (64 × 32), the slice of S (dk × 32), the
// inter-chunk outputs (64 × 32): about 165 KB at dk = 128 (Hopper allows 227 KB).
//
// The block's work is a sequence of phases separated by barriers, each a
// function of the thread index (chunk_block); the kernel runs them with
// __syncthreads between, gated_delta_chunked_host runs the same phases thread
// by thread on the host, so that a machine without a GPU checks the indexing.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cuda/device.hpp"
#include "core/error.hpp"
#include "model/cuda/kernels.hpp"

namespace cortiq::model::cuda {

namespace {

constexpr int kChunk = 64;  // tokens per chunk (as the CPU's kDeltaChunk)
constexpr int kCols = 32;   // state columns per block (one per lane)
constexpr int kWarps = 8;   // threads: kWarps × 32
constexpr int kThreads = kWarps * 32;
constexpr int kMaxDk = 128;
constexpr int kRowsI = kChunk / kWarps;  // chunk rows per thread in the row-parallel phases

// Offsets (in floats) of the shared arrays for key dimension dk.
struct Smem {
    int ld;  // padded row of k, q̂, W
    int k, q, w, a, p, u, s, o, gam, eg, kdec, beta, total;
    __host__ __device__ explicit Smem(int dk) : ld(dk + 1) {
        k = 0;
        q = k + kChunk * ld;
        w = q + kChunk * ld;
        a = w + kChunk * ld;
        p = a + kChunk * kChunk;
        u = p + kChunk * kChunk;
        s = u + kChunk * kCols;
        o = s + dk * kCols;
        gam = o + kChunk * kCols;
        eg = gam + kChunk;
        kdec = eg + kChunk;
        beta = kdec + kChunk;
        total = beta + kChunk;
    }
};

// What one block works on.
struct Block {
    DeltaRuleArgs r;
    float* state;  // the sequence's global state (batch 1), or null
    float* out;
    int64_t ld_o, h, kh, b, j0;  // value head, key head, sequence, first state column
    float scale;
    float* sh;  // shared memory (Smem's layout)
    Smem m;
};

// The chunk's k and q̂ rows, β, and γ (a serial prefix sum by thread 0, as
// the CPU sums).
__host__ __device__ void load_rows(const Block& B, int64_t row0, int n, int tid) {
    const DeltaRuleArgs& r = B.r;
    const int dk = static_cast<int>(r.dk);
    float* sh = B.sh;
    for (int idx = tid; idx < n * dk; idx += kThreads) {
        const int i = idx / dk, a = idx % dk;
        const int64_t off = (row0 + i) * r.ld_qk + B.kh * dk + a;
        sh[B.m.k + i * B.m.ld + a] = r.k[off];
        sh[B.m.q + i * B.m.ld + a] = r.q[off] * B.scale;
    }
    for (int i = tid; i < kChunk; i += kThreads)
        sh[B.m.beta + i] = i < n ? r.beta[(row0 + i) * r.v_heads + B.h] : 0.0f;
    if (tid == 0) {
        float acc = 0;
        for (int i = 0; i < kChunk; ++i) {
            if (i < n) acc += r.g[(row0 + i) * r.v_heads + B.h];
            sh[B.m.gam + i] = acc;
        }
    }
}

// e^γ, e^{γ_last − γ}; U = β v (zero past n rows and past dv).
__host__ __device__ void load_gates(const Block& B, int64_t row0, int n, int tid) {
    const DeltaRuleArgs& r = B.r;
    float* sh = B.sh;
    const float last = sh[B.m.gam + n - 1];
    for (int i = tid; i < kChunk; i += kThreads) {
        sh[B.m.eg + i] = i < n ? expf(sh[B.m.gam + i]) : 0.0f;
        sh[B.m.kdec + i] = i < n ? expf(last - sh[B.m.gam + i]) : 0.0f;
    }
    for (int idx = tid; idx < kChunk * kCols; idx += kThreads) {
        const int i = idx / kCols, c = idx % kCols;
        const int64_t j = B.j0 + c;
        sh[B.m.u + idx] =
            i < n && j < r.dv ? sh[B.m.beta + i] * r.v[(row0 + i) * r.ld_v + B.h * r.dv + j] : 0.0f;
    }
}

// W = e^γ β k (the right side of its forward substitution).
__host__ __device__ void load_w(const Block& B, int n, int tid) {
    const int dk = static_cast<int>(B.r.dk), ld = B.m.ld;
    float* sh = B.sh;
    for (int idx = tid; idx < n * dk; idx += kThreads) {
        const int i = idx / dk, a = idx % dk;
        sh[B.m.w + i * ld + a] = sh[B.m.eg + i] * sh[B.m.beta + i] * sh[B.m.k + i * ld + a];
    }
}

// A (strictly lower) and P (lower with the diagonal); lane = column j.
__host__ __device__ void key_products(const Block& B, int n, int tid) {
    const int lane = tid % 32, warp = tid / 32, dk = static_cast<int>(B.r.dk), ld = B.m.ld;
    float* sh = B.sh;
    const float *K = sh + B.m.k, *Q = sh + B.m.q;
    for (int ii = 0; ii < kRowsI; ++ii) {
        const int i = warp + kWarps * ii;
        for (int jj = 0; jj < kChunk / 32; ++jj) {
            const int j = lane + 32 * jj;
            float dkk = 0, dqk = 0;
            if (i < n && j <= i)
                for (int a = 0; a < dk; ++a) {
                    const float kj = K[j * ld + a];
                    dkk += K[i * ld + a] * kj;
                    dqk += Q[i * ld + a] * kj;
                }
            const float d = i < n && j <= i ? expf(sh[B.m.gam + i] - sh[B.m.gam + j]) : 0.0f;
            sh[B.m.a + i * kChunk + j] = j < i ? sh[B.m.beta + i] * dkk * d : 0.0f;
            sh[B.m.p + i * kChunk + j] = dqk * d;
        }
    }
}

// (I + A) X = X in place, one thread per column of [U | W].
__host__ __device__ void forward_substitution(const Block& B, int n, int tid) {
    const int dk = static_cast<int>(B.r.dk);
    float* sh = B.sh;
    const float* A = sh + B.m.a;
    for (int col = tid; col < kCols + dk; col += kThreads) {
        float* x = col < kCols ? sh + B.m.u + col : sh + B.m.w + (col - kCols);
        const int ld = col < kCols ? kCols : B.m.ld;
        for (int i = 1; i < n; ++i) {
            float acc = x[i * ld];
            for (int j = 0; j < i; ++j) acc -= A[i * kChunk + j] * x[j * ld];
            x[i * ld] = acc;
        }
    }
}

// V' = U − W S (in U) and the inter-chunk outputs e^γ q̂ S (in o); lane = column.
__host__ __device__ void state_reads(const Block& B, int n, int tid) {
    const int lane = tid % 32, warp = tid / 32, dk = static_cast<int>(B.r.dk), ld = B.m.ld;
    float* sh = B.sh;
    const float *W = sh + B.m.w, *Q = sh + B.m.q, *S = sh + B.m.s;
    for (int ii = 0; ii < kRowsI; ++ii) {
        const int i = warp + kWarps * ii;
        if (i >= n) continue;
        float ws = 0, qs = 0;
        for (int a = 0; a < dk; ++a) {
            const float s = S[a * kCols + lane];
            ws += W[i * ld + a] * s;
            qs += Q[i * ld + a] * s;
        }
        sh[B.m.o + i * kCols + lane] = sh[B.m.eg + i] * qs;
        sh[B.m.u + i * kCols + lane] -= ws;
    }
}

// o += P V' (written out); S ← e^{γ_last} S + Σ_j e^{γ_last − γ_j} k_j V'_jᵀ.
__host__ __device__ void outputs_and_state(const Block& B, int64_t row0, int n, int tid) {
    const int lane = tid % 32, warp = tid / 32, dk = static_cast<int>(B.r.dk), ld = B.m.ld;
    float* sh = B.sh;
    const float *U = sh + B.m.u, *K = sh + B.m.k;
    const int64_t j = B.j0 + lane;
    for (int ii = 0; ii < kRowsI; ++ii) {
        const int i = warp + kWarps * ii;
        if (i >= n) continue;
        float acc = sh[B.m.o + i * kCols + lane];
        for (int jj = 0; jj <= i; ++jj) acc += sh[B.m.p + i * kChunk + jj] * U[jj * kCols + lane];
        if (j < B.r.dv) B.out[(row0 + i) * B.ld_o + B.h * B.r.dv + j] = acc;
    }
    const float decay = expf(sh[B.m.gam + n - 1]);
    for (int a = warp; a < dk; a += kWarps) {
        float acc = 0;
        for (int jj = 0; jj < n; ++jj)
            acc += sh[B.m.kdec + jj] * K[jj * ld + a] * U[jj * kCols + lane];
        sh[B.m.s + a * kCols + lane] = decay * sh[B.m.s + a * kCols + lane] + acc;
    }
}

// The slice of S from the global state (or zeros), and back.
__host__ __device__ void state_in(const Block& B, int tid) {
    const int lane = tid % 32, warp = tid / 32;
    const int64_t j = B.j0 + lane;
    const float* S = B.state ? B.state + B.h * B.r.dk * B.r.dv : nullptr;
    for (int a = warp; a < B.r.dk; a += kWarps)
        B.sh[B.m.s + a * kCols + lane] = S && j < B.r.dv ? S[a * B.r.dv + j] : 0.0f;
}

__host__ __device__ void state_out(const Block& B, int tid) {
    const int lane = tid % 32, warp = tid / 32;
    const int64_t j = B.j0 + lane;
    if (!B.state || j >= B.r.dv) return;
    float* S = B.state + B.h * B.r.dk * B.r.dv;
    for (int a = warp; a < B.r.dk; a += kWarps) S[a * B.r.dv + j] = B.sh[B.m.s + a * kCols + lane];
}

// The block's phases in order; ex(f) runs f for every thread, then a barrier.
#pragma nv_exec_check_disable
template <class Exec>
__host__ __device__ void chunk_block(const Block& B, Exec ex) {
    ex([&](int tid) { state_in(B, tid); });
    for (int64_t t0 = 0; t0 < B.r.T; t0 += kChunk) {
        const int n = static_cast<int>(B.r.T - t0 < kChunk ? B.r.T - t0 : kChunk);
        const int64_t row0 = B.b * B.r.T + t0;
        ex([&](int tid) { load_rows(B, row0, n, tid); });
        ex([&](int tid) { load_gates(B, row0, n, tid); });
        ex([&](int tid) { load_w(B, n, tid); });
        ex([&](int tid) { key_products(B, n, tid); });
        ex([&](int tid) { forward_substitution(B, n, tid); });
        ex([&](int tid) { state_reads(B, n, tid); });
        ex([&](int tid) { outputs_and_state(B, row0, n, tid); });
    }
    ex([&](int tid) { state_out(B, tid); });
}

struct DeviceExec {
    template <class F>
    __device__ void operator()(F f) const {
        f(static_cast<int>(threadIdx.x));
        __syncthreads();
    }
};

struct HostExec {
    template <class F>
    void operator()(F f) const {
        for (int tid = 0; tid < kThreads; ++tid) f(tid);
    }
};

Block make_block(const DeltaRuleArgs& r, float* state, float* out, int64_t ld_o, int64_t bx,
                 int64_t h, int64_t b, float* sh) {
    return Block{r,
                 state,
                 out,
                 ld_o,
                 h,
                 h / (r.v_heads / r.k_heads),
                 b,
                 bx * kCols,
                 1.0f / std::sqrt(static_cast<float>(r.dk)),  // as the CPU
                 sh,
                 Smem(static_cast<int>(r.dk))};
}

__global__ void __launch_bounds__(kThreads)
    delta_chunk_kernel(DeltaRuleArgs r, float* state, float* out, int64_t ld_o, float scale) {
    extern __shared__ float sh[];
    const int64_t h = blockIdx.y;
    const Block B{r,
                  state,
                  out,
                  ld_o,
                  h,
                  h / (r.v_heads / r.k_heads),
                  blockIdx.z,
                  static_cast<int64_t>(blockIdx.x) * kCols,
                  scale,
                  sh,
                  Smem(static_cast<int>(r.dk))};
    chunk_block(B, DeviceExec{});
}

void check_args(const DeltaRuleArgs& r, const float* state) {
    CORTIQ_ASSERT(r.k_heads > 0 && r.v_heads % r.k_heads == 0 && r.dk > 0 && r.dv > 0,
                  "delta rule: {} key heads, {} value heads", r.k_heads, r.v_heads);
    CORTIQ_ASSERT(r.dk <= kMaxDk, "delta rule: key head dimension {} (at most {})", r.dk, kMaxDk);
    CORTIQ_ASSERT(!state || r.batch == 1, "a delta-rule state serves one sequence, not {}",
                  r.batch);
    CORTIQ_ASSERT(r.batch <= 65535 && r.v_heads <= 65535);
}

}  // namespace

void gated_delta_chunked(const DeltaRuleArgs& r, float* state, float* out, int64_t ld_o,
                         cudaStream_t stream) {
    check_args(r, state);
    if (r.batch == 0 || r.T == 0) return;
    const size_t smem = sizeof(float) * static_cast<size_t>(Smem(static_cast<int>(r.dk)).total);
    int device = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    CORTIQ_ASSERT(smem <= static_cast<size_t>(optin),
                  "delta rule: {} bytes of shared memory, {} allowed", smem, optin);
    CUDA_CHECK(cudaFuncSetAttribute(delta_chunk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
    const dim3 grid(static_cast<unsigned>((r.dv + kCols - 1) / kCols),
                    static_cast<unsigned>(r.v_heads), static_cast<unsigned>(r.batch));
    const float scale = 1.0f / std::sqrt(static_cast<float>(r.dk));  // as the CPU
    delta_chunk_kernel<<<grid, kThreads, smem, stream>>>(r, state, out, ld_o, scale);
    CUDA_LAUNCH_CHECK();
}

void gated_delta_chunked_host(const DeltaRuleArgs& r, float* state, float* out, int64_t ld_o) {
    check_args(r, state);
    std::vector<float> sh(static_cast<size_t>(Smem(static_cast<int>(r.dk)).total));
    for (int64_t b = 0; b < r.batch; ++b)
        for (int64_t h = 0; h < r.v_heads; ++h)
            for (int64_t bx = 0; bx < (r.dv + kCols - 1) / kCols; ++bx) {
                std::fill(sh.begin(), sh.end(), std::nanf(""));  // as uninitialised as it gets
                chunk_block(make_block(r, state, out, ld_o, bx, h, b, sh.data()), HostExec{});
            }
}

}  // namespace cortiq::model::cuda
