// libFuzzer target: the tokenizers themselves on arbitrary bytes (valid and
// invalid UTF-8, special-token text, lone continuation bytes). The first byte
// picks a tokenizer from fuzz/tokenizers and the mode; the rest is the text,
// or (mode 1) a list of int32 ids to decode, in or out of range.
//
// Properties checked besides "no crash": decode gives valid UTF-8; the
// byte-level tokenizers (no normaliser) give back any valid UTF-8 text they
// encoded, and the stream pieces of decode_token concatenate to decode.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.hpp"
#include "io/tokenizer.hpp"
#include "io/tokenizer_impl.hpp"

using namespace cortiq;

namespace {

struct Loaded {
    io::Tokenizer tok;
    bool byte_level;  // decode(encode(s)) == s for valid UTF-8 s
};

std::vector<Loaded>& tokenizers() {
    static std::vector<Loaded> all = [] {
        std::vector<Loaded> v;
        // the source tree: where this build's was, unless CORTIQ_SOURCE_DIR says otherwise
        const char* env = std::getenv("CORTIQ_SOURCE_DIR");
        const std::string root = env && *env ? env : CORTIQ_SOURCE_DIR;
        const std::string dir = root + "/fuzz/tokenizers/";
        v.push_back({io::Tokenizer::load(root + "/models/demo"), true});
        v.push_back({io::Tokenizer::load(dir + "spm-byte-fallback.json"), false});
        v.push_back({io::Tokenizer::load(dir + "qwen2-split.json"), true});
        v.push_back({io::Tokenizer::load(dir + "llama3-split.json"), true});
        return v;
    }();
    return all;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    fuzz::init_env();
    (void)tokenizers();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const auto& all = tokenizers();
    const Loaded& t = all[data[0] % all.size()];
    const int mode = (data[0] / all.size()) % 4;
    const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
    if (mode == 1) {
        std::vector<int32_t> ids(text.size() / 4);
        if (!ids.empty()) std::memcpy(ids.data(), text.data(), ids.size() * 4);
        for (bool skip : {false, true})
            if (!io::tok::utf8_is_valid(t.tok.decode(ids, skip))) std::abort();
        int32_t prev = -1;
        for (int32_t id : ids) {
            (void)t.tok.decode_token(id, prev);
            (void)t.tok.id_to_token(id);
            (void)t.tok.is_special(id);
            prev = id;
        }
        return 0;
    }
    const bool special = mode == 2;
    const auto ids = t.tok.encode(text, special);
    for (int32_t id : ids)
        if (id < 0 || id >= t.tok.vocab_size()) std::abort();
    const std::string back = t.tok.decode(ids);
    if (!io::tok::utf8_is_valid(back)) std::abort();
    if (t.byte_level && !special && io::tok::utf8_is_valid(text)) {
        if (back != text) std::abort();
        std::string stream;
        int32_t prev = -1;
        for (int32_t id : ids) {
            stream += t.tok.decode_token(id, prev);
            prev = id;
        }
        if (stream != back) std::abort();
    }
    return 0;
}
