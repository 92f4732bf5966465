// The column-search kernels of gptq_v (internal to src/encode/cuda/).
#pragma once

#include <cstdint>

#include "encode/cuda/common.hpp"

namespace cortiq::encode::cuda {

struct GptqArgs {
    const float* b;    // n × r targets Mᵀt_j (permuted, trailing updates applied)
    float* s;          // n × r signs (permuted), updated
    const float* ks0;  // n × r, K s_j of the starting signs
    const float* k;    // r × r
    const float* kd;   // diag K
    const float* uc;   // n × n
    float* e;          // n × r scaled latent errors (out)
    float* g;          // n (out, permuted order)
    int64_t n, r, j0, j1;
    double tol;
    int passes;
    int feedback;
    unsigned long long* flips;
};

// A launch plan: threads per block, columns per block (bounded by shared memory).
struct GptqPlan {
    int threads = 256;
    int nb = 0;
    int ept = 1;  // batched kernel: elements of r per thread (a power of two)
    size_t smem = 0;
};

GptqPlan plan_windowed(const Gpu& g, int64_t r, int block);
// threads: per block (0: 256 up to r = 256, else 512)
GptqPlan plan_batched(const Gpu& g, int64_t r, int block, int threads = 0);
// Sets the kernel's shared-memory limit and returns the launcher of one block
// of columns [a.j0, a.j1) on the Gpu's stream.
void launch_windowed(const Gpu& g, const GptqArgs& a, const GptqPlan& p);
void launch_batched(const Gpu& g, const GptqArgs& a, const GptqPlan& p);
void prepare_windowed(const GptqPlan& p);
void prepare_batched(const GptqPlan& p);

// Does flipping bit a raise φ = α²/β by more than the tolerance? (the CPU's
// phi2 > phi·(1+tol) + 1e-300, multiplied through by β·β' > 0)
__device__ inline bool gptq_gain(float sa, float ba, float ksa, float kaa, double alpha,
                                 double beta, double tol) {
    const double alpha2 = alpha - 2.0 * sa * ba;
    const double beta2 = beta - 4.0 * sa * ksa + 4.0 * kaa;
    if (!(beta2 > 0)) return false;
    if (!(beta > 0)) return alpha2 * alpha2 > 1e-300 * beta2;
    return alpha2 * alpha2 * beta > alpha * alpha * beta2 * (1 + tol) + 1e-300 * beta * beta2;
}

}  // namespace cortiq::encode::cuda
