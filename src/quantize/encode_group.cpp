#include "quantize/encode_group.hpp"

#include "encode/cpu/stages.hpp"
#include "encode/dispatch.hpp"

namespace cortiq::quant {

std::vector<encode::Encoded> encode_group(
    const std::vector<GroupJob>& jobs, const MatD& h_fit, const MatD& h_sel,
    const encode::Options& base, encode::Device device, int gpu_jobs, const std::string& what,
    const std::function<void(size_t, const encode::Encoded&)>& on_done) {
    std::vector<encode::Encoded> out(jobs.size());
    if (jobs.empty()) return out;
    if (device == encode::Device::gpu) {
        (void)gpu_jobs;
        for (size_t i = 0; i < jobs.size(); ++i) {
            encode::Options o = base;
            o.bpw = jobs[i].bpw;
            out[i] = encode::encode_gpu(jobs[i].w, h_fit, h_sel, o, nullptr);
            on_done(i, out[i]);
        }
        return out;
    }
    const encode::cpu::InputContext ic(h_fit, h_sel, base.rho, what);
    for (size_t i = 0; i < jobs.size(); ++i) {
        encode::Options o = base;
        o.bpw = jobs[i].bpw;
        try {
            out[i] = encode::cpu::encode_tensor(jobs[i].w, ic, o);
        } catch (const Error& e) {
            CORTIQ_FAIL("{}: {}", jobs[i].name, e.what());
        }
        on_done(i, out[i]);
    }
    return out;
}

}  // namespace cortiq::quant
