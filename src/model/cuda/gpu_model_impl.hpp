// GpuModel's state (private to src/model/cuda/): the weights on the device, a
// workspace sized for the largest batch seen, the KV cache, and the forward pass as a sequence of
// cuBLAS GEMMs and the kernels of kernels.hpp, in the order of model/block.cpp and
// model/delta_block.cpp (Qwen3.5's Gated DeltaNet and gated attention).
#pragma once

#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <string_view>
#include <tuple>
#include <utility>
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

// An instantiated CUDA graph (owned; destroyed with it).
class GraphExec {
  public:
    GraphExec() = default;
    explicit GraphExec(cudaGraphExec_t e) : e_(e) {}
    GraphExec(GraphExec&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
    GraphExec& operator=(GraphExec&& o) noexcept {
        std::swap(e_, o.e_);
        return *this;
    }
    ~GraphExec() {
        if (e_) cudaGraphExecDestroy(e_);
    }
    cudaGraphExec_t get() const { return e_; }
    explicit operator bool() const { return e_ != nullptr; }

  private:
    cudaGraphExec_t e_ = nullptr;
};

// Where the rows of a cached pass go: the sequences seq0.. of the cache, the
// position of each one's first row in device memory (pos, one per
// sequence), and a bound on the keys any row sees (it sizes the attention
// grid, and with it the captured graph's size class).
struct CacheStep {
    int64_t seq0 = 0;
    const int32_t* pos = nullptr;
    int64_t max_keys = 0;
};

struct GpuModel::Impl {
    gpu_base::Gpu gpu;  // first member: destroyed last, after every buffer freed on its stream
    io::ModelConfig cfg;
    std::vector<float> inv_freq;
    GpuOptions opt;
    cuda::DeviceWeights w;

    // cos/sin of every position below rope_rows (the CPU's table, rows × d/2).
    DVec rope_cos, rope_sin;
    int64_t rope_rows = 0;

    // Activations of up to `rows` token rows; the Qwen3.5 ones (qg, agate and
    // the DeltaNet's) only for a model that has them.
    struct Work {
        int64_t rows = 0;
        int64_t logit_rows = 0;  // logits are sized apart: calibration never makes any
        gpu_base::DeviceBuffer<int32_t> tokens;
        DVec x, n, q, k, v, attn, gate, up, logits;
        DVec qg, agate;                             // attn_gate: q_proj output, the gate half
        DVec qkv_lin, qkv, z, a, b, g, beta, core;  // Gated DeltaNet layers
        gpu_base::DeviceBuffer<double> nll;
    } ws;

    // Per sequence s: keys and values (after RoPE) of positions [0,
    // length[s]), per attention layer capacity × kv_dim (float32 or fp16,
    // as opt.kv says; sequence s's rows from s·capacity); per Gated DeltaNet
    // layer its convolution state ((kernel − 1) × conv_dim) and delta-rule
    // state (v_heads × dk × dv). pos: the device copy of each sequence's
    // next position, written before each cached pass.
    struct Cache {
        int64_t capacity = 0, sequences = 0;
        std::vector<int64_t> length;
        std::vector<DVec> k, v, conv, state;
        std::vector<gpu_base::DeviceBuffer<__half>> k16, v16;
        gpu_base::DeviceBuffer<int32_t> pos;
    } cache;

    // The decode step's graphs by (sequences, first sequence, attention
    // splits): captured on a step's second run with the same buffers (the
    // first sizes every workspace), replayed while they stay the same.
    struct StepGraph {
        GraphExec exec;
        uint64_t buffers = 0;  // buffers_signature() it was made with
        bool warmed = false;
    };
    std::map<std::tuple<int64_t, int64_t, int>, StepGraph> graphs;
    int64_t replays = 0, captures = 0;

    Impl(const Model& m, const GpuOptions& o)
        : cfg(m.config()),
          inv_freq(rope_inv_freq(m.config())),
          opt(o),
          w(cuda::upload_weights(m, gpu.stream(), gpu.blas(), o.weights, o.head == HeadFormat::f16,
                                 o.layers_on_demand)) {}

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

    int64_t cache_bytes() const {
        int64_t f = 0;
        for (const auto* part : {&cache.k, &cache.v, &cache.conv, &cache.state})
            for (const DVec& b : *part) f += 4 * b.size();
        for (const auto* part : {&cache.k16, &cache.v16})
            for (const auto& b : *part) f += 2 * b.size();
        return f;
    }

    cuda::KvCacheView kv_view(size_t l, int64_t seq0) {
        const int64_t off = seq0 * cache.capacity * cfg.kv_dim();
        cuda::KvCacheView v;
        v.capacity = cache.capacity;
        if (opt.kv == KvFormat::f16) {
            v.k_f16 = cache.k16[l].get() + off;
            v.v_f16 = cache.v16[l].get() + off;
        } else {
            v.k_f32 = cache.k[l].get() + off;
            v.v_f32 = cache.v[l].get() + off;
        }
        return v;
    }

    // The addresses every captured step reads or writes (workspace, RoPE
    // table, cache positions, the packed and fp16 scratch), hashed: a graph
    // is replayed only while they are the ones it was captured with.
    uint64_t buffers_signature() const {
        const auto& sc = *w.scratch;
        const void* ptrs[] = {ws.tokens.get(),
                              ws.x.get(),
                              ws.n.get(),
                              ws.q.get(),
                              ws.k.get(),
                              ws.v.get(),
                              ws.attn.get(),
                              ws.gate.get(),
                              ws.up.get(),
                              ws.logits.get(),
                              ws.qg.get(),
                              ws.agate.get(),
                              ws.qkv_lin.get(),
                              ws.qkv.get(),
                              ws.z.get(),
                              ws.a.get(),
                              ws.b.get(),
                              ws.g.get(),
                              ws.beta.get(),
                              ws.core.get(),
                              rope_cos.get(),
                              rope_sin.get(),
                              cache.pos.get(),
                              sc.xg.get(),
                              sc.t.get(),
                              sc.u.get(),
                              sc.tile.get(),
                              sc.x16.get(),
                              sc.t16.get(),
                              sc.tile16.get(),
                              sc.row_scale.get(),
                              sc.gemv.part.get(),
                              sc.gemv.counters.get(),
                              sc.planes.get(),
                              sc.plane_floats.get(),
                              sc.tile_sums.get(),
                              sc.halves.get(),
                              w.half_scratch->x.get()};
        uint64_t h = 1469598103934665603ull;  // FNV-1a over the addresses
        for (const void* p : ptrs) {
            h ^= static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p));
            h *= 1099511628211ull;
        }
        return h;
    }

    int64_t bytes() const {
        const auto& sc = *w.scratch;
        const int64_t scratch = 4 * (sc.xg.size() + sc.t.size() + sc.u.size() + sc.tile.size());
        return w.bytes + scratch + 8 * rope_rows * static_cast<int64_t>(inv_freq.size()) +
               4 * ws.rows * row_floats() + 12 * ws.rows + cache_bytes();
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

    // Rows × vocab floats for the head's output: 16 GB for a calibration
    // batch of 16,384 rows at a 248k-word vocabulary, so only when a pass
    // makes logits (calibration runs blocks only).
    void ensure_logits(int64_t rows) {
        if (rows <= ws.logit_rows) return;
        ws.logits = DVec{};  // the old buffer first
        ws.logits = DVec(rows * cfg.vocab_size, stream());
        ws.logit_rows = rows;
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
    // With cs the keys and values go to the cache and attention reads it;
    // without, each sequence sees its own rows from position 0.
    // Returns false when it stopped at an input.
    bool attention(size_t l, int64_t batch, int64_t T, const CacheStep* cs, float* n, float* x,
                   const Seen& seen, const cuda::InputNorm* x_norm = nullptr) {
        const io::ModelConfig& c = cfg;
        const int64_t R = batch * T, hd = c.head_dim, half = rope_half();
        const float eps = static_cast<float>(c.rms_norm_eps);
        const cudaStream_t st = stream();
        const cublasHandle_t bl = gpu.blas();
        const cuda::DeviceLayer& L = w.layers[l];
        if (seen("self_attn.q_proj", n, c.hidden_size)) return false;
        float* q = ws.q.get();
        float* k = ws.k.get();
        float* v = ws.v.get();
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
                      rope_sin.get(), 0, cs ? cs->pos : nullptr, st);
        cuda::AttentionArgs a;
        a.q = q;
        a.k = k;
        a.v = v;
        a.out = ws.attn.get();
        a.batch = batch;
        a.T = T;
        a.kv_rows = T;
        a.heads = c.num_heads;
        a.kv_heads = c.num_kv_heads;
        a.head_dim = hd;
        a.window = c.sliding_window;
        if (cs) {
            const cuda::KvCacheView kv = kv_view(l, cs->seq0);
            cuda::kv_store(k, v, batch, T, c.kv_dim(), kv, 0, cs->pos, st);
            a.k = kv.k_f32;
            a.v = kv.v_f32;
            a.k_f16 = kv.k_f16;
            a.v_f16 = kv.v_f16;
            a.kv_rows = cache.capacity;
            a.pos = cs->pos;
            a.max_keys = cs->max_keys;
        }
        cuda::attention(a, st);
        if (c.attn_gate) cuda::sigmoid_gate(ws.attn.get(), ws.agate.get(), R * c.q_dim(), st);
        if (seen("self_attn.o_proj", ws.attn.get(), c.q_dim())) return false;
        cuda::linear(bl, st, L.o, ws.attn.get(), R, x, 1.0f);
        return true;
    }

    // The Gated DeltaNet mixer of block l (model/delta_block.cpp): from n to
    // out_proj's output added into x. With cs the convolution and the delta
    // rule continue from the cached sequences' states and leave theirs
    // there; without it every sequence starts from zero states.
    bool delta(size_t l, int64_t batch, int64_t T, const CacheStep* cs, const float* n, float* x,
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
        float* conv_state = cs ? cache.conv[l].get() + cs->seq0 * (d.conv_kernel - 1) * C : nullptr;
        cuda::causal_conv1d_silu(ws.qkv_lin.get(), batch, T, C, D.conv.get(), d.conv_kernel,
                                 conv_state, ws.qkv.get(), st);
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
        float* state =
            cs ? cache.state[l].get() + cs->seq0 * d.v_heads * d.k_dim * d.v_dim : nullptr;
        if (kChunkedPrefill && T > 1 && batch == 1)
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

    // Block l on x (batch sequences of T rows, from position 0 or, with cs,
    // cached sequences', updated in place to the block's output). With
    // `stop_after` (an input name): returns right after `hook` saw that
    // input (x then holds a partial sum).
    void block(size_t l, int64_t batch, int64_t T, const CacheStep* cs, float* x,
               const DeviceHook* hook = nullptr, std::string_view stop_after = {}) {
        const io::ModelConfig& c = cfg;
        const int64_t R = batch * T, H = c.hidden_size;
        const float eps = static_cast<float>(c.rms_norm_eps);
        const cudaStream_t st = stream();
        const cublasHandle_t bl = gpu.blas();
        const Seen seen{hook, stop_after, R};
        float* n = ws.n.get();
        const cuda::DeviceLayer& L = w.layers[l];
        CORTIQ_CHECK(L.resident, "layer {} is not on the device (GpuModel::load_layer)", l);
        // When nothing else reads the normed input (no hook, no stop), the
        // projections may norm x as they read it (linear_group_normed: the
        // decode's first launch does it), and down_proj may apply SwiGLU so
        // (linear_swiglu); Gated DeltaNet reads the normed input itself.
        const bool proj_norms = hook == nullptr && stop_after.empty();
        const cuda::InputNorm in_norm{L.input_norm.get(), eps};
        // The token mixer; its output projection accumulates into x.
        if (!proj_norms || L.delta_mixer) cuda::rmsnorm(x, R, H, L.input_norm.get(), eps, n, st);
        const bool done =
            L.delta_mixer ? delta(l, batch, T, cs, n, x, seen)
                          : attention(l, batch, T, cs, n, x, seen, proj_norms ? &in_norm : nullptr);
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

    // `batch` sequences of T tokens (in ws.tokens). With cs, cached
    // sequences cs->seq0.. continue from their positions: keys and values go
    // to the cache and attention reads every cached position; without it
    // each sequence sees its own rows from position 0. Leaves the logits of
    // every row, or of the last, in ws.logits (without `with_head`: the
    // head's input, in ws.n). Allocates nothing when the workspace, RoPE
    // table and cache are already sized (a captured step).
    void run(int64_t batch, int64_t T, const CacheStep* cs, bool last_only, bool with_head = true) {
        const io::ModelConfig& c = cfg;
        const int64_t R = batch * T, H = c.hidden_size;
        const float eps = static_cast<float>(c.rms_norm_eps);
        const cudaStream_t st = stream();
        CORTIQ_ASSERT(R <= ws.rows && (!cs || cs->seq0 + batch <= cache.sequences));
        if (!cs) ensure_rope(T);  // a cache's table is made with it (reset_cache)

        float* x = ws.x.get();
        cuda::embed_rows(w, ws.tokens.get(), R, H, x, st);
        for (size_t l = 0; l < w.layers.size(); ++l) block(l, batch, T, cs, x);
        const int64_t r0 = last_only ? R - 1 : 0;
        float* n = ws.n.get();
        cuda::rmsnorm(x + r0 * H, R - r0, H, w.final_norm.get(), eps, n, st);
        if (with_head) head(n, R - r0);
    }

    // The head's logits of `rows` normed rows at n, into ws.logits.
    void head(const float* n, int64_t rows) {
        ensure_logits(rows);  // sized by a first run before any capture
        cuda::linear(gpu.blas(), stream(), w.lm_head, n, rows, ws.logits.get(), 0.0f);
    }

    // One token for each of `batch` cached sequences from cs.seq0 (tokens in
    // ws.tokens, positions in cache.pos): the captured graph of this size
    // class replayed, or, with graphs off, on a step's first run with these
    // buffers and whenever they change, the same kernels launched one by one.
    void decode(int64_t batch, const CacheStep& cs) {
        if (!opt.graphs) return run(batch, 1, &cs, false);
        const cudaStream_t st = stream();
        const int splits =
            cuda::attention_decode_splits(cs.max_keys, cfg.sliding_window, batch * cfg.num_heads);
        StepGraph& g = graphs[{batch, cs.seq0, splits}];
        const uint64_t buffers = buffers_signature();
        if (!g.exec || g.buffers != buffers) {
            if (!g.warmed || g.buffers != buffers) {  // size every buffer first
                run(batch, 1, &cs, false);
                g.exec = GraphExec{};
                g.warmed = true;
                g.buffers = buffers_signature();
                return;
            }
            g.exec = capture([&] { run(batch, 1, &cs, false); });
            CORTIQ_ASSERT(buffers_signature() == buffers, "a buffer moved while capturing a step");
            ++captures;
        }
        CUDA_CHECK(cudaGraphLaunch(g.exec.get(), st));
        ++replays;
    }

    // f's launches on the stream, captured (not run) into an instantiated graph.
    template <class F>
    GraphExec capture(F&& f) {
        const cudaStream_t st = stream();
        CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        try {
            f();
        } catch (...) {
            cudaGraph_t broken = nullptr;
            cudaStreamEndCapture(st, &broken);
            if (broken) cudaGraphDestroy(broken);
            throw;
        }
        cudaGraph_t graph = nullptr;
        CUDA_CHECK(cudaStreamEndCapture(st, &graph));
        cudaGraphExec_t exec = nullptr;
        const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
        cudaGraphDestroy(graph);
        CUDA_CHECK(e);
        return GraphExec(exec);
    }

    MatF download_logits(int64_t rows) {
        const int64_t V = cfg.vocab_size;
        return MatF(rows, V, gpu_base::download_f(ws.logits.get(), rows * V, stream()));
    }
};

}  // namespace cortiq::model
