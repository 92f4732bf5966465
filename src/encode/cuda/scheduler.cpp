// encode_many on the GPUs: one queue (largest tensors first) served by
// `in_flight` worker threads per device, each with its own streams and
// handles; a per-device memory budget admits a tensor only when its estimate
// fits beside the ones in flight; input contexts are built once per device and
// freed after their input's last tensor.
#include "encode/cuda/scheduler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>

#include "core/error.hpp"
#include "encode/cpu/stages.hpp"
#include "encode/cuda/stages.hpp"

namespace cortiq::encode::cuda {

namespace {

constexpr int kDefaultInFlight = 4;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Device bytes promised to tensors in flight and to input contexts.
class MemoryBudget {
  public:
    explicit MemoryBudget(size_t capacity) : cap_(capacity) {}
    size_t capacity() const { return cap_; }
    // Contexts: taken at once (the tensor that needs one has been admitted).
    void reserve(size_t bytes) {
        std::lock_guard<std::mutex> lock(mu_);
        used_ += bytes;
    }
    void unreserve(size_t bytes) {
        std::lock_guard<std::mutex> lock(mu_);
        used_ -= std::min(used_, bytes);
        cv_.notify_all();
    }
    // Tensors: wait until the bytes fit beside the others; with no other
    // tensor in flight, go ahead (an allocation failure is then a clean error).
    void acquire(size_t bytes) {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return used_ + bytes <= cap_ || jobs_ == 0; });
        used_ += bytes;
        ++jobs_;
    }
    void release(size_t bytes) {
        std::lock_guard<std::mutex> lock(mu_);
        used_ -= std::min(used_, bytes);
        --jobs_;
        cv_.notify_all();
    }

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    size_t cap_;
    size_t used_ = 0;
    int jobs_ = 0;
};

struct DeviceContext {
    std::mutex mu;
    std::unique_ptr<InputContext> ctx;
    size_t bytes = 0;
};

class Scheduler {
  public:
    Scheduler(const std::vector<ManyInput>& inputs, const std::vector<ManyJob>& jobs,
              const ManyOptions& opt)
        : inputs_(inputs), jobs_(jobs), opt_(opt), results_(jobs.size()), errors_(jobs.size()) {
        int count = 0;
        CUDA_CHECK(cudaGetDeviceCount(&count));
        CORTIQ_CHECK(count >= 1, "encode_many: no CUDA device visible");
        if (!opt.gpus.empty()) {
            for (const int g : opt.gpus) {
                CORTIQ_CHECK(g >= 0 && g < count, "GPU {} does not exist: {} visible (0 to {})", g,
                             count, count - 1);
                CORTIQ_CHECK(std::count(opt.gpus.begin(), opt.gpus.end(), g) == 1,
                             "GPU {} is named twice", g);
                devs_.push_back(g);
            }
        } else {
            const int n = opt.max_gpus > 0 ? std::min(count, opt.max_gpus) : count;
            for (int g = 0; g < n; ++g) devs_.push_back(g);
        }
        ndev_ = static_cast<int>(devs_.size());
        t0_ = std::chrono::steady_clock::now();
        for (int d = 0; d < ndev_; ++d) {
            CUDA_CHECK(cudaSetDevice(devs_[static_cast<size_t>(d)]));
            const double free_b = static_cast<double>(device_free_bytes());
            const double cap = std::max(0.0, 0.92 * free_b - 0.5 * kGiB);
            budgets_.push_back(std::make_unique<MemoryBudget>(static_cast<size_t>(cap)));
        }
        order_.resize(jobs.size());
        std::iota(order_.begin(), order_.end(), size_t{0});
        std::stable_sort(order_.begin(), order_.end(),
                         [&](size_t a, size_t b) { return jobs[a].w->size() > jobs[b].w->size(); });
        remaining_.assign(inputs.size(), 0);
        needs_l_.assign(inputs.size(), false);
        for (const auto& jb : jobs) {
            ++remaining_[jb.input];
            if (jb.w->rows() > jb.w->cols()) needs_l_[jb.input] = true;
        }
        dev_ctx_.resize(inputs.size());
        for (auto& v : dev_ctx_) {
            v.resize(static_cast<size_t>(ndev_));
            for (auto& p : v) p = std::make_unique<DeviceContext>();
        }
        cpu_ctx_.resize(inputs.size());
    }

    ~Scheduler() {
        // Contexts of inputs whose tensors did not all run (after an error).
        for (auto& v : dev_ctx_)
            for (size_t d = 0; d < v.size(); ++d)
                if (v[d]->ctx) {
                    cudaSetDevice(devs_[d]);
                    v[d]->ctx.reset();
                }
    }
    Scheduler(const Scheduler&) = delete;
    Scheduler& operator=(const Scheduler&) = delete;

    std::vector<ManyResult> run() {
        const int per = std::max(1, opt_.in_flight > 0 ? opt_.in_flight : kDefaultInFlight);
        const size_t workers =
            std::min(jobs_.size(), static_cast<size_t>(per) * static_cast<size_t>(ndev_));
        std::vector<std::thread> threads;
        for (size_t w = 0; w < workers; ++w) {
            const int d = static_cast<int>(w % static_cast<size_t>(ndev_));
            threads.emplace_back([this, d] { worker(d); });
        }
        for (auto& t : threads) t.join();
        if (worker_error_) std::rethrow_exception(worker_error_);
        for (auto& e : errors_)
            if (e) std::rethrow_exception(e);
        return std::move(results_);
    }

  private:
    void worker(int d) {
        try {
            const int dev = devs_[static_cast<size_t>(d)];
            Gpu gpu(dev), helper(dev);
            while (!abort_) {
                const size_t k = next_.fetch_add(1);
                if (k >= order_.size()) break;
                const size_t j = order_[k];
                try {
                    encode_one(j, d, gpu, helper);
                } catch (...) {
                    errors_[j] = std::current_exception();
                    abort_ = true;
                }
                finish_input(jobs_[j].input);
            }
        } catch (...) {
            std::lock_guard<std::mutex> lock(mu_);
            if (!worker_error_) worker_error_ = std::current_exception();
            abort_ = true;
        }
    }

    void encode_one(size_t j, int d, Gpu& gpu, Gpu& helper) {
        const ManyJob& jb = jobs_[j];
        const int64_t m = jb.w->rows(), n = jb.w->cols();
        ManyResult res;
        res.start_s = seconds_since_start();
        Profile stages;  // the context's and the encoder's, into res.enc.stages
        Profile* prof = opt_.profile ? &stages : nullptr;
        Tuning tuning;
        tuning.check_memory = false;  // budgeted here
        const size_t need = estimate_bytes(m, n, jb.options, false, tuning);
        const size_t ctx = context_bytes(needs_l_[jb.input] ? n + 1 : n, n);
        MemoryBudget& budget = *budgets_[static_cast<size_t>(d)];
        const bool fits = need + ctx <= budget.capacity();
        if (!fits) {
            CORTIQ_CHECK(opt_.cpu_fallback,
                         "{}: {}x{} at {} bpw needs about {:.1f} GiB of GPU memory, GPU {} has "
                         "{:.1f} GiB for encoding (allow the CPU fallback or use --device cpu)",
                         jb.name, m, n, jb.options.bpw, static_cast<double>(need + ctx) / kGiB,
                         devs_[static_cast<size_t>(d)],
                         static_cast<double>(budget.capacity()) / kGiB);
            const cpu::InputContext& input_ctx = cpu_context(jb.input, jb.options.rho, prof);
            res.enc = cpu::encode_tensor(*jb.w, input_ctx, jb.options, prof);
            res.device = -1;
        } else {
            const InputContext& input_ctx = device_context(jb.input, d, gpu, jb.options.rho, prof);
            budget.acquire(need);
            try {
                res.enc = encode_tensor(*jb.w, input_ctx, jb.options, prof, gpu, tuning, &helper);
            } catch (...) {
                gpu.sync_noexcept();
                budget.release(need);
                throw;
            }
            budget.release(need);
            res.device = devs_[static_cast<size_t>(d)];
        }
        res.end_s = seconds_since_start();
        res.enc.stages = std::move(stages);
        results_[j] = std::move(res);
        if (opt_.on_done) {
            std::lock_guard<std::mutex> lock(cb_mu_);
            opt_.on_done(j, results_[j]);
        }
    }

    const InputContext& device_context(size_t input, int d, Gpu& gpu, double rho, Profile* prof) {
        DeviceContext& dc = *dev_ctx_[input][static_cast<size_t>(d)];
        std::lock_guard<std::mutex> lock(dc.mu);
        if (!dc.ctx) {
            const ManyInput& in = inputs_[input];
            const int64_t n = in.h_fit->rows();
            const size_t bytes = context_bytes(needs_l_[input] ? n + 1 : n, n);
            budgets_[static_cast<size_t>(d)]->reserve(bytes);
            try {
                StageTimer st(gpu, prof, "context");
                dc.ctx = std::make_unique<InputContext>(gpu, *in.h_fit, *in.h_sel, rho, in.name);
            } catch (...) {
                budgets_[static_cast<size_t>(d)]->unreserve(bytes);
                throw;
            }
            dc.bytes = bytes;
        }
        return *dc.ctx;
    }

    const cpu::InputContext& cpu_context(size_t input, double rho, Profile* prof) {
        std::lock_guard<std::mutex> lock(cpu_mu_);
        auto& c = cpu_ctx_[input];
        if (!c) {
            ScopedStage st(prof, "context");
            const ManyInput& in = inputs_[input];
            c = std::make_unique<cpu::InputContext>(*in.h_fit, *in.h_sel, rho, in.name);
        }
        return *c;
    }

    // After an input's last tensor (every stream that read it has synchronised).
    void finish_input(size_t input) {
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (--remaining_[input] > 0) return;
        }
        for (int d = 0; d < ndev_; ++d) {
            DeviceContext& dc = *dev_ctx_[input][static_cast<size_t>(d)];
            std::lock_guard<std::mutex> lock(dc.mu);
            if (dc.ctx) {
                cudaSetDevice(devs_[static_cast<size_t>(d)]);
                dc.ctx.reset();
                budgets_[static_cast<size_t>(d)]->unreserve(dc.bytes);
                dc.bytes = 0;
            }
        }
        std::lock_guard<std::mutex> lock(cpu_mu_);
        cpu_ctx_[input].reset();
    }

    const std::vector<ManyInput>& inputs_;
    const std::vector<ManyJob>& jobs_;
    const ManyOptions& opt_;
    std::vector<int> devs_;  // slot d runs on CUDA device devs_[d]
    int ndev_ = 0;
    std::chrono::steady_clock::time_point t0_;
    double seconds_since_start() const {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    }
    std::vector<std::unique_ptr<MemoryBudget>> budgets_;
    std::vector<size_t> order_;
    std::vector<size_t> remaining_;
    std::vector<bool> needs_l_;
    std::vector<std::vector<std::unique_ptr<DeviceContext>>> dev_ctx_;
    std::vector<std::unique_ptr<cpu::InputContext>> cpu_ctx_;
    std::vector<ManyResult> results_;
    std::vector<std::exception_ptr> errors_;
    std::exception_ptr worker_error_;
    std::atomic<size_t> next_{0};
    std::atomic<bool> abort_{false};
    std::mutex mu_, cb_mu_, cpu_mu_;
};

}  // namespace

std::vector<ManyResult> encode_many_gpu(const std::vector<ManyInput>& inputs,
                                        const std::vector<ManyJob>& jobs, const ManyOptions& opt) {
    if (jobs.empty()) return {};
    Scheduler s(inputs, jobs, opt);
    return s.run();
}

}  // namespace cortiq::encode::cuda
