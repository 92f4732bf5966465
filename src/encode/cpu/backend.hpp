// The CPU backend of the encoder's driver (encode/driver.hpp): its types, and
// the stages whose arguments differ from the CUDA ones under the driver's names.
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
    static std::pair<VecD, VecD> itq_weights(const Context& c, const MatD& up, const MatD& vp) {
        return cpu::itq_weights(up, vp, c.input_ctx);
    }
    static ItqResult itq(const Context&, const MatD& up, const MatD& vp, const VecD& wu,
                         const VecD& wv, int iters) {
        return cpu::itq(up, vp, wu, wv, iters);
    }
    static blr::Path svid(const Context&, const MatD& u, const MatD& v) { return cpu::svid(u, v); }
};

}  // namespace cortiq::encode::cpu
