// The CPU stages under the names the encoder's driver calls (encode/driver.hpp).
#pragma once

#include <utility>

#include "encode/cpu/stages.hpp"

namespace cortiq::encode::cpu {

struct Backend {
    using Context = TensorContext;
    using Factors = blr::Factors;
    using Mat = MatD;
    using Metric = cpu::Metric;
    struct Stage : ScopedStage {
        Stage(const Context& c, const char* stage) : ScopedStage(c.prof, stage) {}
    };

    static std::pair<int64_t, int64_t> shape(const Context& c) { return {c.w.rows(), c.w.cols()}; }
    static const MatD& weight(const Context& c) { return c.w; }
    static const MatD& weight_h(const Context& c) { return c.wh; }
    static Factors factors(const Context& c, int64_t r) { return {c.w.rows(), c.w.cols(), r, {}}; }
    static Factors copy(const Factors& f, const Context&) { return f; }

    static std::pair<MatD, MatD> latents(const Context& c, const MatD& t, const MatD* t_h,
                                         int64_t r, bool whiten, bool /*of_weight*/) {
        return cpu::latents(t, t_h, c.input_ctx, r, whiten);
    }
    static std::pair<MatD, MatD> residual(const Context& c, const Factors& f, bool with_h) {
        return cpu::residual(c, f, with_h);
    }
    static std::pair<VecD, VecD> itq_weights(const Context& c, const MatD& up, const MatD& vp) {
        return cpu::itq_weights(up, vp, c.input_ctx);
    }
    static ItqResult itq(const Context&, const MatD& up, const MatD& vp, const VecD& wu,
                         const VecD& wv, int iters) {
        return cpu::itq(up, vp, wu, wv, iters);
    }
    static blr::Path svid(const Context&, const MatD& u, const MatD& v) { return cpu::svid(u, v); }
    static void als(Factors& f, const Context& c, int sweeps) { cpu::als(f, c, sweeps); }
    static void flip_u(Factors& f, const Context& c, size_t p, double tol, int passes) {
        cpu::flip_u(f, c, p, tol, passes);
    }
    static void gptq_v(Factors& f, const Context& c, size_t p, double tol, int passes, int block) {
        cpu::gptq_v(f, c, p, tol, passes, block);
    }
    static double err(const Factors& f, const Context& c, Metric x) { return cpu::err(f, c, x); }
    static double rel_err(const Factors& f, const Context& c, Metric x) {
        return cpu::rel_err(f, c, x);
    }
    static void pack(const Context& c, const Factors& f, Encoded& out) { cpu::pack(c, f, out); }
};

}  // namespace cortiq::encode::cpu
