// Sign products by whole rows (model/cuda/sign_rows.hpp), the lookup method of
// bitnet.cpp and T-MAC with the table in shared memory, as in sign_gemv.cu,
// but a block owns whole rows: it walks the row's 1024-column stripes (of
// every piece) one after the other, rebuilding the table of signed sums for
// each, and keeps its rows' sums in registers, so nothing meets through
// global memory and no block waits for another. sign_gemv's spans cost a
// partial-sum round trip (write, fence, atomic, the last block's reads) on
// the critical path of every product; here the price is a table per stripe
// per block instead of one per block.
//
// A block: 8 warps, 8·RPW rows at most (RPW a power of two ≤ 8 chosen per
// launch from its bits, about three blocks per SM). Its rows' bits (all
// pieces) are copied to shared memory with cp.async before the block waits
// for the previous kernel (programmatic dependent launch: the bits are
// weights, no kernel writes them). The inputs come through a ring of stripe
// slots in shared memory, two stripes ahead (cp.async, coalesced). Per
// stripe: every thread tabulates the 16 signed sums of 4 inputs, one
// barrier, then each warp adds, for each of its rows, 8 table entries per
// lane (one per nibble of the lane's word). The table is double-buffered: the
// barrier of stripe s also ends the reads of stripe s − 1's buffer, so one
// barrier per stripe suffices.
//
// Measured on the H200 (bench_blr_gpu, 1 bpw, decode inside CUDA graphs):
// 4096×4096 8.9 µs for both products against 10.2 with sign_gemv (P = 2:
// 9.0 against 18.9); a 32-layer 4096/11008 model's linears with q/k/v and
// gate/up grouped 1.933 ms against 2.632 (P = 2: 2.087 against 5.237). What
// it took: bank-conflict-free tables (the first version, with strided reads,
// ran 3× slower), inputs staged ahead (not loaded per stripe), no branches
// over a warp's rows (so their lookups interleave), three blocks per SM (the
// grouped model: 2.316 ms with one, 2.122 with two).

#include <algorithm>
#include <cstdlib>

#include "core/error.hpp"
#include "model/cuda/sign_launch.hpp"
#include "model/cuda/sign_rows.hpp"

namespace cortiq::model::cuda {

namespace {

using namespace sign_detail;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerWarp = 8;
constexpr int kStripeCols = 1024;
constexpr int kLut = 8 * 16 * 32;  // floats per table: [nibble group q][nibble][lane]
// Shared memory for the block's bits: with two tables per row of
// activations, two blocks fit on an SM (the next kernel's block copies its
// bits while this one works).
constexpr int64_t bits_budget(int rows) {
    return rows == 1 ? 40 * 1024 : 32 * 1024;
}

struct Params {
    SignProduct prod[kMaxSignProducts];
    int first_block[kMaxSignProducts + 1];
    int rows_per_block[kMaxSignProducts];
    int count;
};

// Stripe s of a product: its piece and the stripe within the piece.
struct Stripe {
    int pc, g;
};
__device__ __forceinline__ Stripe stripe_of(int s, int groups0) {
    return s < groups0 ? Stripe{0, s} : Stripe{1, s - groups0};
}

// What staging a piece's inputs reads, held in registers for the whole block
// (from shared memory, every use after an asynchronous copy would be reloaded).
struct PieceInputs {
    const float* in;
    int64_t ld_in;
    int cols;
    const float* g;
};

// Piece pc's inputs, field by field (a conditional reference would put both
// in local memory).
__device__ __forceinline__ PieceInputs pick(int pc, const PieceInputs& a, const PieceInputs& b) {
    return {pc ? b.in : a.in, pc ? b.ld_in : a.ld_in, pc ? b.cols : a.cols, pc ? b.g : a.g};
}

// The inputs of a stripe in shared memory: R rows of 1024 x values, then
// 1024 g values. Ring slots hold the next kStages − 1 stripes while one is
// tabulated, so their loads are in flight together instead of one global
// round trip per stripe.
constexpr int kStages = 3;
template <int R>
constexpr int kSlotFloats = (R + 1) * kStripeCols;

// cp.async of one 32-bit word, or (ok false) a zero written in its place
// without reading the source.
__device__ __forceinline__ void copy_word_or_zero(float* dst, const float* src, bool ok) {
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src),
                 "r"(ok ? 4 : 0));
}

// Thread t copies, then tabulates, the 4 columns 4t + b (b < 4) of a stripe:
// nibble q = t % 8 of the word of lane L = t / 8. The copies are coalesced,
// its reads of them contiguous with its neighbours', and the table slot of
// (q, nib, L) is rotated by 4q banks, so the stores of a warp (4 lanes L × 8
// nibbles q) and the lookups of a warp (32 lanes L, one q) both hit 32
// different banks. Zeros (x and g) past the last column.
template <int R>
__device__ __forceinline__ void stage_inputs(const PieceInputs& pc, int g, float* slot) {
    const int c = 4 * threadIdx.x;
    const int j0 = kStripeCols * g + c;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
        const bool ok = j0 + b < pc.cols;
        const int j = ok ? j0 + b : 0;
#pragma unroll
        for (int i = 0; i < R; ++i)
            copy_word_or_zero(slot + i * kStripeCols + c + b, pc.in + i * pc.ld_in + j, ok);
        if (pc.g) copy_word_or_zero(slot + R * kStripeCols + c + b, pc.g + j, ok);
    }
}

__device__ __forceinline__ int lut_slot(int q, int nib, int lane) {
    return q * 512 + nib * 32 + ((lane + 4 * q) & 31);
}

// e(nib) = Σ_b (bit b of nib ? −v_b : v_b), v_b = g_b·x_b (g_b = 1 without
// g), into this thread's table slots.
template <int R>
__device__ __forceinline__ void tabulate(const float* slot, bool with_g, float* lut) {
    const int c = 4 * threadIdx.x, q = threadIdx.x & 7, lane = threadIdx.x >> 3;
    float4 g = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
    if (with_g) g = *reinterpret_cast<const float4*>(slot + R * kStripeCols + c);
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const float4 x = *reinterpret_cast<const float4*>(slot + i * kStripeCols + c);
        const float v[4] = {g.x * x.x, g.y * x.y, g.z * x.z, g.w * x.w};
        float e[16];
        signed_sums(v, e);
        float* dst = lut + i * kLut;
#pragma unroll
        for (int nib = 0; nib < 16; ++nib) dst[lut_slot(q, nib, lane)] = e[nib];
    }
}

// RPW: rows per warp (a block: 8·RPW rows at most). Every warp runs all RPW
// of its rows without branches (rows past the block's last read its last row
// and are not written), so the compiler interleaves them.
template <int R, int RPW>
__global__ void __launch_bounds__(kThreads) sign_rows_kernel(const __grid_constant__ Params p) {
    // two tables (R × kLut each), the input ring, then the block's bits
    extern __shared__ float smem[];
    float* lut = smem;
    float* ring = smem + 2 * R * kLut;
    uint32_t* bits = reinterpret_cast<uint32_t*>(ring + kStages * kSlotFloats<R>);
    // This block's product, copied once into shared memory: read from the
    // parameters with a block-dependent index, every field would be a load
    // through the constant cache.
    __shared__ alignas(8) uint32_t pr_words[sizeof(SignProduct) / 4];
    __shared__ int pi;
    const SignProduct& pr = *reinterpret_cast<const SignProduct*>(pr_words);
    if (threadIdx.x == 0) {
        int k = 0;
        while (k + 1 < p.count && int(blockIdx.x) >= p.first_block[k + 1]) ++k;
        pi = k;
    }
    __syncthreads();
    static_assert(sizeof(SignProduct) % 4 == 0);
    if (threadIdx.x < sizeof(SignProduct) / 4)
        pr_words[threadIdx.x] = reinterpret_cast<const uint32_t*>(&p.prod[pi])[threadIdx.x];
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t k0 = int64_t{int(blockIdx.x) - p.first_block[pi]} * p.rows_per_block[pi];
    const int nrow = static_cast<int>(min(int64_t{p.rows_per_block[pi]}, pr.piece[0].s.rows - k0));
    const int pieces = pr.pieces;
    const int ld0 = static_cast<int>(pr.piece[0].s.ld);
    const int ld1 = pieces > 1 ? static_cast<int>(pr.piece[1].s.ld) : 0;
    const PieceInputs in0{pr.piece[0].in, pr.piece[0].ld_in, static_cast<int>(pr.piece[0].s.cols),
                          pr.piece[0].in_scale};
    const PieceInputs in1{pr.piece[1].in, pr.piece[1].ld_in, static_cast<int>(pr.piece[1].s.cols),
                          pr.piece[1].in_scale};
    // Weights first, before the wait for the previous kernel: the rows k0..
    // of a piece are nrow·ld consecutive words; the rows' scales.
    for (int pc = 0; pc < pieces; ++pc) {
        const int ld = pc == 0 ? ld0 : ld1, words = nrow * ld;
        const uint32_t* src = pr.piece[pc].s.words + k0 * ld;
        uint32_t* dst = bits + (pc == 0 ? 0 : nrow * ld0);
        for (int w = threadIdx.x; w < words; w += kThreads) copy_word_async(dst + w, src + w);
    }
    commit_copies();
    int row_of[RPW];  // this warp's rows (clamped to the block's last)
    float scale[2][RPW];
#pragma unroll
    for (int u = 0; u < RPW; ++u) {
        row_of[u] = min(warp + kWarps * u, max(nrow - 1, 0));
#pragma unroll
        for (int pc = 0; pc < 2; ++pc) {
            const __half* sc = pr.piece[pc].out_scale;
            scale[pc][u] = pc < pieces && sc ? __half2float(sc[k0 + row_of[u]]) : 1.0f;
        }
    }
#if __CUDA_ARCH__ >= 900
    cudaTriggerProgrammaticLaunchCompletion();
    cudaGridDependencySynchronize();  // the inputs and outputs of earlier kernels
#endif
    const int groups0 = (ld0 + 31) / 32;
    const int stripes = groups0 + (ld1 + 31) / 32;
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < stripes) {
            const Stripe st = stripe_of(s, groups0);
            stage_inputs<R>(pick(st.pc, in0, in1), st.g, ring + s * kSlotFloats<R>);
        }
        commit_copies();
    }

    float acc[RPW][R], tot[RPW][R];
#pragma unroll
    for (int u = 0; u < RPW; ++u)
#pragma unroll
        for (int i = 0; i < R; ++i) acc[u][i] = tot[u][i] = 0.0f;
    for (int s = 0; s < stripes; ++s) {
        const int ahead = s + kStages - 1;
        if (ahead < stripes) {
            const Stripe sa = stripe_of(ahead, groups0);
            stage_inputs<R>(pick(sa.pc, in0, in1), sa.g, ring + (ahead % kStages) * kSlotFloats<R>);
        }
        commit_copies();
        asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 1));  // stripe s (and the bits)
        float* tab = lut + (s & 1) * R * kLut;
        const Stripe st = stripe_of(s, groups0);
        tabulate<R>(ring + (s % kStages) * kSlotFloats<R>, (st.pc ? in1.g : in0.g) != nullptr, tab);
        __syncthreads();  // the table, and (first time) every thread's bits
        const int ld = st.pc == 0 ? ld0 : ld1;
        const int wi = 32 * st.g + lane;
        const uint32_t* brow = bits + (st.pc == 0 ? 0 : nrow * ld0) + min(wi, ld - 1);
        uint32_t w[RPW];
#pragma unroll
        for (int u = 0; u < RPW; ++u) w[u] = wi < ld ? brow[row_of[u] * ld] : 0u;
        const float* t = tab;
#pragma unroll
        for (int u = 0; u < RPW; ++u)
#pragma unroll
            for (int i = 0; i < R; ++i) {
                float e[8];
#pragma unroll
                for (int q = 0; q < 8; ++q)
                    e[q] =
                        t[i * kLut + lut_slot(q, static_cast<int>((w[u] >> (4 * q)) & 15u), lane)];
                acc[u][i] += ((e[0] + e[1]) + (e[2] + e[3])) + ((e[4] + e[5]) + (e[6] + e[7]));
            }
        if (s + 1 != stripes && s + 1 != groups0) continue;  // the piece goes on
#pragma unroll
        for (int u = 0; u < RPW; ++u)
#pragma unroll
            for (int i = 0; i < R; ++i) {
                tot[u][i] += (st.pc == 0 ? scale[0][u] : scale[1][u]) * acc[u][i];
                acc[u][i] = 0.0f;
            }
    }
#pragma unroll
    for (int u = 0; u < RPW; ++u) {
        const int row = warp + kWarps * u;
        const int64_t k = k0 + row;
#pragma unroll
        for (int i = 0; i < R; ++i) {
            const float sum = warp_sum(tot[u][i]);
            if (lane != 0 || row >= nrow) continue;
            float* o = pr.out + i * pr.ld_out + k;
            float val = pr.beta == 0.0f ? 0.0f : pr.beta * *o;
            if (pr.bias) val += pr.bias[k];
            *o = val + sum;
        }
    }
}

int64_t row_words(const SignProduct& p) {
    return p.piece[0].s.ld + (p.pieces > 1 ? p.piece[1].s.ld : 0);
}

template <int R, int RPW>
void launch(const Params& p, int blocks, size_t bits_bytes, cudaStream_t stream) {
    constexpr size_t fixed = sizeof(float) * (2 * R * kLut + kStages * kSlotFloats<R>);
    const size_t smem = fixed + bits_bytes;
    static const bool sized = [] {
        CUDA_CHECK(cudaFuncSetAttribute(sign_rows_kernel<R, RPW>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(fixed + bits_budget(R))));
        return true;
    }();
    (void)sized;
    launch_pdl(sign_rows_kernel<R, RPW>, dim3(static_cast<unsigned>(blocks)), kThreads, smem,
               stream, p);
}

template <int R>
void launch_rpw(int rpw, const Params& p, int blocks, size_t bits_bytes, cudaStream_t stream) {
    switch (rpw) {
        case 1:
            return launch<R, 1>(p, blocks, bits_bytes, stream);
        case 2:
            return launch<R, 2>(p, blocks, bits_bytes, stream);
        case 4:
            return launch<R, 4>(p, blocks, bits_bytes, stream);
        default:
            return launch<R, 8>(p, blocks, bits_bytes, stream);
    }
}

}  // namespace

bool sign_rows_fits(const SignProduct& p, int rows) {
    return p.pieces >= 1 && p.pieces <= 2 && 4 * row_words(p) <= bits_budget(rows) &&
           (p.pieces == 1 || p.piece[1].s.rows == p.piece[0].s.rows);
}

void sign_rows(const SignProduct* products, int count, int rows, cudaStream_t stream) {
    CORTIQ_ASSERT(rows == 1 || rows == 2, "sign_rows takes 1 or 2 rows, not {}", rows);
    for (int c0 = 0; c0 < count; c0 += kMaxSignProducts) {
        const int n = std::min(kMaxSignProducts, count - c0);
        // Blocks: about CORTIQ_ROWS_BLOCKS_PER_SM per SM over the launch's
        // bits, each product cut into runs of whole rows: 8·RPW rows (RPW a
        // power of two up to 8, one for the launch), or fewer where the
        // bits budget allows fewer.
        static const int per_sm = knob("CORTIQ_ROWS_BLOCKS_PER_SM", 3, 1, 16);
        int64_t total_words = 0;
        for (int i = 0; i < n; ++i)
            total_words += products[c0 + i].piece[0].s.rows * row_words(products[c0 + i]);
        const int64_t per_block = std::max<int64_t>(1, ceil_div(total_words, per_sm * sm_count()));
        int rpw = 1;
        for (int i = 0; i < n; ++i) {
            const SignProduct& pr = products[c0 + i];
            CORTIQ_ASSERT(sign_rows_fits(pr, rows), "sign_rows: a product does not fit");
            const int64_t rw = row_words(pr);
            const int64_t want = std::min(ceil_div(per_block, rw), bits_budget(rows) / (4 * rw));
            while (rpw < kRowsPerWarp && kWarps * rpw < want) rpw *= 2;
        }
        Params p{};
        int blocks = 0;
        size_t bits_bytes = 0;
        for (int i = 0; i < n; ++i) {
            const SignProduct& pr = products[c0 + i];
            const int64_t rw = row_words(pr), m = pr.piece[0].s.rows;
            if (m == 0) continue;
            const int64_t rpb =
                std::clamp<int64_t>(bits_budget(rows) / (4 * rw), 1, int64_t{kWarps} * rpw);
            p.prod[p.count] = pr;
            p.rows_per_block[p.count] = static_cast<int>(rpb);
            p.first_block[p.count] = blocks;
            blocks += static_cast<int>(ceil_div(m, rpb));
            bits_bytes = std::max(bits_bytes, static_cast<size_t>(4 * rpb * rw));
            ++p.count;
        }
        if (p.count == 0) continue;
        p.first_block[p.count] = blocks;
        if (rows == 1)
            launch_rpw<1>(rpw, p, blocks, bits_bytes, stream);
        else
            launch_rpw<2>(rpw, p, blocks, bits_bytes, stream);
    }
}

}  // namespace cortiq::model::cuda
