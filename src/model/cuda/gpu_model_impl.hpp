// GpuModel's state (private to src/model/cuda/): the weights on the device, a
// workspace sized for the largest batch seen, the KV cache, and the forward pass as a sequence of
// cuBLAS GEMMs and the kernels of kernels.hpp, in the order of model/block.cpp and
// model/delta_block.cpp (Qwen3.5's Gated DeltaNet and gated attention).
#pragma once

#include <algorithm>
#include <array>
#include <functional>
#include <string_view>
#include <vector>

#include "core/cuda/device.hpp"
#include "core/error.hpp"
#include "model/cuda/kernels.hpp"
#include "model/cuda/weights.hpp"
#include "model/gpu_model.hpp"
#include "model/llama.hpp"
#include "model/ops.hpp"

namespace cortiq::model {

namespace gpu_base = cortiq::cuda;  // core/cuda/device.hpp
using cuda::DVec;

// Prefill and scoring (more than one token per sequence) through the chunkwise
// delta-rule kernel (model/cuda/delta_chunk.cu) instead of the step kernel.
// Off until the chunk kernel has run on a GPU: its phases are checked against
// the CPU on the host (test_qwen35_gpu ChunkKernelPhasesOnTheHostMatchTheCpu),
// the step kernel end to end on an H200. Turn on once
// DeltaRuleMatchesTheCpuStepAndChunkForms passes on a device, and rerun the
// GPU tests.
inline constexpr bool kChunkedPrefill = false;

// A scoring batch: about this many token rows keep the GEMMs large...
inline constexpr int64_t kBatchRows = 16384;
// ...unless its logits (rows × vocab floats, kept on the device) would pass this.
inline constexpr int64_t kMaxLogitBytes = int64_t{1} << 30;

struct GpuModel::Impl {
    gpu_base::Gpu gpu;  // first member: destroyed last, after every buffer freed on its stream
    io::ModelConfig cfg;
    std::vector<float> inv_freq;
    cuda::DeviceWeights w;

    // cos/sin of every position below rope_rows (the CPU's table, rows × d/2).
    DVec rope_cos, rope_sin;
    int64_t rope_rows = 0;

    // Activations of up to `rows` token rows; the Qwen3.5 ones (qg, agate and
    // the DeltaNet's) only for a model that has them.
    struct Work {
        int64_t rows = 0;
        gpu_base::DeviceBuffer<int32_t> tokens;
        DVec x, n, q, k, v, attn, gate, up, logits;
        DVec qg, agate;                             // attn_gate: q_proj output, the gate half
        DVec qkv_lin, qkv, z, a, b, g, beta, core;  // Gated DeltaNet layers
        gpu_base::DeviceBuffer<double> nll;
    } ws;

    // Keys and values (after RoPE) of positions [0, length), per attention
    // layer capacity × kv_dim; per Gated DeltaNet layer its convolution state
    // ((kernel − 1) × conv_dim) and delta-rule state (v_heads × dk × dv).
    struct Cache {
        int64_t capacity = 0, length = 0;
        std::vector<DVec> k, v, conv, state;
    } cache;

    explicit Impl(const Model& m)
        : cfg(m.config()),
          inv_freq(rope_inv_freq(m.config())),
          w(cuda::upload_weights(m, gpu.stream())) {}

    cudaStream_t stream() const { return gpu.stream(); }

    // Floats of the workspace per token row.
    int64_t row_floats() const {
        const io::ModelConfig& c = cfg;
        int64_t f = 2 * c.hidden_size + 2 * c.q_dim() + 2 * c.kv_dim() + 2 * c.intermediate_size +
                    c.vocab_size;
        if (c.attn_gate) f += c.q_proj_dim() + c.q_dim();
        if (c.hybrid()) {
            const io::DeltaNetConfig& d = c.delta;
            f += 2 * d.conv_dim() + 2 * d.value_dim() + 4 * d.v_heads;
        }
        return f;
    }

    int64_t cache_floats() const {
        int64_t f = 0;
        for (const auto* part : {&cache.k, &cache.v, &cache.conv, &cache.state})
            for (const DVec& b : *part) f += b.size();
        return f;
    }

    int64_t bytes() const {
        const auto& sc = *w.scratch;
        const int64_t scratch = 4 * (sc.xg.size() + sc.t.size() + sc.u.size() + sc.tile.size());
        return w.bytes + scratch + 8 * rope_rows * static_cast<int64_t>(inv_freq.size()) +
               4 * ws.rows * row_floats() + 12 * ws.rows + 4 * cache_floats();
    }

    // The table covers positions [0, positions); rows are computed exactly
    // as model::rope_table computes them for any pos0.
    void ensure_rope(int64_t positions) {
        if (positions <= rope_rows) return;
        const int64_t n = std::max({positions, 2 * rope_rows, int64_t{512}});
        const RopeTable t = rope_table(inv_freq, 0, n);
        rope_cos = gpu_base::upload_f(t.cos, stream());
        rope_sin = gpu_base::upload_f(t.sin, stream());
        rope_rows = n;
    }

    void ensure_work(int64_t rows) {
        if (rows <= ws.rows) return;
        const io::ModelConfig& c = cfg;
        ws = Work{};  // free the old buffers first
        const cudaStream_t st = stream();
        ws.tokens = gpu_base::DeviceBuffer<int32_t>(rows, st);
        ws.x = DVec(rows * c.hidden_size, st);
        ws.n = DVec(rows * c.hidden_size, st);
        ws.q = DVec(rows * c.q_dim(), st);
        ws.k = DVec(rows * c.kv_dim(), st);
        ws.v = DVec(rows * c.kv_dim(), st);
        ws.attn = DVec(rows * c.q_dim(), st);
        ws.gate = DVec(rows * c.intermediate_size, st);
        ws.up = DVec(rows * c.intermediate_size, st);
        ws.logits = DVec(rows * c.vocab_size, st);
        if (c.attn_gate) {
            ws.qg = DVec(rows * c.q_proj_dim(), st);
            ws.agate = DVec(rows * c.q_dim(), st);
        }
        if (c.hybrid()) {
            const io::DeltaNetConfig& d = c.delta;
            ws.qkv_lin = DVec(rows * d.conv_dim(), st);
            ws.qkv = DVec(rows * d.conv_dim(), st);
            ws.z = DVec(rows * d.value_dim(), st);
            ws.core = DVec(rows * d.value_dim(), st);
            for (DVec* p : {&ws.a, &ws.b, &ws.g, &ws.beta}) *p = DVec(rows * d.v_heads, st);
        }
        ws.nll = gpu_base::DeviceBuffer<double>(rows, st);
        ws.rows = rows;
    }

    // Checks the ids (as model::Embedding::rows does), sizes the workspace and
    // copies the ids to the device.
    void load_tokens(std::span<const int32_t> tokens) {
        CORTIQ_CHECK(!tokens.empty(), "forward: no tokens");
        const int64_t T = static_cast<int64_t>(tokens.size());
        for (int64_t i = 0; i < T; ++i)
            CORTIQ_CHECK(tokens[i] >= 0 && tokens[i] < cfg.vocab_size,
                         "token id {} at position {} is outside the vocabulary (0..{})", tokens[i],
                         i, cfg.vocab_size - 1);
        ensure_work(T);
        CUDA_CHECK(cudaMemcpyAsync(ws.tokens.get(), tokens.data(), tokens.size() * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, stream()));
    }

    // A linear layer's input as the calibration sees it (input: a
    // LinearInputHook name), a device pointer valid during the call.
    using DeviceHook = GpuModel::DeviceInputHook;

    // Where a block meets a linear layer's input: tells the hook, and whether
    // the block stops there.
    struct Seen {
        const DeviceHook* hook = nullptr;
        std::string_view stop_after;
        int64_t rows = 0;
        bool operator()(std::string_view input, const float* v, int64_t cols) const {
            if (hook) (*hook)(input, v, rows, cols);
            return input == stop_after;
        }
    };

    // The attention mixer of block l (model/block.cpp's attention_forward):
    // from n (the normed input; with x_norm, x normed by the projections,
    // n then scratch) to o_proj's output added into x. With
    // Qwen3.5's output gate, q_proj makes the query and the gate per head.
    // Returns false when it stopped at an input.
    bool attention(size_t l, int64_t batch, int64_t T, int64_t pos0, bool cached, float* n,
                   float* x, const Seen& seen, const cuda::InputNorm* x_norm = nullptr) {
        const io::ModelConfig& c = cfg;
        const int64_t R = batch * T, hd = c.head_dim, half = rope_half();
        const float eps = static_cast<float>(c.rms_norm_eps);
        const cudaStream_t st = stream();
        const cublasHandle_t bl = gpu.blas();
        const cuda::DeviceLayer& L = w.layers[l];
        if (seen("self_attn.q_proj", n, c.hidden_size)) return false;
        float* q = ws.q.get();
        float* k = cached ? cache.k[l].get() + pos0 * c.kv_dim() : ws.k.get();
        float* v = cached ? cache.v[l].get() + pos0 * c.kv_dim() : ws.v.get();
        if (x_norm)  // n not written: the projections norm x themselves
            cuda::linear_group_normed(bl, st, {&L.q, &L.k, &L.v}, x, *x_norm, n, c.hidden_size, R,
                                      {c.attn_gate ? ws.qg.get() : q, k, v});
        else
            cuda::linear_group(bl, st, {&L.q, &L.k, &L.v}, n, R,
                               {c.attn_gate ? ws.qg.get() : q, k, v});
        if (c.attn_gate)
            cuda::split_query_gate(ws.qg.get(), R, c.num_heads, hd, q, ws.agate.get(), st);
        if (c.qk_norm) {  // per head: rows of head_dim values
            cuda::rmsnorm(q, R * c.num_heads, hd, L.q_norm.get(), eps, q, st);
            cuda::rmsnorm(k, R * c.num_kv_heads, hd, L.k_norm.get(), eps, k, st);
        }
        cuda::rope_qk(q, c.num_heads, k, c.num_kv_heads, R, T, hd, half, rope_cos.get(),
                      rope_sin.get(), pos0, st);
        const float* keys = cached ? cache.k[l].get() : ws.k.get();
        const float* vals = cached ? cache.v[l].get() : ws.v.get();
        cuda::attention(q, keys, vals, ws.attn.get(), batch, T, cached ? cache.capacity : T,
                        c.num_heads, c.num_kv_heads, hd, pos0, c.sliding_window, st);
        if (c.attn_gate) cuda::sigmoid_gate(ws.attn.get(), ws.agate.get(), R * c.q_dim(), st);
        if (seen("self_attn.o_proj", ws.attn.get(), c.q_dim())) return false;
        cuda::linear(bl, st, L.o, ws.attn.get(), R, x, 1.0f);
        return true;
    }

    // The Gated DeltaNet mixer of block l (model/delta_block.cpp): from n to
    // out_proj's output added into x. With the cache (batch 1) the
    // convolution and the delta rule continue from its states and leave
    // theirs there; without it every sequence starts from zero states.
    bool delta(size_t l, int64_t batch, int64_t T, bool cached, const float* n, float* x,
               const Seen& seen) {
        const io::ModelConfig& c = cfg;
        const io::DeltaNetConfig& d = c.delta;
        const int64_t R = batch * T, C = d.conv_dim(), VD = d.value_dim();
        const cudaStream_t st = stream();
        const cublasHandle_t bl = gpu.blas();
        const cuda::DeviceDelta& D = w.layers[l].delta;
        if (seen("linear_attn.in_proj_qkv", n, c.hidden_size)) return false;
        cuda::linear_group(bl, st, {&D.qkv, &D.z, &D.b, &D.a}, n, R,
                           {ws.qkv_lin.get(), ws.z.get(), ws.b.get(), ws.a.get()});
        cuda::causal_conv1d_silu(ws.qkv_lin.get(), batch, T, C, D.conv.get(), d.conv_kernel,
                                 cached ? cache.conv[l].get() : nullptr, ws.qkv.get(), st);
        constexpr float kL2Eps = 1e-6f;  // transformers' l2norm in the delta rule
        cuda::l2norm_heads(ws.qkv.get(), R, C, 2 * d.k_heads, d.k_dim, kL2Eps, st);  // q and k
        cuda::delta_gates(ws.a.get(), ws.b.get(), R, d.v_heads, D.a_log.get(), D.dt_bias.get(),
                          ws.g.get(), ws.beta.get(), st);
        cuda::DeltaRuleArgs r;
        r.q = ws.qkv.get();
        r.k = ws.qkv.get() + d.key_dim();
        r.v = ws.qkv.get() + 2 * d.key_dim();
        r.g = ws.g.get();
        r.beta = ws.beta.get();
        r.batch = batch;
        r.T = T;
        r.ld_qk = r.ld_v = C;
        r.k_heads = d.k_heads;
        r.v_heads = d.v_heads;
        r.dk = d.k_dim;
        r.dv = d.v_dim;
        float* state = cached ? cache.state[l].get() : nullptr;
        if (kChunkedPrefill && T > 1)
            cuda::gated_delta_chunked(r, state, ws.core.get(), VD, st);
        else
            cuda::gated_delta_rule(r, state, ws.core.get(), VD, st);
        cuda::rmsnorm_gated(ws.core.get(), ws.z.get(), R * d.v_heads, d.v_dim, D.norm.get(),
                            static_cast<float>(c.rms_norm_eps), ws.core.get(), st);
        if (seen("linear_attn.out_proj", ws.core.get(), VD)) return false;
        cuda::linear(bl, st, D.out, ws.core.get(), R, x, 1.0f);
        return true;
    }

    int64_t rope_half() const { return static_cast<int64_t>(inv_freq.size()); }

    // Block l on x (batch sequences of T rows at positions pos0.., updated in
    // place to the block's output). With `stop_after` (an input name): returns
    // right after `hook` saw that input (x then holds a partial sum).
    void block(size_t l, int64_t batch, int64_t T, int64_t pos0, bool cached, float* x,
               const DeviceHook* hook = nullptr, std::string_view stop_after = {}) {
        const io::ModelConfig& c = cfg;
        const int64_t R = batch * T, H = c.hidden_size;
        const float eps = static_cast<float>(c.rms_norm_eps);
        const cudaStream_t st = stream();
        const cublasHandle_t bl = gpu.blas();
        const Seen seen{hook, stop_after, R};
        float* n = ws.n.get();
        const cuda::DeviceLayer& L = w.layers[l];
        // When nothing else reads the normed input (no hook, no stop), the
        // projections may norm x as they read it (linear_group_normed: the
        // decode's first launch does it), and down_proj may apply SwiGLU so
        // (linear_swiglu); Gated DeltaNet reads the normed input itself.
        const bool proj_norms = hook == nullptr && stop_after.empty();
        const cuda::InputNorm in_norm{L.input_norm.get(), eps};
        // The token mixer; its output projection accumulates into x.
        if (!proj_norms || L.delta_mixer) cuda::rmsnorm(x, R, H, L.input_norm.get(), eps, n, st);
        const bool done = L.delta_mixer ? delta(l, batch, T, cached, n, x, seen)
                                        : attention(l, batch, T, pos0, cached, n, x, seen,
                                                    proj_norms ? &in_norm : nullptr);
        if (!done) return;
        // MLP half; down_proj accumulates into x.
        if (proj_norms) {  // gate/up norm x, down_proj applies SwiGLU, as they read
            cuda::linear_group_normed(bl, st, {&L.gate, &L.up}, x, {L.post_attn_norm.get(), eps}, n,
                                      H, R, {ws.gate.get(), ws.up.get()});
            return cuda::linear_swiglu(bl, st, L.down, ws.gate.get(), ws.up.get(), R, x, 1.0f);
        }
        cuda::rmsnorm(x, R, H, L.post_attn_norm.get(), eps, n, st);
        if (seen("mlp.gate_proj", n, H)) return;
        cuda::linear_group(bl, st, {&L.gate, &L.up}, n, R, {ws.gate.get(), ws.up.get()});
        cuda::swiglu(ws.gate.get(), ws.up.get(), R * c.intermediate_size, st);
        if (seen("mlp.down_proj", ws.gate.get(), c.intermediate_size)) return;
        cuda::linear(bl, st, L.down, ws.gate.get(), R, x, 1.0f);
    }

    // `batch` sequences of T tokens (in ws.tokens) at positions pos0.. . With
    // the cache (batch 1) keys and values go to its rows pos0.. and attention
    // reads every cached position; without it each sequence sees its own.
    // Leaves the logits of every row, or of the last, in ws.logits.
    void run(int64_t batch, int64_t T, int64_t pos0, bool cached, bool last_only) {
        const io::ModelConfig& c = cfg;
        const int64_t R = batch * T, H = c.hidden_size;
        const float eps = static_cast<float>(c.rms_norm_eps);
        const cudaStream_t st = stream();
        const cublasHandle_t bl = gpu.blas();
        CORTIQ_ASSERT(R <= ws.rows && (!cached || (batch == 1 && pos0 + T <= cache.capacity)));
        ensure_rope(pos0 + T);

        float* x = ws.x.get();
        cuda::embed_rows(w, ws.tokens.get(), R, H, x, st);
        for (size_t l = 0; l < w.layers.size(); ++l) block(l, batch, T, pos0, cached, x);
        const int64_t r0 = last_only ? R - 1 : 0;
        float* n = ws.n.get();
        cuda::rmsnorm(x + r0 * H, R - r0, H, w.final_norm.get(), eps, n, st);
        cuda::linear(bl, st, w.lm_head, n, R - r0, ws.logits.get(), 0.0f);
    }

    MatF download_logits(int64_t rows) {
        const int64_t V = cfg.vocab_size;
        return MatF(rows, V, gpu_base::download_f(ws.logits.get(), rows * V, stream()));
    }
};

}  // namespace cortiq::model
