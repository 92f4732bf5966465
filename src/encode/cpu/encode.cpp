// The CPU encoder's entry point: the driver (encode/driver.hpp) over the
// float64 stages.
#include <chrono>

#include "encode/cpu/backend.hpp"
#include "encode/driver.hpp"

namespace cortiq::encode::cpu {

blr::Factors build_init(const TensorContext& c, int64_t r, int paths, const Options& o) {
    return driver::build_init<Backend>(c, r, paths, o);
}

blr::Factors refine(blr::Factors f, const TensorContext& c, const Options& o) {
    return driver::refine<Backend>(std::move(f), c, o);
}

Encoded encode_tensor(const MatD& w, const InputContext& input, const Options& o, Profile* prof) {
    const auto t0 = std::chrono::steady_clock::now();
    if (o.method == Method::rtn_sign) return encode_rtn_sign(w, input, o, prof);
    TensorContext c(w, input);
    c.prof = prof;
    Encoded out;
    if (o.method == Method::svid) {
        out = driver::encode_svid<Backend>(c, o);
    } else {
        const auto ranks = driver::candidate_ranks(w.rows(), w.cols(), o);
        out =
            driver::select_and_pack<Backend>(c, driver::encode_candidates<Backend>(c, ranks, o), o);
    }
    out.seconds = seconds_since(t0);
    return out;
}

}  // namespace cortiq::encode::cpu
