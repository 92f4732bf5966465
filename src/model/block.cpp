#include "model/block.hpp"

#include <algorithm>

#include "core/blas_threads.hpp"
#include "model/ops.hpp"

namespace cortiq::model {

KvCache::KvCache(const io::ModelConfig& c, int64_t cap) : capacity(cap) {
    CORTIQ_CHECK(cap > 0, "KV cache capacity must be positive, got {}", cap);
    k.reserve(static_cast<size_t>(c.num_layers));
    v.reserve(static_cast<size_t>(c.num_layers));
    for (int64_t l = 0; l < c.num_layers; ++l) {
        k.emplace_back(cap, c.kv_dim());
        v.emplace_back(cap, c.kv_dim());
    }
}

namespace {

// A moved-from Mat keeps its rows/cols but not its storage: check both.
void ensure(MatF& m, int64_t rows, int64_t cols) {
    if (m.rows() != rows || m.cols() != cols || static_cast<int64_t>(m.vec().size()) != rows * cols)
        m = MatF(rows, cols);
}

// The hook runs with BLAS threaded again (it may accumulate Grams with BLAS).
void call_hook(const BlockContext& ctx, std::string_view input, const MatF& x) {
    if (!ctx.hook || !*ctx.hook) return;
    ThreadedBlas blas;
    (*ctx.hook)(ctx.layer, input, x.data(), x.rows(), x.cols());
}

}  // namespace

void block_forward(const LayerWeights& w, const BlockContext& ctx, BlockActivations& a) {
    const io::ModelConfig& c = *ctx.cfg;
    const int64_t T = a.x.rows(), H = c.hidden_size, hd = c.head_dim;
    const float eps = static_cast<float>(c.rms_norm_eps);
    CORTIQ_ASSERT(a.x.cols() == H && a.x.size() == static_cast<int64_t>(a.x.vec().size()),
                  "{} vs {}", a.x.cols(), H);
    CORTIQ_ASSERT(ctx.rope && ctx.rope->pos0 == ctx.pos0 && ctx.rope->rows >= T);
    SingleThreadedBlas single_blas;  // OpenMP drives the parallelism (model/ops.hpp)

    // Attention half.
    ensure(a.attn_in, T, H);
    rmsnorm(a.x.data(), T, H, w.input_norm.data(), eps, a.attn_in.data());
    call_hook(ctx, "self_attn.q_proj", a.attn_in);
    if (ctx.stop_after == "self_attn.q_proj") return;
    w.q.forward(a.attn_in, a.q_lin);
    w.k.forward(a.attn_in, a.k_lin);
    w.v.forward(a.attn_in, a.v);
    a.q = a.q_lin;
    a.k = a.k_lin;
    if (c.qk_norm) {  // per head: rows of head_dim values
        rmsnorm(a.q.data(), T * c.num_heads, hd, w.q_norm.data(), eps, a.q.data());
        rmsnorm(a.k.data(), T * c.num_kv_heads, hd, w.k_norm.data(), eps, a.k.data());
    }
    rope(a.q.data(), T, c.q_dim(), c.num_heads, hd, *ctx.rope);
    rope(a.k.data(), T, c.kv_dim(), c.num_kv_heads, hd, *ctx.rope);

    const float *keys = a.k.data(), *vals = a.v.data();
    int64_t key_pos0 = 0;  // absolute position of keys[0]
    if (ctx.cache) {
        KvCache& kc = *ctx.cache;
        CORTIQ_CHECK(ctx.pos0 + T <= kc.capacity, "KV cache full: {} + {} tokens > capacity {}",
                     ctx.pos0, T, kc.capacity);
        MatF &ck = kc.k[static_cast<size_t>(ctx.layer)], &cv = kc.v[static_cast<size_t>(ctx.layer)];
        std::copy_n(a.k.data(), a.k.size(), ck.row(ctx.pos0));
        std::copy_n(a.v.data(), a.v.size(), cv.row(ctx.pos0));
        keys = ck.data();
        vals = cv.data();
    } else {
        key_pos0 = ctx.pos0;  // no cache: the batch's own keys, first at pos0
    }
    ensure(a.attn, T, c.q_dim());
    // attention() indexes keys from absolute position 0; without a cache the
    // batch's keys start at pos0, which the query offset accounts for.
    attention(a.q.data(), T, c.q_dim(), keys, vals, c.kv_dim(), c.num_heads, c.num_kv_heads, hd,
              ctx.pos0 - key_pos0, c.sliding_window, a.attn.data(), c.q_dim());
    call_hook(ctx, "self_attn.o_proj", a.attn);
    if (ctx.stop_after == "self_attn.o_proj") return;
    w.o.forward(a.attn, a.attn_out);
    ensure(a.h, T, H);
    add(a.x.data(), a.attn_out.data(), a.x.size(), a.h.data());

    // MLP half.
    ensure(a.mlp_in, T, H);
    rmsnorm(a.h.data(), T, H, w.post_attn_norm.data(), eps, a.mlp_in.data());
    call_hook(ctx, "mlp.gate_proj", a.mlp_in);
    if (ctx.stop_after == "mlp.gate_proj") return;
    w.gate.forward(a.mlp_in, a.gate);
    w.up.forward(a.mlp_in, a.up);
    ensure(a.act, T, c.intermediate_size);
    swiglu(a.gate.data(), a.up.data(), a.gate.size(), a.act.data());
    call_hook(ctx, "mlp.down_proj", a.act);
    if (ctx.stop_after == "mlp.down_proj") return;
    w.down.forward(a.act, a.mlp_out);
    ensure(a.out, T, H);
    add(a.h.data(), a.mlp_out.data(), a.h.size(), a.out.data());
}

}  // namespace cortiq::model
