// Sign products on the binary tensor cores (sign_mma.hpp). A warp owns 16
// rows of one product and a share of its chunks (split: 1–8 warps per 16
// rows, so that small products still spread over the GPU); a block of 8
// warps owns 8 / split tiles of 16 rows. Per chunk of 512 inputs a lane
// loads 16 bytes of row g and of row g + 8 (g = lane / 4, the words 4t..4t+3
// of the chunk, t = lane % 4) — the A fragments of two mma.m16n8k256 .b1
// (the k order inside a chunk permuted alike in A and B: word 4t + h of a
// chunk is k-step h / 2's k-block t + 4·(h % 2)) — and 16 bytes of planes g
// and g + 8 (the B fragments). Four mmas give D_p for 16 rows × 16 planes;
// each lane folds its 4 planes into Σ_p w_p D_p (int32, exact), scales it by
// the chunk's σ in float, and the lanes, then the warps of a tile, are summed
// in a fixed order (deterministic). The weights of the first chunks are
// loaded before the wait for the previous kernel (programmatic dependent
// launch: the sign_planes kernel before it is small, so both fit together).
// More than two tokens (up to kPlaneDecodeRows): a row of blocks per pair of
// tokens (blockIdx.y), each the two-token kernel on its pair; the pairs read
// the same sign rows, the first from memory and the others mostly from L2,
// and a token's sums are those it would get decoded alone.
#include <algorithm>

#include "core/error.hpp"
#include "model/cuda/sign_launch.hpp"
#include "model/cuda/sign_mma.hpp"

namespace cortiq::model::cuda {

namespace {

using namespace sign_detail;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBatch = 4;  // chunks a warp loads at once

struct Params {
    MmaProduct prod[kMaxMmaProducts];
    int first_block[kMaxMmaProducts + 1];
    int split[kMaxMmaProducts];  // warps per tile of 16 rows: 1, 2, 4 or 8
    int count;
    int tokens;  // rows of activations in all (pairs of them along blockIdx.y)
};

// D += A·B over 256 k, A 16×256 and B 256×8 bits, popc(a AND b) per element.
__device__ __forceinline__ void mma_and_popc(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                             uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The products' sums per row of this lane from one chunk: D_p for 16 rows ×
// 16 planes from four mmas (narrow planes, the Σq term of sign_mma.hpp added
// by the lanes of t = 0), or 16 rows × 24 planes from six (wide planes, their
// Σq added once in the finishing step), as σ_c Σ_p w_p D_p in float.
template <bool kWide>
__device__ __forceinline__ float2 chunk_sums(const MmaPiece& piece, int i, int cc, uint4 a_lo,
                                             uint4 a_hi, int g, int t) {
    int d0[4] = {0, 0, 0, 0}, d1[4] = {0, 0, 0, 0};
    auto mma_pair = [&](int(&d)[4], uint4 b) {
        mma_and_popc(d, a_lo.x, a_hi.x, a_lo.y, a_hi.y, b.x, b.y);
        mma_and_popc(d, a_lo.z, a_hi.z, a_lo.w, a_hi.w, b.z, b.w);
    };
    // w_p of the lane's planes 2t, 2t + 1 of each group of 8
    const int w_a = 1 << (2 * t), w_b = 2 * w_a, w_c = 256 * w_a;
    if constexpr (kWide) {
        const WideInput& in = piece.wide;
        const uint32_t* pl = in.planes + i * wide_plane_words(in.cols) + cc * kWideChunkWords;
        int d2[4] = {0, 0, 0, 0};
        mma_pair(d0, *reinterpret_cast<const uint4*>(pl + g * 16 + 4 * t));
        mma_pair(d1, *reinterpret_cast<const uint4*>(pl + (g + 8) * 16 + 4 * t));
        mma_pair(d2, *reinterpret_cast<const uint4*>(pl + (g + 16) * 16 + 4 * t));
        const float sigma = in.sigma[i * plane_chunks(in.cols) + cc];
        // planes 0–15 weigh 2^p (< 2^25 in all: int32), 16–23 2^16·(2^(p−16)),
        // plane 23 −2^23: the sum in int64, exact
        const int w_d = t == 3 ? -128 : w_b;
        const int64_t x_lo = (w_a * d0[0] + w_b * d0[1] + w_c * d1[0] + 2 * w_c * d1[1]) +
                             int64_t{w_a * d2[0] + w_d * d2[1]} * 65536;
        const int64_t x_hi = (w_a * d0[2] + w_b * d0[3] + w_c * d1[2] + 2 * w_c * d1[3]) +
                             int64_t{w_a * d2[2] + w_d * d2[3]} * 65536;
        return make_float2(sigma * static_cast<float>(x_lo), sigma * static_cast<float>(x_hi));
    } else {
        const PlaneInput& in = piece.in;
        const uint32_t* pl = in.planes + i * plane_words(in.cols) + cc * blr::kPlaneChunkWords;
        mma_pair(d0, *reinterpret_cast<const uint4*>(pl + g * 16 + 4 * t));
        mma_pair(d1, *reinterpret_cast<const uint4*>(pl + (g + 8) * 16 + 4 * t));
        const float2 info = in.info[i * plane_chunks(in.cols) + cc];
        const int w_d = t == 3 ? -32768 : 2 * w_c;  // plane 15: −2^15
        const int x_lo = w_a * d0[0] + w_b * d0[1] + w_c * d1[0] + w_d * d1[1];
        const int x_hi = w_a * d0[2] + w_b * d0[3] + w_c * d1[2] + w_d * d1[3];
        const float half_q = t == 0 ? 0.5f * info.y : 0.0f;
        return make_float2(info.x * static_cast<float>(x_lo) - half_q,
                           info.x * static_cast<float>(x_hi) - half_q);
    }
}

// Wide inputs: Σ_c σ'_c Σ_{k∈c} q_k of piece pc, token i, from the tile sums:
// lane l sums σ'_c·(tile l of chunk c) over the chunks in order (loads
// independent of one another), then the lanes by a butterfly (deterministic).
__device__ float wide_q_sum(const WideInput& in, int i, int lane) {
    const int64_t chunks = plane_chunks(in.cols);
    float s = 0.0f;
    for (int64_t c = 0; c < chunks; ++c)
        s += in.sigma[i * chunks + c] *
             static_cast<float>(in.tile_sum[(i * chunks + c) * kTilesPerChunk + lane]);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

// B of sign_mma.hpp, lane l's share: Σ_{c ≡ l mod 32} σ_c Σ|q| of x's chunks
// in order (loaded before the products, summed over the lanes after them by
// bound_butterfly: the order of blr::wide_bound).
__device__ float bound_share(const PlaneInput& in, int i, int lane) {
    const int64_t chunks = plane_chunks(in.cols);
    float s = 0.0f;
    for (int64_t c = lane; c < chunks; c += 32) s += in.abs_info[i * chunks + c];
    return s;
}

__device__ float bound_butterfly(float s) {
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

// Largest |ℓ_k| over the 512 rows of chunk c (ones where out_scale is null),
// by the whole block (a weight: before the wait).
__device__ float chunk_scale_max(const MmaProduct& pr, int64_t c, float* red8) {
    const int64_t rows = pr.piece[0].s.rows, k1 = min(rows, (c + 1) * kPlaneChunk);
    const __half* ls = pr.piece[0].out_scale;
    float mx = 0.0f;
    for (int64_t k = c * kPlaneChunk + threadIdx.x; k < k1; k += kThreads)
        mx = fmaxf(mx, ls ? fabsf(__half2float(ls[k])) : 1.0f);
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if ((threadIdx.x & 31) == 0) red8[threadIdx.x >> 5] = mx;
    __syncthreads();
    mx = red8[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) mx = fmaxf(mx, red8[w]);
    return mx;
}

// The wide planes of the outputs (sign_mma.hpp): each 16 lanes of a warp hold
// one tile of 16 outputs of one token (q = 0 past the rows); 24 ballots give
// the planes' bits, lane p of the 16 stores plane p's (and p + 16's) half
// word, lane 0 the tile's Σq and, on a chunk's first tile, σ'.
__device__ void write_wide(const WidePlanes& po, int64_t rows, int64_t tile, int i, float val,
                           bool valid, bool stores, float bound) {
    const float sigma = bound / static_cast<float>(kWideQMax);
    const float inv = bound > 0.0f ? static_cast<float>(kWideQMax) / bound : 0.0f;
    const int q = valid ? max(-kWideQMax, min(kWideQMax, __float2int_rn(val * inv))) : 0;
    const int lane = threadIdx.x & 31, ll = lane & 15, half = lane >> 4;
    uint32_t w0 = 0, w1 = 0;
#pragma unroll
    for (int b = 0; b < kWidePlanes; ++b) {
        const uint32_t word = __ballot_sync(0xffffffffu, (static_cast<uint32_t>(q) >> b) & 1u);
        if (b < 16 && ll == b) w0 = word;
        if (b >= 16 && ll == b - 16) w1 = word;
    }
    int qs = q;
    for (int o = 8; o > 0; o >>= 1) qs += __shfl_xor_sync(0xffffffffu, qs, o);
    if (!stores) return;
    const int64_t c = tile / kTilesPerChunk;
    auto* half_words =
        reinterpret_cast<uint16_t*>(po.planes + i * wide_plane_words(rows) + c * kWideChunkWords) +
        tile % kTilesPerChunk;
    half_words[32 * ll] = static_cast<uint16_t>(w0 >> (16 * half));
    if (ll < kWidePlanes - 16)
        half_words[32 * (16 + ll)] = static_cast<uint16_t>(w1 >> (16 * half));
    if (ll == 0) {
        po.tile_sum[i * wide_tiles(rows) + tile] = qs;
        if (tile % kTilesPerChunk == 0) po.sigma[i * plane_chunks(rows) + c] = sigma;
    }
}

// Three blocks an SM for one token (80 registers); two for two tokens, whose
// sums and fragments need more.
template <int R, bool kWide>
__global__ void __launch_bounds__(kThreads, R == 1 ? 3 : 2)
    sign_mma_kernel(const __grid_constant__ Params p) {
    __shared__ alignas(16) uint32_t pr_words[sizeof(MmaProduct) / 4];
    __shared__ float red[kWarps][2][R][16];
    __shared__ float red8[kWarps], wide_s[2][R];
    __shared__ int pi_s;
    const MmaProduct& pr = *reinterpret_cast<const MmaProduct*>(pr_words);
    if (threadIdx.x == 0) {
        int k = 0;
        while (k + 1 < p.count && int(blockIdx.x) >= p.first_block[k + 1]) ++k;
        pi_s = k;
    }
    __syncthreads();
    const int pi = pi_s;
    static_assert(sizeof(MmaProduct) % 4 == 0 && sizeof(MmaProduct) / 4 <= kThreads);
    if (threadIdx.x < sizeof(MmaProduct) / 4)
        pr_words[threadIdx.x] = reinterpret_cast<const uint32_t*>(&p.prod[pi])[threadIdx.x];
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    // this block's tokens: i0 .. i0 + valid − 1; a missing second token of
    // an odd count reads the first's inputs and writes nothing
    const int i0 = R * static_cast<int>(blockIdx.y), valid = min(R, p.tokens - i0);
    auto tok = [&](int i) { return i0 + min(i, valid - 1); };
    const int split = p.split[pi], tiles_per_block = kWarps / split;
    const int64_t rows = pr.piece[0].s.rows;
    // the block's first tile of 16 rows, and this warp's
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
    load_batch(ks);
    // The finishing thread's row scales and bias, weights too: before the wait.
    const int fin_tb = threadIdx.x / (16 * R), fin_i = (threadIdx.x / 16) % R;
    const int64_t fin_k = 16 * (tile0 + fin_tb) + threadIdx.x % 16;
    const bool in_group = int(threadIdx.x) < tiles_per_block * 16 * R;
    const bool stores = in_group && fin_i < valid;
    const bool finishes = stores && fin_k < rows;
    float fin_scale[2] = {1.0f, 1.0f}, fin_bias = 0.0f;
    if (finishes) {
        for (int pc = 0; pc < pr.pieces; ++pc)
            if (pr.piece[pc].out_scale) fin_scale[pc] = __half2float(pr.piece[pc].out_scale[fin_k]);
        if (pr.bias) fin_bias = pr.bias[fin_k];
    }
    const bool planes_out = !kWide && pr.planes_out.planes != nullptr;  // one piece
    const float l_max = planes_out ? chunk_scale_max(pr, tile0 / kTilesPerChunk, red8) : 0.0f;
#if __CUDA_ARCH__ >= 900
    cudaTriggerProgrammaticLaunchCompletion();
    cudaGridDependencySynchronize();  // the planes, and out when β ≠ 0
#endif
    // the bound's shares of each token, for the warps that write wide planes
    float b_share[R];
#pragma unroll
    for (int i = 0; i < R; ++i)
        b_share[i] = planes_out ? bound_share(pr.piece[0].in, tok(i), lane) : 0.0f;
    if constexpr (kWide) {
        if (warp < pr.pieces * R) {
            const float s = wide_q_sum(pr.piece[warp / R].wide, tok(warp % R), lane);
            if (lane == 0) wide_s[warp / R][warp % R] = s;
        }
    }
    // Σ_c (σ_c Σ_p w_p D_p [− σ_c Σq / 2]) per piece, token and row (g, g + 8)
    float acc0[R][2], acc1[R][2];
#pragma unroll
    for (int i = 0; i < R; ++i) acc0[i][0] = acc0[i][1] = acc1[i][0] = acc1[i][1] = 0.0f;
    for (int base = ks; active && base < total; base += kBatch * split) {
        if (base != ks) load_batch(base);
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
            const int c = base + u * split;
            if (c >= total) break;
            const int pc = c >= c0 ? 1 : 0, cc = pc ? c - c0 : c;
#pragma unroll
            for (int i = 0; i < R; ++i) {
                const float2 v =
                    chunk_sums<kWide>(pr.piece[pc], tok(i), cc, a_lo[u], a_hi[u], g, t);
                if (pc) {
                    acc1[i][0] += v.x;
                    acc1[i][1] += v.y;
                } else {
                    acc0[i][0] += v.x;
                    acc0[i][1] += v.y;
                }
            }
        }
    }
    // lanes t = 0..3 of a row, then the warps of a tile, in order
#pragma unroll
    for (int i = 0; i < R; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float a = acc0[i][h], b = acc1[i][h];
            a += __shfl_xor_sync(0xffffffffu, a, 1);
            a += __shfl_xor_sync(0xffffffffu, a, 2);
            b += __shfl_xor_sync(0xffffffffu, b, 1);
            b += __shfl_xor_sync(0xffffffffu, b, 2);
            if (t == 0) {
                red[warp][0][i][g + 8 * h] = a;
                red[warp][1][i][g + 8 * h] = b;
            }
        }
    __syncthreads();
    float val = 0.0f;
    if (finishes) {
        const int rr = threadIdx.x % 16;
        const int64_t row_out = int64_t{i0 + fin_i} * pr.ld_out + fin_k;
        val = pr.beta == 0.0f ? 0.0f : pr.beta * pr.out[row_out];
        val += fin_bias;
        for (int pc = 0; pc < pr.pieces; ++pc) {
            float sum = 0.0f;
            for (int s = 0; s < split; ++s) sum += red[fin_tb * split + s][pc][fin_i][rr];
            // narrow: Σq inside sum; wide: S = Σ_c σ'_c Σq once per token
            val += fin_scale[pc] * ((kWide ? wide_s[pc][fin_i] : 0.0f) - 2.0f * sum);
        }
        if (pr.out) pr.out[row_out] = val;
    }
    // the warps that hold tiles (warp-uniform), for the ballots
    if (!planes_out || warp * 32 >= tiles_per_block * 16 * R) return;
    float b_in = bound_butterfly(b_share[0]);
    if (R == 2) {
        const float b1 = bound_butterfly(b_share[R - 1]);
        if (fin_i == 1) b_in = b1;
    }
    write_wide(pr.planes_out, rows, tile0 + fin_tb, i0 + fin_i, val, finishes, stores,
               l_max * b_in * (1.0f + 1.0f / 4096.0f));
}

// Warps per tile: about two chunks each, at most 8 (CORTIQ_MMA_SPLIT: at
// most that many). Measured on the H200 at 1 bpw (bench_blr_gpu, one token):
// a warp per chunk (8 for S_U's 6 chunks at 4096×11008 and S_Vᵀ's 8 at
// 11008×4096) took 8.3 / 9.5 µs and the 32-layer model 1.150 ms; at most 4
// warps, 10.2 / 7.7 µs and 1.131 ms (4096×11008's 22-chunk S_Vᵀ then lacks
// warps); at most 2, 14.2 / 8.8 µs.
int split_for(int chunks) {
    static const int most = knob("CORTIQ_MMA_SPLIT", kWarps, 1, kWarps);
    int s = 1;
    while (s < most && 2 * s < chunks) s *= 2;
    return s;
}

template <bool kWide>
void launch_mma(const MmaProduct* products, int count, int rows, cudaStream_t stream) {
    CORTIQ_ASSERT(rows >= 1 && rows <= kPlaneDecodeRows, "sign_mma takes 1 to {} rows, not {}",
                  kPlaneDecodeRows, rows);
    for (int c0 = 0; c0 < count; c0 += kMaxMmaProducts) {
        Params p{};
        p.tokens = rows;
        int blocks = 0;
        for (int i = c0; i < std::min(count, c0 + kMaxMmaProducts); ++i) {
            const MmaProduct& pr = products[i];
            CORTIQ_ASSERT(pr.pieces == 1 || pr.pieces == 2, "sign_mma: {} pieces", pr.pieces);
            for (int pc = 0; pc < pr.pieces; ++pc)
                CORTIQ_ASSERT(
                    pr.piece[pc].s.ld % 4 == 0 && pr.piece[pc].s.rows == pr.piece[0].s.rows,
                    "sign_mma: rows of {} words (a multiple of 4), {} rows", pr.piece[pc].s.ld,
                    pr.piece[pc].s.rows);
            const bool planes_out = pr.planes_out.planes != nullptr;
            CORTIQ_ASSERT(!planes_out || (!kWide && pr.pieces == 1 && pr.beta == 0.0f && !pr.bias &&
                                          pr.piece[0].in.abs_info),
                          "sign_mma: wide planes out of one narrow piece, β = 0, no bias");
            const int64_t m = pr.piece[0].s.rows;
            if (m == 0) continue;
            int chunks = 0;
            for (int pc = 0; pc < pr.pieces; ++pc)
                chunks += static_cast<int>(plane_chunks(pr.piece[pc].s.cols));
            // wide planes: every tile of the last chunk, to zero its tail
            const int split = split_for(chunks);
            const int tiles = static_cast<int>(planes_out ? wide_tiles(m) : ceil_div(m, 16));
            p.prod[p.count] = pr;
            p.split[p.count] = split;
            p.first_block[p.count] = blocks;
            blocks += static_cast<int>(ceil_div(tiles, kWarps / split));
            ++p.count;
        }
        if (p.count == 0) continue;
        p.first_block[p.count] = blocks;
        const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>((rows + 1) / 2));
        if (rows == 1)
            launch_pdl(sign_mma_kernel<1, kWide>, grid, kThreads, 0, stream, p);
        else
            launch_pdl(sign_mma_kernel<2, kWide>, grid, kThreads, 0, stream, p);
    }
}

}  // namespace

void sign_mma(const MmaProduct* products, int count, int rows, cudaStream_t stream) {
    launch_mma<false>(products, count, rows, stream);
}

void sign_mma_wide(const MmaProduct* products, int count, int rows, cudaStream_t stream) {
    launch_mma<true>(products, count, rows, stream);
}

}  // namespace cortiq::model::cuda
