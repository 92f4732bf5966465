// The decode product of a sign matrix (model/cuda/sign_gemv.hpp) with a table
// of signed sums of four inputs in shared memory (sign_gemv_device.cuh).
//
// A block of 8 warps owns a span of G groups of 1024 columns (G ≤ 4) and a
// chunk of rows: it tabulates its span's inputs, then sums its rows, whose
// bits come through shared memory in slabs of 32 KB (cp.async; the first
// slab is in flight while the table is built). Spans meet in a partial
// buffer; the last block of a row chunk to finish (counted with an atomic)
// sums them in span order, so the result does not depend on timing.
#include <algorithm>
#include <cstdlib>

#include "core/error.hpp"
#include "model/cuda/sign_gemv.hpp"
#include "model/cuda/sign_gemv_device.cuh"

namespace cortiq::model::cuda {

namespace ec = cortiq::cuda;

namespace {

using gemv::kGroupCols;
using gemv::kLut;
using gemv::kSlabRows;
using gemv::kSlabWords;
using gemv::kThreads;
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
    gemv::copy_slab<G>(bits, p.s.ld, live, k0, k1, slabs);
#if __CUDA_ARCH__ >= 900
    cudaGridDependencySynchronize();
#endif
    // the table is built while the first slab is on its way
    const int64_t c0 = int64_t{blockIdx.x} * kGroupCols * G;
    gemv::tabulate<R, G>(
        [&](int i, int64_t j) {
            j += c0;
            float v = 0.0f;
            if (j < p.s.cols) {
                v = p.io.in[i * p.io.ld_in + j];
                if (p.io.in_scale) v *= __half2float(p.io.in_scale[j]);
            }
            return v;
        },
        lut);
    __syncthreads();

    uint32_t* const bufs[2] = {slabs, slabs + kSlabWords};
    gemv::sum_rows<R, G>(bits, p.s.ld, live, k0, k1, lut + lane, bufs,
                         [&](int i, int64_t k, float sum) {
                             if (p.spans == 1)
                                 finish(p.io, i, k, sum);
                             else
                                 p.part[(int64_t{blockIdx.x} * R + i) * p.s.rows + k] = sum;
                         });
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

// A benchmark's knob from the environment, read once per name at first use.
int knob(const char* name, int fallback, int lo, int hi) {
    const char* e = std::getenv(name);
    return e ? std::clamp(std::atoi(e), lo, hi) : fallback;
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
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1] = {};
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    // On by default since the bits come in slabs: the next product copies its
    // first slab while this one finishes. On the H200 at 1 bpw: 4096×11008
    // 16.3 → 14.3 µs, a 32-layer model's linears 3.017 → 2.608 ms per token
    // (CUDA graph). With loads into registers it had been slower (29.6 against
    // 17.1 µs), the waiting blocks holding their SMs. CORTIQ_GEMV_PDL=0: off.
    static const int pdl = knob("CORTIQ_GEMV_PDL", 1, 0, 1);
    attr[0].val.programmaticStreamSerializationAllowed = pdl;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, sign_gemv_kernel<R, G>, p));
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

int sm_count() {
    static const int n = [] {
        int dev = 0, v = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
        return v;
    }();
    return n;
}

int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
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
