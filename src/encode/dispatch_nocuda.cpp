// Without the CUDA backend every GPU request fails with one clear message.
#ifndef CORTIQ_HAVE_CUDA
#include "core/error.hpp"
#include "encode/dispatch.hpp"

namespace cortiq::encode {

Encoded encode_gpu(const MatD&, const MatD&, const MatD&, const Options&, Profile*) {
    CORTIQ_FAIL("--device gpu: {}", gpu_unavailable_reason());
}

}  // namespace cortiq::encode
#endif
