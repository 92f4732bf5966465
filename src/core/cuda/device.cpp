// The RAII layer's out-of-line parts: error messages, the per-thread Gpu,
// memory queries and small host ↔ device copies.
#include "core/cuda/device.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <mutex>

#include "core/error.hpp"
#include "core/profile.hpp"

namespace cortiq::cuda {

void fail_call(const char* lib, const char* expr, const char* file, int line,
               const std::string& detail) {
    throw Error(fmt::format("{} error at {}:{}: {}: {}", lib, file, line, expr, detail));
}

const char* cublas_status_name(cublasStatus_t s) {
    switch (s) {
        case CUBLAS_STATUS_SUCCESS:
            return "success";
        case CUBLAS_STATUS_NOT_INITIALIZED:
            return "not initialised";
        case CUBLAS_STATUS_ALLOC_FAILED:
            return "out of device memory";
        case CUBLAS_STATUS_INVALID_VALUE:
            return "invalid value";
        case CUBLAS_STATUS_ARCH_MISMATCH:
            return "architecture mismatch";
        case CUBLAS_STATUS_MAPPING_ERROR:
            return "mapping error";
        case CUBLAS_STATUS_EXECUTION_FAILED:
            return "execution failed";
        case CUBLAS_STATUS_INTERNAL_ERROR:
            return "internal error";
        case CUBLAS_STATUS_NOT_SUPPORTED:
            return "not supported";
        default:
            return "unknown status";
    }
}

const char* cusolver_status_name(cusolverStatus_t s) {
    switch (s) {
        case CUSOLVER_STATUS_SUCCESS:
            return "success";
        case CUSOLVER_STATUS_NOT_INITIALIZED:
            return "not initialised";
        case CUSOLVER_STATUS_ALLOC_FAILED:
            return "out of device memory";
        case CUSOLVER_STATUS_INVALID_VALUE:
            return "invalid value";
        case CUSOLVER_STATUS_ARCH_MISMATCH:
            return "architecture mismatch";
        case CUSOLVER_STATUS_EXECUTION_FAILED:
            return "execution failed";
        case CUSOLVER_STATUS_INTERNAL_ERROR:
            return "internal error";
        case CUSOLVER_STATUS_NOT_SUPPORTED:
            return "not supported";
        default:
            return "unknown status";
    }
}

namespace {

// Keep freed blocks in the device's pool (stream-ordered reuse without
// returning memory to the driver at every synchronisation).
void configure_pool(int device) {
    static std::mutex mu;
    static std::vector<bool> done;
    std::lock_guard<std::mutex> lock(mu);
    if (done.size() <= static_cast<size_t>(device)) done.resize(device + 1, false);
    if (done[device]) return;
    cudaMemPool_t pool;
    CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t threshold = UINT64_MAX;
    CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    done[device] = true;
}

}  // namespace

Gpu::Gpu(int device) {
    if (device < 0) CUDA_CHECK(cudaGetDevice(&device));
    device_ = device;
    CUDA_CHECK(cudaSetDevice(device_));
    configure_pool(device_);
    CUDA_CHECK(
        cudaDeviceGetAttribute(&smem_optin_, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_));
    CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    try {
        CUBLAS_CHECK(cublasCreate(&blas_));
        CUBLAS_CHECK(cublasSetStream(blas_, stream_));
        // after cublasSetStream, which resets the handle to the shared pool
        CUDA_CHECK(cudaMalloc(&blas_workspace_, kBlasWorkspaceBytes));
        CUBLAS_CHECK(cublasSetWorkspace(blas_, blas_workspace_, kBlasWorkspaceBytes));
        CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));  // plain FP32 unless asked
        CUSOLVER_CHECK(cusolverDnCreate(&solver_));
        CUSOLVER_CHECK(cusolverDnSetStream(solver_, stream_));
    } catch (...) {
        if (solver_) cusolverDnDestroy(solver_);
        if (blas_) cublasDestroy(blas_);
        if (blas_workspace_) cudaFree(blas_workspace_);
        cudaStreamDestroy(stream_);
        throw;
    }
}

Gpu::~Gpu() {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    if (solver_) cusolverDnDestroy(solver_);
    if (blas_) cublasDestroy(blas_);
    if (blas_workspace_) cudaFree(blas_workspace_);
    cudaStreamDestroy(stream_);
}

StageTimer::StageTimer(const Gpu& gpu, Profile* prof, const char* stage, bool sync_start)
    : gpu_(gpu), prof_(prof), stage_(stage) {
    if (prof_ && sync_start) gpu_.sync();
    t0_ = std::chrono::steady_clock::now();
}

StageTimer::~StageTimer() {
    if (!prof_) return;
    gpu_.sync_noexcept();
    prof_->add(stage_, seconds_since(t0_));
}

void Gpu::sync() const {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void Gpu::sync_noexcept() const noexcept {
    cudaStreamSynchronize(stream_);
}

void Gpu::make_current() const {
    CUDA_CHECK(cudaSetDevice(device_));
}

size_t device_free_bytes() {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    cudaMemPool_t pool;
    CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t reserved = 0, used = 0;
    CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
    CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
    return free_b + (reserved > used ? reserved - used : 0);
}

size_t device_total_bytes() {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return total_b;
}

DVec upload(const std::vector<double>& v, cudaStream_t stream) {
    std::vector<float> f(v.begin(), v.end());
    return upload_f(f, stream);
}

DVec upload_f(const std::vector<float>& v, cudaStream_t stream) {
    DVec d(static_cast<int64_t>(v.size()), stream);
    if (!v.empty()) {
        CUDA_CHECK(cudaMemcpyAsync(d.get(), v.data(), v.size() * sizeof(float),
                                   cudaMemcpyHostToDevice, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));  // `v` may die with the caller's frame
    }
    return d;
}

std::vector<float> download_f(const float* p, int64_t n, cudaStream_t stream) {
    std::vector<float> out(static_cast<size_t>(n));
    if (n > 0) {
        CUDA_CHECK(cudaMemcpyAsync(out.data(), p, static_cast<size_t>(n) * sizeof(float),
                                   cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    return out;
}

std::vector<double> download(const DVec& v, cudaStream_t stream) {
    const auto f = download_f(v.get(), v.size(), stream);
    return std::vector<double>(f.begin(), f.end());
}

}  // namespace cortiq::cuda
