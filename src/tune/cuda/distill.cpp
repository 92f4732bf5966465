// distill on the GPU: tune/distill.cpp step for step (the same windows per
// batch in the same shuffled order, the same loss and Adam updates, the same
// choice of the epoch kept), with the embedding lookup, every block's forward
// and backward, the final norm, the head and the KL divergence on the device.
// The teacher (the original model, on the host) runs once per window when its
// log-probabilities fit on the device.
#include "tune/distill.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <optional>

#include "core/cuda/gemm_tf32.hpp"
#include "core/error.hpp"
#include "tune/cuda/adam_slots.hpp"
#include "tune/cuda/block.hpp"
#include "tune/cuda/parts.hpp"
#include "tune/epochs.hpp"

namespace cortiq::tune {

namespace {

using cuda::DBlockActs;
using cuda::DBlockGrads;
using cuda::DBlockParams;
using cuda::DVec;
using cuda::Gpu;
using Windows = std::vector<std::vector<int32_t>>;
// each stage timed on its own when profiling (the device waited for around it)
using Stage = cortiq::cuda::StageTimer;

// The teacher's log-probabilities of the fit and held-out windows. With a
// device teacher they are kept on the device when they fit in half of its
// free memory; else the head's inputs of every window are kept when those
// fit, and the head and log-softmax run again for each use; else the whole
// teacher runs for each use (TuneOptions::teacher_keep pins a choice). Every
// choice gives the same bits: each window's values come from the same calls
// (hidden, then logits of those rows, then log-softmax) whichever is kept.
class TeacherCache {
  public:
    using Keep = TuneOptions::TeacherKeep;
    TeacherCache(const Gpu& g, const TeacherFn& t, const DeviceTeacher& dt, const Windows& fit,
                 const Windows& sel, int64_t L, int64_t vocab, Keep keep)
        : g_(g), teacher_(t), device_teacher_(dt), L_(L), vocab_(vocab) {
        CORTIQ_CHECK(!dt || dt.width > 0, "a device teacher without its hidden width");
        const double windows = static_cast<double>(fit.size() + sel.size());
        if (keep == Keep::automatic) {
            size_t free = 0, total = 0;
            CUDA_CHECK(cudaMemGetInfo(&free, &total));
            const double half = 0.5 * static_cast<double>(free);
            keep = 4.0 * L * vocab * windows <= half            ? Keep::log_probs
                   : dt && 4.0 * L * dt.width * windows <= half ? Keep::head_inputs
                                                                : Keep::nothing;
        }
        CORTIQ_CHECK(keep != Keep::head_inputs || dt,
                     "distillation: keeping the teacher's head inputs needs a device teacher");
        keep_ = keep;
        if (keep_ == Keep::nothing) return;
        for (const auto* set : {&fit, &sel})
            for (size_t i = 0; i < set->size(); ++i) {
                const bool is_sel = set == &sel;
                if (keep_ == Keep::log_probs) {
                    DVec& v = kept_[is_sel].emplace_back(L * vocab, g.stream());
                    compute(is_sel, i, (*set)[i], v.get());
                    continue;
                }
                DVec& v = kept_[is_sel].emplace_back(L * dt.width, g.stream());
                CUDA_CHECK(cudaMemcpyAsync(v.get(), device_teacher_.hidden(is_sel, i, (*set)[i]),
                                           sizeof(float) * v.size(), cudaMemcpyDeviceToDevice,
                                           g.stream()));
                g.sync();  // the teacher's next call overwrites what was read
            }
    }
    // Copies the window's log-probabilities to dst (device).
    void copy(const Windows& set, bool is_sel, size_t i, float* dst) {
        if (keep_ == Keep::nothing) return compute(is_sel, i, set[i], dst);
        const DVec& v = kept_[is_sel][i];
        if (keep_ == Keep::head_inputs) return from_head_inputs(v.get(), dst);
        CUDA_CHECK(cudaMemcpyAsync(dst, v.get(), sizeof(float) * v.size(), cudaMemcpyDeviceToDevice,
                                   g_.stream()));
    }

  private:
    // The log-probabilities of the head inputs at normed (device, L × width).
    void from_head_inputs(const float* normed, float* dst) {
        cuda::log_softmax_rows(g_, device_teacher_.logits(normed, L_), L_, vocab_, dst);
        g_.sync();  // the teacher's next call overwrites what was read
    }
    // The log-probabilities of window i (tokens w) of a set into dst (device,
    // L × vocab).
    void compute(bool is_sel, size_t i, const std::vector<int32_t>& w, float* dst) {
        const cudaStream_t st = g_.stream();
        if (device_teacher_) return from_head_inputs(device_teacher_.hidden(is_sel, i, w), dst);
        MatF t = teacher_(w);
        CORTIQ_CHECK(t.rows() == L_ && t.cols() == vocab_, "teacher logits {}x{}, expected {}x{}",
                     t.rows(), t.cols(), L_, vocab_);
        log_softmax_rows(t);
        CUDA_CHECK(
            cudaMemcpyAsync(dst, t.data(), sizeof(float) * t.size(), cudaMemcpyHostToDevice, st));
        CUDA_CHECK(cudaStreamSynchronize(st));  // t is freed on return
    }

    const Gpu& g_;
    const TeacherFn& teacher_;
    const DeviceTeacher& device_teacher_;
    int64_t L_, vocab_;
    Keep keep_ = Keep::nothing;
    std::vector<DVec> kept_[2];
};

struct DStudent {
    DVec embed, final_norm, head;
    std::vector<DBlockParams> blocks;
    std::vector<DBlockGrads> grads;
    std::vector<DBlockActs> acts;
    cuda::DRope rope;
};

class Trainer {
  public:
    Trainer(const Gpu& g, Student& s, TeacherCache& tc, int64_t L, const TuneOptions& o)
        : g(g),
          s(s),
          tc(tc),
          prof(o.profile),
          packed(o.lr_signs == 0 && o.pack_fixed_signs),
          L(L),
          H(s.d.hidden),
          V(s.embed->rows()),
          sum(1, g.stream()) {
        const cudaStream_t st = g.stream();
        const auto up = [&](const float* p, size_t n) {
            return cortiq::cuda::upload_f(std::vector<float>(p, p + n), st);
        };
        ds.embed = up(s.embed->data(), s.embed->size());
        ds.head = up(s.head->data(), s.head->size());
        ds.final_norm = up(s.final_norm.data(), s.final_norm.size());
        head_tf32 = cortiq::cuda::exact_in_tf32(st, ds.head.get(), ds.head.size());
        ds.rope = cuda::upload(rope_for<float>(s.inv_freq, L), st);
        CORTIQ_CHECK(!s.full_block || packed,
                     "distillation: a student without its signs needs them fixed and packed");
        // one block's float signs at a time on the host, when full_block gives them
        for (size_t l = 0; l < s.blocks.size(); ++l) {
            if (!packed) {
                ds.blocks.push_back(cuda::upload(s.blocks[l], st));
            } else if (s.full_block) {
                ds.blocks.push_back(cuda::upload_packed(g, s.full_block(l)));
                g.sync();  // the host block is freed on return
            } else {
                ds.blocks.push_back(cuda::upload_packed(g, s.blocks[l]));
            }
            ds.grads.push_back(cuda::zero_grads(ds.blocks.back(), st, o.lr_signs > 0));
        }
        // every BLR layer's products use one scratch, in turn
        ds.acts.resize(s.blocks.size());
        for (auto& a : ds.acts) a.blr.shared = &blr_scratch;
    }

    // The host's tuned values back on the device (the kept epoch's).
    void upload_tuned() {
        for (size_t l = 0; l < s.blocks.size(); ++l) {
            if (packed)
                cuda::upload_tuned(s.blocks[l], ds.blocks[l], g.stream());
            else
                ds.blocks[l] = cuda::upload(s.blocks[l], g.stream());
        }
    }

    // Forward of windows [first, first + count) of `order` in `set`. With
    // scale 0 it returns Σ KL; with scale > 0 (a step) it returns 0 and leaves
    // scale · ∂KL/∂logits for backward().
    double forward(const Windows& set, bool is_sel, const std::vector<size_t>& order, size_t first,
                   size_t count, float scale) {
        const cudaStream_t st = g.stream();
        const int64_t N = L * static_cast<int64_t>(count);
        std::vector<int32_t> toks;
        cuda::ensure(tlogp, N * V, st);
        {
            const Stage stage(g, prof, "kd_teacher", true);
            for (size_t i = 0; i < count; ++i) {
                const auto& w = set[order[first + i]];
                CORTIQ_ASSERT(static_cast<int64_t>(w.size()) == L, "windows of different lengths");
                toks.insert(toks.end(), w.begin(), w.end());
                tc.copy(set, is_sel, order[first + i], tlogp.get() + i * L * V);
            }
        }
        {
            const Stage stage(g, prof, "kd_forward", true);
            dtoks = cortiq::cuda::DeviceBuffer<int32_t>(N, st);
            CUDA_CHECK(cudaMemcpyAsync(dtoks.get(), toks.data(), sizeof(int32_t) * toks.size(),
                                       cudaMemcpyHostToDevice, st));
            cuda::ensure(x, N * H, st);
            cuda::embedding_forward(g, ds.embed.get(), H, dtoks.get(), N, x.get());
            const float* in = x.get();
            for (size_t l = 0; l < ds.blocks.size(); ++l) {
                cuda::block_forward(g, ds.blocks[l], s.d, ds.rope, in, static_cast<int64_t>(count),
                                    L, ds.acts[l]);
                in = ds.acts[l].out.get();
            }
            cuda::ensure(normed, N * H, st);
            cuda::ensure(rstd, N, st);
            cuda::rmsnorm_forward(g, in, N, H, ds.final_norm.get(), static_cast<float>(s.d.eps),
                                  normed.get(), rstd.get());
            cuda::ensure(logits, N * V, st);
            {
                const cuda::PartTimer part(g, "part/head_forward");
                cuda::linear_forward(g, normed.get(), N, H, ds.head.get(), V, nullptr, logits.get(),
                                     head_tf32);
            }
            if (scale > 0) cuda::ensure(dlogits, N * V, st);
            CUDA_CHECK(cudaMemsetAsync(sum.get(), 0, sizeof(double), st));
            const cuda::PartTimer part(g, "part/kl");
            cuda::kl_loss(g, logits.get(), tlogp.get(), N, V, scale, sum.get(),
                          scale > 0 ? dlogits.get() : nullptr);
        }
        // a step's loss is not read: the host goes on queueing its backward
        // and the next steps without waiting for the device
        if (scale > 0) return 0.0;
        double h = 0;
        CUDA_CHECK(cudaMemcpyAsync(&h, sum.get(), sizeof h, cudaMemcpyDeviceToHost, st));
        g.sync();
        return h;
    }

    void backward() {
        const cudaStream_t st = g.stream();
        const int64_t N = rstd.size();
        cuda::ensure(dnormed, N * H, st);
        {
            const cuda::PartTimer part(g, "part/head_backward");
            cuda::linear_backward_dx(g, dlogits.get(), N, H, ds.head.get(), V, dnormed.get(), false,
                                     head_tf32);
        }
        cuda::ensure(dx, N * H, st);
        cuda::ensure(dprev, N * H, st);
        cuda::rmsnorm_backward(g, dnormed.get(), ds.acts.back().out.get(), ds.final_norm.get(),
                               rstd.get(), N, H, dx.get(), nullptr);
        for (size_t l = ds.blocks.size(); l-- > 0;) {
            cuda::block_backward(g, ds.blocks[l], s.d, ds.rope, ds.acts[l], dx.get(),
                                 l > 0 ? dprev.get() : nullptr, ds.grads[l]);
            if (l > 0) std::swap(dx, dprev);
        }
    }

    double mean_kl(const Windows& set, bool is_sel, size_t batch) {
        std::vector<size_t> order(set.size());
        std::iota(order.begin(), order.end(), size_t{0});
        double total = 0;
        for (size_t i = 0; i < set.size(); i += batch)
            total += forward(set, is_sel, order, i, std::min(batch, set.size() - i), 0.0f);
        return total / static_cast<double>(set.size() * static_cast<size_t>(L));
    }

    const Gpu& g;
    Student& s;
    TeacherCache& tc;
    Profile* prof;  // TuneOptions::profile
    bool packed;    // fixed signs held packed (TuneOptions::pack_fixed_signs)
    int64_t L, H, V;
    DStudent ds;
    bool head_tf32 = false;         // the head's values exact in TF32: two passes a product
    cuda::DBlrScratch blr_scratch;  // every BLR layer's (DBlrScratch::shared)
    DVec x, normed, rstd, logits, dlogits, tlogp, dnormed, dx, dprev;
    cortiq::cuda::DeviceBuffer<int32_t> dtoks;
    cortiq::cuda::DeviceBuffer<double> sum;
};

}  // namespace

DistillResult distill_gpu(Student& s, const TeacherFn& teacher, const Windows& fit,
                          const Windows& sel, const TuneOptions& o,
                          const DeviceTeacher& device_teacher) {
    const auto t0 = std::chrono::steady_clock::now();
    CORTIQ_CHECK(!fit.empty() && !s.blocks.empty(), "distillation needs windows and blocks");
    const int64_t L = static_cast<int64_t>(fit[0].size());
    const Gpu g;
    const cudaStream_t st = g.stream();
    const cuda::PartProfileScope parts(o.profile);
    // the fixed costs of a run (kd_setup: the teacher's kept values, the
    // student and Adam's moments on the device; kd_keep: the best pass's
    // values back on the host; kd_restore: those values on the device again)
    std::optional<Stage> setup(std::in_place, g, o.profile, "kd_setup", true);
    TeacherCache tc(g, teacher, device_teacher, fit, sel, L, s.embed->rows(), o.teacher_keep);
    Trainer tr(g, s, tc, L, o);
    setup.reset();
    const size_t batch = static_cast<size_t>(std::max<int64_t>(1, o.batch_windows));
    const bool has_sel = !sel.empty();
    DistillResult r;
    r.kl_fit_before = r.kl_fit_after = tr.mean_kl(fit, false, batch);
    r.kl_sel_before = r.kl_sel_after = has_sel ? tr.mean_kl(sel, true, batch) : r.kl_fit_before;

    setup.emplace(g, o.profile, "kd_setup", true);
    cuda::AdamSlots adam;
    for (size_t l = 0; l < s.blocks.size(); ++l)
        adam.add_block(tr.ds.blocks[l], tr.ds.grads[l], s.d, o, st);
    setup.reset();
    if (adam.empty()) return r;
    // the start's signs, for the flips (none when the signs are fixed)
    const std::vector<BlockParamsT<float>> start =
        o.lr_signs > 0 ? s.blocks : std::vector<BlockParamsT<float>>{};
    std::vector<BlockParamsT<float>> best = s.blocks;
    const auto step = [&](const std::vector<size_t>& order, size_t i, size_t c, double rate) {
        const float scale = 1.0f / static_cast<float>(c * static_cast<size_t>(L));
        tr.forward(fit, false, order, i, c, scale);
        {
            const Stage stage(g, o.profile, "kd_backward", true);
            for (auto& gl : tr.ds.grads) cuda::clear(gl, st);
            tr.backward();
        }
        const Stage stage(g, o.profile, "kd_adam", true);
        adam.step(g, o.beta1, o.beta2, rate);
    };
    // the CPU's seed: the same batches in the same order
    r.best_epoch = run_epochs(
        o.schedule(fit.size(), kDistillSeed), r.kl_sel_after, r.epochs_run, step,
        [&] { return has_sel ? tr.mean_kl(sel, true, batch) : tr.mean_kl(fit, false, batch); },
        [&] {
            const Stage stage(g, o.profile, "kd_keep", true);
            for (size_t l = 0; l < best.size(); ++l)
                cuda::download_into(tr.ds.blocks[l], best[l], st);
        },
        o.on_progress);
    s.blocks = std::move(best);
    {
        const Stage stage(g, o.profile, "kd_restore", true);
        tr.upload_tuned();
    }
    r.kl_fit_after = tr.mean_kl(fit, false, batch);
    for (size_t l = 0; l < start.size(); ++l) r.flips += sign_changes(start[l], s.blocks[l]);
    g.sync();
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

}  // namespace cortiq::tune
