// The floors under a packed decode on this GPU, side by side in one run
// (prints a table; not a timed unit test):
//   bench_launch_floor_gpu [--bytes 4.1e6,1.5e6] [--reps 200] [--batch 48]
// A packed BLR decode is two dependent sign products (t = S_Vᵀ v, then
// y = S_U t) plus the input's bit planes: a chain of dependent steps whose
// bytes are small (5.6 MB at 4096×11008, 1 bpw). What does the chain itself
// cost? Each row is µs per call, the calls captured in a CUDA graph, each on
// its own copy of the bytes (past the 50 MB L2):
//   - empty kernels, 1 and 3 in a chain (programmatic dependent launch, as
//     the decode launches them);
//   - one kernel streaming both products' bytes, and the same bytes as two
//     chained kernels;
//   - one persistent kernel (a block per SM slot, all resident) with one and
//     two grid barriers (an arrival counter and a generation word), empty
//     and streaming the bytes on either side of its barriers.
// The ratio that matters is the fp16 GEMV's time (bench_blr_gpu) to these.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_gpu_timing.hpp"
#include "core/cuda/device.hpp"
#include "core/error.hpp"
#include "model/cuda/sign_launch.hpp"

namespace {

constexpr int kThreads = 256;

// The sign products' own 16-byte load, past L1 (model/cuda/sign_launch.hpp).
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
    return cortiq::model::cuda::sign_detail::load_stream(reinterpret_cast<const uint32_t*>(p));
}

// XOR of a slice of words: the block's share of `count` uint4s (a sink keeps it).
__device__ uint32_t stream_share(const uint4* p, int64_t count, int64_t block, int64_t blocks) {
    const int64_t per = (count + blocks - 1) / blocks, lo = block * per, hi = min(count, lo + per);
    uint32_t acc = 0;
    for (int64_t i = lo + threadIdx.x; i < hi; i += kThreads) {
        const uint4 v = load_stream(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    return acc;
}

__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
    cudaTriggerProgrammaticLaunchCompletion();
    cudaGridDependencySynchronize();
#endif
}

__global__ void empty_kernel(uint32_t* sink) {
    pdl_wait();
    if (threadIdx.x == 0 && sink[0] == 0x9e3779b9u) sink[1] = blockIdx.x;
}

__global__ void stream_kernel(const uint4* p, int64_t count, uint32_t* sink) {
    pdl_wait();
    const uint32_t acc = stream_share(p, count, blockIdx.x, gridDim.x);
    if (acc == 0x9e3779b9u) sink[1] = acc;
}

// A barrier over every block of a launch whose blocks are all resident at
// once (the persistent grid below). Two words in global memory, zero at
// first: the arrivals and a generation. Thread 0 of each block reads the
// generation, then arrives; the last to arrive resets the arrivals and bumps
// the generation, which the others poll (acquire). Both words are reusable
// after each barrier. A block that polls for ~2^31 rounds traps instead of
// hanging (a grid that was not resident).
__device__ __forceinline__ unsigned load_acquire_gpu(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ inline void grid_barrier(unsigned* words) {
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned gen = load_acquire_gpu(words + 1);
        __threadfence();  // this block's writes before its arrival
        if (atomicAdd(words, 1u) == gridDim.x * gridDim.y * gridDim.z - 1) {
            words[0] = 0;
            __threadfence();
            atomicAdd(words + 1, 1u);
        } else {
            for (uint32_t spins = 0; load_acquire_gpu(words + 1) == gen; ++spins)
                if (spins == 0x80000000u) __trap();
        }
        __threadfence();
    }
    __syncthreads();
}

// `barriers` grid barriers; the bytes a before the first, b after the last.
__global__ void persistent_kernel(const uint4* a, int64_t na, const uint4* b, int64_t nb,
                                  int barriers, unsigned* bar, uint32_t* sink) {
    uint32_t acc = stream_share(a, na, blockIdx.x, gridDim.x);
    for (int i = 0; i < barriers; ++i) grid_barrier(bar);
    acc ^= stream_share(b, nb, blockIdx.x, gridDim.x);
    if (acc == 0x9e3779b9u) sink[1] = acc;
}

// b's loads issued before the barriers (into registers), used after.
__global__ void persistent_prefetch_kernel(const uint4* a, int64_t na, const uint4* b, int64_t nb,
                                           int barriers, unsigned* bar, uint32_t* sink) {
    constexpr int kAhead = 8;
    const int64_t per = (nb + gridDim.x - 1) / gridDim.x, lo = blockIdx.x * per,
                  hi = min(nb, lo + per);
    uint4 ahead[kAhead];
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
        const int64_t i = lo + threadIdx.x + int64_t{u} * kThreads;
        ahead[u] = i < hi ? load_stream(b + i) : make_uint4(0, 0, 0, 0);
    }
    uint32_t acc = stream_share(a, na, blockIdx.x, gridDim.x);
    for (int i = 0; i < barriers; ++i) grid_barrier(bar);
#pragma unroll
    for (int u = 0; u < kAhead; ++u) acc ^= ahead[u].x ^ ahead[u].y ^ ahead[u].z ^ ahead[u].w;
    for (int64_t i = lo + threadIdx.x + int64_t{kAhead} * kThreads; i < hi; i += kThreads) {
        const uint4 v = load_stream(b + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) sink[1] = acc;
}

template <class... Args>
void launch(void (*kernel)(Args...), int blocks, bool pdl, cudaStream_t st, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>(blocks));
    cfg.blockDim = dim3(kThreads);
    cfg.stream = st;
    cudaLaunchAttribute attr[1] = {};
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

}  // namespace

int main(int argc, char** argv) try {
    double bytes_a = 4.08e6, bytes_b = 1.52e6;  // S_Vᵀ and S_U of 4096×11008 at 1 bpw
    int reps = 200, batch = 48;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--bytes") {
            std::stringstream ss(v);
            std::string x;
            std::getline(ss, x, ',');
            bytes_a = std::stod(x);
            std::getline(ss, x, ',');
            bytes_b = std::stod(x);
        } else if (k == "--reps") {
            reps = std::stoi(v);
        } else if (k == "--batch") {
            batch = std::stoi(v);
        } else {
            throw std::runtime_error("unknown flag " + k);
        }
    }
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    int dev = 0, sms = 0, per_sm = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_prefetch_kernel,
                                                             kThreads, 0));
    const int resident = sms * std::min(per_sm, 3);
    const int64_t na = static_cast<int64_t>(bytes_a / 16), nb = static_cast<int64_t>(bytes_b / 16);
    // copies so that a batch reads ≥ 256 MB
    const int copies =
        static_cast<int>(std::clamp(std::ceil(256e6 / (16.0 * (na + nb))), 1.0, 64.0));
    cortiq::cuda::DeviceBuffer<uint4> buf(copies * (na + nb), st);
    CUDA_CHECK(cudaMemsetAsync(buf.get(), 0x5a, sizeof(uint4) * buf.size(), st));
    cortiq::cuda::DeviceBuffer<uint32_t> sink(2, st);
    CUDA_CHECK(cudaMemsetAsync(sink.get(), 0, 8, st));
    cortiq::cuda::DeviceBuffer<unsigned> bar(2, st);
    CUDA_CHECK(cudaMemsetAsync(bar.get(), 0, 8, st));
    auto a_of = [&](int i) { return buf.get() + (i % copies) * (na + nb); };
    auto b_of = [&](int i) { return a_of(i) + na; };
    uint32_t* s = sink.get();
    unsigned* br = bar.get();
    const int blocks_a =
        static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(na / 64, 2 * resident)));
    struct Row {
        std::string name;
        double us;
        bool reads;
    };
    std::vector<Row> rows;
    auto add = [&](std::string name, auto&& f) {
        const bool reads = name.find("empty") == std::string::npos;
        rows.push_back({name, 1e3 * cortiq::bench::graph_ms(st, reps, batch, f), reads});
    };
    add("empty kernel ×1 (PDL)", [&](int) { launch(empty_kernel, resident, true, st, s); });
    add("empty kernels ×3 chained (PDL)", [&](int) {
        for (int k = 0; k < 3; ++k) launch(empty_kernel, resident, true, st, s);
    });
    add("empty kernels ×3 chained (no PDL)", [&](int) {
        for (int k = 0; k < 3; ++k) launch(empty_kernel, resident, false, st, s);
    });
    add("stream a+b in one kernel", [&](int i) {
        launch(stream_kernel, blocks_a, true, st, static_cast<const uint4*>(a_of(i)), na + nb, s);
    });
    add("stream a, then b (2 kernels, PDL)", [&](int i) {
        launch(stream_kernel, blocks_a, true, st, static_cast<const uint4*>(a_of(i)), na, s);
        launch(stream_kernel, blocks_a, true, st, static_cast<const uint4*>(b_of(i)), nb, s);
    });
    for (int nbar : {0, 1, 2}) {
        add("persistent, empty, " + std::to_string(nbar) + " grid barrier(s)", [&](int) {
            launch(persistent_kernel, resident, false, st, static_cast<const uint4*>(nullptr),
                   int64_t{0}, static_cast<const uint4*>(nullptr), int64_t{0}, nbar, br, s);
        });
        add("persistent, a | " + std::to_string(nbar) + " barrier(s) | b", [&](int i) {
            launch(persistent_kernel, resident, false, st, static_cast<const uint4*>(a_of(i)), na,
                   static_cast<const uint4*>(b_of(i)), nb, nbar, br, s);
        });
        add("persistent, b prefetched, a | " + std::to_string(nbar) + " barrier(s) | b",
            [&](int i) {
                launch(persistent_prefetch_kernel, resident, false, st,
                       static_cast<const uint4*>(a_of(i)), na, static_cast<const uint4*>(b_of(i)),
                       nb, nbar, br, s);
            });
    }
    CUDA_CHECK(cudaStreamSynchronize(st));
    unsigned host_bar[2];
    CUDA_CHECK(cudaMemcpy(host_bar, br, 8, cudaMemcpyDeviceToHost));
    if (host_bar[0] != 0) throw std::runtime_error("grid barrier left arrivals behind");
    std::printf(
        "SMs %d, resident blocks %d (%d per SM, 256 threads), bytes a %.2f MB, b %.2f MB, %d "
        "copies\n\n| chain | µs per call | GB/s of a+b |\n|---|---|---|\n",
        sms, resident, per_sm, 16e-6 * na, 16e-6 * nb, copies);
    for (const auto& r : rows) {
        if (r.reads)
            std::printf("| %s | %.2f | %.0f |\n", r.name.c_str(), r.us,
                        16.0 * (na + nb) / (r.us * 1e3));
        else
            std::printf("| %s | %.2f | — |\n", r.name.c_str(), r.us);
    }
    cudaStreamDestroy(st);
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "bench_launch_floor_gpu: %s\n", e.what());
    return 1;
}
