// The CUDA twin of tune/block.hpp: a decoder block's forward and backward on
// device buffers (float32), the same stages in the same order, so that
// tests/test_tune_grad_gpu.cpp can hold every activation and gradient against
// the CPU block. Parameters, gradients and activations live on the device;
// upload/download move them to and from the host structures of tune/block.hpp.
#pragma once

#include <optional>
#include <vector>

#include "tune/block.hpp"
#include "tune/cuda/delta_grad_ops.hpp"
#include "tune/cuda/grad_ops.hpp"

namespace cortiq::tune::cuda {

struct DLinear {
    int64_t m = 0, n = 0;
    std::optional<DBlr> blr;  // set: y = BLR(x); else y = x Wᵀ
    DVec w;                   // m × n when dense
    DVec bias;                // empty or m values
};

struct DBlockParams {
    bool delta = false;  // tune::BlockParamsT::delta
    DVec in_norm, post_norm, q_norm, k_norm;
    DLinear q, k, v, o, gate, up, down;
    DLinear qkv, z, b, a, out;  // Gated DeltaNet
    DVec conv, a_log, dt_bias, gnorm;
    // The linears in the order of tune::BlockParamsT::linears().
    std::vector<DLinear*> linears() {
        return {&q, &k, &v, &o, &gate, &up, &down, &qkv, &z, &b, &a, &out};
    }
    std::vector<const DLinear*> linears() const {
        return {&q, &k, &v, &o, &gate, &up, &down, &qkv, &z, &b, &a, &out};
    }
};
DBlockParams upload(const BlockParamsT<float>& p, cudaStream_t stream);
// The same with every BLR layer's signs packed (DBlrPath::packed), for a
// tuner that does not move them; on g's stream.
DBlockParams upload_packed(const Gpu& g, const BlockParamsT<float>& p);
// What tuning changes (BLR scales and signs, norm weights) copied back into p;
// packed signs are fixed, and p's are left as they are (they may be empty).
void download_into(const DBlockParams& d, BlockParamsT<float>& p, cudaStream_t stream);
// The reverse for a block of upload_packed: p's scales and norm weights into
// d (p's signs are not read, and may be empty).
void upload_tuned(const BlockParamsT<float>& p, DBlockParams& d, cudaStream_t stream);
// Block tuning's kept epoch held on the device (block_snapshot.cu): d's
// BLR scales and norm weights copied into `snap`, its signs packed one bit
// each (snap's paths are packed()); a later call reuses snap's memory.
void snapshot_into(const Gpu& g, const DBlockParams& d, DBlockParams& snap);
// The reverse: snap's values into d, float signs expanded to ±1 (0 in the
// padding columns), exactly the values snapshot_into read.
void restore_from(const Gpu& g, const DBlockParams& snap, DBlockParams& d);
// The signs that differ between two snapshots of one block (tune::sign_changes
// on the device); waits for the stream.
int64_t sign_changes(const Gpu& g, const DBlockParams& a, const DBlockParams& b);

struct DBlockGrads {
    std::vector<std::optional<DBlrGrad>> blr;  // order of linears(); unset for dense ones
    DVec in_norm, post_norm, q_norm, k_norm;
};
// with_signs false: no gradients of the signs (a tuner with lr_signs = 0),
// whose products the backward then skips.
DBlockGrads zero_grads(const DBlockParams& p, cudaStream_t stream, bool with_signs = true);
void clear(DBlockGrads& g, cudaStream_t stream);
BlockGradsT<float> download(const DBlockGrads& g, cudaStream_t stream);

struct DRope {
    int64_t period = 0;
    DVec cos, sin;
};
DRope upload(const RopeT<float>& r, cudaStream_t stream);

// The forward's activations (names of tune::BlockActsT) and the backward's
// scratch, kept between calls so a tuning loop allocates once.
struct DBlockActs {
    int64_t windows = 0, L = 0;
    DVec x, n1, rstd1, q_lin, k_lin, rstd_q, rstd_k, q, k, v, probs, attn, h, n2, rstd2, gate, up,
        act, out;
    DVec q_in, gate_lin, core, dcore, dqgate, dqg;  // Qwen3.5's gated attention
    // Qwen3.5's Gated DeltaNet (names of tune::BlockActsT) and its backward's
    DVec qkv_lin, conv_pre, qkv, qkv_n, inv_qk, z, b_lin, a_lin, g, beta, states, delta, rstd_g;
    DVec dqkv, dqkv_lin, ddelta, dz, dg, dbeta, da, db;
    DeltaRuleScratch rule;
    std::vector<DBlrCache> cache;  // per linear
    DBlrScratch blr;
    DVec dh, dact, dgate, dup, dn2, tmp, dattn, dq, dk, dv, dql, dkl, dn1, ds;
};

// As tune::block_forward; x: windows · L rows of `hidden` on the device.
void block_forward(const Gpu& g, const DBlockParams& p, const BlockDims& d, const DRope& rope,
                   const float* x, int64_t windows, int64_t L, DBlockActs& a);
// As tune::block_backward: gradients added into gr, dx (may be null) overwritten.
void block_backward(const Gpu& g, const DBlockParams& p, const BlockDims& d, const DRope& rope,
                    DBlockActs& a, const float* dout, float* dx, DBlockGrads& gr);

}  // namespace cortiq::tune::cuda
