#include "core/parallel.hpp"

#include <thread>

extern "C" void openblas_set_num_threads(int);

namespace cortiq {

void set_num_threads(int threads) {
    if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
}

int num_threads() {
    return omp_get_max_threads();
}

}  // namespace cortiq
