// The decode product of a sign matrix (model/cuda/sign_gemv.hpp) with a table
// of signed sums, the lookup method of bitnet.cpp and T-MAC, in shared memory.
//
// A block of 8 warps owns a span of G groups of 1024 columns (G ≤ 4) and a
// chunk of rows. It first tabulates, for each 4 inputs of its span, the 16
// signed sums e(nib) = Σ_b (bit b of nib ? −v_b : v_b). A warp then takes one
// row at a time: lane L reads the row's word 32·(G·span + g) + L and adds 8
// table entries per word, one per nibble, so a bit costs a quarter of a
// shift, mask, load and add instead of an extract, a sign flip and an add
// each. The bits come through shared memory in slabs of 32 KB, copied with
// cp.async (each lane copies the words it will read, 128-byte rows per warp):
// the first slab is in flight while the table is built, the next while one is
// summed, so a block keeps its whole slab of loads in flight instead of a few
// rows per warp. The table is indexed [nibble group q][nibble][lane], so the
// 32 lanes of a lookup hit 32 different banks. Spans meet in a partial
// buffer; the last block of a row chunk to finish (counted with an atomic)
// sums them in span order, so the result does not depend on timing.
#include <algorithm>
#include <cstdlib>

#include "core/error.hpp"
#include "model/cuda/sign_gemv.hpp"
#include "model/cuda/sign_launch.hpp"

namespace cortiq::model::cuda {

namespace ec = cortiq::cuda;

namespace {

using namespace sign_detail;

constexpr int kGroupCols = 1024;     // columns a warp covers with one word per lane
constexpr int kLut = 8 * 16 * 32;    // table floats per group and row: [q][nibble][lane]
constexpr int kThreads = 256;        // 8 warps: warp q tabulates nibble group q
constexpr int kRowsPerWarpStep = 4;  // rows a warp sums side by side
constexpr int kSlabWords = 8192;     // 32 KB of bits per slab buffer (two: one copied, one summed)
template <int G>
constexpr int64_t kSlabRows = kSlabWords / (32 * G);  // rows of 32·G words per slab
constexpr int kMaxGroups = 4;  // a span: up to 4096 columns (64 KB of table a row)

struct Params {
    SignMatrix s;
    GemvIo io;
    float* part;         // spans × R × s.rows
    unsigned* counters;  // per row chunk
    int spans;
    int64_t chunk;  // rows per chunk
};

// out[i, k] = β·out[i, k] + bias[k] + scale[k]·sum
__device__ __forceinline__ void finish(const GemvIo& io, int i, int64_t k, float sum) {
    float* o = io.out + i * io.ld_out + k;
    float v = io.beta == 0.0f ? 0.0f : io.beta * *o;
    if (io.bias) v += io.bias[k];
    *o = v + (io.out_scale ? __half2float(io.out_scale[k]) : 1.0f) * sum;
}

// Thread (warp q, lane L) tabulates, in each group g of the span, the 4
// inputs c0 + 1024g + 32L + 4q + b, b < 4 (zero past the last column): the
// nibble q of lane L's word g.
template <int R, int G>
__device__ __forceinline__ void tabulate(const Params& p, int64_t c0, float* lut) {
    const int lane = threadIdx.x & 31, q = threadIdx.x >> 5;
#pragma unroll
    for (int i = 0; i < R; ++i)
#pragma unroll
        for (int g = 0; g < G; ++g) {
            float v[4];
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                const int64_t j = c0 + kGroupCols * g + 32 * lane + 4 * q + b;
                v[b] = 0.0f;
                if (j < p.s.cols) {
                    v[b] = p.io.in[i * p.io.ld_in + j];
                    if (p.io.in_scale) v[b] *= __half2float(p.io.in_scale[j]);
                }
            }
            float e[16];
            signed_sums(v, e);
            float* dst = lut + (i * G + g) * kLut + q * 512 + lane;
#pragma unroll
            for (int nib = 0; nib < 16; ++nib) dst[nib * 32] = e[nib];
        }
}

// Bits come through cp.async (copy_word_async, sign_launch.hpp): the copies of a
// whole slab of rows are in flight at once, where loads into registers were
// limited to the registers a lane could hold (4 rows ahead). Measured on the
// H200 this alone changed little (4096×11008 at 1 bpw: 16.3 against 15.7 µs):
// each product is bound by its chain of dependent steps, not by the loads in
// flight; what it bought is the overlap with programmatic dependent launch
// (14.3 µs, launch() below).
template <int N>
__device__ __forceinline__ void wait_copies() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Lane `lane` of warp `warp` copies its words of the slab's rows s0 + warp,
// s0 + warp + 8, ... (< k1) into buf (row-major, 32·G words a row): a lane
// later reads only the words it copied, so its own wait suffices.
template <int G>
__device__ __forceinline__ void copy_slab(const Params& p, const uint32_t* bits, const bool live[G],
                                          int64_t s0, int64_t k1, uint32_t* buf) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t s1 = min(k1, s0 + kSlabRows<G>);
    for (int64_t k = s0 + warp; k < s1; k += 8)
#pragma unroll
        for (int g = 0; g < G; ++g)
            if (live[g])
                copy_word_async(buf + (k - s0) * 32 * G + 32 * g + lane,
                                bits + k * p.s.ld + 32 * g);
    commit_copies();
}

// The rows of one slab that this warp owns, kRowsPerWarpStep at a time (the
// warp sums of several rows overlap).
template <int R, int G>
__device__ __forceinline__ void slab_rows(const Params& p, const float* tab, const bool live[G],
                                          const uint32_t* buf, int64_t s0, int64_t k1) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t s1 = min(k1, s0 + kSlabRows<G>);
    for (int64_t k = s0 + warp; k < s1; k += 8 * kRowsPerWarpStep) {
        float acc[kRowsPerWarpStep][R];
#pragma unroll
        for (int u = 0; u < kRowsPerWarpStep; ++u) {
            const int64_t ku = k + 8 * u;
#pragma unroll
            for (int i = 0; i < R; ++i) acc[u][i] = 0.0f;
#pragma unroll
            for (int g = 0; g < G; ++g) {
                const uint32_t w =
                    live[g] && ku < s1 ? buf[(ku - s0) * 32 * G + 32 * g + lane] : 0u;
#pragma unroll
                for (int q = 0; q < 8; ++q) {
                    const uint32_t nib = (w >> (4 * q)) & 15u;
#pragma unroll
                    for (int i = 0; i < R; ++i)
                        acc[u][i] += tab[(i * G + g) * kLut + q * 512 + nib * 32];
                }
            }
        }
#pragma unroll
        for (int u = 0; u < kRowsPerWarpStep; ++u) {
            const int64_t ku = k + 8 * u;
#pragma unroll
            for (int i = 0; i < R; ++i) {
                const float sum = warp_sum(acc[u][i]);
                if (lane != 0 || ku >= s1) continue;
                if (p.spans == 1)
                    finish(p.io, i, ku, sum);
                else
                    p.part[(int64_t{blockIdx.x} * R + i) * p.s.rows + ku] = sum;
            }
        }
    }
}

template <int R, int G>
__global__ void __launch_bounds__(kThreads) sign_gemv_kernel(Params p) {
    extern __shared__ float smem[];  // the table (R × G × kLut), then two slabs of bits
    float* lut = smem;
    uint32_t* slabs = reinterpret_cast<uint32_t*>(smem + R * G * kLut);
    __shared__ bool last;
    const int lane = threadIdx.x & 31;
    const int64_t k0 = int64_t{blockIdx.y} * p.chunk, k1 = min(p.s.rows, k0 + p.chunk);
    const int64_t wcol = int64_t{blockIdx.x} * 32 * G + lane;  // this lane's first word of a row
    bool live[G];
#pragma unroll
    for (int g = 0; g < G; ++g) live[g] = wcol + 32 * g < p.s.ld;
    const uint32_t* bits = p.s.words + wcol;
    // With programmatic dependent launch (sm_90, the default) the next
    // kernel may start now; this one starts copying its first slab of bits,
    // which no earlier kernel writes, and only then waits for the earlier
    // kernels' results (in, out, scratch). Without it both calls return at once.
#if __CUDA_ARCH__ >= 900
    cudaTriggerProgrammaticLaunchCompletion();
#endif
    copy_slab<G>(p, bits, live, k0, k1, slabs);
#if __CUDA_ARCH__ >= 900
    cudaGridDependencySynchronize();
#endif
    // the table is built while the first slab is on its way
    tabulate<R, G>(p, int64_t{blockIdx.x} * kGroupCols * G, lut);
    __syncthreads();

    const float* tab = lut + lane;
    int b = 0;
    for (int64_t s0 = k0; s0 < k1; s0 += kSlabRows<G>, b ^= 1) {
        if (s0 + kSlabRows<G> < k1) {  // the next slab flies while this one is summed
            copy_slab<G>(p, bits, live, s0 + kSlabRows<G>, k1, slabs + (b ^ 1) * kSlabWords);
            wait_copies<1>();
        } else {
            wait_copies<0>();
        }
        slab_rows<R, G>(p, tab, live, slabs + b * kSlabWords, s0, k1);
    }
    if (p.spans == 1) return;

    // The last block of this row chunk adds the spans' partials: the lanes
    // that wrote partials make them visible first.
    if (lane == 0) __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(p.counters + blockIdx.y, 1u) == unsigned(p.spans - 1);
    __syncthreads();
    if (!last) return;
    __threadfence();
    const int64_t len = k1 - k0;
    for (int64_t t = threadIdx.x; t < R * len; t += kThreads) {
        const int i = static_cast<int>(t / len);
        const int64_t k = k0 + t % len;
        float sum = 0.0f;
        for (int sp = 0; sp < p.spans; ++sp)
            sum += __ldcg(p.part + (int64_t{sp} * R + i) * p.s.rows + k);
        finish(p.io, i, k, sum);
    }
    if (threadIdx.x == 0) p.counters[blockIdx.y] = 0u;  // ready for the next call
}

template <int R, int G>
void launch(const Params& p, dim3 grid, cudaStream_t stream) {
    const size_t smem = sizeof(float) * kLut * R * G + 2 * sizeof(uint32_t) * kSlabWords;
    static const bool sized = [&] {  // tables past 48 KB need the opt-in, once
        CUDA_CHECK(cudaFuncSetAttribute(sign_gemv_kernel<R, G>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
        return true;
    }();
    (void)sized;
    launch_pdl(sign_gemv_kernel<R, G>, grid, kThreads, smem, stream, p);
}

template <int R>
void launch_groups(int groups, const Params& p, dim3 grid, cudaStream_t stream) {
    switch (groups) {
        case 1:
            return launch<R, 1>(p, grid, stream);
        case 2:
            return launch<R, 2>(p, grid, stream);
        case 3:
            return launch<R, 3>(p, grid, stream);
        default:
            return launch<R, 4>(p, grid, stream);
    }
}

// Groups of 1024 columns per span: 1, or CORTIQ_GEMV_GROUPS up to 4. On the
// H200 one group was faster than four at every shape of bench_blr_gpu (17.1
// against 25.3 µs at 4096×11008, 1 bpw): more, smaller blocks hide more
// latency than the fewer cross-span sums save.
int max_groups() {
    static const int g = knob("CORTIQ_GEMV_GROUPS", 1, 1, kMaxGroups);
    return g;
}

}  // namespace

void sign_gemv(const SignMatrix& s, const GemvIo& io, int rows, GemvScratch& ws,
               cudaStream_t stream) {
    CORTIQ_ASSERT(rows == 1 || rows == 2, "sign_gemv takes 1 or 2 rows, not {}", rows);
    CORTIQ_ASSERT(s.ld >= ceil_div(s.cols, 32));
    if (s.rows == 0) return;
    // spans of up to max_groups() groups, the groups spread evenly over them
    const int64_t groups_total = std::max<int64_t>(1, ceil_div(s.cols, kGroupCols));
    const int64_t spans = ceil_div(groups_total, max_groups());
    const int groups = static_cast<int>(ceil_div(groups_total, spans));
    Params p{s, io, nullptr, nullptr, static_cast<int>(spans), 0};
    // about one block per SM (CORTIQ_GEMV_BLOCKS_PER_SM), a chunk at least 16
    // rows (two per warp). On the H200 at 1 bpw, 1 block per SM gave 15.8 µs
    // at 4096×11008 and 2.875 ms for a 32-layer model's linears; 2: 15.9 µs,
    // 2.917 ms; 3: 17.1 µs, 3.296 ms; 6: 27.1 µs, 5.35 ms. Each block builds
    // a table and adds its partials once: fewer, longer blocks win.
    static const int per_sm = knob("CORTIQ_GEMV_BLOCKS_PER_SM", 1, 1, 16);
    int64_t chunks = std::clamp<int64_t>(ceil_div(per_sm * sm_count(), spans), 1,
                                         std::max<int64_t>(1, ceil_div(s.rows, 16)));
    chunks = std::min<int64_t>(chunks, 65535);
    p.chunk = ceil_div(s.rows, chunks);
    chunks = ceil_div(s.rows, p.chunk);
    if (spans > 1) {
        const int64_t need = spans * rows * s.rows;
        if (ws.part.size() < need) ws.part = ec::DVec(need, stream);
        if (ws.counters.size() < chunks) {
            ws.counters = ec::DeviceBuffer<unsigned>(std::max<int64_t>(chunks, 1024), stream);
            CUDA_CHECK(cudaMemsetAsync(ws.counters.get(), 0,
                                       sizeof(unsigned) * static_cast<size_t>(ws.counters.size()),
                                       stream));
        }
        p.part = ws.part.get();
        p.counters = ws.counters.get();
    }
    const dim3 grid(static_cast<unsigned>(spans), static_cast<unsigned>(chunks));
    if (rows == 1)
        launch_groups<1>(groups, p, grid, stream);
    else
        launch_groups<2>(groups, p, grid, stream);
}

}  // namespace cortiq::model::cuda
