// A step of quantize() with --tune block+kd (or kd): after every layer is
// encoded (and block-tuned), the BLR layers of all blocks distilled together
// on the original model's next-token distribution (tune/distill.hpp).
#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <optional>

#include "calib/gpu_states.hpp"
#include "core/memory_usage.hpp"
#include "core/progress.hpp"
#include "dist/comm.hpp"
#include "model/ops.hpp"
#include "quantize/steps.hpp"
#include "tune/distill.hpp"

namespace cortiq::quant {

namespace {

// What the student reads besides its blocks: a compressed embedding's rows
// as floats for the lookups, and the head's dense weight (a compressed
// embedding or head stays as it is).
struct StudentTables {
    std::optional<MatF> embed_rows;
    MatF head;
};

// Every block's tuned parameters on the host. Fixed signs on the GPU stay in
// the payloads (signs_from_payloads): the host keeps each block's scales and
// norms, and the tuner reads one block's signs at a time as it packs them on
// the device (a 7B model's signs as floats are 26 GB).
tune::Student make_student(Run& run, StudentTables& tables, bool signs_from_payloads) {
    const io::ModelConfig& cfg = run.model.config();
    tune::Student s;
    s.d = dims_of(cfg);
    s.inv_freq = model::rope_inv_freq(cfg);
    // compressed or mapped: read once for the whole distillation
    if (!run.model.embedding().table_ptr())
        tables.embed_rows.emplace(run.model.embedding().dense());
    s.embed = tables.embed_rows ? &*tables.embed_rows : &run.model.embed_table();
    s.final_norm = run.model.final_norm();
    tables.head = run.model.lm_head().w->dense();
    CORTIQ_CHECK(run.model.lm_head().bias.empty(), "--tune kd: a biased lm_head is not supported");
    s.head = &tables.head;
    // (with the signs left in the payloads, not unpacked only to be dropped)
    for (int64_t l = 0; l < run.model.num_layers(); ++l)
        s.blocks.push_back(block_params(run, l, !signs_from_payloads));
    if (signs_from_payloads)
        s.full_block = [&run](size_t l) { return block_params(run, static_cast<int64_t>(l)); };
    return s;
}

// With --device gpu the teacher runs there as the calibration did: every
// window's hidden states through one layer at a time, one layer of the
// original on the device at a time (calib::GpuStates), so the teacher never
// holds the whole model (a 7B model's layers are 26 GB in float32).
// Distillation then reads each window's head inputs from those states and
// runs the head for the logits; they never leave the device.
struct GpuTeacher {
    std::unique_ptr<calib::GpuStates> states;
    tune::DeviceTeacher device;
};

void start_gpu_teacher(const Run& run, const model::Model& original,
                       const std::vector<std::vector<int32_t>>& fit,
                       const std::vector<std::vector<int32_t>>& sel, double& seconds,
                       GpuTeacher& t) {
    const auto t1 = std::chrono::steady_clock::now();
    const io::ModelConfig& cfg = original.config();
    calib::CalibSet windows;
    windows.fit = fit;
    windows.sel = sel;
    t.states = std::make_unique<calib::GpuStates>(original, windows);
    Progress bar("teacher", cfg.num_layers, "layers", run.o.progress, run.o.on_progress);
    for (int64_t l = 0; l < cfg.num_layers; ++l) {
        t.states->advance(0, l);
        if (!sel.empty()) t.states->advance(1, l);
        bar.advance(1, fmt::format("{} windows through layer {}", fit.size() + sel.size(), l));
    }
    seconds += seconds_since(t1);
    bar.finish(fmt::format("the original model's outputs in {:.1f} s", seconds_since(t1)));
    calib::GpuStates* states = t.states.get();
    t.device.width = cfg.hidden_size;
    t.device.hidden = [states, &seconds](bool is_sel, size_t i, const std::vector<int32_t>&) {
        const auto t2 = std::chrono::steady_clock::now();
        const float* normed = states->final_hidden(is_sel ? 1 : 0, static_cast<int64_t>(i));
        seconds += seconds_since(t2);
        return normed;
    };
    t.device.logits = [states, &seconds](const float* normed, int64_t rows) {
        const auto t2 = std::chrono::steady_clock::now();
        const float* logits = states->head_logits(normed, rows);
        seconds += seconds_since(t2);
        return logits;
    };
}

// Under mpirun with several windows a step every rank distils (quantize.cpp),
// each computing its share of each step's windows; with one window a step
// rank 0 alone (ranks stays unset).
void share_over_ranks(const std::vector<std::vector<int32_t>>& fit,
                      const std::vector<std::vector<int32_t>>& sel, tune::TuneOptions& kd,
                      tune::TuneRanks& ranks) {
    if (!dist::distributed() || kd.batch_windows <= 1) return;
    const auto [f0, f1] = dist::share(static_cast<int64_t>(fit.size()), dist::rank(), dist::size());
    const auto [s0, s1] = dist::share(static_cast<int64_t>(sel.size()), dist::rank(), dist::size());
    ranks = {.fit_first = f0,
             .fit_total = static_cast<int64_t>(fit.size()),
             .sel_first = s0,
             .sel_total = static_cast<int64_t>(sel.size()),
             .rows = static_cast<int64_t>(fit.front().size()),
             .fit_count = f1 - f0,
             .sel_count = s1 - s0,
             .fold = fold_over_ranks};
    kd.ranks = &ranks;
}

// The kept pass's blocks put in the model (with signs from the payloads:
// each block's signs read back and its tuned scales put beside them).
void install_distilled(Run& run, const tune::Student& s, bool signs_from_payloads) {
    for (int64_t l = 0; l < run.model.num_layers(); ++l) {
        const tune::BlockParamsT<float>& tuned = s.blocks[static_cast<size_t>(l)];
        if (!signs_from_payloads) {
            install_block(run, l, tuned, nullptr);
            continue;
        }
        tune::BlockParamsT<float> whole = block_params(run, l);
        copy_scales(tuned, whole);
        install_block(run, l, whole, nullptr);
    }
}

}  // namespace

void distill_model(Run& run, const calib::CalibSet& cs, const model::Model& original,
                   double kd_random) {
    const auto t0 = std::chrono::steady_clock::now();
    const bool gpu = run.o.device == encode::Device::gpu;
    const bool signs_from_payloads = gpu && run.o.kd.lr_signs == 0 && run.o.kd.pack_fixed_signs;
    // the host's parts of the run, under --profile beside the tuner's own
    Profile* prof = run.o.profile ? &run.report.tune_stages : nullptr;
    StudentTables tables;
    std::optional<ScopedStage> stage(std::in_place, prof, "kd_student");
    tune::Student s = make_student(run, tables, signs_from_payloads);
    stage.reset();
    // the teacher's share of the time, for the report
    double teacher_seconds = 0;
    const tune::TeacherFn teacher = [&](const std::vector<int32_t>& toks) {
        const auto t1 = std::chrono::steady_clock::now();
        MatF logits = original.forward(toks);
        teacher_seconds += seconds_since(t1);
        return logits;
    };
    if (run.o.verbose) run.bar.print("distilling the logits of the whole model");
    std::vector<std::vector<int32_t>> fit = cs.fit;
    const int64_t n_random =
        calib::append_random_windows(fit, kd_random, run.model.config().vocab_size,
                                     0x7a2d0);  // fixed: reproducible
    GpuTeacher gpu_teacher;
    stage.emplace(prof, "kd_teacher_start");
    if (gpu) start_gpu_teacher(run, original, fit, cs.sel, teacher_seconds, gpu_teacher);
    stage.reset();
    tune::TuneOptions kd = run.o.kd;
    if (run.o.profile) kd.profile = &run.report.tune_stages;
    tune::TuneRanks ranks;
    share_over_ranks(fit, cs.sel, kd, ranks);
    // A line with an ETA while it runs: at most `epochs` passes over the
    // windows (fewer when the held-out KL stops falling: --kd-patience).
    Progress bar("distilling", static_cast<int64_t>(kd.epochs) * static_cast<int64_t>(fit.size()),
                 "windows", run.o.progress, run.o.on_progress);
    std::string last;  // the last evaluation, shown after the ETA
    kd.on_progress = [&](const tune::EpochProgress& e) {
        if (e.evaluated)
            last = fmt::format("pass {}/{}: held-out KL {:.4f}, best {:.4f} (pass {})", e.epoch,
                               e.epochs, e.held_out, e.best, e.kept);
        bar.advance(static_cast<int64_t>(e.windows_stepped),
                    last.empty() ? fmt::format("pass {}/{}", e.epoch, e.epochs) : last);
    };
    const tune::DistillResult r =
        gpu ? tune::distill_gpu(s, teacher, fit, cs.sel, kd, gpu_teacher.device)
            : tune::distill(s, teacher, fit, cs.sel, kd);
    bar.finish(fmt::format("{} of at most {} passes run", r.epochs_run, kd.epochs));
    stage.emplace(prof, "kd_install");
    if (r.best_epoch > 0) install_distilled(run, s, signs_from_payloads);
    stage.reset();
    const double secs = seconds_since(t0);
    run.report.tune_seconds += secs;
    run.report.distilled = {{"kl_fit_before", r.kl_fit_before},
                            {"kl_fit_after", r.kl_fit_after},
                            {"kl_sel_before", r.kl_sel_before},
                            {"kl_sel_after", r.kl_sel_after},
                            {"best_epoch", r.best_epoch},
                            {"epochs_run", r.epochs_run},
                            {"fit_windows", cs.fit.size()},
                            {"random_windows", n_random},
                            {"flips", r.flips},
                            {"seconds", secs},
                            {"teacher_seconds", teacher_seconds},
                            {"peak_rss_bytes", peak_rss_bytes()}};
    if (run.o.verbose)
        run.bar.print(fmt::format(
            "distilled: KL {:.4f} → {:.4f} nats/token (held out {:.4f} → "
            "{:.4f}), epoch {} kept of {} run, {} signs flipped, {:.1f}s (teacher {:.1f}s), peak "
            "RSS {:.0f} MB",
            r.kl_fit_before, r.kl_fit_after, r.kl_sel_before, r.kl_sel_after, r.best_epoch,
            r.epochs_run, r.flips, secs, teacher_seconds, peak_rss_bytes() / 1e6));
}

}  // namespace cortiq::quant
