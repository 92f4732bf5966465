// libFuzzer target: one safetensors file (length, JSON header, offsets,
// dtypes, metadata), opened as a file and as a one-file checkpoint; every
// tensor it accepts is read and, when a float, converted.
#include <cstdint>

#include "fuzz_common.hpp"
#include "io/safetensors.hpp"

using namespace cortiq;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    fuzz::init_env();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz::MemFile file(data, size);
    fuzz::expect_clean([&] {
        const auto f = io::SafetensorsFile::open(file.path());
        for (const auto& t : f.tensors()) {
            const auto b = f.bytes(t);
            if (b.size() != t.nbytes() || f.find(t.name) != &f.info(t.name)) std::abort();
            (void)t.shape_str();
            if (io::is_float(t.dtype)) {
                fuzz::expect_clean([&] {
                    const MatF m = io::to_matf(t, b, f.path());
                    if (static_cast<uint64_t>(m.size()) * io::dtype_size(t.dtype) != b.size())
                        std::abort();
                });
            }
        }
        for (const auto& [k, v] : f.metadata()) (void)k, (void)v;
    });
    fuzz::expect_clean([&] {
        const auto c = io::Checkpoint::open(file.path());
        for (const auto& n : c.names())
            if (io::is_float(c.info(n).dtype)) fuzz::expect_clean([&] { (void)c.load_floats(n); });
    });
    return 0;
}
