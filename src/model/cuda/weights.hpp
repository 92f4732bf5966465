// A Model's weights on the device — compressed layers as their bits, float
// ones float32; or, for the dense fp16 runtime (the baseline of the packed
// one), every weight fp16 and dense — and the one GEMM every linear layer
// goes through.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "core/cuda/device.hpp"
#include "core/matrix.hpp"
#include "model/cuda/blr_linear.hpp"
#include "model/runtime.hpp"  // WeightFormat

namespace cortiq::model {
class Model;
class LinearWeights;
}  // namespace cortiq::model

namespace cortiq::model::cuda {

using cortiq::cuda::DVec;

// The fp16 copy of a dense fp16 layer's input (x → fp16 before the GEMM),
// shared by a model's layers and sized for the largest batch seen.
struct HalfScratch {
    cortiq::cuda::DeviceBuffer<__half> x;
};

struct DeviceLinear {
    DVec own;                  // m × n row-major (empty when w points into another buffer)
    const float* w = nullptr;  // the weight: own.get(), or a shared buffer (tied lm_head)
    // Every value of w exact in TF32 (a BF16 or FP16 checkpoint's weight): its
    // 3xTF32 products skip w's split, two passes instead of three, the same
    // bits (core/cuda/gemm_tf32.hpp, exact_in_tf32). Set where w is written.
    bool w_tf32 = false;
    // The dense fp16 runtime: the weight in fp16 (own16, or a shared table),
    // w null; its input goes through half_scratch.
    cortiq::cuda::DeviceBuffer<__half> own16;
    const __half* w16 = nullptr;
    bool w16_transposed = false;  // w16 holds Wᵀ row-major (a dequantised packed layer)
    HalfScratch* half_scratch = nullptr;
    DVec bias;  // m values, or empty
    int64_t m = 0, n = 0;
    // A compressed layer runs from its bits instead (w stays null), with the
    // scratch buffers its model's packed layers share.
    std::unique_ptr<DevicePacked> packed;
    PackedScratch* scratch = nullptr;
};

// A Gated DeltaNet mixer's weights (model::DeltaNetWeights).
struct DeviceDelta {
    DeviceLinear qkv, z, b, a, out;  // in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, out_proj
    DVec conv;                       // conv_dim × kernel
    DVec a_log, dt_bias;             // v_heads
    DVec norm;                       // v_dim: the gated RMSNorm's w
};

struct DeviceLayer {
    bool resident = true;                             // false: not on the device (load_layer)
    bool delta_mixer = false;                         // a Gated DeltaNet layer (Qwen3.5)
    DVec input_norm, post_attn_norm, q_norm, k_norm;  // q_norm, k_norm: qwen3, qwen3.5 only
    DeviceLinear q, k, v, o, gate, up, down;          // q..o: attention layers only
    DeviceDelta delta;                                // Gated DeltaNet layers only
};

struct DeviceWeights {
    DVec embed;                                  // vocab × hidden, a float embedding
    cortiq::cuda::DeviceBuffer<__half> embed16;  // the same in fp16 (WeightFormat::f16)
    // A compressed embedding: its bits and scales (embed stays empty); a tied
    // head reads the same ones (embed_packed then points into lm_head).
    std::unique_ptr<DevicePacked> embed_own;
    const DevicePacked* embed_packed = nullptr;
    std::vector<DeviceLayer> layers;
    DVec final_norm;
    DeviceLinear lm_head;  // tied: reads `embed` (a compressed one: embed_packed is its bits)
    std::unique_ptr<PackedScratch> scratch = std::make_unique<PackedScratch>();
    std::unique_ptr<HalfScratch> half_scratch = std::make_unique<HalfScratch>();
    int64_t bytes = 0;  // device memory held by the weights
};

// Copies every weight of m to the device. native: float layers dense,
// compressed ones (model::BlrLinear) as their bits and f16 scales, never
// dequantised. f16: the embedding, every linear layer and the head dense in
// fp16, a compressed layer dequantised on the device by its own packed
// kernels (blas: for those), a compressed embedding on the host (the norms
// and the DeltaNet's small tensors stay float32). head_f16 (native): a float
// head dense in fp16 (tied: an fp16 copy of the table for the head, the
// lookups still from the float32 one); a compressed head stays packed.
// layers_on_demand: no decoder layer is uploaded (each not resident) until
// load_layer.
DeviceWeights upload_weights(const Model& m, cudaStream_t stream, cublasHandle_t blas,
                             WeightFormat format = WeightFormat::native, bool head_f16 = false,
                             bool layers_on_demand = false);
// Layer `layer` of m uploaded with every linear dense in float32 (a
// compressed one formed on the device, as set_weight_blr), every other
// layer released first: one layer on the device at a time.
void load_layer(DeviceWeights& d, const Model& m, int64_t layer, cudaStream_t stream,
                cublasHandle_t blas);
// Every decoder layer's device memory freed (none resident).
void release_layers(DeviceWeights& d, cudaStream_t stream);

// out (rows × hidden) = the embedding rows of tokens (ids checked on the
// host), from the float table or the compressed embedding's bits.
void embed_rows(const DeviceWeights& w, const int32_t* tokens, int64_t rows, int64_t hidden,
                float* out, cudaStream_t stream);

// Sets d.w_tf32 from d.w's values (false when w is null); waits for the stream.
void mark_tf32(DeviceLinear& d, cudaStream_t stream);

// Replaces d's weight (same shape; its bias stays) by w, e.g. a linear layer
// just compressed (dense: dequantised).
void set_weight(DeviceLinear& d, const MatF& w, cudaStream_t stream);
// The same with a BLR weight's dense form made on the device in float64 and
// rounded once (blr_dense.cu): blr::dequant's values up to the order of its
// float64 sums. `blas` runs on `stream`.
void set_weight_blr(DeviceLinear& d, const blr::PackedWeight& p, cublasHandle_t blas,
                    cudaStream_t stream);
// Either, as w is: a BLR layer's dense form made on the device, any other
// weight (a sign payload included) from its host dense form.
void set_weight_of(DeviceLinear& d, const LinearWeights& w, cublasHandle_t blas,
                   cudaStream_t stream);

// y (rows × m) = beta·y + x (rows × n) · Wᵀ, then + bias: plain FP32 cuBLAS
// (the handle's math mode is CUBLAS_DEFAULT_MATH: no TF32), bias by a kernel.
// beta = 1 accumulates into a residual stream.
void linear(cublasHandle_t blas, cudaStream_t stream, const DeviceLinear& l, const float* x,
            int64_t rows, float* y, float beta);

// ys[i] = x · ls[i]ᵀ (+ bias) for layers that read the same x (q, k, v; gate,
// up): the compressed ones share their decode launches (packed_linear_group).
void linear_group(cublasHandle_t blas, cudaStream_t stream,
                  std::initializer_list<const DeviceLinear*> ls, const float* x, int64_t rows,
                  std::initializer_list<float*> ys);

// linear_group on RMSNorm(x) (norm.w, norm.eps; rows × n). With every layer
// compressed and decoded by planes, the decode's first launch norms x as it
// reads it (decode_norms_input): one launch fewer, no normed copy; otherwise
// x is normed into n_buf (rows × n) first.
void linear_group_normed(cublasHandle_t blas, cudaStream_t stream,
                         std::initializer_list<const DeviceLinear*> ls, const float* x,
                         const InputNorm& norm, float* n_buf, int64_t n, int64_t rows,
                         std::initializer_list<float*> ys);

// y = beta·y + (silu(gate) ∘ up) Wᵀ (+ bias), gate and up rows × l.n (the
// MLP's down_proj): compressed and decoded by planes, the decode's first
// launch applies SwiGLU as it reads gate (gate left as it is); otherwise
// gate ← silu(gate) ∘ up in place first (swiglu).
void linear_swiglu(cublasHandle_t blas, cudaStream_t stream, const DeviceLinear& l, float* gate,
                   const float* up, int64_t rows, float* y, float beta);

}  // namespace cortiq::model::cuda
