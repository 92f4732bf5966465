// The CUDA base every GPU layer builds on (the encoder, the runtime, the
// calibration): checked calls (CUDA_CHECK, CUBLAS_CHECK, CUSOLVER_CHECK throw
// cortiq::Error with file and line), device buffers that free themselves
// (stream-ordered, from the device's memory pool), and one `Gpu` per host
// thread: a stream with its cuBLAS and cuSOLVER handles.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace cortiq {
class Profile;  // core/profile.hpp
}

namespace cortiq::cuda {

// Throws cortiq::Error("<lib> error at file:line: <expr>: <detail>").
[[noreturn]] void fail_call(const char* lib, const char* expr, const char* file, int line,
                            const std::string& detail);
const char* cublas_status_name(cublasStatus_t s);
const char* cusolver_status_name(cusolverStatus_t s);

}  // namespace cortiq::cuda

#define CUDA_CHECK(expr)                                                 \
    do {                                                                 \
        const cudaError_t cortiq_e_ = (expr);                            \
        if (cortiq_e_ != cudaSuccess) [[unlikely]]                       \
            ::cortiq::cuda::fail_call("CUDA", #expr, __FILE__, __LINE__, \
                                      cudaGetErrorString(cortiq_e_));    \
    } while (0)

#define CUBLAS_CHECK(expr)                                                            \
    do {                                                                              \
        const cublasStatus_t cortiq_s_ = (expr);                                      \
        if (cortiq_s_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                          \
            ::cortiq::cuda::fail_call("cuBLAS", #expr, __FILE__, __LINE__,            \
                                      ::cortiq::cuda::cublas_status_name(cortiq_s_)); \
    } while (0)

#define CUSOLVER_CHECK(expr)                                                            \
    do {                                                                                \
        const cusolverStatus_t cortiq_s_ = (expr);                                      \
        if (cortiq_s_ != CUSOLVER_STATUS_SUCCESS) [[unlikely]]                          \
            ::cortiq::cuda::fail_call("cuSOLVER", #expr, __FILE__, __LINE__,            \
                                      ::cortiq::cuda::cusolver_status_name(cortiq_s_)); \
    } while (0)

// After a kernel launch: the launch error, if any.
#define CUDA_LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

namespace cortiq::cuda {

// A device array of T, allocated and freed in stream order on `stream` (the
// device's default memory pool). Objects shared between streams are first
// synchronised and then rebound to the legacy stream 0 (see `rebind`).
template <class T>
class DeviceBuffer {
  public:
    DeviceBuffer() = default;
    DeviceBuffer(int64_t n, cudaStream_t stream) : n_(n), stream_(stream) {
        if (n_ > 0)
            CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&p_),
                                       static_cast<size_t>(n_) * sizeof(T), stream_));
    }
    ~DeviceBuffer() { reset(); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    DeviceBuffer(DeviceBuffer&& o) noexcept
        : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)), stream_(o.stream_) {}
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        if (this != &o) {
            reset();
            p_ = std::exchange(o.p_, nullptr);
            n_ = std::exchange(o.n_, 0);
            stream_ = o.stream_;
        }
        return *this;
    }
    void reset() noexcept {
        // A free that fails (at teardown, after its stream or the context is
        // gone) cannot be reported from here; its error is taken off the
        // thread so that the next launch check does not report it as its own.
        if (p_ && cudaFreeAsync(p_, stream_) != cudaSuccess) (void)cudaGetLastError();
        p_ = nullptr;
        n_ = 0;
    }
    // A copy on `stream`.
    DeviceBuffer clone(cudaStream_t stream) const {
        DeviceBuffer o(n_, stream);
        if (n_ > 0)
            CUDA_CHECK(cudaMemcpyAsync(o.p_, p_, static_cast<size_t>(n_) * sizeof(T),
                                       cudaMemcpyDeviceToDevice, stream));
        return o;
    }
    // Future frees go to `stream` (the caller has ordered all earlier use).
    void rebind(cudaStream_t stream) noexcept { stream_ = stream; }
    T* get() { return p_; }
    const T* get() const { return p_; }
    int64_t size() const { return n_; }
    bool empty() const { return n_ == 0; }

  private:
    T* p_ = nullptr;
    int64_t n_ = 0;
    cudaStream_t stream_ = nullptr;
};

using DVec = DeviceBuffer<float>;

// A row-major float32 matrix on the device.
struct DMat {
    DMat() = default;
    DMat(int64_t rows_, int64_t cols_, cudaStream_t stream)
        : buf(rows_ * cols_, stream), rows(rows_), cols(cols_) {}
    float* data() { return buf.get(); }
    const float* data() const { return buf.get(); }
    int64_t size() const { return rows * cols; }
    float* row(int64_t i) { return buf.get() + i * cols; }
    const float* row(int64_t i) const { return buf.get() + i * cols; }
    DMat clone(cudaStream_t stream) const {
        DMat o;
        o.buf = buf.clone(stream);
        o.rows = rows;
        o.cols = cols;
        return o;
    }
    void rebind(cudaStream_t stream) noexcept { buf.rebind(stream); }

    DeviceBuffer<float> buf;
    int64_t rows = 0, cols = 0;
};

// One host thread's view of one GPU: a non-blocking stream, a cuBLAS and a
// cuSOLVER handle bound to it. Not shared between threads. The cuBLAS handle
// has a workspace of its own (kBlasWorkspaceBytes): without one, cuBLAS
// shares a pool among the streams of the process and may pick other kernels,
// so other bits, when several streams are busy at once (its documentation,
// "Results reproducibility"); with one, a product's bits do not depend on
// what else runs.
class Gpu {
  public:
    explicit Gpu(int device = -1);  // -1: the calling thread's current device
    ~Gpu();
    Gpu(const Gpu&) = delete;
    Gpu& operator=(const Gpu&) = delete;

    int device() const { return device_; }
    cudaStream_t stream() const { return stream_; }
    cublasHandle_t blas() const { return blas_; }
    cusolverDnHandle_t solver() const { return solver_; }
    int smem_optin() const { return smem_optin_; }  // max dynamic shared memory per block
    int sm_count() const { return sm_count_; }
    void sync() const;  // waits for the stream; throws on a device error
    void sync_noexcept() const noexcept;
    // Makes this thread's current device the GPU's (worker threads call it first).
    void make_current() const;

  private:
    int device_ = 0;
    int smem_optin_ = 48 * 1024;
    int sm_count_ = 1;
    cudaStream_t stream_ = nullptr;
    cublasHandle_t blas_ = nullptr;
    cusolverDnHandle_t solver_ = nullptr;
    void* blas_workspace_ = nullptr;
};

// The size cuBLAS's own pool gives each stream on Hopper (32 MiB).
inline constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;

// Adds the scope's wall time to `prof` (if any) under `stage`, after waiting
// for the stream so the seconds land on the stage that queued the work.
class StageTimer {
  public:
    // sync_start: wait for the stream first, so a stage (or a part,
    // "stage/part") is charged only its own work.
    StageTimer(const Gpu& gpu, Profile* prof, const char* stage, bool sync_start = false);
    ~StageTimer();
    StageTimer(const StageTimer&) = delete;
    StageTimer& operator=(const StageTimer&) = delete;

  private:
    const Gpu& gpu_;
    Profile* prof_;
    const char* stage_;
    std::chrono::steady_clock::time_point t0_;
};

// Bytes free on the current device for new allocations: what the driver
// reports plus what the memory pool holds unused.
size_t device_free_bytes();
size_t device_total_bytes();

// Host ↔ device copies (float32 on the device, float64 on the host).
DVec upload(const std::vector<double>& v, cudaStream_t stream);
std::vector<double> download(const DVec& v, cudaStream_t stream);
DVec upload_f(const std::vector<float>& v, cudaStream_t stream);
std::vector<float> download_f(const float* p, int64_t n, cudaStream_t stream);

}  // namespace cortiq::cuda
