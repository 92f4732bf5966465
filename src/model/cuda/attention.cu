// Causal grouped-query attention with an optional sliding window, online
// softmax, nothing of size T × T stored (long contexts cost no memory).
// Two kernels:
//   - many query rows (prefill, scoring): one warp per (query row, head) and
//     chunks of 32 keys: lane t scores key j0 + t (a whole dot product per
//     lane, no shuffles per key), then every lane accumulates its own output
//     dimensions;
//   - a few query rows (decoding): a cluster of blocks of 4 warps per
//     (query row, head), one block per 32 visible keys up to 16 (fewer where
//     the (row, head) pairs already fill the GPU), the keys
//     dealt out to the cluster's warps four at a time; a warp reads each key
//     and value row whole (lane t holds the kDims dimensions t·kDims + c, one
//     8- or 16-byte load of float32 or fp16 values, so an fp16 row is read
//     in half the transactions of a float32 one), keeps
//     its own running max, sum and output, and the partial softmaxes are
//     merged (m = max_w m_w, l = Σ_w l_w e^{m_w − m}, out = Σ_w acc_w
//     e^{m_w − m} / l): a block's warps in its shared memory, then the
//     cluster's blocks by block 0 through distributed shared memory. The
//     first kernel gave a decoded token of a 32-layer, 32-head model 10 ms
//     of attention at 256 cached positions (32 warps in all, each reading 32
//     rows at a stride of a row per lane).
#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/cuda/device.hpp"
#include "core/error.hpp"
#include "model/cuda/kernels.hpp"
#include "model/cuda/knob.hpp"
#include "model/cuda/pdl.cuh"
#include "model/cuda/reduce.cuh"

namespace cortiq::model::cuda {

namespace {

// A cached key or value as float: the cache holds float32 or fp16.
__device__ __forceinline__ float kv_load(const float* p) {
    return __ldg(p);
}
__device__ __forceinline__ float kv_load(const __half* p) {
    return __half2float(__ldg(p));
}

// Two fp16 values packed in a 32-bit word (the low half first, as in memory).
__device__ __forceinline__ __half2 half2_of(uint32_t w) {
    return __halves2half2(__ushort_as_half(static_cast<unsigned short>(w & 0xffffu)),
                          __ushort_as_half(static_cast<unsigned short>(w >> 16)));
}

// Dimensions lane·N .. lane·N + N − 1 of a cached row as float, N = 2, 4 or
// 8: one vector load when the row's values are aligned to N (head_dim a
// multiple of N), else one value at a time; dimensions ≥ hd read as 0.
template <int N>
__device__ __forceinline__ void load_dims(const float* row, int lane, int hd, bool vec,
                                          float (&out)[N]) {
    const int d0 = lane * N;
    if (vec && d0 < hd) {
        if constexpr (N == 2) {
            const float2 a = __ldg(reinterpret_cast<const float2*>(row + d0));
            out[0] = a.x;
            out[1] = a.y;
        } else {
#pragma unroll
            for (int c = 0; c < N; c += 4) {
                const float4 a = __ldg(reinterpret_cast<const float4*>(row + d0 + c));
                out[c] = a.x;
                out[c + 1] = a.y;
                out[c + 2] = a.z;
                out[c + 3] = a.w;
            }
        }
        return;
    }
#pragma unroll
    for (int c = 0; c < N; ++c) out[c] = d0 + c < hd ? __ldg(row + d0 + c) : 0.0f;
}
// Halves d0 .. d0 + N − 1 of a row (aligned to N) as N / 2 words of two,
// in one 4-, 8- or 16-byte load.
template <int N>
__device__ __forceinline__ void load_half_words(const __half* row, int d0, uint32_t (&w)[N / 2]) {
    if constexpr (N == 2) {
        w[0] = __ldg(reinterpret_cast<const unsigned*>(row + d0));
    } else if constexpr (N == 4) {
        const uint2 x = __ldg(reinterpret_cast<const uint2*>(row + d0));
        w[0] = x.x;
        w[1] = x.y;
    } else {
        static_assert(N == 8);
        const uint4 x = __ldg(reinterpret_cast<const uint4*>(row + d0));
        w[0] = x.x;
        w[1] = x.y;
        w[2] = x.z;
        w[3] = x.w;
    }
}

template <int N>
__device__ __forceinline__ void load_dims(const __half* row, int lane, int hd, bool vec,
                                          float (&out)[N]) {
    const int d0 = lane * N;
    if (vec && d0 < hd) {
        uint32_t words[N / 2];
        load_half_words<N>(row, d0, words);
#pragma unroll
        for (int c = 0; c < N / 2; ++c) {
            const float2 f = __half22float2(half2_of(words[c]));
            out[2 * c] = f.x;
            out[2 * c + 1] = f.y;
        }
        return;
    }
#pragma unroll
    for (int c = 0; c < N; ++c) out[c] = d0 + c < hd ? __half2float(__ldg(row + d0 + c)) : 0.0f;
}

// The position of sequence b's first query row: pos[b] when the positions
// live on the device (a captured decode step), else pos0.
__device__ __forceinline__ int64_t first_position(const int32_t* pos, int64_t pos0, int64_t b) {
    return pos ? static_cast<int64_t>(pos[b]) : pos0;
}

constexpr int kWarps = 4;  // query rows per block, all of one head
constexpr int kMaxHeadDim = 256;
constexpr int kDimsPerLane = kMaxHeadDim / 32;

// q · k over d values; q in shared memory (already scaled by 1/sqrt(d)).
template <class KV>
__device__ __forceinline__ float dot(const float* q, const KV* k, int d) {
    float s = 0;
    if constexpr (!std::is_same_v<KV, float>) {
        if ((d & 7) == 0) {  // rows start at multiples of 8 halves: 16-byte loads
            const uint4* k8 = reinterpret_cast<const uint4*>(k);
            for (int i = 0; i < d / 8; ++i) {
                const uint4 w = __ldg(k8 + i);
                const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const float2 f = __half22float2(half2_of(words[c]));
                    s += q[8 * i + 2 * c] * f.x + q[8 * i + 2 * c + 1] * f.y;
                }
            }
        } else {
            for (int i = 0; i < d; ++i) s += q[i] * kv_load(k + i);
        }
    } else if ((d & 3) == 0) {  // rows start at multiples of 4 floats: 16-byte loads
        const float4* q4 = reinterpret_cast<const float4*>(q);
        const float4* k4 = reinterpret_cast<const float4*>(k);
        for (int i = 0; i < d / 4; ++i) {
            const float4 a = q4[i], b = __ldg(k4 + i);
            s += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
        }
    } else {
        for (int i = 0; i < d; ++i) s += q[i] * __ldg(k + i);
    }
    return s;
}

template <class KV>
__global__ void attention_kernel(const float* q, const KV* k, const KV* v, float* out, int64_t T,
                                 int64_t kv_rows, int heads, int kv_heads, int hd, int64_t pos0,
                                 const int32_t* pos, int64_t window, float scale) {
    pdl_start();
    extern __shared__ float4 smem4[];  // kWarps rows of hd floats (float4: 16-byte aligned)
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
    if (i >= T) return;  // whole warps leave; only warp-level syncs below
    const int h = blockIdx.y, g = h / (heads / kv_heads);
    const int64_t b = blockIdx.z;
    const int64_t q_dim = static_cast<int64_t>(heads) * hd;
    const int64_t kv_dim = static_cast<int64_t>(kv_heads) * hd;

    float* qs = reinterpret_cast<float*>(smem4) + warp * hd;
    const float* qrow = q + (b * T + i) * q_dim + static_cast<int64_t>(h) * hd;
    for (int d = lane; d < hd; d += 32) qs[d] = qrow[d] * scale;
    __syncwarp();

    const int64_t p = first_position(pos, pos0, b) + i;  // this row's position: keys lo..p
    const int64_t lo = window > 0 ? max(int64_t{0}, p - window + 1) : 0;
    const KV* kb = k + b * kv_rows * kv_dim + static_cast<int64_t>(g) * hd;
    const KV* vb = v + b * kv_rows * kv_dim + static_cast<int64_t>(g) * hd;

    float m = -INFINITY, l = 0;  // running max and Σ exp(s − m)
    float acc[kDimsPerLane];
#pragma unroll
    for (int c = 0; c < kDimsPerLane; ++c) acc[c] = 0;
    for (int64_t j0 = lo; j0 <= p; j0 += 32) {
        const int64_t j = j0 + lane;
        const float s = j <= p ? dot(qs, kb + j * kv_dim, hd) : -INFINITY;
        const float m_new = fmaxf(m, warp_max(s));  // finite: key j0 is visible
        const float corr = expf(m - m_new);         // 0 on the first chunk
        const float pj = j <= p ? expf(s - m_new) : 0.0f;
        l = l * corr + warp_sum(pj);
#pragma unroll
        for (int c = 0; c < kDimsPerLane; ++c) acc[c] *= corr;
        const int nk = static_cast<int>(min(int64_t{32}, p - j0 + 1));  // same in every lane
        for (int t = 0; t < nk; ++t) {
            const float pt = __shfl_sync(kFullMask, pj, t);
            const KV* vr = vb + (j0 + t) * kv_dim;
#pragma unroll
            for (int c = 0; c < kDimsPerLane; ++c) {
                const int d = lane + 32 * c;
                if (d < hd) acc[c] += pt * kv_load(vr + d);
            }
        }
        m = m_new;
    }
    const float inv = 1.0f / l;
    float* orow = out + (b * T + i) * q_dim + static_cast<int64_t>(h) * hd;
#pragma unroll
    for (int c = 0; c < kDimsPerLane; ++c) {
        const int d = lane + 32 * c;
        if (d < hd) orow[d] = acc[c] * inv;
    }
}

// Warps a block. Measured on an H100 (7B decode step, 1 bpw, ms a step at 1
// and 16 sequences, contexts 256 and 2048): 16 warps, 128 keys a block, at
// most 8 blocks 2.007 / 6.036 (256), 2.946 / 10.988 (2048); 4 warps, 32 keys,
// at most 16: 2.034 / 5.432, 2.653 / 10.370; 4, 64, 16: 2.050 / 5.505, 2.673 /
// 10.507; 8, 128, 16: 2.076 / 5.640, 2.849 / 10.578.
constexpr int kDecodeWarps = 4;
// Keys a warp takes at once (their loads in flight together). Eight measured
// slower on the H200 (attention of the 32-layer decode step, contexts 256 /
// 2048: 0.255 / 1.189 ms against 0.234 / 1.118 with four).
constexpr int kDecodeKeys = 4;
constexpr int kDecodeMaxRows = 4;
constexpr int kMaxSplits = 16;        // blocks of a cluster (above 8: a non-portable size)
constexpr int kDecodeBlockKeys = 32;  // visible keys a block (kDecodeWarps above)

// Benchmark knobs: visible keys per block (CORTIQ_ATTN_KEYS, default 32), the
// most blocks of a cluster (CORTIQ_ATTN_SPLITS, default 16) and the warps of
// a block (CORTIQ_ATTN_WARPS: 4, 8 or 16); measured above. With 16 warps
// (H200, attention ms a token at contexts 256 / 2048): 128 keys and 8 blocks
// 0.234 / 1.118; 64 and 8 0.343 / 1.121; 32 and 8 0.526 / 1.120; 128 and 16
// 0.237 / 1.401.
// One block's share of the keys as a partial softmax: m, l and the unscaled
// output acc (out = acc / l once every share is merged).
struct Partial {
    float m, l;
    float acc[kMaxHeadDim];
};

// A lane's dimensions of one cached row as loaded: kDims floats, or kDims
// fp16 values in kDims / 2 words (converted when used, so that twice as many
// fp16 rows as float32 ones are in flight in the same registers).
template <int kDims, class KV>
struct LaneRow {
    float f[kDims];
    __device__ __forceinline__ void load(const KV* row, int lane, int hd, bool vec) {
        load_dims<kDims>(row, lane, hd, vec, f);
    }
    __device__ __forceinline__ void clear() {
#pragma unroll
        for (int c = 0; c < kDims; ++c) f[c] = 0.0f;
    }
    __device__ __forceinline__ float at(int c) const {
        return f[c];
    }
};
template <int kDims>
struct LaneRow<kDims, __half> {
    uint32_t w[kDims / 2];
    __device__ __forceinline__ void load(const __half* row, int lane, int hd, bool vec) {
        const int d0 = lane * kDims;
        if (vec && d0 < hd) return load_half_words<kDims>(row, d0, w);
        float f[kDims];
        load_dims<kDims>(row, lane, hd, vec, f);
#pragma unroll
        for (int c = 0; c < kDims / 2; ++c) {
            const __half2 h = __floats2half2_rn(f[2 * c], f[2 * c + 1]);  // exact: fp16 values
            w[c] = *reinterpret_cast<const uint32_t*>(&h);
        }
    }
    __device__ __forceinline__ void clear() {
#pragma unroll
        for (int c = 0; c < kDims / 2; ++c) w[c] = 0u;
    }
    __device__ __forceinline__ float at(int c) const {
        const float2 f = __half22float2(half2_of(w[c / 2]));
        return c % 2 ? f.y : f.x;
    }
};

// Keys a warp takes at once: kDecodeKeys float32 rows, twice as many fp16
// ones (the same bytes in flight).
template <class KV>
constexpr int kDecodeKeysOf = std::is_same_v<KV, float> ? kDecodeKeys : 2 * kDecodeKeys;

// Warp w's keys are lo + K·(w + W·t) + u, u < K = kDecodeKeysOf<KV>, t = 0,
// 1, .., W the warps of the cluster; the warp keeps its running max m, sum l
// and output acc.
template <int kDims, class KV>
__device__ void attend_keys(const float (&qv)[kDims], const KV* kb, const KV* vb, int64_t kv_dim,
                            int64_t lo, int64_t p, int w, int W, int hd, bool vec, float& m,
                            float& l, float (&acc)[kDims]) {
    constexpr int K = kDecodeKeysOf<KV>;
    const int lane = threadIdx.x % 32;
    for (int64_t j0 = lo + int64_t{w} * K; j0 <= p; j0 += int64_t{W} * K) {
        LaneRow<kDims, KV> kr[K], vr[K];
#pragma unroll
        for (int u = 0; u < K; ++u) {
            if (j0 + u <= p) {  // warp-uniform
                kr[u].load(kb + (j0 + u) * kv_dim, lane, hd, vec);
                vr[u].load(vb + (j0 + u) * kv_dim, lane, hd, vec);
            } else {
                kr[u].clear();
                vr[u].clear();
            }
        }
        float s[K];
#pragma unroll
        for (int u = 0; u < K; ++u) {
            float part = 0.0f;
#pragma unroll
            for (int c = 0; c < kDims; ++c) part += qv[c] * kr[u].at(c);
            s[u] = j0 + u <= p ? warp_sum(part) : -INFINITY;  // warp-uniform branch
        }
        float m_new = m;
#pragma unroll
        for (int u = 0; u < K; ++u) m_new = fmaxf(m_new, s[u]);  // finite: key j0
        const float corr = expf(m - m_new);                      // 0 at first
        l *= corr;
#pragma unroll
        for (int c = 0; c < kDims; ++c) acc[c] *= corr;
#pragma unroll
        for (int u = 0; u < K; ++u) {
            const float pu = expf(s[u] - m_new);  // 0 past p
            l += pu;
#pragma unroll
            for (int c = 0; c < kDims; ++c) acc[c] += pu * vr[u].at(c);
        }
        m = m_new;
    }
}

// Merges n partials: m = max m_k, l = Σ l_k e^{m_k − m}, acc = Σ acc_k
// e^{m_k − m}, by the block's threads over the dimensions. A share that saw
// no key (m = −∞; a warp or a whole block past the last visible key, as in a
// captured step whose grid is sized for its size class) is skipped: its
// e^{m_k − m} would be NaN when every share is empty, and its acc is never
// written. With every share empty the merge is empty too (m = −∞, l = 0).
template <class Get>
__device__ void merge_partials(int n, int hd, Get&& get, Partial& out) {
    float mm = get(0).m;
    for (int k = 1; k < n; ++k) mm = fmaxf(mm, get(k).m);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float num = 0.0f, den = 0.0f;
        for (int k = 0; k < n; ++k) {
            const Partial& pk = get(k);
            if (pk.m == -INFINITY) continue;
            const float e = expf(pk.m - mm);
            num += pk.acc[d] * e;
            den += pk.l * e;
        }
        out.acc[d] = num;
        if (d == 0) out.l = den;
    }
    if (threadIdx.x == 0) out.m = mm;
}

// One cluster of `splits` blocks (blockIdx.x) per query row (blockIdx.z =
// b·T + i) and head (blockIdx.y); kDims: dimensions per lane, hd ≤
// 32·kDims. Each block merges its warps in its shared memory, then block 0
// merges the blocks' partials through the cluster's shared memory.
// kWarpsOf warps a block (kDecodeWarps unless a benchmark's knob says).
// With 16 warps a block was limited to one an SM at head_dim 128 (84
// registers); two (at most 64 registers, a few spilled) measured on the H200
// 0.289 against 0.234 ms of attention a token for 32 layers at context 256,
// 1.026 against 1.118 at 2048.
template <int kDims, class KV, int kWarpsOf = kDecodeWarps>
__global__ void __launch_bounds__(32 * kWarpsOf)
    attention_decode_kernel(const float* q, const KV* k, const KV* v, float* out, int64_t T,
                            int64_t kv_rows, int heads, int kv_heads, int hd, int64_t pos0,
                            const int32_t* pos, int64_t window, float scale) {
    __shared__ Partial warp_part[kWarpsOf], block_part, final_part;
    pdl_start();
    namespace cg = cooperative_groups;
    const cg::cluster_group cluster = cg::this_cluster();
    const int splits = static_cast<int>(cluster.num_blocks());
    const int rank = static_cast<int>(cluster.block_rank());
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t row = blockIdx.z, b = row / T, i = row % T;
    const int h = blockIdx.y, g = h / (heads / kv_heads);
    const int64_t q_dim = static_cast<int64_t>(heads) * hd;
    const int64_t kv_dim = static_cast<int64_t>(kv_heads) * hd;
    const float* qrow = q + row * q_dim + static_cast<int64_t>(h) * hd;
    const bool vec = hd % kDims == 0;  // every row aligned to kDims values
    float qv[kDims], acc[kDims];
#pragma unroll
    for (int c = 0; c < kDims; ++c) {
        const int d = lane * kDims + c;
        qv[c] = d < hd ? qrow[d] * scale : 0.0f;
        acc[c] = 0.0f;
    }
    const int64_t p = first_position(pos, pos0, b) + i;  // keys lo..p are visible
    const int64_t lo = window > 0 ? max(int64_t{0}, p - window + 1) : 0;
    float m = -INFINITY, l = 0.0f;
    attend_keys<kDims, KV>(qv, k + b * kv_rows * kv_dim + static_cast<int64_t>(g) * hd,
                           v + b * kv_rows * kv_dim + static_cast<int64_t>(g) * hd, kv_dim, lo, p,
                           rank * kWarpsOf + warp, splits * kWarpsOf, hd, vec, m, l, acc);
    Partial& mine = warp_part[warp];
    if (lane == 0) {
        mine.m = m;
        mine.l = l;
    }
#pragma unroll
    for (int c = 0; c < kDims; ++c) {
        const int d = lane * kDims + c;
        if (d < hd) mine.acc[d] = acc[c];
    }
    __syncthreads();
    merge_partials(
        kWarpsOf, hd, [&](int w) -> const Partial& { return warp_part[w]; }, block_part);
    cluster.sync();  // every block's partial written
    if (rank == 0) {
        // rank 0's own partial first, then the others in rank order
        merge_partials(
            splits, hd,
            [&](int r) -> const Partial& { return *cluster.map_shared_rank(&block_part, r); },
            final_part);
        __syncthreads();
        for (int d = threadIdx.x; d < hd; d += blockDim.x)
            out[row * q_dim + static_cast<int64_t>(h) * hd + d] = final_part.acc[d] / final_part.l;
    }
    cluster.sync();  // the others' shared memory stays until block 0 has read it
}

}  // namespace

// The splits fill the GPU when few (row, head) pairs would leave it idle: at
// most kDecodeBlocks / pairs blocks a pair. Each block's partial costs a
// merge and two cluster barriers, so where the pairs alone fill the GPU
// (16 sequences × 32 heads) one block a pair reads its keys faster.
constexpr int kDecodeBlocks = 256;

int attention_decode_splits(int64_t keys, int64_t window, int64_t pairs) {
    static const int per_block = knob("CORTIQ_ATTN_KEYS", kDecodeBlockKeys, 16, 4096);
    static const int most = knob("CORTIQ_ATTN_SPLITS", kMaxSplits, 1, kMaxSplits);
    static const int blocks = knob("CORTIQ_ATTN_BLOCKS", kDecodeBlocks, 1, 1 << 30);
    const int64_t seen = window > 0 ? std::min(window, keys) : keys;
    const int64_t fill = std::max<int64_t>(1, blocks / std::max<int64_t>(pairs, 1));
    return static_cast<int>(
        std::clamp<int64_t>((seen + per_block - 1) / per_block, 1, std::min<int64_t>(most, fill)));
}

namespace {

template <class KV>
void launch_attention(const AttentionArgs& a, const KV* k, const KV* v, cudaStream_t stream) {
    const int64_t T = a.T, head_dim = a.head_dim;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
    const int heads = static_cast<int>(a.heads), kv_heads = static_cast<int>(a.kv_heads);
    if (T <= kDecodeMaxRows && a.batch * T <= 65535) {
        // a block per 128 visible keys, at most 8 (one cluster); with the
        // positions on the device, as many as the caller's bound needs
        const int splits = attention_decode_splits(a.max_keys > 0 ? a.max_keys : a.pos0 + T,
                                                   a.window, a.batch * T * a.heads);
        const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(a.heads),
                        static_cast<unsigned>(a.batch * T));
        // warps a block (a benchmark's knob, CORTIQ_ATTN_WARPS: 4, 8 or 16)
        static const int warps = knob("CORTIQ_ATTN_WARPS", kDecodeWarps, 4, 16);
        auto pick = [&]<int W>() {
            return head_dim <= 64    ? attention_decode_kernel<2, KV, W>
                   : head_dim <= 128 ? attention_decode_kernel<4, KV, W>
                                     : attention_decode_kernel<8, KV, W>;
        };
        auto* kernel = warps >= 16  ? pick.template operator()<16>()
                       : warps >= 8 ? pick.template operator()<8>()
                                    : pick.template operator()<4>();
        if (splits > 8)
            CUDA_CHECK(
                cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = grid;
        cfg.blockDim = dim3(32 * (warps >= 16 ? 16 : warps >= 8 ? 8 : 4));
        cfg.stream = stream;
        cudaLaunchAttribute attr[2] = {};
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = pdl_allowed() ? 1 : 0;
        attr[1].id = cudaLaunchAttributeClusterDimension;
        attr[1].val.clusterDim.x = static_cast<unsigned>(splits);
        attr[1].val.clusterDim.y = 1;
        attr[1].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 2;
        CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, a.q, k, v, a.out, T, a.kv_rows, heads, kv_heads,
                                      static_cast<int>(head_dim), a.pos0, a.pos, a.window, scale));
        return;
    }
    const dim3 grid(static_cast<unsigned>((T + kWarps - 1) / kWarps),
                    static_cast<unsigned>(a.heads), static_cast<unsigned>(a.batch));
    const size_t smem = sizeof(float) * kWarps * static_cast<size_t>(head_dim);
    launch_pdl(attention_kernel<KV>, grid, 32 * kWarps, smem, stream, a.q, k, v, a.out, T,
               a.kv_rows, heads, kv_heads, static_cast<int>(head_dim), a.pos0, a.pos, a.window,
               scale);
}

}  // namespace

void attention(const AttentionArgs& a, cudaStream_t stream) {
    CORTIQ_ASSERT(a.head_dim > 0 && a.head_dim <= kMaxHeadDim, "head_dim {} (at most {})",
                  a.head_dim, kMaxHeadDim);
    CORTIQ_ASSERT(a.kv_heads > 0 && a.heads % a.kv_heads == 0 && a.batch <= 65535 &&
                  a.heads <= 65535);
    CORTIQ_ASSERT(a.pos || a.kv_rows >= a.pos0 + a.T, "{} key rows for positions up to {}",
                  a.kv_rows, a.pos0 + a.T);
    CORTIQ_ASSERT((a.k_f16 != nullptr) == (a.v_f16 != nullptr) &&
                  (a.k_f16 != nullptr) != (a.k != nullptr));
    if (a.batch == 0 || a.T == 0) return;
    if (a.k_f16)
        launch_attention(a, a.k_f16, a.v_f16, stream);
    else
        launch_attention(a, a.k, a.v, stream);
}

void attention(const float* q, const float* k, const float* v, float* out, int64_t batch, int64_t T,
               int64_t kv_rows, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t pos0,
               int64_t window, cudaStream_t stream) {
    AttentionArgs a;
    a.q = q;
    a.k = k;
    a.v = v;
    a.out = out;
    a.batch = batch;
    a.T = T;
    a.kv_rows = kv_rows;
    a.heads = heads;
    a.kv_heads = kv_heads;
    a.head_dim = head_dim;
    a.pos0 = pos0;
    a.window = window;
    attention(a, stream);
}

}  // namespace cortiq::model::cuda
