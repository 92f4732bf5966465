// libFuzzer target: config.json → ModelConfig, then the tensor list and the
// one-line summary of every config it accepts.
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"
#include "io/config.hpp"

using namespace cortiq;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    fuzz::init_env();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    fuzz::expect_clean([&] {
        const auto c = io::ModelConfig::parse(text, "fuzz config.json");
        (void)c.summary();
        // Sizes the parser accepted must not overflow what is derived from them.
        if (c.q_dim() <= 0 || c.kv_dim() <= 0) std::abort();
        for (int32_t id : c.eos_token_ids)
            if (id < 0 || id >= c.vocab_size) std::abort();
        if (c.bos_token_id >= c.vocab_size) std::abort();
        if (c.num_layers <= 64) {
            for (const auto& t : io::expected_tensors(c))
                for (int64_t d : t.shape)
                    if (d <= 0) std::abort();
        }
    });
    return 0;
}
