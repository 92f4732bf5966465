// The thread's part profile (tune/cuda/parts.hpp).
#include "tune/cuda/parts.hpp"

namespace cortiq::tune::cuda {

Profile*& part_profile() {
    thread_local Profile* p = nullptr;
    return p;
}

}  // namespace cortiq::tune::cuda
