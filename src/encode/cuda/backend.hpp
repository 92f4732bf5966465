// The CUDA backend of the encoder's driver (encode/driver.hpp): its types, and
// the stages whose arguments differ from the CPU ones under the driver's names.
#pragma once

#include <utility>

#include "encode/cuda/stages.hpp"

namespace cortiq::encode::cuda {

struct Backend {
    using Context = TensorContext;
    using Factors = DeviceFactors;
    using Mat = DMat;
    using Metric = cuda::Metric;
    using Stage = StageTimer;

    static std::pair<int64_t, int64_t> shape(const Context& c) { return {c.d.m, c.d.n}; }
    static const DMat& weight(const Context& c) { return c.d.w; }
    static const DMat& weight_h(const Context& c) { return c.d.wh; }
    static Factors factors(const Context& c, int64_t r) {
        Factors f;
        f.m = c.d.m;
        f.n = c.d.n;
        f.r = r;
        return f;
    }
    static Factors copy(const Factors& f, const Context& c) { return f.clone(c.stream()); }

    static std::pair<DMat, DMat> latents(const Context& c, const DMat& t, const DMat* t_h,
                                         int64_t r, bool whiten, bool of_weight) {
        return cuda::latents(c, t, t_h, r, whiten, /*use_cache=*/of_weight);
    }
    static std::pair<VecD, VecD> itq_weights(const Context& c, const DMat& up, const DMat& vp) {
        return cuda::itq_weights(c, up, vp);
    }
    static ItqResult itq(const Context& c, const DMat& up, const DMat& vp, const VecD& wu,
                         const VecD& wv, int iters) {
        return cuda::itq(c, up, vp, wu, wv, iters);
    }
    static Path svid(const Context& c, const DMat& u, const DMat& v) {
        return cuda::svid(c.gpu, u, v);
    }
};

}  // namespace cortiq::encode::cuda
