// The gated delta rule's forward and backward on the device, the twins of
// tune::delta_rule_forward / delta_rule_backward (tune/delta_grad_ops.hpp has
// the equations). Given k, q, g, β, the columns j of a head's state S
// (dk × dv) evolve independently:
//   S[:, j] ← e^g S[:, j] + k β (v_j − e^g S[:, j] · k)
// so one block runs one tile of kCols columns of one (window, value head),
// its tile of S in registers for the whole window.
//
// Threads: lane = 8·c + rg of warp w holds column j = tile·kCols + 4w + c and
// the rows a = 8i + rg (i < kRows) of it. A sum over the rows of a column
// (Sᵀk, Sᵀq̂, dSᵀk) is a sum over the 8 lanes of a group (three shuffles, no
// barrier); a sum over the columns (dq̂ = S do, dk, dβ, dg) is folded over the
// 4 columns of a warp by shuffles, over the warps in shared memory, and over
// the tiles by a second kernel (delta_reduce_*), in a fixed order. Eight lanes
// a column (16 rows each for dk = 128) rather than four halve the serial work
// of a step and double the blocks: one window of Qwen3.5-0.8B's 16 heads of
// 128 fills 128 blocks, not 64.
//
// The tokens' k, q̂, v (and do) are staged in shared memory kStage steps at a
// time. The backward walks the chunks last to first: it recomputes the
// chunk's states from the forward's checkpoint into `steps` (each thread its
// own values, read back by itself), then walks the chunk's steps backwards
// with dS in registers.
#include <cmath>

#include "core/error.hpp"
#include "model/cuda/reduce.cuh"
#include "tune/cuda/delta_grad_ops.hpp"
#include "tune/cuda/grad_ops.hpp"

namespace cortiq::tune::cuda {

using model::cuda::kFullMask;
using model::cuda::warp_sum;

namespace {

constexpr int kGroup = 8;                     // lanes (row groups) per column
constexpr int kColsPerWarp = 32 / kGroup;     // 4
constexpr int kWarps = 4;                     //
constexpr int kCols = kColsPerWarp * kWarps;  // state columns per block
constexpr int kThreads = 32 * kWarps;
constexpr int kStage = 16;   // steps staged in shared memory at a time
constexpr int kMaxDk = 128;  // key head dimension at most (kRows = 16)

// kStage steps of the block's inputs: k and q̂ = q/√dk of the key head (zero
// past dk), v and do of the block's columns (zero past dv), g, β.
struct Stage {
    float k[kStage][kMaxDk], q[kStage][kMaxDk];
    float v[kStage][kCols], dout[kStage][kCols];
    float g[kStage], beta[kStage];
};

// Where a thread sits: its column j (in the tile: cc) and row group rg.
struct Place {
    int lane, warp, rg, cc, tid;
    int64_t b, h, kh, j0, j;
    bool col;  // j < dv
};

__device__ Place place(const DeltaRule& r) {
    Place p;
    p.tid = threadIdx.x;
    p.lane = p.tid % 32;
    p.warp = p.tid / 32;
    p.rg = p.lane % kGroup;
    p.cc = p.warp * kColsPerWarp + p.lane / kGroup;
    p.h = blockIdx.y;
    p.b = blockIdx.z;
    p.kh = p.h / (r.v_heads / r.k_heads);
    p.j0 = static_cast<int64_t>(blockIdx.x) * kCols;
    p.j = p.j0 + p.cc;
    p.col = p.j < r.dv;
    return p;
}

// Σ over the kGroup lanes of a column's group; every lane of it gets the same sum.
__device__ __forceinline__ float group_sum(float x) {
#pragma unroll
    for (int mask = 1; mask < kGroup; mask *= 2) x += __shfl_xor_sync(kFullMask, x, mask);
    return x;
}

// Loads steps t .. t + m − 1 of the block's window (rows b·L + t …) into st;
// dout may be null (the forward). The caller brackets it with barriers.
__device__ void load_stage(Stage& st, const DeltaRule& r, const Place& p, const float* dout,
                           int64_t ld_o, int64_t t, int m, int dk_pad, float scale) {
    const int64_t row0 = p.b * r.L + t;
    for (int e = p.tid; e < m * dk_pad; e += kThreads) {
        const int s = e / dk_pad, a = e % dk_pad;
        const int64_t off = (row0 + s) * r.ld_qk + p.kh * r.dk + a;
        st.k[s][a] = a < r.dk ? r.k[off] : 0.0f;
        st.q[s][a] = a < r.dk ? r.q[off] * scale : 0.0f;  // q̂ as the CPU: q · (1/√dk)
    }
    for (int e = p.tid; e < m * kCols; e += kThreads) {
        const int s = e / kCols, c = e % kCols;
        const int64_t row = row0 + s, j = p.j0 + c;
        st.v[s][c] = j < r.dv ? r.v[row * r.ld_v + p.h * r.dv + j] : 0.0f;
        if (dout) st.dout[s][c] = j < r.dv ? dout[row * ld_o + p.h * r.dv + j] : 0.0f;
    }
    if (p.tid < m) {
        const int64_t gi = (row0 + p.tid) * r.v_heads + p.h;
        st.g[p.tid] = r.g[gi];
        st.beta[p.tid] = r.beta[gi];
    }
}

// This thread's rows of its column of a dk × dv state (S: the head's).
template <int kRows>
__device__ void load_state(const float* S, const DeltaRule& r, const Place& p, float (&s)[kRows]) {
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
        const int64_t a = i * kGroup + p.rg;
        s[i] = p.col && a < r.dk ? S[a * r.dv + p.j] : 0.0f;
    }
}

template <int kRows>
__device__ void save_state(float* S, const DeltaRule& r, const Place& p, const float (&s)[kRows]) {
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
        const int64_t a = i * kGroup + p.rg;
        if (p.col && a < r.dk) S[a * r.dv + p.j] = s[i];
    }
}

// One forward step of the column: δ = β (v − e^g Sᵀk), S ← e^g S + k δ;
// returns this thread's share of Sᵀq̂ (of the new S) when want_o, else 0.
template <int kRows>
__device__ float forward_step(const Stage& st, int s, const Place& p, float (&S)[kRows],
                              bool want_o) {
    const float decay = expf(st.g[s]), beta = st.beta[s];
    float kv = 0;
#pragma unroll
    for (int i = 0; i < kRows; ++i) kv += S[i] * st.k[s][i * kGroup + p.rg];
    kv = group_sum(kv);
    const float delta = beta * (st.v[s][p.cc] - decay * kv);
    float o = 0;
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
        const int a = i * kGroup + p.rg;
        S[i] = decay * S[i] + st.k[s][a] * delta;
        if (want_o) o += st.q[s][a] * S[i];
    }
    return o;
}

// out (rows × v_heads·dv, stride ld_o) and the checkpoints, one block per
// (column tile, value head, window).
template <int kRows>
__global__ void __launch_bounds__(kThreads)
    delta_forward_kernel(DeltaRule r, int64_t chunk, int64_t nch, float scale, float* out,
                         int64_t ld_o, float* states) {
    __shared__ Stage st;
    const Place p = place(r);
    const int64_t H = r.v_heads, sz = r.dk * r.dv;
    float S[kRows] = {};
    int64_t next_ckpt = 0;
    for (int64_t t0 = 0; t0 < r.L; t0 += kStage) {
        const int m = static_cast<int>(r.L - t0 < kStage ? r.L - t0 : kStage);
        __syncthreads();  // the previous stage read
        load_stage(st, r, p, nullptr, 0, t0, m, kRows * kGroup, scale);
        __syncthreads();
        for (int s = 0; s < m; ++s) {
            const int64_t t = t0 + s;
            if (t == next_ckpt) {  // the state at the start of chunk t / chunk
                save_state(states + ((p.b * nch + t / chunk) * H + p.h) * sz, r, p, S);
                next_ckpt += chunk;
            }
            const float o = group_sum(forward_step(st, s, p, S, true));
            if (p.rg == 0 && p.col) out[(p.b * r.L + t) * ld_o + p.h * r.dv + p.j] = o;
        }
    }
}

// v[0, h) += the partner's other half: lanes with `upper` keep v[h, 2h),
// the others v[0, h), each moved to v[0, h) and summed with the partner's
// (lane ^ mask) copy of it.
template <int kHalf, int kRows>
__device__ __forceinline__ void fold(float (&v)[kRows], int mask, bool upper) {
#pragma unroll
    for (int m = 0; m < kHalf; ++m) {
        const float send = upper ? v[m] : v[m + kHalf];
        const float keep = upper ? v[m + kHalf] : v[m];
        v[m] = keep + __shfl_xor_sync(kFullMask, send, mask);
    }
}

// Sums v over the kColsPerWarp columns of the warp (lanes differing in the
// bits above the row group's): after it, v[m] for m < kRows / kColsPerWarp
// holds the sum for i = c·kRows/kColsPerWarp + m, c = lane / kGroup.
template <int kRows>
__device__ __forceinline__ void fold_columns(float (&v)[kRows], int lane) {
    static_assert(kGroup == 8, "the folds below are those of 4 columns a warp");
    fold<kRows / 2>(v, 16, lane & 16);
    fold<kRows / 4>(v, 8, lane & 8);
}

// Shared memory of the backward's column sums, two copies (odd and even
// steps) so one barrier per step suffices: dq̂ and dk shares per warp, and
// dβ, dg per warp.
struct ColumnSums {
    float vec[2][kWarps][2][kMaxDk];
    float scalar[2][kWarps][2];
};

// The block's share of dq̂, dk (vq, vk: this warp's, folded by fold_columns),
// dβ, dg (this thread's) of one step, summed over its columns into part
// (2 dk + 2 values).
template <int kRows>
__device__ void sum_columns(ColumnSums& cs, int par, const Place& p, int64_t dk,
                            const float (&vq)[kRows], const float (&vk)[kRows], float dbeta,
                            float dg, float* part) {
    dbeta = warp_sum(dbeta);
    dg = warp_sum(dg);
    constexpr int kKept = kRows / kColsPerWarp;
#pragma unroll
    for (int m = 0; m < kKept; ++m) {
        const int a = ((p.lane / kGroup) * kKept + m) * kGroup + p.rg;
        cs.vec[par][p.warp][0][a] = vq[m];
        cs.vec[par][p.warp][1][a] = vk[m];
    }
    if (p.lane == 0) {
        cs.scalar[par][p.warp][0] = dbeta;
        cs.scalar[par][p.warp][1] = dg;
    }
    __syncthreads();
    const int64_t n = 2 * dk + 2;
    for (int64_t e = p.tid; e < n; e += kThreads) {
        float acc = 0;
#pragma unroll
        for (int w = 0; w < kWarps; ++w)
            acc += e < 2 * dk ? cs.vec[par][w][e / dk][e % dk] : cs.scalar[par][w][e - 2 * dk];
        part[e] = acc;
    }
}

// One backward step (the header's equations) at staged step s, row `row`;
// prev: this thread's rows of the state before the step.
template <int kRows>
__device__ void backward_step(const Stage& st, int s, const Place& p, const DeltaRule& r,
                              int64_t row, const float (&prev)[kRows], float (&dS)[kRows],
                              ColumnSums& cs, int par, float* dv, float* part) {
    const float decay = expf(st.g[s]), beta = st.beta[s];
    const float* k = st.k[s];
    const float* qh = st.q[s];
    const float d_o = st.dout[s][p.cc];
    float P[kRows];  // P = e^g S_prev
#pragma unroll
    for (int i = 0; i < kRows; ++i) P[i] = decay * prev[i];
    float kv = 0;
#pragma unroll
    for (int i = 0; i < kRows; ++i) kv += P[i] * k[i * kGroup + p.rg];
    const float u = st.v[s][p.cc] - group_sum(kv), delta = beta * u;  // δ = β (v − Pᵀk)
    // o = S_tᵀ q̂: dS += q̂ do, dq̂ += S_t do with S_t = P + k δ
    float vq[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
        const int a = i * kGroup + p.rg;
        vq[i] = (P[i] + k[a] * delta) * d_o;
        dS[i] += qh[a] * d_o;
    }
    fold_columns(vq, p.lane);  // now, so that its registers are free for vk
    float dd = 0;              // dδ = dSᵀ k
#pragma unroll
    for (int i = 0; i < kRows; ++i) dd += dS[i] * k[i * kGroup + p.rg];
    dd = group_sum(dd);
    if (p.rg == 0 && p.col) dv[row * r.ld_v + p.h * r.dv + p.j] = beta * dd;  // dv = β dδ
    const float dbeta = p.rg == 0 ? dd * u : 0.0f;                            // dβ = dδ · u
    // dk += dS δ − β P dδ;  dP = dS − β k dδ;  dg = Σ dP ∘ P;  dS ← e^g dP
    float vk[kRows], dg = 0;
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
        vk[i] = dS[i] * delta - beta * P[i] * dd;
        const float dP = dS[i] - beta * k[i * kGroup + p.rg] * dd;
        dg += dP * P[i];
        dS[i] = decay * dP;
    }
    fold_columns(vk, p.lane);
    sum_columns(cs, par, p, r.dk, vq, vk, dbeta, dg, part);
}

// This thread's rows of the state before step `step` of the chunk (`steps`:
// slot step·kRows·kThreads + i·kThreads + tid, written by recompute_chunk).
template <int kRows>
__device__ __forceinline__ void load_slot(const float* steps, int64_t step, int tid,
                                          float (&s)[kRows]) {
    const float* slot = steps + step * kRows * kThreads + tid;
#pragma unroll
    for (int i = 0; i < kRows; ++i) s[i] = slot[i * kThreads];
}

// Recomputes the states before steps t0 .. t0 + n − 1 from the chunk's
// checkpoint into `steps` (slot s·kRows·kThreads + i·kThreads + tid).
template <int kRows>
__device__ void recompute_chunk(Stage& st, const DeltaRule& r, const Place& p, const float* ckpt,
                                int64_t t0, int64_t n, float scale, float* steps) {
    float S[kRows];
    load_state(ckpt, r, p, S);
    for (int64_t ts = t0; ts < t0 + n; ts += kStage) {
        const int m = static_cast<int>(t0 + n - ts < kStage ? t0 + n - ts : kStage);
        __syncthreads();
        load_stage(st, r, p, nullptr, 0, ts, m, kRows * kGroup, scale);
        __syncthreads();
        for (int s = 0; s < m; ++s) {
            float* slot = steps + (ts - t0 + s) * kRows * kThreads + p.tid;
#pragma unroll
            for (int i = 0; i < kRows; ++i) slot[i * kThreads] = S[i];
            forward_step(st, s, p, S, false);
        }
    }
}

// dv and the tiles' partials of dq̂, dk, dβ, dg; one block per (column tile,
// value head, window) as the forward. part: tiles × rows × v_heads × (2 dk + 2).
template <int kRows>
__global__ void __launch_bounds__(kThreads)
    delta_backward_kernel(DeltaRule r, int64_t chunk, int64_t nch, float scale, const float* states,
                          const float* dout, int64_t ld_o, float* dv, float* steps, float* part) {
    __shared__ Stage st;
    __shared__ ColumnSums cs;
    const Place p = place(r);
    const int64_t H = r.v_heads, rows = r.windows * r.L, tiles = gridDim.x, pn = 2 * r.dk + 2;
    float* my_steps = steps + ((p.b * H + p.h) * tiles + blockIdx.x) * chunk * kRows *
                                  static_cast<int64_t>(kThreads);
    float* my_part = part + static_cast<int64_t>(blockIdx.x) * rows * H * pn;
    float dS[kRows] = {}, prev[kRows], next[kRows] = {};
    int par = 0;
    for (int64_t c = nch - 1; c >= 0; --c) {
        const int64_t t0 = c * chunk, n = r.L - t0 < chunk ? r.L - t0 : chunk;
        recompute_chunk<kRows>(st, r, p, states + ((p.b * nch + c) * H + p.h) * r.dk * r.dv, t0, n,
                               scale, my_steps);
        load_slot(my_steps, n - 1, p.tid, prev);
        for (int64_t ts = t0 + (n - 1) / kStage * kStage; ts >= t0; ts -= kStage) {
            const int m = static_cast<int>(t0 + n - ts < kStage ? t0 + n - ts : kStage);
            __syncthreads();
            load_stage(st, r, p, dout, ld_o, ts, m, kRows * kGroup, scale);
            __syncthreads();
            for (int s = m - 1; s >= 0; --s) {
                const int64_t row = p.b * r.L + ts + s;
                // the next (earlier) step's state, in flight during this step
                if (ts + s > t0) load_slot(my_steps, ts + s - t0 - 1, p.tid, next);
                backward_step(st, s, p, r, row, prev, dS, cs, par, dv,
                              my_part + (row * H + p.h) * pn);
                par ^= 1;
#pragma unroll
                for (int i = 0; i < kRows; ++i) prev[i] = next[i];
            }
        }
    }
}

// dq[row, kh·dk + a] = scale · Σ_{h of kh} Σ_tiles dq̂ share; dk likewise
// without the scale; one thread per (row, key head, a ∈ [0, 2 dk)).
__global__ void delta_reduce_qk_kernel(const float* part, int64_t tiles, int64_t rows, int64_t H,
                                       int64_t k_heads, int64_t dk, float scale, float* dq,
                                       float* dkk, int64_t ld_qk) {
    const int64_t group = H / k_heads, pn = 2 * dk + 2, total = rows * k_heads * 2 * dk;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t e = i % (2 * dk), kh = (i / (2 * dk)) % k_heads, row = i / (2 * dk * k_heads);
        float acc = 0;
        for (int64_t h = kh * group; h < (kh + 1) * group; ++h)
            for (int64_t t = 0; t < tiles; ++t) acc += part[((t * rows + row) * H + h) * pn + e];
        const int64_t a = e % dk;
        if (e < dk)
            dq[row * ld_qk + kh * dk + a] = scale * acc;
        else
            dkk[row * ld_qk + kh * dk + a] = acc;
    }
}

// dβ, dg (rows × v_heads): the tiles' shares summed.
__global__ void delta_reduce_gates_kernel(const float* part, int64_t tiles, int64_t rows, int64_t H,
                                          int64_t dk, float* dg, float* dbeta) {
    const int64_t pn = 2 * dk + 2, total = rows * H;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        float b = 0, g = 0;
        for (int64_t t = 0; t < tiles; ++t) {
            const float* q = part + (t * rows * H + i) * pn + 2 * dk;
            b += q[0];
            g += q[1];
        }
        dbeta[i] = b;
        dg[i] = g;
    }
}

unsigned blocks_for(int64_t n) {
    const int64_t b = (n + 255) / 256;
    return static_cast<unsigned>(b < 65535 * 16 ? b : 65535 * 16);
}

// Rows of S per thread for the key head dimension: dk ≤ kGroup · kRows.
int rows_per_thread(int64_t dk) {
    return dk <= 32 ? 4 : dk <= 64 ? 8 : 16;
}

void check(const DeltaRule& r, int64_t chunk) {
    CORTIQ_ASSERT(r.k_heads > 0 && r.v_heads % r.k_heads == 0 && r.dk > 0 && r.dv > 0,
                  "delta rule: {} key heads, {} value heads", r.k_heads, r.v_heads);
    CORTIQ_ASSERT(r.dk <= kMaxDk, "delta rule: key head dimension {} (at most {})", r.dk, kMaxDk);
    CORTIQ_ASSERT(chunk > 0 && r.L >= 0 && r.windows >= 0, "delta rule: chunk {}, L {}", chunk,
                  r.L);
    CORTIQ_ASSERT(r.v_heads <= 65535 && r.windows <= 65535, "delta rule: {} heads, {} windows",
                  r.v_heads, r.windows);
}

dim3 grid_of(const DeltaRule& r) {
    return dim3(static_cast<unsigned>((r.dv + kCols - 1) / kCols), static_cast<unsigned>(r.v_heads),
                static_cast<unsigned>(r.windows));
}

// 1/√dk in float, as the CPU's float path computes it.
float scale_of(const DeltaRule& r) {
    return 1.0f / std::sqrt(static_cast<float>(r.dk));
}

}  // namespace

int64_t delta_rule_states_size(const DeltaRule& r, int64_t chunk) {
    return r.windows * ((r.L + chunk - 1) / chunk) * r.v_heads * r.dk * r.dv;
}

void delta_rule_forward(const Gpu& g, const DeltaRule& r, int64_t chunk, float* out, int64_t ld_o,
                        DVec& states) {
    check(r, chunk);
    ensure(states, delta_rule_states_size(r, chunk), g.stream());
    if (r.windows == 0 || r.L == 0) return;
    const int64_t nch = (r.L + chunk - 1) / chunk;
    const float scale = scale_of(r);
    const dim3 grid = grid_of(r);
    switch (rows_per_thread(r.dk)) {
        case 4:
            delta_forward_kernel<4>
                <<<grid, kThreads, 0, g.stream()>>>(r, chunk, nch, scale, out, ld_o, states.get());
            break;
        case 8:
            delta_forward_kernel<8>
                <<<grid, kThreads, 0, g.stream()>>>(r, chunk, nch, scale, out, ld_o, states.get());
            break;
        default:
            delta_forward_kernel<16>
                <<<grid, kThreads, 0, g.stream()>>>(r, chunk, nch, scale, out, ld_o, states.get());
    }
    CUDA_LAUNCH_CHECK();
}

void delta_rule_backward(const Gpu& g, const DeltaRule& r, int64_t chunk, const DVec& states,
                         const float* dout, int64_t ld_o, float* dq, float* dk, float* dv,
                         float* dg, float* dbeta, DeltaRuleScratch& scratch) {
    check(r, chunk);
    CORTIQ_ASSERT(states.size() == delta_rule_states_size(r, chunk),
                  "delta rule backward: {} checkpoint values for chunk {}", states.size(), chunk);
    if (r.windows == 0 || r.L == 0) return;
    const int64_t nch = (r.L + chunk - 1) / chunk, rows = r.windows * r.L;
    const int kRows = rows_per_thread(r.dk);
    const dim3 grid = grid_of(r);
    const int64_t tiles = grid.x;
    const cudaStream_t st = g.stream();
    ensure(scratch.steps, r.windows * r.v_heads * tiles * chunk * kRows * kThreads, st);
    ensure(scratch.partials, tiles * rows * r.v_heads * (2 * r.dk + 2), st);
    const float scale = scale_of(r);
    float *steps = scratch.steps.get(), *part = scratch.partials.get();
    switch (kRows) {
        case 4:
            delta_backward_kernel<4><<<grid, kThreads, 0, st>>>(r, chunk, nch, scale, states.get(),
                                                                dout, ld_o, dv, steps, part);
            break;
        case 8:
            delta_backward_kernel<8><<<grid, kThreads, 0, st>>>(r, chunk, nch, scale, states.get(),
                                                                dout, ld_o, dv, steps, part);
            break;
        default:
            delta_backward_kernel<16><<<grid, kThreads, 0, st>>>(r, chunk, nch, scale, states.get(),
                                                                 dout, ld_o, dv, steps, part);
    }
    CUDA_LAUNCH_CHECK();
    delta_reduce_qk_kernel<<<blocks_for(rows * r.k_heads * 2 * r.dk), 256, 0, st>>>(
        part, tiles, rows, r.v_heads, r.k_heads, r.dk, scale, dq, dk, r.ld_qk);
    CUDA_LAUNCH_CHECK();
    delta_reduce_gates_kernel<<<blocks_for(rows * r.v_heads), 256, 0, st>>>(
        part, tiles, rows, r.v_heads, r.dk, dg, dbeta);
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::tune::cuda
