// libFuzzer target: BLR and sign payloads through the public entry points
// (validate_any, payload_shape, dequant_any), so it survives changes to the
// layout. Every payload that validates must dequantise to finite values of
// the shape its header states.
#include <cmath>
#include <cstdint>
#include <span>

#include "blr/sign.hpp"
#include "fuzz_common.hpp"

using namespace cortiq;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    fuzz::init_env();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::span<const uint8_t> bytes(data, size);
    bool valid = false;
    fuzz::expect_clean([&] {
        blr::validate_any(bytes, "fuzz payload");
        valid = true;
    });
    if (!valid) return 0;
    // Accepted once, accepted everywhere: these must not throw at all.
    const auto shape = blr::payload_shape(bytes, "fuzz payload");
    blr::validate_any(bytes, "fuzz payload", shape.m, shape.n);
    if (shape.m <= 0 || shape.n <= 0 || shape.bits <= 0) std::abort();
    const MatF w = blr::dequant_any(bytes);
    if (w.rows() != shape.m || w.cols() != shape.n) std::abort();
    for (int64_t i = 0; i < w.size(); ++i)
        if (!std::isfinite(w.data()[i])) std::abort();
    return 0;
}
