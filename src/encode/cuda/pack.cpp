// Stage 9 on the device (SPEC §3.9; cpu/pack.cpp): the scales packed on the
// host, the signs on the device (pack_signs.cu), then the fit and held-out
// errors of the stored (rebalanced, f16-rounded) scales with the same signs.
#include "encode/cuda/stages.hpp"

namespace cortiq::encode::cuda {

void pack(const TensorContext& c, const DeviceFactors& f, Encoded& out) {
    blr::Factors stored;
    {
        StageTimer st(c, "pack");
        out.payload = c.tuning.host_pack ? blr::pack(to_host(f, c.stream()), &stored)
                                         : pack_payload(f, c.stream(), &stored);
    }
    StageTimer st(c, "select");
    DeviceFactors sd;
    sd.m = f.m;
    sd.n = f.n;
    sd.r = f.r;
    for (size_t p = 0; p < f.paths.size(); ++p) {
        Path q;
        q.h = upload(stored.paths[p].h, c.stream());
        q.l = upload(stored.paths[p].l, c.stream());
        q.g = upload(stored.paths[p].g, c.stream());
        q.su = f.paths[p].su.clone(c.stream());
        q.sv = f.paths[p].sv.clone(c.stream());
        sd.paths.push_back(std::move(q));
    }
    out.set_size(f.m, f.n, f.r, static_cast<int>(f.paths.size()));
    out.err_fit = rel_err(sd, c, Metric::fit);
    out.err_sel = rel_err(sd, c, Metric::sel);
}

}  // namespace cortiq::encode::cuda
