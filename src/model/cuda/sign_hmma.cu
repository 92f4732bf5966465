// Sign products on the fp16 tensor cores (sign_hmma.hpp). A warp owns 16
// rows of one product and a share of its chunks (split: 1–8 warps per 16
// rows, as sign_mma); a block of 8 warps owns 8 / split tiles of 16 rows and
// every row of inputs (up to 16: one or two groups of 8, the mma's n). Per
// chunk of 512 inputs a lane loads 16 bytes of sign row g and of row g + 8
// (g = lane / 4, the chunk's words 4t..4t+3, t = lane % 4), and per word h
// the 64 bytes of input row g (and g + 8) that match it (half_index: a warp's
// 16-byte loads are 512 contiguous bytes); each word gives 8
// k-steps, a step's A fragment four shifts-and-masks of the two rows' words
// (bits 2q, 2q + 16 and 2q + 1, 2q + 17: k = 2t, 2t + 1 and 2t + 8, 2t + 9 of
// mma.m16n8k16). A chunk's sums start from zero and are scaled by each input
// row's σ_c in float; the lanes' and then the warps' sums meet in shared
// memory in a fixed order, and every input row is a column of its own, so a
// row's outputs do not depend on the other rows (deterministic, and equal
// whether decoded alone or beside 15 others).
#include <algorithm>

#include "core/error.hpp"
#include "model/cuda/sign_hmma.hpp"
#include "model/cuda/sign_launch.hpp"

namespace cortiq::model::cuda {

namespace {

using namespace sign_detail;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBatch = 2;  // chunks a warp loads at once

struct Params {
    HalfProduct prod[kMaxHalfProducts];
    int first_block[kMaxHalfProducts + 1];
    int split[kMaxHalfProducts];  // warps per tile of 16 rows: 1, 2, 4 or 8
    int count;
    int tokens;  // rows of inputs
};

// D += A·B, A 16×16 and B 16×8 fp16, D fp32.
__device__ __forceinline__ void mma_f16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                        uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// fp16 ±1 from bits p (low half) and p + 16 (high half) of w, −1 where set.
__device__ __forceinline__ uint32_t signs_f16(uint32_t w, int p) {
    return ((w << (15 - p)) & 0x80008000u) | 0x3C003C00u;
}

// One chunk's Σ_{j∈c} s(k, j) q_j for the lane's rows g, g + 8 and input rows
// 8·ng + 2t, 2t + 1 (the mma's D layout), from zero. The inputs of kH words
// are loaded at once (all four for 8 rows, two for 16: the registers), and
// the steps alternate between two sums per group so that consecutive mmas
// do not wait on each other.
template <int NT>
__device__ __forceinline__ void chunk_products(const HalfInput& in, int64_t cc, uint4 a_lo,
                                               uint4 a_hi, int lane, float (&d)[NT][4]) {
    constexpr int kRp = 8 * NT, kH = NT == 1 ? 4 : 2;
    // lane's 16 bytes of group (h, v) of the chunk, row 8·ng + g
    const uint4* src = reinterpret_cast<const uint4*>(in.q) + cc * 16 * kRp * 4 + lane;
    const uint32_t wl[4] = {a_lo.x, a_lo.y, a_lo.z, a_lo.w};
    const uint32_t wh[4] = {a_hi.x, a_hi.y, a_hi.z, a_hi.w};
    float e[NT][2][4];
#pragma unroll
    for (int ng = 0; ng < NT; ++ng)
#pragma unroll
        for (int k = 0; k < 4; ++k) e[ng][0][k] = e[ng][1][k] = 0.0f;
#pragma unroll
    for (int h0 = 0; h0 < 4; h0 += kH) {
        uint4 b[kH][NT][4];
#pragma unroll
        for (int hh = 0; hh < kH; ++hh)
#pragma unroll
            for (int ng = 0; ng < NT; ++ng)
#pragma unroll
                for (int v = 0; v < 4; ++v)
                    b[hh][ng][v] = src[(4 * (h0 + hh) + v) * kRp * 4 + 32 * ng];
#pragma unroll
        for (int hh = 0; hh < kH; ++hh) {
            const int h = h0 + hh;
#pragma unroll
            for (int q = 0; q < 8; ++q) {
                const uint32_t a0 = signs_f16(wl[h], 2 * q), a1 = signs_f16(wh[h], 2 * q);
                const uint32_t a2 = signs_f16(wl[h], 2 * q + 1), a3 = signs_f16(wh[h], 2 * q + 1);
#pragma unroll
                for (int ng = 0; ng < NT; ++ng) {
                    const uint4 bv = b[hh][ng][q / 2];
                    mma_f16(e[ng][q % 2], a0, a1, a2, a3, q % 2 ? bv.z : bv.x, q % 2 ? bv.w : bv.y);
                }
            }
        }
    }
#pragma unroll
    for (int ng = 0; ng < NT; ++ng)
#pragma unroll
        for (int k = 0; k < 4; ++k) d[ng][k] = e[ng][0][k] + e[ng][1][k];
}

// 2^e' of sign_hmma.hpp for input row i: L·A·(1 + 2^−8) in [2^14, 2^15), A
// summed over the chunks in order (every block gets the same).
__device__ float t_scale(const HalfProduct& pr, int i) {
    const HalfInput& in = pr.piece[0].in;
    const int64_t chunks = plane_chunks(in.cols);
    float a = 0.0f;
    for (int64_t c = 0; c < chunks; ++c) a += in.abs_info[i * chunks + c];
    const float bound = pr.t_out.scale_max * a * (1.0f + 1.0f / 256.0f);
    int e = 0;
    if (bound > 0.0f && isfinite(bound)) {
        int E = 0;
        frexpf(bound, &E);
        e = min(max(15 - E, -100), 100);
    }
    return ldexpf(1.0f, e);
}

template <int NT>
__global__ void __launch_bounds__(kThreads, 2) sign_hmma_kernel(const __grid_constant__ Params p) {
    constexpr int kRows = 8 * NT;  // input rows a block holds
    __shared__ alignas(16) uint32_t pr_words[sizeof(HalfProduct) / 4];
    __shared__ float red[kWarps][2][kRows][16];
    __shared__ float t_up[kRows];
    __shared__ int pi_s;
    const HalfProduct& pr = *reinterpret_cast<const HalfProduct*>(pr_words);
    if (threadIdx.x == 0) {
        int k = 0;
        while (k + 1 < p.count && int(blockIdx.x) >= p.first_block[k + 1]) ++k;
        pi_s = k;
    }
    __syncthreads();
    const int pi = pi_s;
    static_assert(sizeof(HalfProduct) % 4 == 0 && sizeof(HalfProduct) / 4 <= kThreads);
    if (threadIdx.x < sizeof(HalfProduct) / 4)
        pr_words[threadIdx.x] = reinterpret_cast<const uint32_t*>(&p.prod[pi])[threadIdx.x];
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int tokens = p.tokens;
    auto tok = [&](int i) { return min(i, tokens - 1); };
    const int split = p.split[pi], tiles_per_block = kWarps / split;
    const int64_t rows = pr.piece[0].s.rows;
    const int64_t tile0 = int64_t{int(blockIdx.x) - p.first_block[pi]} * tiles_per_block;
    const int64_t k0 = 16 * (tile0 + warp / split);
    const int ks = warp % split;
    const bool active = k0 < rows;
    const int64_t r_lo = min(k0 + g, rows - 1), r_hi = min(k0 + g + 8, rows - 1);
    const int c0 = static_cast<int>(plane_chunks(pr.piece[0].s.cols));
    const int total = c0 + (pr.pieces > 1 ? static_cast<int>(plane_chunks(pr.piece[1].s.cols)) : 0);

    uint4 a_lo[kBatch], a_hi[kBatch];
    auto load_batch = [&](int base) {
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
            const int c = base + u * split;
            if (!active || c >= total) continue;
            const int pc = c >= c0 ? 1 : 0, cc = pc ? c - c0 : c;
            const SignMatrix& s = pr.piece[pc].s;
            a_lo[u] = load_stream(s.words + r_lo * s.ld + 16 * cc + 4 * t);
            a_hi[u] = load_stream(s.words + r_hi * s.ld + 16 * cc + 4 * t);
        }
    };
    load_batch(ks);  // weights: before the wait
#if __CUDA_ARCH__ >= 900
    cudaTriggerProgrammaticLaunchCompletion();
    cudaGridDependencySynchronize();  // the inputs, and out when β ≠ 0
#endif
    int s_row[NT][2];
#pragma unroll
    for (int ng = 0; ng < NT; ++ng) {
        s_row[ng][0] = tok(8 * ng + 2 * t);
        s_row[ng][1] = tok(8 * ng + 2 * t + 1);
    }
    float acc0[NT][4] = {}, acc1[NT][4] = {};
    auto add = [&](float(&acc)[NT][4], const float(&d)[NT][4], const float(&sg)[NT][2]) {
#pragma unroll
        for (int ng = 0; ng < NT; ++ng) {
            acc[ng][0] += sg[ng][0] * d[ng][0];
            acc[ng][1] += sg[ng][1] * d[ng][1];
            acc[ng][2] += sg[ng][0] * d[ng][2];
            acc[ng][3] += sg[ng][1] * d[ng][3];
        }
    };
    for (int base = ks; active && base < total; base += kBatch * split) {
        if (base != ks) load_batch(base);
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
            const int c = base + u * split;
            if (c >= total) break;
            const int pc = c >= c0 ? 1 : 0, cc = pc ? c - c0 : c;
            const HalfInput& in = pr.piece[pc].in;
            // the chunk's σ of the lane's input rows, loaded before the products
            const int64_t chunks = plane_chunks(in.cols);
            float sg[NT][2], d[NT][4];
#pragma unroll
            for (int ng = 0; ng < NT; ++ng)
#pragma unroll
                for (int e = 0; e < 2; ++e) sg[ng][e] = in.sigma[s_row[ng][e] * chunks + cc];
            chunk_products<NT>(in, cc, a_lo[u], a_hi[u], lane, d);
            if (pc)
                add(acc1, d, sg);
            else
                add(acc0, d, sg);
        }
    }
    // after the products: the bound's loads do not hold up warp 0's
    if (pr.t_out.q && threadIdx.x < kRows) t_up[threadIdx.x] = t_scale(pr, tok(threadIdx.x));
#pragma unroll
    for (int ng = 0; ng < NT; ++ng) {
        const int i = 8 * ng + 2 * t;
        red[warp][0][i][g] = acc0[ng][0];
        red[warp][0][i + 1][g] = acc0[ng][1];
        red[warp][0][i][g + 8] = acc0[ng][2];
        red[warp][0][i + 1][g + 8] = acc0[ng][3];
        red[warp][1][i][g] = acc1[ng][0];
        red[warp][1][i + 1][g] = acc1[ng][1];
        red[warp][1][i][g + 8] = acc1[ng][2];
        red[warp][1][i + 1][g + 8] = acc1[ng][3];
    }
    __syncthreads();
    // one output (row k, input row i) a thread at a time; the warps of a tile in order
    for (int idx = threadIdx.x; idx < tiles_per_block * 16 * kRows; idx += kThreads) {
        const int rr = idx % 16, i = (idx / 16) % kRows, tb = idx / (16 * kRows);
        const int64_t k = 16 * (tile0 + tb) + rr;
        if (i >= tokens) {  // t's rows past R: zeros
            if (pr.t_out.q && k < plane_chunks(rows) * kPlaneChunk)
                pr.t_out.q[half_index(i, k, tokens)] = __float2half_rn(0.0f);
            continue;
        }
        float sum[2] = {0.0f, 0.0f};
        for (int pc = 0; pc < pr.pieces; ++pc)
            for (int s = 0; s < split; ++s) sum[pc] += red[tb * split + s][pc][i][rr];
        auto scale = [&](int pc) {
            const __half* ls = pr.piece[pc].out_scale;
            return ls ? __half2float(ls[k]) : 1.0f;
        };
        if (pr.t_out.q) {
            if (k >= plane_chunks(rows) * kPlaneChunk) continue;
            float tv = 0.0f;
            if (k < rows) {
                tv = scale(0) * sum[0];
                if (pr.out) pr.out[i * pr.ld_out + k] = tv;
            }
            pr.t_out.q[half_index(i, k, tokens)] = __float2half_rn(tv * t_up[i]);
            if (k % kPlaneChunk == 0)  // σ' = 2^−e', exact
                pr.t_out.sigma[i * plane_chunks(rows) + k / kPlaneChunk] = 1.0f / t_up[i];
            continue;
        }
        if (k >= rows) continue;
        const int64_t o = i * pr.ld_out + k;
        float val = pr.beta == 0.0f ? 0.0f : pr.beta * pr.out[o];
        if (pr.bias) val += pr.bias[k];
        for (int pc = 0; pc < pr.pieces; ++pc) val += scale(pc) * sum[pc];
        pr.out[o] = val;
    }
}

// Warps per tile: about two chunks each, at most 8 (CORTIQ_HMMA_SPLIT: at
// most that many), as sign_mma.
int split_for(int chunks) {
    static const int most = knob("CORTIQ_HMMA_SPLIT", kWarps, 1, kWarps);
    int s = 1;
    while (s < most && 2 * s < chunks) s *= 2;
    return s;
}

}  // namespace

void sign_hmma(const HalfProduct* products, int count, int rows, cudaStream_t stream) {
    CORTIQ_ASSERT(rows >= 1 && rows <= kPlaneDecodeRows, "sign_hmma takes 1 to {} rows, not {}",
                  kPlaneDecodeRows, rows);
    for (int c0 = 0; c0 < count; c0 += kMaxHalfProducts) {
        Params p{};
        p.tokens = rows;
        int blocks = 0;
        for (int i = c0; i < std::min(count, c0 + kMaxHalfProducts); ++i) {
            const HalfProduct& pr = products[i];
            CORTIQ_ASSERT(pr.pieces == 1 || pr.pieces == 2, "sign_hmma: {} pieces", pr.pieces);
            for (int pc = 0; pc < pr.pieces; ++pc)
                CORTIQ_ASSERT(pr.piece[pc].s.ld % 4 == 0 &&
                                  pr.piece[pc].s.rows == pr.piece[0].s.rows &&
                                  pr.piece[pc].in.cols == pr.piece[pc].s.cols,
                              "sign_hmma: rows of {} words (a multiple of 4), {} rows",
                              pr.piece[pc].s.ld, pr.piece[pc].s.rows);
            const bool t_out = pr.t_out.q != nullptr;
            CORTIQ_ASSERT(!t_out || (pr.pieces == 1 && pr.beta == 0.0f && !pr.bias &&
                                     pr.t_out.sigma && pr.piece[0].in.abs_info),
                          "sign_hmma: t written as fp16 inputs from one piece, β = 0, no bias");
            CORTIQ_ASSERT(t_out || pr.out, "sign_hmma: a product with no output");
            const int64_t m = pr.piece[0].s.rows;
            if (m == 0) continue;
            int chunks = 0;
            for (int pc = 0; pc < pr.pieces; ++pc)
                chunks += static_cast<int>(plane_chunks(pr.piece[pc].s.cols));
            const int split = split_for(chunks);
            // t_out: every tile of the last chunk, to zero its tail
            const int tiles =
                static_cast<int>(ceil_div(t_out ? plane_chunks(m) * kPlaneChunk : m, 16));
            p.prod[p.count] = pr;
            p.split[p.count] = split;
            p.first_block[p.count] = blocks;
            blocks += static_cast<int>(ceil_div(tiles, kWarps / split));
            ++p.count;
        }
        if (p.count == 0) continue;
        p.first_block[p.count] = blocks;
        const dim3 grid(static_cast<unsigned>(blocks));
        if (rows <= 8)
            launch_pdl(sign_hmma_kernel<1>, grid, kThreads, 0, stream, p);
        else
            launch_pdl(sign_hmma_kernel<2>, grid, kThreads, 0, stream, p);
    }
}

}  // namespace cortiq::model::cuda
