// libFuzzer target: tokenizer.json (and, after a NUL byte in the input,
// tokenizer_config.json) loaded from a scratch folder; a tokenizer that loads
// then encodes and decodes a few fixed texts and every id it knows.
#include <cstdint>
#include <cstring>
#include <string_view>

#include "fuzz_common.hpp"
#include "io/tokenizer.hpp"

using namespace cortiq;
namespace fs = std::filesystem;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    fuzz::init_env();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    const size_t nul = in.find('\0');
    const fs::path dir = fuzz::scratch_dir();
    fuzz::write_file(dir / "tokenizer.json", in.substr(0, nul));
    if (nul == std::string_view::npos) {
        fs::remove(dir / "tokenizer_config.json");
    } else {
        fuzz::write_file(dir / "tokenizer_config.json", in.substr(nul + 1));
    }
    fuzz::expect_clean([&] {
        const auto tok = io::Tokenizer::load(dir.string());
        const int32_t v = tok.vocab_size();
        if (v < 0) std::abort();
        for (std::string_view text :
             {"Hello world!  It's 2024.\n\tOK", " \xe2\x96\x81x\xff\xc3", "<s>a</s><|endoftext|>",
              "",
              // full-width f, fi ligature, e + acute, Hangul jamo
              "\xef\xbd\x86\xef\xac\x81 e\xcc\x81 \xe1\x84\x80\xe1\x85\xa1"}) {
            for (bool special : {false, true}) {
                const auto ids = tok.encode(text, special);
                (void)tok.decode(ids, false);
                (void)tok.decode(ids, true);
                int32_t prev = -1;
                for (int32_t id : ids) {
                    (void)tok.decode_token(id, prev);
                    prev = id;
                }
            }
        }
        const int32_t lim = v < 2048 ? v : 2048;
        for (int32_t id = -1; id <= lim; ++id) {
            (void)tok.id_to_token(id);
            (void)tok.is_special(id);
            (void)tok.decode_token(id, id - 1);
        }
        (void)tok.bos_id();
        (void)tok.eos_id();
    });
    return 0;
}
