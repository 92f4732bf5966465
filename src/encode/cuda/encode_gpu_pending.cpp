// Placeholder until the CUDA encoder lands: a clear error, never a crash.
#include "core/error.hpp"
#include "encode/dispatch.hpp"

namespace cortiq::encode {

Encoded encode_gpu(const MatD&, const MatD&, const MatD&, const Options&, Profile*) {
    CORTIQ_CHECK(gpu_available(), "--device gpu: {}", gpu_unavailable_reason());
    CORTIQ_FAIL("--device gpu: the CUDA encoder is not part of this build yet");
}

}  // namespace cortiq::encode
