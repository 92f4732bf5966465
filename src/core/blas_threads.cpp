#include "core/blas_threads.hpp"

#include <mutex>

extern "C" {
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);
}

namespace cortiq {

namespace {

std::mutex g_mu;
int g_single = 0;  // live SingleThreadedBlas guards
int g_saved = 1;   // thread count to restore when the last one ends

}  // namespace

SingleThreadedBlas::SingleThreadedBlas() {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_single++ == 0) {
        g_saved = openblas_get_num_threads();
        if (g_saved != 1) openblas_set_num_threads(1);
    }
}

SingleThreadedBlas::~SingleThreadedBlas() {
    std::lock_guard<std::mutex> lock(g_mu);
    if (--g_single == 0 && g_saved != 1) openblas_set_num_threads(g_saved);
}

OneBlasThread::OneBlasThread() {
    std::lock_guard<std::mutex> lock(g_mu);
    saved_ = openblas_get_num_threads();
    if (saved_ != 1) openblas_set_num_threads(1);
}

OneBlasThread::~OneBlasThread() {
    std::lock_guard<std::mutex> lock(g_mu);
    if (saved_ != 1) openblas_set_num_threads(saved_);
}

ThreadedBlas::ThreadedBlas() {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_single > 0 && g_saved != 1) {
        openblas_set_num_threads(g_saved);
        active_ = true;
    }
}

ThreadedBlas::~ThreadedBlas() {
    std::lock_guard<std::mutex> lock(g_mu);
    if (active_ && g_single > 0) openblas_set_num_threads(1);
}

}  // namespace cortiq
