// A step of encode_layer with --tune block: the BLR layers of the freshly
// encoded block fitted to the original model's block outputs
// (tune/block_tune.hpp; on the GPU with --device gpu), re-packed at the same
// rank and paths, put in place.
#include <fmt/format.h>

#include <chrono>
#include <functional>
#include <optional>

#include "blr/packed.hpp"
#include "blr/sign.hpp"
#include "core/memory_usage.hpp"
#include "core/parallel.hpp"
#include "core/profile.hpp"
#include "dist/comm.hpp"
#include "model/ops.hpp"
#include "quantize/steps.hpp"

namespace cortiq::quant {

tune::BlockDims dims_of(const io::ModelConfig& c) {
    tune::BlockDims d;
    d.hidden = c.hidden_size;
    d.heads = c.num_heads;
    d.kv_heads = c.num_kv_heads;
    d.head_dim = c.head_dim;
    d.ffn = c.intermediate_size;
    d.eps = c.rms_norm_eps;
    d.qk_norm = c.qk_norm;
    d.attn_gate = c.attn_gate;
    d.rotary_dim = c.rotary_dim();
    const io::DeltaNetConfig& dc = c.delta;
    d.delta = {dc.k_heads, dc.v_heads, dc.k_dim, dc.v_dim, dc.conv_kernel};
    return d;
}

namespace {

// The names of a layer's linears in the order of tune::BlockParamsT::linears()
// ("" where the layer has none in that slot).
std::vector<std::string> slot_names(bool delta) {
    static const char* const attention[] = {"self_attn.q_proj", "self_attn.k_proj",
                                            "self_attn.v_proj", "self_attn.o_proj"};
    static const char* const mixer[] = {"linear_attn.in_proj_qkv", "linear_attn.in_proj_z",
                                        "linear_attn.in_proj_b", "linear_attn.in_proj_a",
                                        "linear_attn.out_proj"};
    std::vector<std::string> out(tune::kLinearSlots);
    if (!delta)
        for (size_t i = 0; i < 4; ++i) out[tune::kQ + i] = attention[i];
    out[tune::kGate] = "mlp.gate_proj";
    out[tune::kUp] = "mlp.up_proj";
    out[tune::kDown] = "mlp.down_proj";
    if (delta)
        for (size_t i = 0; i < 5; ++i) out[tune::kQkv + i] = mixer[i];
    return out;
}

}  // namespace

tune::BlockParamsT<float> block_params(const Run& run, int64_t layer, bool with_signs) {
    const model::LayerWeights& lw = run.model.layer(layer);
    tune::BlockParamsT<float> p;
    p.delta = lw.mixer == io::Mixer::gated_delta;
    p.in_norm = lw.input_norm;
    p.post_norm = lw.post_attn_norm;
    p.q_norm = lw.q_norm;
    p.k_norm = lw.k_norm;
    if (p.delta) {
        const model::DeltaNetWeights& dw = lw.delta;
        p.conv.assign(dw.conv.data(), dw.conv.data() + dw.conv.size());
        p.a_log = dw.a_log;
        p.dt_bias = dw.dt_bias;
        p.gnorm = dw.norm;
    }
    const auto names = slot_names(p.delta);
    auto lins = p.linears();
    for (size_t i = 0; i < names.size(); ++i) {
        if (names[i].empty()) continue;
        const model::Linear& lin = run.model.linear(layer, names[i]);
        tune::LinearT<float>& t = *lins[i];
        t.m = lin.out_features();
        t.n = lin.in_features();
        t.bias = lin.bias;
        const auto it = run.payloads.find(tensor_name(run.model.config(), layer, names[i]));
        if (it != run.payloads.end() && !blr::is_sign_payload(it->second)) {
            t.blr = tune::to_weights(blr::PackedWeight::from_payload(it->second, it->first),
                                     with_signs);
        } else {
            const MatF w = lin.w->dense();
            t.w.assign(w.data(), w.data() + w.size());
        }
    }
    return p;
}

void install_block(Run& run, int64_t layer, const tune::BlockParamsT<float>& p, LayerRecord* rec) {
    const auto names = slot_names(p.delta);
    auto lins = p.linears();
    // the payloads packed side by side (each is a pure function of its
    // layer's values), then put in place one after the other
    std::vector<std::vector<uint8_t>> packed(names.size());
    parallel_for(0, static_cast<int64_t>(names.size()), [&](int64_t i) {
        const auto k = static_cast<size_t>(i);
        if (lins[k]->blr) packed[k] = tune::pack_weights(*lins[k]->blr);
    });
    for (size_t i = 0; i < names.size(); ++i) {
        if (!lins[i]->blr) continue;
        const std::string name = tensor_name(run.model.config(), layer, names[i]);
        const std::vector<uint8_t> bytes = std::move(packed[i]);
        install_payload(run, layer, names[i], bytes);
        if (rec)
            for (auto& [n, b] : rec->payloads)
                if (n == name) b = bytes;
    }
}

void copy_scales(const tune::BlockParamsT<float>& from, tune::BlockParamsT<float>& to) {
    const auto src = from.linears();
    auto dst = to.linears();
    for (size_t i = 0; i < src.size(); ++i) {
        CORTIQ_ASSERT(!src[i]->blr == !dst[i]->blr, "blocks of different layers (linear {})", i);
        if (!src[i]->blr) continue;
        const auto& a = *src[i]->blr;
        auto& b = *dst[i]->blr;
        CORTIQ_ASSERT(a.m == b.m && a.n == b.n && a.r == b.r && a.paths.size() == b.paths.size(),
                      "blocks of different layers (linear {})", i);
        for (size_t k = 0; k < a.paths.size(); ++k) {
            b.paths[k].h = a.paths[k].h;
            b.paths[k].l = a.paths[k].l;
            b.paths[k].g = a.paths[k].g;
        }
    }
}

namespace {

// After a block's tuning: the tuned layers put in place when an epoch was
// kept, the report, the record sent to the other ranks (`broadcast`), progress.
void finish_tuning(Run& run, int64_t layer, LayerRecord& rec, const tune::BlockParamsT<float>& p,
                   const tune::BlockTuneResult& res, std::chrono::steady_clock::time_point t0,
                   bool broadcast) {
    Profile* const prof = run.o.profile ? &run.report.tune_stages : nullptr;
    if (res.best_epoch > 0) {
        const ScopedStage stage(prof, "install");  // packed, dequantised, put in the model
        install_block(run, layer, p, &rec);
    }
    const double secs = seconds_since(t0);
    run.report.tune_seconds += secs;
    run.report.tuned_blocks.push_back({{"layer", layer},
                                       {"fit_before", res.fit_before},
                                       {"fit_after", res.fit_after},
                                       {"sel_before", res.sel_before},
                                       {"sel_after", res.sel_after},
                                       {"best_epoch", res.best_epoch},
                                       {"flips", res.flips},
                                       {"seconds", secs},
                                       {"peak_rss_bytes", peak_rss_bytes()}});
    if (broadcast) broadcast_record(rec, 0);
    int64_t weights = 0;  // the layer's tuning, on the quantize bar (quantize.cpp)
    for (const auto& r : rec.reports) weights += r.m * r.n;
    run.bar.advance(weights, fmt::format("layer {} tuned", layer));
    if (run.o.verbose)
        run.bar.print(fmt::format(
            "layer {} tuned: block error {:.4f} → {:.4f} (held out {:.4f} → {:.4f}), epoch {} "
            "kept, {} signs flipped, {:.1f}s, peak RSS {:.0f} MB",
            layer, res.fit_before, res.fit_after, res.sel_before, res.sel_after, res.best_epoch,
            res.flips, secs, peak_rss_bytes() / 1e6));
}

// Block tuning on the calibration's states on the device (--device gpu, one
// process): the windows and the original block's outputs never go to the host.
tune::BlockTuneResult tune_on_device_states(Run& run, int64_t layer, tune::BlockParamsT<float>& p,
                                            const tune::BlockDims& dims, Profile* prof) {
    using Pairs = calib::SequentialCalib::DevicePairs;
    Pairs fit, sel;
    {
        const ScopedStage stage(prof, "pairs");
        fit = run.states.block_pairs_on_device(0, layer);
        sel = run.states.block_pairs_on_device(1, layer);
    }
    const auto windows = [](const Pairs& d) {
        CORTIQ_ASSERT(d.x.windows == d.y.windows && d.x.rows == d.y.rows && d.x.cols == d.y.cols,
                      "block tuning: {} inputs of {} × {}, {} targets of {} × {}", d.x.windows,
                      d.x.rows, d.x.cols, d.y.windows, d.y.rows, d.y.cols);
        return tune::DeviceWindowPairs{d.x.data, d.y.data, d.x.windows, d.x.rows, d.x.cols};
    };
    tune::TuneOptions to = run.o.tune;
    to.profile = prof;
    const tune::BlockTuneResult res = tune::tune_block_gpu(
        p, dims, model::rope_inv_freq(run.model.config()), windows(fit), windows(sel), to);
    run.states.free_block_pairs();
    return res;
}

}  // namespace

void tune_layer(Run& run, int64_t layer, LayerRecord& rec) {
    const auto t0 = std::chrono::steady_clock::now();
    const io::ModelConfig& cfg = run.model.config();
    const tune::BlockDims dims = dims_of(cfg);
    CORTIQ_CHECK(cfg.sliding_window == 0 || cfg.sliding_window >= run.o.calib.seqlen,
                 "--tune block: a sliding window ({}) shorter than the calibration windows ({}) "
                 "is not supported",
                 cfg.sliding_window, run.o.calib.seqlen);
    CORTIQ_CHECK(run.o.tune.lr_norms == 0,
                 "--tune block: tuned RMSNorm weights are not written to the output yet");
    Profile* const prof = run.o.profile ? &run.report.tune_stages : nullptr;
    tune::BlockParamsT<float> p;
    {
        const ScopedStage stage(prof, "unpack");  // the payloads into tuning's values
        p = block_params(run, layer);
    }
    // Under mpirun with several windows a step (--tune-batch > 1): every rank
    // tunes on its own windows, the gradients and losses summed across the
    // ranks in window order (tune::TuneRanks), and every rank ends with the
    // tuned block. With one window a step a step has nothing to share: rank 0
    // holds every window's pairs and tunes, the others take its payloads.
    const bool data_parallel = dist::distributed() && run.o.tune.batch_windows > 1;
    // --device gpu with the states on the device: the windows stay there.
    if (run.states.on_device() && !dist::distributed())
        return finish_tuning(run, layer, rec, p, tune_on_device_states(run, layer, p, dims, prof),
                             t0, false);
    std::optional<ScopedStage> pairs_stage(std::in_place, prof, "pairs");
    auto [xf, yf] = run.states.block_pairs(0, layer, !data_parallel);
    auto [xs, ys] = run.states.block_pairs(1, layer, !data_parallel);
    pairs_stage.reset();
    if (dist::distributed() && !data_parallel && !dist::is_root()) {
        broadcast_record(rec, 0);
        return install_record(run, layer, rec);
    }
    tune::TuneOptions to = run.o.tune;
    to.profile = prof;
    tune::TuneRanks ranks;
    if (data_parallel) {
        const auto [fit_first, fit_total] = run.states.window_share(0);
        const auto [sel_first, sel_total] = run.states.window_share(1);
        ranks = {.fit_first = fit_first,
                 .fit_total = fit_total,
                 .sel_first = sel_first,
                 .sel_total = sel_total,
                 .rows = run.o.calib.seqlen,
                 .fit_count = static_cast<int64_t>(xf.size()),
                 .sel_count = static_cast<int64_t>(xs.size()),
                 .fold = fold_over_ranks};
        to.ranks = &ranks;
    }
    // --device gpu tunes on the GPU (tune/cuda/block_tune.cpp), the same steps in
    // float32, for every block kind.
    const tune::WindowPairs fit{std::move(xf), std::move(yf)}, sel{std::move(xs), std::move(ys)};
    const std::vector<float> inv_freq = model::rope_inv_freq(cfg);
    const tune::BlockTuneResult res = run.o.device == encode::Device::gpu
                                          ? tune::tune_block_gpu(p, dims, inv_freq, fit, sel, to)
                                          : tune::tune_block(p, dims, inv_freq, fit, sel, to);
    finish_tuning(run, layer, rec, p, res, t0, dist::distributed() && !data_parallel);
}

}  // namespace cortiq::quant
