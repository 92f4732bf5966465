// Stage 9 (SPEC §3.9): pack the chosen factors into a payload (scales
// rebalanced and rounded to f16), then the fit and held-out errors with the
// stored scales.
#include "encode/cpu/stages.hpp"

namespace cortiq::encode::cpu {

void pack(const TensorContext& c, const blr::Factors& f, Encoded& out) {
    blr::Factors stored;
    {
        ScopedStage st(c.prof, "pack");
        out.payload = blr::pack(f, &stored);
    }
    ScopedStage st(c.prof, "select");
    out.set_size(f.m, f.n, f.r, static_cast<int>(f.paths.size()));
    out.err_fit = rel_err(stored, c, Metric::fit);
    out.err_sel = rel_err(stored, c, Metric::sel);
}

}  // namespace cortiq::encode::cpu
