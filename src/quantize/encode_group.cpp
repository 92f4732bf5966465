#include "quantize/encode_group.hpp"

#include <mutex>

#include "core/blas_threads.hpp"
#include "core/parallel.hpp"
#include "encode/cpu/stages.hpp"
#include "encode/dispatch.hpp"
#include "encode/encode_many.hpp"

namespace cortiq::quant {

std::vector<encode::Encoded> encode_group(
    const std::vector<GroupJob>& jobs, const MatD& h_fit, const MatD& h_sel,
    const encode::Options& base, encode::Device device, int gpu_jobs, const std::vector<int>& gpus,
    bool profile, const std::string& what,
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
        mo.gpus = gpus;
        mo.profile = profile;
        mo.on_done = [&](size_t i, const encode::ManyResult& r) { on_done(i, r.enc); };
        auto res = encode::encode_many(inputs, many, mo);
        for (size_t i = 0; i < jobs.size(); ++i) out[i] = std::move(res[i].enc);
        return out;
    }
    const encode::cpu::InputContext input_ctx(h_fit, h_sel, base.rho, what);
    auto encode_one = [&](size_t i) {
        encode::Options o = base;
        o.bpw = jobs[i].bpw;
        try {
            Profile prof;
            out[i] = encode::cpu::encode_tensor(jobs[i].w, input_ctx, o, profile ? &prof : nullptr);
            out[i].stages = prof;
        } catch (const Error& e) {
            CORTIQ_FAIL("{}: {}", jobs[i].name, e.what());
        }
    };
    // Small tensors of one group (q/k/v, gate/up) run side by side, each with
    // single-threaded BLAS: a small product split over the threads costs more
    // in synchronisation than it gains (the demo's quantize took 23.3 s on two
    // threads against 21.6 s on one). Large ones run one after the other with
    // threaded BLAS, and one at a time keeps their memory. The choice follows
    // the shapes only, so the bytes do not depend on the thread count.
    constexpr int64_t kSmall = int64_t{1} << 22;  // m·n up to 2048 × 2048
    bool small = jobs.size() > 1;
    for (const auto& j : jobs) small = small && j.w.rows() * j.w.cols() <= kSmall;
    if (small) {
        const SingleThreadedBlas single;
        std::mutex mu;
        parallel_for(0, static_cast<int64_t>(jobs.size()), [&](int64_t i) {
            encode_one(static_cast<size_t>(i));
            const std::lock_guard<std::mutex> lock(mu);  // on_done: one call at a time
            on_done(static_cast<size_t>(i), out[static_cast<size_t>(i)]);
        });
        return out;
    }
    for (size_t i = 0; i < jobs.size(); ++i) {
        encode_one(i);
        on_done(i, out[i]);
    }
    return out;
}

}  // namespace cortiq::quant
