// encode_many: argument checks, the CPU path (the float64 encoder, jobs in
// sequence) and the hand-off to the GPU scheduler (encode/cuda/scheduler.cpp).
#include "encode/encode_many.hpp"

#include <memory>

#include "core/error.hpp"
#include "encode/cpu/stages.hpp"
#include "encode/dispatch.hpp"
#ifdef CORTIQ_HAVE_CUDA
#include "encode/cuda/scheduler.hpp"
#endif

namespace cortiq::encode {

namespace {

void check_jobs(const std::vector<ManyInput>& inputs, const std::vector<ManyJob>& jobs) {
    std::vector<double> rho(inputs.size(), -1.0);
    for (size_t i = 0; i < inputs.size(); ++i)
        CORTIQ_CHECK(inputs[i].h_fit && inputs[i].h_sel,
                     "encode_many: input {} ('{}') has no Grams", i, inputs[i].name);
    for (size_t j = 0; j < jobs.size(); ++j) {
        const ManyJob& jb = jobs[j];
        CORTIQ_CHECK(jb.w, "encode_many: job {} ('{}') has no weight", j, jb.name);
        CORTIQ_CHECK(jb.input < inputs.size(), "encode_many: job {} ('{}') names input {} of {}", j,
                     jb.name, jb.input, inputs.size());
        CORTIQ_CHECK(jb.w->cols() == inputs[jb.input].h_fit->rows(),
                     "{}: weight is {}x{} but its input '{}' is {}-wide", jb.name, jb.w->rows(),
                     jb.w->cols(), inputs[jb.input].name, inputs[jb.input].h_fit->rows());
        double& r = rho[jb.input];
        CORTIQ_CHECK(r < 0 || r == jb.options.rho,
                     "{}: rho {} differs from another tensor of input '{}' ({})", jb.name,
                     jb.options.rho, inputs[jb.input].name, r);
        r = jb.options.rho;
    }
}

std::vector<ManyResult> encode_many_cpu(const std::vector<ManyInput>& inputs,
                                        const std::vector<ManyJob>& jobs, const ManyOptions& opt) {
    std::vector<size_t> remaining(inputs.size(), 0);
    for (const auto& jb : jobs) ++remaining[jb.input];
    std::vector<std::unique_ptr<cpu::InputContext>> ctx(inputs.size());
    std::vector<ManyResult> out(jobs.size());
    for (size_t j = 0; j < jobs.size(); ++j) {
        const ManyJob& jb = jobs[j];
        ManyResult& res = out[j];
        Profile stages;  // the context's and the encoder's, into res.enc.stages
        Profile* prof = opt.profile ? &stages : nullptr;
        auto& input_ctx = ctx[jb.input];
        if (!input_ctx) {
            ScopedStage st(prof, "context");
            const ManyInput& in = inputs[jb.input];
            input_ctx =
                std::make_unique<cpu::InputContext>(*in.h_fit, *in.h_sel, jb.options.rho, in.name);
        }
        res.enc = cpu::encode_tensor(*jb.w, *input_ctx, jb.options, prof);
        res.enc.stages = std::move(stages);
        res.device = -1;
        if (--remaining[jb.input] == 0) input_ctx.reset();
        if (opt.on_done) opt.on_done(j, res);
    }
    return out;
}

}  // namespace

std::vector<ManyResult> encode_many(const std::vector<ManyInput>& inputs,
                                    const std::vector<ManyJob>& jobs, const ManyOptions& opt) {
    check_jobs(inputs, jobs);
    if (opt.device == Device::cpu) return encode_many_cpu(inputs, jobs, opt);
    CORTIQ_CHECK(gpu_available(), "encode_many on the GPU: {}", gpu_unavailable_reason());
#ifdef CORTIQ_HAVE_CUDA
    return cuda::encode_many_gpu(inputs, jobs, opt);
#else
    CORTIQ_FAIL("encode_many on the GPU: this cortiq was built without CUDA");
#endif
}

}  // namespace cortiq::encode
