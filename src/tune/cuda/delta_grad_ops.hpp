// The CUDA twins of tune/delta_grad_ops.hpp: float32 forward and backward
// passes of the operations of Qwen3.5's Gated DeltaNet mixer on device
// buffers, same names, same shapes, same conventions (row-major activations,
// one row per token, `windows` windows of L rows each starting from zero
// states; dx-like outputs overwritten, parameter gradients added, may be
// null). Every launcher enqueues on the Gpu's stream. Reductions across rows
// or columns are taken in a fixed order (no float atomics), so results repeat
// bit for bit run to run. tests/test_tune_delta_grad_gpu.cpp checks each
// against the CPU float64 reference.
#pragma once

#include <cstdint>

#include "core/cuda/device.hpp"
#include "tune/delta_grad_ops.hpp"

namespace cortiq::tune::cuda {

using cortiq::cuda::DeviceBuffer;
using cortiq::cuda::DVec;
using cortiq::cuda::Gpu;

// ── convolution, normalisations, gates (delta_conv.cu) ─────────────────────────
// pre = causal depthwise convolution of width K (K ≤ 8), y = silu(pre).
void conv_silu_forward(const Gpu& g, const float* x, int64_t windows, int64_t L, int64_t C,
                       const float* w, int64_t K, float* pre, float* y);
// dx overwritten; dw (C · K) added, may be null.
void conv_silu_backward(const Gpu& g, const float* dy, const float* x, const float* pre,
                        int64_t windows, int64_t L, int64_t C, const float* w, int64_t K, float* dx,
                        float* dw);

// Per head of d values (row stride ld for x and y): y = x · inv. y may be x.
void l2norm_forward(const Gpu& g, const float* x, int64_t rows, int64_t ld, int64_t heads,
                    int64_t d, float eps, float* y, float* inv);
// dx may be dy.
void l2norm_backward(const Gpu& g, const float* dy, const float* y, const float* inv, int64_t rows,
                     int64_t ld, int64_t heads, int64_t d, float* dx);

void delta_gates_forward(const Gpu& g, const float* a, const float* b, int64_t rows, int64_t heads,
                         const float* a_log, const float* dt_bias, float* gate, float* beta);
void delta_gates_backward(const Gpu& g, const float* dgate, const float* dbeta, const float* a,
                          const float* beta, int64_t rows, int64_t heads, const float* a_log,
                          const float* dt_bias, float* da, float* db);

void rmsnorm_gated_forward(const Gpu& g, const float* x, const float* z, int64_t rows, int64_t n,
                           const float* w, float eps, float* y, float* rstd);
// dx, dz overwritten; dw (n) added, may be null.
void rmsnorm_gated_backward(const Gpu& g, const float* dy, const float* x, const float* z,
                            const float* w, const float* rstd, int64_t rows, int64_t n, float* dx,
                            float* dz, float* dw);

// ── the gated delta rule (delta_rule.cu) ───────────────────────────────────────
// The inputs, device pointers (tune::DeltaRuleT's layout); dk ≤ 128.
using DeltaRule = tune::DeltaRuleT<float>;

// The chunk checkpoints: windows × ⌈L/chunk⌉ × v_heads × dk × dv floats, the
// state at the start of every chunk (the CPU's `states`, same layout).
int64_t delta_rule_states_size(const DeltaRule& r, int64_t chunk);

// The backward's scratch, kept between calls so a tuning loop allocates once
// (delta_rule_backward sizes it). With T = ⌈dv/32⌉ column tiles and dk' = dk
// rounded up to 32, 64 or 128:
//   steps:    windows × v_heads × T × chunk × dk' × 32 floats, the states
//             inside one chunk, recomputed from its checkpoint;
//   partials: T × windows · L × v_heads × (2 dk + 2) floats, each tile's share
//             of dq, dk, dβ, dg before they are summed over the tiles.
// For the 0.8B model (16 heads, dk = dv = 128, chunk 64) that is 67 MB and
// 135 MB per window of 2048 tokens.
struct DeltaRuleScratch {
    DVec steps, partials;
};

// As tune::delta_rule_forward; `states` is resized to delta_rule_states_size.
void delta_rule_forward(const Gpu& g, const DeltaRule& r, int64_t chunk, float* out, int64_t ld_o,
                        DVec& states);
// As tune::delta_rule_backward: dq, dk (stride ld_qk), dv (stride ld_v), dg,
// dbeta (rows × v_heads) overwritten; they may be columns of one buffer.
void delta_rule_backward(const Gpu& g, const DeltaRule& r, int64_t chunk, const DVec& states,
                         const float* dout, int64_t ld_o, float* dq, float* dk, float* dv,
                         float* dg, float* dbeta, DeltaRuleScratch& scratch);

}  // namespace cortiq::tune::cuda
