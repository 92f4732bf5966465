// What the GPU benchmarks share: median times of CUDA events, of a call on
// its own and of a call inside a captured CUDA graph. CUDA builds only.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "core/cuda/device.hpp"

namespace cortiq::bench {

// Median milliseconds of `reps` runs of f on the stream, after a warm-up.
template <class F>
double time_ms(cudaStream_t st, int reps, F&& f) {
    f();
    CUDA_CHECK(cudaStreamSynchronize(st));
    std::vector<float> t;
    cudaEvent_t a, b;
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
    for (int i = 0; i < reps; ++i) {
        CUDA_CHECK(cudaEventRecord(a, st));
        f();
        CUDA_CHECK(cudaEventRecord(b, st));
        CUDA_CHECK(cudaEventSynchronize(b));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

// Median milliseconds of one run of f when `batch` runs are captured in a
// CUDA graph and launched together: the GPU's time, without the host's
// launch latency between kernels.
// f(i) runs the i-th of the batch (e.g. on its own copy of the weights).
template <class F>
double graph_ms(cudaStream_t st, int reps, int batch, F&& f) {
    f(0);  // buffers before capture
    CUDA_CHECK(cudaStreamSynchronize(st));
    cudaGraph_t g;
    cudaGraphExec_t e;
    CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < batch; ++i) f(i);
    CUDA_CHECK(cudaStreamEndCapture(st, &g));
    CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
    cudaGraphDestroy(g);
    const double ms = time_ms(st, reps, [&] { CUDA_CHECK(cudaGraphLaunch(e, st)); }) / batch;
    cudaGraphExecDestroy(e);
    return ms;
}

}  // namespace cortiq::bench
