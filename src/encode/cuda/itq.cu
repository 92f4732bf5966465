// Stage 3 on the device (SPEC §3.3): weighted ITQ, B = w² ∘ sign(X R) and
// R = polar(Xᵀ B), the polar factor by Newton–Schulz with few readbacks.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "encode/cuda/ops.hpp"
#include "encode/cuda/stages.hpp"
#include "linalg/polar_scaling.hpp"

namespace cortiq::encode::cuda {

std::pair<VecD, VecD> itq_weights(const TensorContext& c, const DMat& up, const DMat& vp) {
    const cudaStream_t st = c.stream();
    DVec nu(up.rows, st), nv(vp.rows, st);
    rowdot(st, up.data(), up.data(), up.rows, up.cols, nu.get());
    rowdot(st, vp.data(), vp.data(), vp.rows, vp.cols, nv.get());
    VecD wu = download(nu, st), wv = download(nv, st);
    for (auto& v : wu) v = std::sqrt(std::max(v, 0.0));
    for (size_t j = 0; j < wv.size(); ++j)
        wv[j] = std::sqrt(std::max(wv[j], 0.0)) * c.input_ctx.sqd[j];
    return {wu, wv};
}

DMat polar(const Gpu& g, const DMat& mm_in, const PolarOptions& po, PolarStats* stats) {
    const cudaStream_t st = g.stream();
    const bool tf32 = po.tf32;
    const double tol = po.tol;
    const int max_iter = po.max_iter;
    const bool timed = po.timed && stats;
    if (timed) g.sync();
    const auto t0 = std::chrono::steady_clock::now();
    auto t_switch = t0;
    constexpr int kLanczosSteps = 24;
    const int64_t r = mm_in.rows;
    CORTIQ_ASSERT(mm_in.cols == r, "polar of a {}x{} matrix", mm_in.rows, mm_in.cols);
    DMat x = mm_in.clone(st);
    const double nf = std::sqrt(dot(st, mm_in.data(), mm_in.data(), r * r));
    if (!(nf > 0)) {
        set_identity(st, x.data(), r);
        return x;
    }
    // The polar factor does not depend on the scale; the iteration count does:
    // M/‖M‖_F (SPEC) has σ ≤ 1 but its small σ start √rank lower than under
    // M/‖M‖₂. Scale by 1.1× the Lanczos estimate of ‖M‖₂ (never above ‖M‖_F;
    // a divergence falls back to ‖M‖_F) and, when scaled, run Chen–Chow's
    // scaled steps (linalg/polar_scaling.hpp) from the Lanczos estimate of the
    // smallest σ: the first step unscaled, which maps any σ up to √3 into
    // (0, 1] should the estimate of ‖M‖₂ be low.
    const int64_t active = po.active >= 0 ? po.active : r;
    const auto [th_min, th_max] = lanczos_extremes(g, mm_in, kLanczosSteps, active);
    const la::NsStart start = la::ns_start(nf, th_min, th_max);
    double scale = start.scale, low = po.scaled ? start.l : 0.0;
    if (stats) {
        stats->theta_min = th_min;
        stats->theta_max = th_max;
        stats->scale = start.scale;
        stats->l0 = low;
    }
    scal(st, x.data(), static_cast<float>(1.0 / scale), r * r);
    DMat a(r, r, st), y(r, r, st);
    // ‖XᵀX − I‖_F is read back only at checkpoints: from iteration 4, every 2.
    // FP32 stops at tol or where rounding ends the quadratic convergence;
    // TF32 hands over to FP32 below 0.1 (or where it stagnates below 1, or
    // after kMaxTf32Steps).
    constexpr int kMaxTf32Steps = 40;
    Prec p = tf32 ? Prec::tf32 : po.finish;
    double prev = INFINITY;
    int it = 0, fast_steps = 0;
    SumBatch sb(st);
    for (;; ++it) {
        mm_into(g, 1.f, x, true, x, false, 0.f, a, p);  // XᵀX
        if (it >= max_iter || (it >= 4 && it % 2 == 0)) {
            sb.dev_identity(a.data(), r, active);
            const double dev = std::sqrt(sb.read()[0]);
            if (!std::isfinite(dev) || dev > 4.0 * static_cast<double>(r)) {
                CORTIQ_ASSERT(scale < nf, "Newton-Schulz diverged from M/|M|_F");
                scale = nf;  // restart from the safe scaling, unscaled steps
                low = 0;
                if (stats) ++stats->restarts;
                CUDA_CHECK(cudaMemcpyAsync(x.data(), mm_in.data(), x.size() * sizeof(float),
                                           cudaMemcpyDeviceToDevice, st));
                scal(st, x.data(), static_cast<float>(1.0 / scale), r * r);
                prev = INFINITY;
                continue;
            }
            if (it >= max_iter) break;
            if (p == Prec::tf32) {
                // While many σ are still far below 1 (the growth phase, each
                // step ×1.5), ‖XᵀX − I‖_F barely moves although the iteration
                // progresses, so a slow decrease is read as TF32's rounding
                // floor only below 1 (unless early_handover, the early rule,
                // which handed over after about 6 steps: 900 TF32 against 1,206
                // FP32 steps on a 4096×11008 tensor).
                const bool stalled = dev > 0.5 * prev && (po.early_handover || dev < 1.0);
                if (dev < 0.1 || stalled || it >= kMaxTf32Steps) {
                    fast_steps = it;
                    if (timed) t_switch = std::chrono::steady_clock::now();  // read back: synced
                    if (po.tf32_only) break;  // an intermediate factor: TF32's accuracy
                    p = po.finish;
                    prev = INFINITY;
                    mm_into(g, 1.f, x, true, x, false, 0.f, a, p);  // XᵀX again, finer
                } else {
                    prev = dev;
                }
            } else {
                if (dev <= tol) break;
                if (dev < 5e-2 && dev > 0.25 * prev) break;  // at the float32 floor
                prev = dev;
            }
        }
        // X ← αX(3I − α²XᵀX)/2 = 1.5α X − 0.5α³ X XᵀX, α = 1 when unscaled
        const la::NsScaledStep step = la::ns_step(it, low);
        low = step.next_l;
        mm_into(g, 1.f, x, false, a, false, 0.f, y, p);  // X XᵀX
        const double al = step.alpha;
        axpby(st, x.data(), static_cast<float>(1.5 * al), y.data(),
              static_cast<float>(-0.5 * al * al * al), r * r);
    }
    if (stats) {
        stats->steps += it;
        stats->fast_steps += p == Prec::tf32 ? it : fast_steps;
        if (timed) {
            const auto t1 = std::chrono::steady_clock::now();
            stats->fast_s += std::chrono::duration<double>(t_switch - t0).count();
            stats->finish_s += std::chrono::duration<double>(t1 - t_switch).count();
        }
    }
    return x;
}

ItqResult itq(const TensorContext& c, const DMat& up, const DMat& vp, const VecD& wu,
              const VecD& wv, int iters, bool record_objective) {
    const Gpu& g = c.gpu;
    const cudaStream_t st = c.stream();
    const int64_t m = up.rows, n = vp.rows, r = up.cols, nn = m + n;
    const bool fast = r >= c.tuning.itq_tf32_min_rank;
    const Prec p = fast ? Prec::tf32 : Prec::fp32;
    // cuBLAS's TF32 products run 2.3–2.8× faster when r is a multiple of 32
    // (H200, bench_gemm_align_gpu: r×r×r at 2966 85–93 TFLOP/s, at 2976
    // 202–269; padding only the leading dimensions does not help). So r is
    // padded with zero columns of X: X R and Xᵀ B keep a zero block (the
    // signs of the padding are set to 0), and the polar factor of
    // [M 0; 0 0] is [Q 0; 0 0] step by step, Q = polar(M).
    const int64_t rp = fast && c.tuning.itq_pad_rank ? (r + 31) / 32 * 32 : r;
    DMat x(nn, rp, st);
    copy_padded(st, up.data(), m, r, r, x.data(), m, rp);
    copy_padded(st, vp.data(), n, r, r, x.row(m), n, rp);
    row_normalize(st, x.data(), nn, rp);
    VecD w2(nn);
    double mean = 0;
    for (int64_t i = 0; i < nn; ++i) {
        const double w = i < m ? wu[i] : wv[i - m];
        w2[i] = w * w;
        mean += w2[i];
    }
    mean /= static_cast<double>(nn);
    for (auto& v : w2) v /= std::max(mean, 1e-300);
    const DVec w2_d = upload(w2, st);

    ItqResult res;
    res.rot = DMat(rp, rp, st);
    set_identity(st, res.rot.data(), rp);
    DMat xr(nn, rp, st), mm_t(rp, rp, st);
    SumBatch sb(st);
    PolarOptions po;
    po.tf32 = fast;
    po.finish = c.tuning.itq_finish_x3 ? Prec::tf32x3 : Prec::fp32;
    po.early_handover = c.tuning.itq_early_handover;
    po.scaled = !c.tuning.itq_plain_ns;
    po.timed = c.prof != nullptr;
    po.active = r;
    PolarStats ps;
    // CORTIQ_ITQ_TRACE=1 (a diagnostic): per iteration the weighted share of
    // signs that changed, (1 − ⟨B_prev, B⟩ / ⟨B, B⟩) / 2 (0: a fixed point,
    // after which every iteration repeats the last), and the Newton–Schulz count.
    static const bool trace = std::getenv("CORTIQ_ITQ_TRACE") != nullptr;
    DMat prev;
    if (trace) prev = DMat(nn, rp, st);
    for (int it = 0; it < iters; ++it) {
        std::optional<StageTimer> products(std::in_place, g, c.prof, "itq/products", true);
        mm_into(g, 1.f, x, false, res.rot, false, 0.f, xr, p);
        if (record_objective) {
            sb.weighted_abs(xr.data(), w2_d.get(), nn, rp);
            res.objective.push_back(sb.read()[0]);
        }
        weighted_sign(st, xr.data(), w2_d.get(), nn, rp, r);
        double changed = 1.0;
        if (trace && it > 0) {
            sb.dot(prev.data(), xr.data(), nn * rp);
            sb.dot(xr.data(), xr.data(), nn * rp);
            const std::vector<double> d = sb.read();
            changed = 0.5 * (1.0 - d[0] / d[1]);
        }
        if (trace)
            CUDA_CHECK(cudaMemcpyAsync(prev.data(), xr.data(), xr.size() * sizeof(float),
                                       cudaMemcpyDeviceToDevice, st));
        mm_into(g, 1.f, x, true, xr, false, 0.f, mm_t, p);  // Xᵀ B
        products.reset();
        const int before = ps.steps;
        po.tf32_only = c.tuning.itq_tf32_intermediate && it + 1 < iters;
        res.rot = polar(g, mm_t, po, &ps);
        const int ns = ps.steps - before;
        if (trace)
            std::fprintf(stderr,
                         "itq %lldx%lld it %d: changed %.3e, ns %d, lanczos %.4g..%.4g, "
                         "scale %.4g, l %.3g, restarts %d\n",
                         static_cast<long long>(nn), static_cast<long long>(r), it, changed, ns,
                         ps.theta_min, ps.theta_max, ps.scale, ps.l0, ps.restarts);
    }
    if (record_objective) {
        mm_into(g, 1.f, x, false, res.rot, false, 0.f, xr);
        sb.weighted_abs(xr.data(), w2_d.get(), nn, rp);
        res.objective.push_back(sb.read()[0]);
    }
    if (rp != r) {  // R's leading r × r block
        DMat rot(r, r, st);
        CUDA_CHECK(cudaMemcpy2DAsync(rot.data(), r * sizeof(float), res.rot.data(),
                                     rp * sizeof(float), r * sizeof(float), r,
                                     cudaMemcpyDeviceToDevice, st));
        res.rot = std::move(rot);
    }
    if (c.prof) {
        c.prof->add("itq.ns_iters", 0, ps.steps);
        // parts of the stage (besides itq/products): the two phases of the polar
        c.prof->add("itq/polar_tf32", ps.fast_s, ps.fast_steps);
        c.prof->add("itq/polar_finish", ps.finish_s, ps.steps - ps.fast_steps);
    }
    res.u = mm(g, up, false, res.rot, false);
    res.v = mm(g, vp, false, res.rot, false);
    return res;
}

}  // namespace cortiq::encode::cuda
