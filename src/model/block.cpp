#include "model/block.hpp"

#include <algorithm>

#include "core/blas_threads.hpp"
#include "model/block_detail.hpp"
#include "model/ops.hpp"

namespace cortiq::model {

KvCache::KvCache(const io::ModelConfig& c, int64_t cap) : capacity(cap) {
    CORTIQ_CHECK(cap > 0, "KV cache capacity must be positive, got {}", cap);
    const size_t L = static_cast<size_t>(c.num_layers);
    k.resize(L);
    v.resize(L);
    conv.resize(L);
    state.resize(L);
    const auto& d = c.delta;
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const size_t i = static_cast<size_t>(l);
        if (c.is_delta(l)) {
            conv[i] = MatF(d.conv_kernel - 1, d.conv_dim());
            state[i].assign(static_cast<size_t>(d.v_heads * d.k_dim * d.v_dim), 0.0f);
        } else {
            k[i] = MatF(cap, c.kv_dim());
            v[i] = MatF(cap, c.kv_dim());
        }
    }
}

void KvCache::clear() {
    length = 0;
    for (auto& m : conv) std::fill(m.vec().begin(), m.vec().end(), 0.0f);
    for (auto& s : state) std::fill(s.begin(), s.end(), 0.0f);
}

std::vector<const Linear*> LayerWeights::linears() const {
    std::vector<const Linear*> out;
    for (const Linear* l :
         {&q, &k, &v, &o, &gate, &up, &down, &delta.qkv, &delta.z, &delta.b, &delta.a, &delta.out})
        if (l->w) out.push_back(l);
    return out;
}

namespace {

using detail::call_hook;
using detail::ensure;

// The attention mixer: from a.attn_in (n1) to a.attn_out (o_proj's output).
// Returns false when ctx.stop_after stopped it.
bool attention_forward(const LayerWeights& w, const BlockContext& ctx, BlockActivations& a) {
    const io::ModelConfig& c = *ctx.cfg;
    const int64_t T = a.x.rows(), hd = c.head_dim;
    const float eps = static_cast<float>(c.rms_norm_eps);
    call_hook(ctx, "self_attn.q_proj", a.attn_in);
    if (ctx.stop_after == "self_attn.q_proj") return false;
    w.q.forward(a.attn_in, a.q_lin);
    w.k.forward(a.attn_in, a.k_lin);
    w.v.forward(a.attn_in, a.v);
    if (c.attn_gate) {  // q_proj: [query | gate] per head
        ensure(a.q, T, c.q_dim());
        ensure(a.gate_lin, T, c.q_dim());
        split_query_gate(a.q_lin.data(), T, c.num_heads, hd, a.q.data(), a.gate_lin.data());
    } else {
        a.q = a.q_lin;
    }
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
    MatF& core = c.attn_gate ? a.attn_core : a.attn;
    ensure(core, T, c.q_dim());
    // attention() indexes keys from absolute position 0; without a cache the
    // batch's keys start at pos0, which the query offset accounts for.
    attention(a.q.data(), T, c.q_dim(), keys, vals, c.kv_dim(), c.num_heads, c.num_kv_heads, hd,
              ctx.pos0 - key_pos0, c.sliding_window, core.data(), c.q_dim());
    if (c.attn_gate) {
        ensure(a.attn, T, c.q_dim());
        sigmoid_gate(a.attn_core.data(), a.gate_lin.data(), a.attn.size(), a.attn.data());
    }
    call_hook(ctx, "self_attn.o_proj", a.attn);
    if (ctx.stop_after == "self_attn.o_proj") return false;
    w.o.forward(a.attn, a.attn_out);
    return true;
}

}  // namespace

void block_forward(const LayerWeights& w, const BlockContext& ctx, BlockActivations& a) {
    const io::ModelConfig& c = *ctx.cfg;
    const int64_t T = a.x.rows(), H = c.hidden_size;
    const float eps = static_cast<float>(c.rms_norm_eps);
    CORTIQ_ASSERT(a.x.cols() == H && a.x.size() == static_cast<int64_t>(a.x.vec().size()),
                  "{} vs {}", a.x.cols(), H);
    CORTIQ_ASSERT(ctx.rope && ctx.rope->pos0 == ctx.pos0 && ctx.rope->rows >= T);
    SingleThreadedBlas single_blas;  // OpenMP drives the parallelism (model/ops.hpp)

    // Token mixer half.
    ensure(a.attn_in, T, H);
    rmsnorm(a.x.data(), T, H, w.input_norm.data(), eps, a.attn_in.data());
    const bool done = w.mixer == io::Mixer::gated_delta ? delta_mixer_forward(w.delta, ctx, a)
                                                        : attention_forward(w, ctx, a);
    if (!done) return;
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
