// The CUDA encoder's entry points: the driver (encode/driver.hpp) over the
// float32 stages, with the P = 2 and P = 1 candidates on two streams at once
// when allowed; and `encode_gpu`, the one-tensor entry point of dispatch.hpp.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>
#include <thread>

#include "encode/cuda/backend.hpp"
#include "encode/dispatch.hpp"
#include "encode/driver.hpp"

namespace cortiq::encode::cuda {

namespace {

using Candidates = std::vector<driver::Candidate<Backend>>;

// Both candidates at once: P = 1 on a helper stream (its own host thread),
// P = 2 on the caller's. Results in the driver's order (P = 2 first).
Candidates encode_candidates_at_once(TensorContext& c, const driver::CandidateRanks& ranks,
                                     const Options& o, Gpu* helper) {
    std::unique_ptr<Gpu> own;
    Gpu* helper_gpu = helper;
    if (!helper_gpu) {
        own = std::make_unique<Gpu>(c.gpu.device());
        helper_gpu = own.get();
    }
    c.gpu.sync();  // W, W·H and the eigenpairs are read by the helper's stream
    std::optional<driver::Candidate<Backend>> c1;
    std::exception_ptr err1;
    std::thread th([&] {
        try {
            helper_gpu->make_current();
            TensorContext cb(c.d, c.input_ctx, *helper_gpu, c.prof, c.tuning);
            cb.eig = c.eig;
            c1 = driver::encode_candidate<Backend>(cb, ranks.one_path, 1, o);
            helper_gpu->sync();
        } catch (...) {
            err1 = std::current_exception();
        }
    });
    std::optional<driver::Candidate<Backend>> c2;
    try {
        c2 = driver::encode_candidate<Backend>(c, ranks.two_paths, 2, o);
    } catch (...) {
        th.join();
        helper_gpu->sync_noexcept();
        throw;
    }
    th.join();
    if (err1) std::rethrow_exception(err1);
    c1->factors.rebind(c.gpu.stream());  // the helper's stream is synchronised: hand over
    Candidates cands;
    cands.push_back(std::move(*c2));
    cands.push_back(std::move(*c1));
    return cands;
}

}  // namespace

DeviceFactors build_init(const TensorContext& c, int64_t r, int paths, const Options& o) {
    return driver::build_init<Backend>(c, r, paths, o);
}

DeviceFactors refine(DeviceFactors f, const TensorContext& c, const Options& o) {
    return driver::refine<Backend>(std::move(f), c, o);
}

Encoded encode_tensor(const MatD& w, const InputContext& input, const Options& o, Profile* prof,
                      Gpu& gpu, const Tuning& tuning, Gpu* helper) {
    const auto t0 = std::chrono::steady_clock::now();
    gpu.make_current();
    CORTIQ_CHECK(input.device == gpu.device(),
                 "input context lives on GPU {}, the encoder on GPU {}", input.device,
                 gpu.device());
    if (o.method == Method::rtn_sign) return encode_rtn_sign(w, input, o, prof, gpu);
    const int64_t m = w.rows(), n = w.cols();
    if (tuning.check_memory) ensure_fits(m, n, o, /*with_context=*/false, tuning);
    std::optional<TensorData> td;
    {
        StageTimer st(gpu, prof, "tensor");
        td.emplace(gpu, w, input, tuning);
    }
    TensorContext c(*td, input, gpu, prof, tuning);
    Encoded out;
    if (o.method == Method::svid) {
        out = driver::encode_svid<Backend>(c, o);
    } else {
        const driver::CandidateRanks ranks = driver::candidate_ranks(m, n, o);
        // Both candidates start from W's latents: one eigendecomposition for both.
        EigCache eig;
        if (ranks.both()) {
            StageTimer st(c, "latents");
            eig = latents_cache(c, std::max(ranks.one_path, ranks.two_paths));
            c.eig = &eig;
        }
        Candidates cands = ranks.both() && tuning.parallel_candidates
                               ? encode_candidates_at_once(c, ranks, o, helper)
                               : driver::encode_candidates<Backend>(c, ranks, o);
        out = driver::select_and_pack<Backend>(c, cands, o);
        cands.clear();
    }
    gpu.sync();
    out.seconds = seconds_since(t0);
    return out;
}

}  // namespace cortiq::encode::cuda

namespace cortiq::encode {

Encoded encode_gpu(const MatD& w, const MatD& h_fit, const MatD& h_sel, const Options& o,
                   Profile* prof) {
    CORTIQ_CHECK(gpu_available(), "--device gpu: {}", gpu_unavailable_reason());
    cortiq::cuda::Gpu gpu;
    cuda::ensure_fits(w.rows(), w.cols(), o, /*with_context=*/true);
    std::optional<cuda::InputContext> input;
    {
        cuda::StageTimer st(gpu, prof, "context");
        input.emplace(gpu, h_fit, h_sel, o.rho, "Gram");
    }
    cuda::Tuning t;
    t.check_memory = false;  // checked above, context included
    return cuda::encode_tensor(w, *input, o, prof, gpu, t);
}

}  // namespace cortiq::encode
