// A step of quantize() with --tune block+kd (or kd): after every layer is
// encoded (and block-tuned), the BLR layers of all blocks distilled together
// on the original model's next-token distribution (tune/distill.hpp).
#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <optional>

#include "core/memory_usage.hpp"
#include "core/progress.hpp"
#include "dist/comm.hpp"
#include "model/gpu_model.hpp"
#include "model/ops.hpp"
#include "quantize/steps.hpp"
#include "tune/distill.hpp"

namespace cortiq::quant {

void distill_model(Run& run, const calib::CalibSet& cs, const model::Model& original,
                   double kd_random, std::unique_ptr<model::GpuModel> gpu_teacher) {
    const auto t0 = std::chrono::steady_clock::now();
    const io::ModelConfig& cfg = run.model.config();
    tune::Student s;
    s.d = dims_of(cfg);
    s.inv_freq = model::rope_inv_freq(cfg);
    // a compressed embedding stays as it is too: its rows as floats for the lookups
    std::optional<MatF> embed_rows;
    if (run.model.embedding().packed()) embed_rows.emplace(run.model.embedding().dense());
    s.embed = embed_rows ? &*embed_rows : &run.model.embed_table();
    s.final_norm = run.model.final_norm();
    const MatF head = run.model.lm_head().w->dense();  // a compressed head stays as it is
    CORTIQ_CHECK(run.model.lm_head().bias.empty(), "--tune kd: a biased lm_head is not supported");
    s.head = &head;
    for (int64_t l = 0; l < run.model.num_layers(); ++l) s.blocks.push_back(block_params(run, l));
    // With --device gpu the teacher runs on the GPU too (model::GpuModel, the
    // runtime's tested forward): on the host a large model's forward pass over
    // every window would take longer than the distillation itself. Where the
    // original does not fit next to the student, it runs on the host.
    if (run.o.device == encode::Device::gpu && !gpu_teacher) {
        try {
            gpu_teacher = std::make_unique<model::GpuModel>(original);
        } catch (const Error& e) {
            run.bar.print(fmt::format(
                "distillation: the original model runs on the CPU as the teacher ({})", e.what()));
        }
    }
    // the teacher's share of the time, for the report (at the 7B shape its
    // logits, 65 MB a window, are most of what the GPU's distillation moves)
    double teacher_seconds = 0;
    const tune::TeacherFn teacher = [&](const std::vector<int32_t>& toks) {
        const auto t1 = std::chrono::steady_clock::now();
        MatF logits = gpu_teacher ? gpu_teacher->forward(toks) : original.forward(toks);
        teacher_seconds += seconds_since(t1);
        return logits;
    };
    // on the GPU the teacher's logits stay there (a window of a large
    // vocabulary is hundreds of MB: 0.5 GB at 248k words and 512 tokens), and
    // where they cannot all be kept, its head inputs are (tune/distill.hpp)
    tune::DeviceTeacher device_teacher;
    if (gpu_teacher) {
        device_teacher.width = cfg.hidden_size;
        device_teacher.hidden = [&](const std::vector<int32_t>& toks) {
            const auto t1 = std::chrono::steady_clock::now();
            const float* normed = gpu_teacher->final_hidden_on_device(toks);
            teacher_seconds += seconds_since(t1);
            return normed;
        };
        device_teacher.logits = [&](const float* normed, int64_t rows) {
            const auto t1 = std::chrono::steady_clock::now();
            const float* logits = gpu_teacher->head_on_device(normed, rows);
            teacher_seconds += seconds_since(t1);
            return logits;
        };
    }
    if (run.o.verbose) run.bar.print("distilling the logits of the whole model");
    std::vector<std::vector<int32_t>> fit = cs.fit;
    const int64_t n_random = calib::append_random_windows(fit, kd_random, cfg.vocab_size,
                                                          0x7a2d0);  // fixed: reproducible
    // A line with an ETA while it runs: at most `epochs` passes over the
    // windows (fewer when the held-out KL stops falling: --kd-patience).
    tune::TuneOptions kd = run.o.kd;
    if (run.o.profile) kd.profile = &run.report.tune_stages;
    // Under mpirun with several windows a step every rank distils
    // (quantize.cpp), each computing its share of each step's windows; with
    // one window a step rank 0 alone.
    tune::TuneRanks ranks;
    if (dist::distributed() && kd.batch_windows > 1) {
        const auto [f0, f1] =
            dist::share(static_cast<int64_t>(fit.size()), dist::rank(), dist::size());
        const auto [s0, s1] =
            dist::share(static_cast<int64_t>(cs.sel.size()), dist::rank(), dist::size());
        ranks = {.fit_first = f0,
                 .fit_total = static_cast<int64_t>(fit.size()),
                 .sel_first = s0,
                 .sel_total = static_cast<int64_t>(cs.sel.size()),
                 .rows = static_cast<int64_t>(fit.front().size()),
                 .fit_count = f1 - f0,
                 .sel_count = s1 - s0,
                 .fold = fold_over_ranks};
        kd.ranks = &ranks;
    }
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
        run.o.device == encode::Device::gpu
            ? tune::distill_gpu(s, teacher, fit, cs.sel, kd, device_teacher)
            : tune::distill(s, teacher, fit, cs.sel, kd);
    bar.finish(fmt::format("{} of at most {} passes run", r.epochs_run, kd.epochs));
    if (r.best_epoch > 0)
        for (int64_t l = 0; l < run.model.num_layers(); ++l)
            install_block(run, l, s.blocks[static_cast<size_t>(l)], nullptr);
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
