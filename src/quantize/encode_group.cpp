#include "quantize/encode_group.hpp"

#include "encode/cpu/stages.hpp"
#include "encode/dispatch.hpp"
#include "encode/encode_many.hpp"

namespace cortiq::quant {

std::vector<encode::Encoded> encode_group(
    const std::vector<GroupJob>& jobs, const MatD& h_fit, const MatD& h_sel,
    const encode::Options& base, encode::Device device, int gpu_jobs, const std::string& what,
    const std::function<void(size_t, const encode::Encoded&)>& on_done) {
    std::vector<encode::Encoded> out(jobs.size());
    if (jobs.empty()) return out;
    // rtn-sign is a few GEMMs: the CPU writes its sign payload.
    if (device == encode::Device::gpu && base.method != encode::Method::rtn_sign) {
        // One input shared by the group; several tensors in flight per GPU.
        const std::vector<encode::ManyInput> inputs = {{&h_fit, &h_sel, what}};
        std::vector<encode::ManyJob> many;
        for (const auto& j : jobs) {
            encode::Options o = base;
            o.bpw = j.bpw;
            many.push_back({j.name, &j.w, 0, o});
        }
        encode::ManyOptions mo;
        mo.device = encode::Device::gpu;
        mo.in_flight = gpu_jobs;
        mo.on_done = [&](size_t i, const encode::ManyResult& r) { on_done(i, r.enc); };
        auto res = encode::encode_many(inputs, many, mo);
        for (size_t i = 0; i < jobs.size(); ++i) out[i] = std::move(res[i].enc);
        return out;
    }
    const encode::cpu::InputContext input_ctx(h_fit, h_sel, base.rho, what);
    for (size_t i = 0; i < jobs.size(); ++i) {
        encode::Options o = base;
        o.bpw = jobs[i].bpw;
        try {
            out[i] = encode::cpu::encode_tensor(jobs[i].w, input_ctx, o);
        } catch (const Error& e) {
            CORTIQ_FAIL("{}: {}", jobs[i].name, e.what());
        }
        on_done(i, out[i]);
    }
    return out;
}

}  // namespace cortiq::quant
