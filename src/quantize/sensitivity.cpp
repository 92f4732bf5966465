// --plan auto's measurement (quantize/allocate.hpp): how much each tensor's
// compression costs the model's output, on the float model and a few
// held-out windows, before anything is encoded.
//
// Layer by layer (the float hidden states of the windows carried along), for
// each tensor of the layer: its input's Gram from the float model, a quick
// encode (one path, few sweeps: the same whitening, signs and scales as the
// real encoder, a fraction of its refinement) at 0.6·b₀, b₀ and 1.6·b₀; each
// put in place of the float weight in turn and the model run from that layer
// on, its KL divergence to the float model's next-token distribution is the
// tensor's cost D_i at that budget (allocate.hpp). The embedding (rows weighted as encode_embedding
// does; a tied head reads it) and an untied head are measured the same way. With
// --device gpu the quick encodes run on the GPU encoder and the forward
// passes of the KL on a GPU copy of the float model (model::GpuModel), the
// measured weight swapped in on the device; the Grams and the head's KL stay
// on the host.
#include <fmt/format.h>

#include <array>
#include <chrono>
#include <cmath>

#include "blr/model.hpp"
#include "blr/sign.hpp"
#include "calib/calib.hpp"
#include "core/parallel.hpp"
#include "model/gpu_model.hpp"
#include "model/ops.hpp"
#include "quantize/steps.hpp"
#include "tune/distill.hpp"

namespace cortiq::quant {

namespace {

using tune::log_softmax_rows;  // rows in parallel, float64 sums

constexpr double kProxyScale[3] = {0.6, 1.0, 1.6};

// The quick encode: the real one's stages with few sweeps (docs/plan.md: a
// weaker one, with errors 1.1–1.8× the real encoder's, planned worse). One
// path, unless `high_rank`: where one path's rank would
// reach half of min(m, n) (an lm_head of hidden 256 at 1 bpw), extra bits
// buy nothing on one path, and the real encoder takes two.
encode::Options proxy_options(const encode::Options& base, bool high_rank) {
    encode::Options p = base;
    p.paths = high_rank ? encode::PathsChoice::two : encode::PathsChoice::one;
    p.method = encode::Method::nvg_noknots;
    p.itq_iters = std::min(base.itq_iters, 20);
    p.als_init_sweeps = 2;
    p.als_joint_sweeps = high_rank ? 1 : 0;
    p.als_knot_sweeps = 0;
    p.refine_sweeps = 1;
    p.flip_passes = 8;
    p.gptq_passes = 8;
    return p;
}

// Σ over rows of KL(p ‖ q) = Σ p·(ln p − ln q), with p given as
// probabilities and log-probabilities, q as log-probabilities; per-row sums
// added in row order (the same total for any number of threads).
double kl_sum(const MatF& p, const MatF& logp, const MatF& logq) {
    std::vector<double> rows(static_cast<size_t>(p.rows()));
    parallel_for(
        0, p.rows(),
        [&](int64_t t) {
            double kl = 0;
            const float *pr = p.row(t), *lp = logp.row(t), *lq = logq.row(t);
            for (int64_t v = 0; v < p.cols(); ++v) kl += double{pr[v]} * (double{lp[v]} - lq[v]);
            rows[static_cast<size_t>(t)] = kl;
        },
        16);
    double kl = 0;
    for (double r : rows) kl += r;
    return kl;
}

// Rows r·stride + stride − 1 of x (the last position of each stride: the
// most context), or x itself at stride 1.
MatF rows_at(const MatF& x, int64_t stride) {
    if (stride == 1) return x;
    MatF out(x.rows() / stride, x.cols());
    for (int64_t r = 0; r < out.rows(); ++r)
        std::copy_n(x.row(r * stride + stride - 1), x.cols(), out.row(r));
    return out;
}

struct Measure {
    model::Model& m;
    const std::vector<std::vector<int32_t>>& windows;
    int64_t stride = 1;          // positions measured: every stride-th
    std::vector<MatF> ref_logp;  // per window: the float model's log-probabilities
    std::vector<MatF> ref_p;     // and its probabilities
    int64_t tokens = 0;          // positions measured in all
    // --device gpu: the KL forwards run on this copy of the model, each
    // measured weight swapped in and out on the device (set_linear)
    std::unique_ptr<model::GpuModel> gpu;

    // The reference at the measured positions of every window: at most
    // `bytes` for both of its tables (SensitivityRequest::reference_bytes).
    void reference(int64_t bytes) {
        CORTIQ_CHECK(!windows.empty(), "--plan auto: no held-out window to measure on");
        const int64_t V = m.config().vocab_size, K = static_cast<int64_t>(windows.size());
        const int64_t T = static_cast<int64_t>(windows.front().size());
        const int64_t fit = std::max<int64_t>(1, bytes / (8 * V * K));
        stride = std::max<int64_t>(1, (T + fit - 1) / fit);
        for (const auto& win : windows) {
            MatF z = rows_at(gpu ? gpu->forward(win) : m.forward(win), stride);
            log_softmax_rows(z);
            MatF pz = z;
            for (auto& v : pz.vec()) v = std::exp(v);
            tokens += z.rows();
            ref_p.push_back(std::move(pz));
            ref_logp.push_back(std::move(z));
        }
    }

    // Mean KL per measured position of the whole model, on the GPU copy.
    double kl_on_gpu() {
        double kl = 0;
        for (size_t w = 0; w < windows.size(); ++w) {
            MatF z = rows_at(gpu->forward(windows[w]), stride);
            log_softmax_rows(z);
            kl += kl_sum(ref_p[w], ref_logp[w], z);
        }
        return kl / static_cast<double>(tokens);
    }

    // Mean KL per measured position of the model as it stands, run from block
    // `from` on the hidden states xs (or from the embedding when xs is null).
    double kl_from(int64_t from, const std::vector<MatF>* xs) {
        double kl = 0;
        model::BlockActivations act;
        MatF normed, logits;
        for (size_t w = 0; w < windows.size(); ++w) {
            act.x = xs ? (*xs)[w] : m.embed(windows[w]);
            for (int64_t l = from; l < m.num_layers(); ++l) {
                m.block(l, 0, nullptr, act);
                act.x = std::move(act.out);
            }
            m.logits(rows_at(act.x, stride), normed, logits);  // the head on those rows only
            log_softmax_rows(logits);
            kl += kl_sum(ref_p[w], ref_logp[w], logits);
        }
        return kl / static_cast<double>(tokens);
    }
};

// The three quick encodes of w against h: their relative errors (sel
// metric) and dense weights.
struct Proxies {
    std::array<double, 3> err{};
    std::array<MatF, 3> dense;
};

Proxies proxies(const std::string& name, const MatD& w, const MatD& h, double b0,
                const QuantizeOptions& o, double& seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    // one budget at a time: each takes two paths only where one path's rank
    // would reach half of min(m, n) and two paths of rank 1 fit
    const int64_t most = std::min(w.rows(), w.cols());
    std::vector<encode::Encoded> enc;
    for (double s : kProxyScale) {
        const double b = s * b0;
        const bool high_rank = 2 * blr::rank_for(w.rows(), w.cols(), b, 1) >= most &&
                               blr::rank_for(w.rows(), w.cols(), b, 2) >= 1;
        auto one = encode_group({{name, w, b}}, h, h, proxy_options(o.enc, high_rank), o.device,
                                o.jobs, o.gpus, false, name + " (sensitivity)",
                                [](size_t, const encode::Encoded&) {});
        enc.push_back(std::move(one[0]));
    }
    Proxies p;
    for (size_t k = 0; k < 3; ++k) {
        p.err[k] = enc[k].err_sel;
        p.dense[k] = blr::dequant_any(enc[k].payload);
    }
    seconds += seconds_since(t0);
    return p;
}

// The cost curve from the three measured KLs; more bits cannot cost more, so
// a later point above an earlier one (noise) is lowered to it.
TensorCost cost_of(const std::string& name, int64_t m, int64_t n, const std::array<double, 3>& kl,
                   double b0) {
    TensorCost c;
    c.name = name;
    c.weights = m * n;
    c.m = m;
    c.n = n;
    for (size_t k = 0; k < 3; ++k) {
        c.b.push_back(kProxyScale[k] * b0);
        const double v = std::max(kl[k], 0.0);
        c.kl.push_back(k == 0 ? v : std::min(v, c.kl.back()));
    }
    return c;
}

// One measurement: the reference distribution, then each tensor in turn.
struct Pass {
    const SensitivityRequest& rq;
    Progress& bar;
    model::Model& m;
    Measure ms;
    Sensitivity out;
    std::vector<MatF> xs;  // the windows' float hidden states at the current layer

    Pass(const SensitivityRequest& r, Progress& b)
        : rq(r), bar(b), m(r.model), ms{r.model, r.windows, 1, {}, {}, 0, nullptr} {
        if (rq.o.device == encode::Device::gpu) ms.gpu = std::make_unique<model::GpuModel>(m);
        ms.reference(rq.reference_bytes);
        out.b0 = rq.b0;
        out.windows = static_cast<int64_t>(rq.windows.size());
        out.stride = ms.stride;
        for (const auto& win : rq.windows) xs.push_back(m.embed(win));
    }

    void record(TensorCost cst, double err_ref) {
        out.costs.push_back(std::move(cst));
        out.proxy_err.push_back(err_ref);
    }

    void reupload() {  // the GPU copy after a change it cannot take in place
        if (!ms.gpu) return;
        ms.gpu.reset();
        ms.gpu = std::make_unique<model::GpuModel>(m);
    }

    // From the embedding, every block after it (rows weighted as
    // encode_embedding weights them).
    void embedding() {
        const auto& c = m.config();
        const int64_t V = c.vocab_size, H = c.hidden_size;
        const std::string name = embedding_name(c);
        const std::vector<double> s = embedding_row_weights(rq.calib, V);
        Proxies p = proxies(name, rows_weighted(*m.embedding().float_table(), s), MatD::identity(H),
                            rq.b0, rq.o, out.encode_seconds);
        const model::Embedding keep = m.embedding();
        std::array<double, 3> kl{};
        for (size_t k = 0; k < 3; ++k) {
            MatF& dense = p.dense[k];
            for (int64_t t = 0; t < V; ++t)
                for (int64_t j = 0; j < H; ++j)
                    dense(t, j) /= static_cast<float>(s[static_cast<size_t>(t)]);
            m.set_embedding(model::Embedding(std::make_shared<const MatF>(std::move(dense))));
            reupload();  // three uploads in all
            kl[k] = ms.gpu ? ms.kl_on_gpu() : ms.kl_from(0, nullptr);
        }
        m.set_embedding(keep);
        reupload();
        record(cost_of(name, V, H, kl, rq.b0), p.err[1]);
        out.costs.back().may_keep = true;
        out.costs.back().keep_bits = rq.embed_keep_bits;
        bar.advance(V * H, "sensitivity: embedding");
    }

    // One decoder tensor against its input's Gram h.
    void tensor(int64_t l, const char* lin, const MatD& h) {
        const std::string name = tensor_name(m.config(), l, lin);
        model::Linear& target = m.linear(l, lin);
        Proxies p =
            proxies(name, target.w->dense().cast<double>(), h, rq.b0, rq.o, out.encode_seconds);
        auto keep = std::move(target.w);
        std::array<double, 3> kl{};
        for (size_t k = 0; k < 3; ++k) {
            if (ms.gpu) {
                ms.gpu->set_linear(l, lin, model::DenseLinear(std::move(p.dense[k])));
                kl[k] = ms.kl_on_gpu();
                continue;
            }
            target.w = std::make_unique<model::DenseLinear>(std::move(p.dense[k]));
            kl[k] = ms.kl_from(l, &xs);
        }
        if (ms.gpu) ms.gpu->set_linear(l, lin, *keep);
        target.w = std::move(keep);
        record(cost_of(name, target.out_features(), target.in_features(), kl, rq.b0), p.err[1]);
        bar.advance(target.in_features() * target.out_features(), "sensitivity: " + name);
    }

    // Layer l's tensors, then the hidden states moved through it.
    void layer(int64_t l) {
        std::map<std::string, calib::GramAccumulator> grams;  // float model, the windows
        const model::LinearInputHook hook = [&](int64_t, std::string_view in, const float* x,
                                                int64_t rows, int64_t cols) {
            auto it = grams.find(std::string(in));
            if (it == grams.end())
                it = grams.emplace(std::string(in), calib::GramAccumulator(cols)).first;
            it->second.add(x, rows, cols);
        };
        std::vector<MatF> next;
        model::BlockActivations act;
        for (const auto& x : xs) {
            act.x = x;
            m.block(l, 0, nullptr, act, &hook);
            next.push_back(std::move(act.out));
        }
        for (const auto& g : input_groups(m.config(), l)) {
            const auto it = grams.find(g.input);
            if (it == grams.end()) continue;
            const MatD h = it->second.mean();
            for (const char* lin : g.linears)
                if (rq.decoder.count(tensor_name(m.config(), l, lin))) tensor(l, lin, h);
        }
        xs = std::move(next);
    }

    // The final norm's outputs' Gram; then only the head changes.
    void head() {
        const auto& c = m.config();
        const int64_t V = c.vocab_size, H = c.hidden_size;
        calib::GramAccumulator g(H);
        std::vector<MatF> normed(xs.size());  // at the measured positions
        for (size_t w = 0; w < xs.size(); ++w) {
            MatF all = xs[w];
            model::rmsnorm(xs[w].data(), xs[w].rows(), H, m.final_norm().data(),
                           static_cast<float>(c.rms_norm_eps), all.data());
            g.add(all.data(), all.rows(), H);  // the Gram: every position
            normed[w] = rows_at(all, ms.stride);
        }
        Proxies p = proxies(kHead, m.lm_head().w->dense().cast<double>(), g.mean(), rq.b0, rq.o,
                            out.encode_seconds);
        std::array<double, 3> kl{};
        for (size_t k = 0; k < 3; ++k) {
            const model::DenseLinear proxy(std::move(p.dense[k]));
            for (size_t w = 0; w < xs.size(); ++w) {
                MatF z(normed[w].rows(), V);
                proxy.apply(normed[w].data(), normed[w].rows(), z.data());
                log_softmax_rows(z);
                kl[k] += kl_sum(ms.ref_p[w], ms.ref_logp[w], z) / static_cast<double>(ms.tokens);
            }
        }
        record(cost_of(kHead, V, H, kl, rq.b0), p.err[1]);
        out.costs.back().may_keep = true;
        out.costs.back().keep_bits = rq.head_keep_bits;
        bar.advance(V * H, "sensitivity: lm_head");
    }
};

}  // namespace

Sensitivity measure_sensitivity(const SensitivityRequest& rq, Progress& bar) {
    const auto t0 = std::chrono::steady_clock::now();
    Pass pass(rq, bar);
    if (rq.embedding) pass.embedding();
    for (int64_t l = 0; l < rq.model.num_layers(); ++l) pass.layer(l);
    if (rq.head) pass.head();
    pass.out.seconds = seconds_since(t0);
    return std::move(pass.out);
}

}  // namespace cortiq::quant
