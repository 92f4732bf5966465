// io::Tokenizer against golden ids from the Hugging Face tokenizers library
// (tests/golden/<model>.json) and the whole-file token counts of
// shared/data/README.md, plus synthetic tokenizer.json files for the options
// the shipped models do not use.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"
#include "io/tokenizer.hpp"
#include "require.hpp"

namespace fs = std::filesystem;
using cortiq::io::Tokenizer;
using nlohmann::json;

namespace {

std::string data_dir() {
    return cortiq::test::shared_data().string();
}
std::string model_dir(const std::string& m) {
    return data_dir() + "/models/" + m;
}
std::string golden_path(const std::string& m) {
    return std::string(CORTIQ_SOURCE_DIR) + "/tests/golden/" + m + ".json";
}
#define REQUIRE_DATA() REQUIRE_DATA_AT(data_dir() + "/models/stories260K/tokenizer.json")

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    EXPECT_TRUE(f.good()) << path;
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// The first n bytes of s as Python's bytes[:n].decode("utf-8", errors="ignore")
// gives them, for valid UTF-8 s: an incomplete last character is dropped.
std::string utf8_prefix(const std::string& s, size_t n) {
    if (n >= s.size()) return s;
    size_t lead = n;
    while (lead > 0 && lead > n - 4 && (static_cast<unsigned char>(s[lead - 1]) & 0xC0) == 0x80) {
        --lead;
    }
    if (lead == 0) return {};
    const auto b = static_cast<unsigned char>(s[lead - 1]);
    const size_t len = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
    return s.substr(0, (lead - 1) + len <= n ? n : lead - 1);
}

const json& golden(const std::string& m) {
    static std::map<std::string, json> cache;
    auto it = cache.find(m);
    if (it == cache.end()) it = cache.emplace(m, json::parse(read_file(golden_path(m)))).first;
    return it->second;
}

const Tokenizer& tokenizer(const std::string& m) {
    static std::map<std::string, Tokenizer> cache;
    auto it = cache.find(m);
    if (it == cache.end()) it = cache.emplace(m, Tokenizer::load(model_dir(m))).first;
    return it->second;
}

// Index of the first difference, or -1.
long first_diff(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    const size_t n = std::min(a.size(), b.size());
    for (size_t i = 0; i < n; ++i) {
        if (a[i] != b[i]) return static_cast<long>(i);
    }
    return a.size() == b.size() ? -1 : static_cast<long>(n);
}

class Model : public ::testing::TestWithParam<std::string> {};

TEST_P(Model, GoldenTextIds) {
    REQUIRE_DATA();
    const std::string m = GetParam();
    const Tokenizer& tok = tokenizer(m);
    const json& g = golden(m);
    ASSERT_FALSE(g.at("ids").empty());
    for (const auto& [name, ids_json] : g.at("ids").items()) {
        const std::string text = utf8_prefix(read_file(data_dir() + "/text/" + name), 16384);
        const auto want = ids_json.get<std::vector<int32_t>>();
        const auto got = tok.encode(text);
        const long d = first_diff(got, want);
        EXPECT_EQ(d, -1) << m << " " << name << ": first difference at token " << d << " of "
                         << want.size() << " (got " << got.size() << ")";
        EXPECT_EQ(tok.decode(want), text) << m << " " << name;
    }
}

TEST_P(Model, GoldenExtraStrings) {
    REQUIRE_DATA();
    const std::string m = GetParam();
    const Tokenizer& tok = tokenizer(m);
    for (const auto& e : golden(m).at("extra")) {
        const auto text = e.at("text").get<std::string>();
        const auto want = e.at("ids").get<std::vector<int32_t>>();
        const auto decoded = e.at("decoded").get<std::string>();
        const auto got = tok.encode(text);
        EXPECT_EQ(got, want) << m << ": '" << text << "'";
        EXPECT_EQ(tok.decode(want), decoded) << m << ": '" << text << "'";
        if (decoded == text) {
            EXPECT_EQ(tok.decode(got), text) << m;
        }
    }
}

TEST_P(Model, RoundTripAndStreaming) {
    REQUIRE_DATA();
    const std::string m = GetParam();
    const Tokenizer& tok = tokenizer(m);
    for (const auto& [name, ids_json] : golden(m).at("ids").items()) {
        const std::string text = utf8_prefix(read_file(data_dir() + "/text/" + name), 16384);
        const auto ids = tok.encode(text);
        EXPECT_EQ(tok.decode(ids), text) << m << " " << name;
        std::string streamed;
        int32_t prev = -1;
        for (int32_t id : ids) {
            streamed += tok.decode_token(id, prev);
            prev = id;
        }
        EXPECT_EQ(streamed, text) << m << " " << name;
    }
}

TEST_P(Model, SpecialTokensAndIds) {
    REQUIRE_DATA();
    const std::string m = GetParam();
    const Tokenizer& tok = tokenizer(m);
    const auto plain = tok.encode("Once upon a time");
    const auto with = tok.encode("Once upon a time", true);
    if (m == "stories260K") {
        EXPECT_EQ(tok.vocab_size(), 512);
        EXPECT_EQ(tok.bos_id(), 1);
        EXPECT_EQ(tok.eos_id(), 2);
        ASSERT_EQ(with.size(), plain.size() + 1);
        EXPECT_EQ(with[0], 1);
        EXPECT_EQ(tok.decode(with), "<s> Once upon a time");  // as tokenizers
        EXPECT_EQ(tok.decode(with, true), "Once upon a time");
        // Streaming after BOS drops the leading space, like llama2.c.
        EXPECT_EQ(tok.decode_token(with[1], 1), tok.decode({with[1]}));
        EXPECT_EQ(tok.decode_token(tok.token_to_id("<0x0A>"), 5), "\n");
        // <s> written in the text is the special token.
        const auto s = tok.encode("<s>hi");
        ASSERT_FALSE(s.empty());
        EXPECT_EQ(s[0], 1);
    } else {
        EXPECT_EQ(tok.vocab_size(), 4096);
        EXPECT_EQ(tok.bos_id(), 0);
        EXPECT_EQ(tok.eos_id(), 0);
        EXPECT_EQ(with, plain);  // the ByteLevel post-processor adds nothing
        EXPECT_TRUE(tok.is_special(0));
        EXPECT_EQ(tok.id_to_token(0), "<|endoftext|>");
        EXPECT_EQ(tok.token_to_id("<|endoftext|>"), 0);
        auto ids = plain;
        ids.insert(ids.begin(), 0);
        ids.push_back(0);
        EXPECT_EQ(tok.decode(ids), "<|endoftext|>Once upon a time<|endoftext|>");
        EXPECT_EQ(tok.decode(ids, true), "Once upon a time");
        // U+180E is not white space for Oniguruma's \s (it is for PCRE2's);
        // ids from tokenizers 0.23.2.
        EXPECT_EQ(tok.encode("YZZ  \u180eLju"),
                  (std::vector<int32_t>{57, 58, 58, 221, 221, 158, 255, 237, 44, 74, 85}));
        // A multi-byte character split over byte tokens streams as raw bytes.
        const std::string emoji = "\xF0\x9F\x99\x82";
        const auto e = tok.encode(emoji);
        std::string streamed;
        for (int32_t id : e) streamed += tok.decode_token(id);
        EXPECT_EQ(streamed, emoji);
    }
    EXPECT_EQ(tok.decode({-5, 1 << 20}), "");  // unknown ids are dropped
    EXPECT_EQ(tok.decode_token(-1), "");
    // Invalid UTF-8 is taken lossily (U+FFFD), not rejected.
    EXPECT_EQ(tok.encode("a\xFF"), tok.encode("a\xEF\xBF\xBD"));
}

INSTANTIATE_TEST_SUITE_P(Tokenizer, Model,
                         ::testing::Values("stories260K", "tiny-llama-6m", "tiny-qwen3-6m"),
                         [](const auto& info) {
                             std::string n = info.param;
                             for (char& c : n) {
                                 if (c == '-') c = '_';
                             }
                             return n;
                         });

TEST(Tokenizer, WholeFileCounts) {
    REQUIRE_DATA();
    const struct {
        const char* model;
        const char* text;
        size_t tokens;
    } cases[] = {
        {"tiny-llama-6m", "tinystories-valid.txt", 277831},
        {"tiny-llama-6m", "austen-heldout.txt", 146697},
        {"tiny-llama-6m", "kjv-heldout.txt", 145702},
        {"tiny-llama-6m", "tinystories-calib.txt", 146430},
        {"tiny-qwen3-6m", "tinystories-valid.txt", 277831},
        {"tiny-qwen3-6m", "austen-heldout.txt", 146697},
        {"tiny-qwen3-6m", "kjv-heldout.txt", 145702},
        {"tiny-qwen3-6m", "tinystories-calib.txt", 146430},
        {"stories260K", "tinystories-valid.txt", 484911},
    };
    for (const auto& c : cases) {
        const std::string text = read_file(data_dir() + "/text/" + c.text);
        const auto t0 = std::chrono::steady_clock::now();
        const auto ids = tokenizer(c.model).encode(text);
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        EXPECT_EQ(ids.size(), c.tokens) << c.model << " " << c.text;
        std::printf("  %-14s %-22s %8zu tokens  %7.1f ms  %5.2f MB/s\n", c.model, c.text,
                    ids.size(), s * 1e3, text.size() / s / 1e6);
        EXPECT_LT(s, 5.0) << c.model << " " << c.text << " encodes too slowly";
    }
}

// ---- errors --------------------------------------------------------------------

struct TempDir {
    fs::path path;
    TempDir() {
        static int counter = 0;
        path = fs::temp_directory_path() /
               ("cortiq_tok_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
        fs::create_directories(path);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    void write(const std::string& name, const std::string& text) const {
        std::ofstream(path / name, std::ios::binary) << text;
    }
};

void expect_error_naming(const std::string& dir, const std::string& needle) {
    try {
        Tokenizer::load(dir);
        ADD_FAILURE() << "no error for " << dir;
    } catch (const cortiq::Error& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
}

TEST(Tokenizer, MissingFileNamesIt) {
    TempDir d;
    expect_error_naming(d.path.string(), (d.path / "tokenizer.json").string());
    expect_error_naming((d.path / "nope").string(), (d.path / "nope" / "tokenizer.json").string());
}

TEST(Tokenizer, CorruptFileNamesIt) {
    TempDir d;
    d.write("tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0,");
    expect_error_naming(d.path.string(), (d.path / "tokenizer.json").string());
    d.write("tokenizer.json", "[1, 2, 3]");
    expect_error_naming(d.path.string(), (d.path / "tokenizer.json").string());
    d.write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}})");
    expect_error_naming(d.path.string(), (d.path / "tokenizer.json").string());
    d.write("tokenizer.json",
            R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", "b"]]}})");
    expect_error_naming(d.path.string(), (d.path / "tokenizer.json").string());
    d.write("tokenizer.json",
            R"({"normalizer": {"type": "Lowercase"}, "model": {"vocab": {"a": 0}, "merges": []}})");
    expect_error_naming(d.path.string(), "Lowercase");
}

TEST(Tokenizer, UnknownNormalizerNamesFileAndType) {
    // Normalizers of the tokenizers library that are not implemented are
    // refused, never skipped: the message names the file and the type.
    TempDir d;
    const std::string file = (d.path / "tokenizer.json").string();
    for (const char* type : {"Precompiled", "BertNormalizer", "StripAccents", "Nmt", "NFKX"}) {
        json t = {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", json::array()}}}};
        t["normalizer"] = {{"type", "Sequence"},
                           {"normalizers", {{{"type", "NFKC"}}, {{"type", type}}}}};
        d.write("tokenizer.json", t.dump());
        expect_error_naming(d.path.string(), file);
        expect_error_naming(d.path.string(), std::string("'") + type + "'");
    }
}

// ---- variants of the shipped tokenizers, checked against the tokenizers library ----

// tests/golden/tokenizer_variants.json (scripts/golden/make_tokenizer_variants.js):
// a shipped tokenizer.json plus patches, and the library's ids and decodes.
json apply_patches(json t, const json& patches) {
    for (const auto& p : patches) {
        const auto op = p.at(0).get<std::string>();
        const auto ptr = p.at(1).get<std::string>();
        if (op == "merges_to_strings") {
            for (auto& m : t[json::json_pointer(ptr)]) {
                if (m.is_array()) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
            }
        } else if (ptr.size() >= 2 && ptr.compare(ptr.size() - 2, 2, "/-") == 0) {
            t[json::json_pointer(ptr.substr(0, ptr.size() - 2))].push_back(p.at(2));
        } else {
            t[json::json_pointer(ptr)] = p.at(2);
        }
    }
    return t;
}

TEST(Tokenizer, VariantsMatchLibrary) {
    REQUIRE_DATA();
    const json g = json::parse(
        read_file(std::string(CORTIQ_SOURCE_DIR) + "/tests/golden/tokenizer_variants.json"));
    std::map<std::string, json> bases;
    int checked = 0;
    for (const auto& [name, v] : g.at("variants").items()) {
        const auto base = v.at("base").get<std::string>();
        if (!bases.count(base)) {
            bases[base] = json::parse(read_file(model_dir(base) + "/tokenizer.json"));
        }
        TempDir d;
        d.write("tokenizer.json", apply_patches(bases[base], v.at("patches")).dump());
        const Tokenizer tok = Tokenizer::load(d.path.string());
        int failures = 0;
        for (const auto& c : g.at("cases")) {
            if (c.at("variant") != name) continue;
            const auto ids = c.at("ids").get<std::vector<int32_t>>();
            std::string what;
            if (!c.at("text").is_null()) {
                const auto text = c.at("text").get<std::string>();
                if (tok.encode(text) != ids) what += " encode";
                if (tok.encode(text, true) != c.at("ids_special").get<std::vector<int32_t>>()) {
                    what += " encode(add_special)";
                }
            }
            if (tok.decode(ids) != c.at("decoded").get<std::string>()) what += " decode";
            if (tok.decode(ids, true) != c.at("decoded_skip").get<std::string>()) {
                what += " decode(skip_special)";
            }
            ++checked;
            if (!what.empty() && ++failures <= 3) {
                ADD_FAILURE() << name << ": " << c.dump() << " differs in" << what;
            }
        }
        EXPECT_EQ(failures, 0) << name;
    }
    EXPECT_GT(checked, 1000);
}

// ---- synthetic tokenizers ---------------------------------------------------------

// GPT-2's byte -> char map, written independently of the library.
std::string byte_char(int b) {
    int cp = b;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
        int n = 0;
        for (int x = 0; x < b; ++x) {
            if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) ++n;
        }
        cp = 256 + n;
    }
    std::string s;
    if (cp < 0x80) {
        s.push_back(static_cast<char>(cp));
    } else {
        s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    return s;
}

// A byte-level BPE whose ids 0..255 are the bytes, then the given merges.
json byte_level_tokenizer(const std::vector<std::pair<std::string, std::string>>& merges) {
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
    json jm = json::array();
    int next = 256;
    for (const auto& [a, b] : merges) {
        jm.push_back(a + " " + b);  // string form
        if (!vocab.contains(a + b)) vocab[a + b] = next++;
    }
    json t;
    t["version"] = "1.0";
    t["added_tokens"] = json::array();
    t["normalizer"] = nullptr;
    t["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
    t["post_processor"] = nullptr;
    t["decoder"] = {{"type", "ByteLevel"}};
    t["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", jm}, {"unk_token", nullptr}};
    return t;
}

Tokenizer load_json(const TempDir& d, const json& t) {
    d.write("tokenizer.json", t.dump());
    return Tokenizer::load(d.path.string());
}

std::vector<int32_t> bytes_of(const std::string& s) {
    std::vector<int32_t> v;
    for (char c : s) v.push_back(static_cast<unsigned char>(c));
    return v;
}

// tests/golden/unicode_forms.json (scripts/golden/make_unicode_forms.py): strings
// in the four forms of Python's unicodedata. A byte-level BPE without merges
// encodes its input to its bytes, so encode shows the normalizer's output.
TEST(Tokenizer, UnicodeNormalizersMatchPython) {
    const json g =
        json::parse(read_file(std::string(CORTIQ_SOURCE_DIR) + "/tests/golden/unicode_forms.json"));
    TempDir d;
    for (const char* form : {"NFC", "NFD", "NFKC", "NFKD"}) {
        json t = byte_level_tokenizer({});
        t["normalizer"] = {{"type", form}};
        const Tokenizer tok = load_json(d, t);
        int changed = 0;
        for (const auto& c : g.at("cases")) {
            const auto text = c.at("text").get<std::string>();
            const auto want = c.at(form).get<std::string>();
            changed += want != text;
            EXPECT_EQ(tok.encode(text), bytes_of(want)) << form << " of " << c.at("text").dump();
            // A normalization form is a fixed point of its normalizer.
            EXPECT_EQ(tok.encode(want), bytes_of(want)) << form << " of " << c.at(form).dump();
            EXPECT_EQ(tok.decode(tok.encode(text)), want) << form;
        }
        EXPECT_GE(changed, 10) << form << ": the golden strings hardly exercise it";
    }
}

TEST(Tokenizer, NormalizedAddedTokenUsesUnicodeForm) {
    // A normalized added token is matched in normalised text by its normalised
    // content: "\uFB01sh" (fi ligature) under NFKC is "fish", and so matches both spellings.
    TempDir d;
    json t = byte_level_tokenizer({});
    t["normalizer"] = {{"type", "NFKC"}};
    t["added_tokens"].push_back({{"id", 300},
                                 {"content", "\uFB01sh"},
                                 {"single_word", false},
                                 {"lstrip", false},
                                 {"rstrip", false},
                                 {"normalized", true},
                                 {"special", false}});
    const Tokenizer tok = load_json(d, t);
    EXPECT_EQ(tok.encode("fish"), (std::vector<int32_t>{300}));
    EXPECT_EQ(tok.encode("\uFB01sh"), (std::vector<int32_t>{300}));
    EXPECT_EQ(tok.encode("\uFF46ish"), (std::vector<int32_t>{300}));  // full-width f
    EXPECT_EQ(tok.decode({300}), "fish");
}

TEST(Tokenizer, SplitPreTokenizerSequence) {
    // Qwen2 / Llama-3 style: Split(regex, Isolated) then ByteLevel without regex.
    TempDir d;
    json t = byte_level_tokenizer({{"1", "2"}, {"12", "3"}, {"4", "5"}, {"3", "4"}});
    t["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern",
            {{"Regex",
              R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
    const Tokenizer tok = load_json(d, t);
    // "12345" -> "123" | "45": no merge across the pieces ("3 4" exists).
    EXPECT_EQ(tok.encode("12345"), (std::vector<int32_t>{257, 258}));
    EXPECT_EQ(tok.decode(tok.encode("12345 héllo\n\n wörld")), "12345 héllo\n\n wörld");
    // Without the split the whole run of digits is one word: 123 | 45.
    t["pre_tokenizer"] = nullptr;
    const Tokenizer whole = load_json(d, t);
    EXPECT_EQ(whole.encode("12345"), (std::vector<int32_t>{257, 258}));
    EXPECT_EQ(whole.encode("2345"), (std::vector<int32_t>{'2', '3', 258}));
}

TEST(Tokenizer, MergeRankOrder) {
    // Lowest rank first; among equal ranks the leftmost pair.
    TempDir d;
    const Tokenizer tok = load_json(d, byte_level_tokenizer({{"b", "c"}, {"a", "b"}, {"a", "a"}}));
    EXPECT_EQ(tok.encode("abc"), (std::vector<int32_t>{'a', 256}));
    EXPECT_EQ(tok.encode("aaa"), (std::vector<int32_t>{258, 'a'}));
    EXPECT_EQ(tok.encode("aaaa"), (std::vector<int32_t>{258, 258}));
    EXPECT_EQ(tok.encode(" abc"), (std::vector<int32_t>{' ', 'a', 256}));
}

TEST(Tokenizer, AddedTokenStripAndSingleWord) {
    // tokenizers' test_lstrip_unicode_space, without the Lowercase normalizer.
    TempDir d;
    json t = byte_level_tokenizer({});
    t["model"]["vocab"]["<mask>"] = 300;
    t["added_tokens"] = json::array();
    t["added_tokens"].push_back({{"id", 300},
                                 {"content", "<mask>"},
                                 {"single_word", true},
                                 {"lstrip", true},
                                 {"rstrip", true},
                                 {"normalized", false},
                                 {"special", true}});
    const Tokenizer tok = load_json(d, t);
    std::vector<int32_t> want = bytes_of("Hi");
    want.push_back(300);
    for (int32_t b : bytes_of("there")) want.push_back(b);
    want.push_back(300);
    want.push_back(300);
    EXPECT_EQ(tok.encode("Hi <mask> there\t<mask>\t<mask>\u2000"), want);
    // single_word: not inside a word.
    EXPECT_EQ(tok.encode("a<mask>"), bytes_of("a<mask>"));
    EXPECT_EQ(tok.encode("<mask>b"), bytes_of("<mask>b"));
    EXPECT_EQ(tok.encode("-<mask>"), (std::vector<int32_t>{'-', 300}));
}

TEST(Tokenizer, LongestAddedTokenWins) {
    TempDir d;
    json t = byte_level_tokenizer({});
    t["added_tokens"] = json::array();
    const char* names[] = {"<|a|>", "<|a|><|b|>", "<|b|>"};
    for (int k = 0; k < 3; ++k) {
        t["added_tokens"].push_back({{"id", 300 + k},
                                     {"content", names[k]},
                                     {"single_word", false},
                                     {"lstrip", false},
                                     {"rstrip", false},
                                     {"normalized", false},
                                     {"special", k != 1}});
    }
    const Tokenizer tok = load_json(d, t);
    EXPECT_EQ(tok.encode("x<|a|><|b|><|b|>"), (std::vector<int32_t>{'x', 301, 302}));
    EXPECT_EQ(tok.vocab_size(), 303);
    EXPECT_EQ(tok.bos_id(), -1);
    EXPECT_EQ(tok.eos_id(), -1);
    EXPECT_EQ(tok.decode({'x', 300, 301}, true), "x<|a|><|b|>");  // 301 is not special
}

TEST(Tokenizer, SentencePieceStyle) {
    // Metaspace pre-tokenizer + decoder, byte fallback, unk, template post-processor,
    // config tokens as AddedToken objects.
    TempDir d;
    json vocab = {{"<unk>", 0}, {"<s>", 1},     {"</s>", 2}, {"\u2581", 3},  {"a", 4},
                  {"b", 5},     {"\u2581a", 6}, {"ab", 7},   {"\u2581ab", 8}};
    for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", b);
        if (b != 0xFF) vocab[name] = 9 + b;
    }
    json t;
    t["added_tokens"] = json::array();
    for (int k = 0; k < 3; ++k) {
        const char* n[] = {"<unk>", "<s>", "</s>"};
        t["added_tokens"].push_back({{"id", k},
                                     {"content", n[k]},
                                     {"single_word", false},
                                     {"lstrip", false},
                                     {"rstrip", false},
                                     {"normalized", false},
                                     {"special", true}});
    }
    t["normalizer"] = nullptr;
    t["pre_tokenizer"] = {{"type", "Metaspace"},
                          {"replacement", "\u2581"},
                          {"prepend_scheme", "first"},
                          {"split", false}};
    t["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single",
                            {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                             {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                             {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
                           {"pair", json::array()},
                           {"special_tokens",
                            {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}},
                             {"</s>", {{"id", "</s>"}, {"ids", {2}}, {"tokens", {"</s>"}}}}}}};
    t["decoder"] = {
        {"type", "Sequence"},
        {"decoders",
         {{{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}}}}};
    t["model"] = {{"type", "BPE"},
                  {"vocab", vocab},
                  {"merges", json::array({json::array({"a", "b"}), json::array({"\u2581", "a"}),
                                          json::array({"\u2581", "ab"})})},
                  {"unk_token", "<unk>"},
                  {"fuse_unk", true},
                  {"byte_fallback", true}};
    d.write("tokenizer_config.json",
            R"({"bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": null})");
    const Tokenizer tok = load_json(d, t);
    EXPECT_EQ(tok.bos_id(), 1);
    EXPECT_EQ(tok.eos_id(), -1);  // explicitly none in the config
    // "ab ab": ▁ab ▁ab; "\n" by byte fallback.
    EXPECT_EQ(tok.encode("ab ab"), (std::vector<int32_t>{8, 8}));
    EXPECT_EQ(tok.encode("ab ab", true), (std::vector<int32_t>{1, 8, 8, 2}));
    EXPECT_EQ(tok.encode("a\nb"), (std::vector<int32_t>{6, 9 + 10, 5}));
    EXPECT_EQ(tok.decode({6, 9 + 10, 5}), "a\nb");
    // "ÿ" (U+00FF = C3 BF) falls back to bytes; "日" too.
    EXPECT_EQ(tok.decode(tok.encode("a\u00ff\u65e5")), "a\u00ff\u65e5");
    // Invalid byte sequences decode to one U+FFFD per byte.
    EXPECT_EQ(tok.decode({4, 9 + 0xE6, 9 + 0x97}), "a\uFFFD\uFFFD");
    // prepend_scheme "first": no ▁ added after an added token.
    EXPECT_EQ(tok.encode("<s>ab"), (std::vector<int32_t>{1, 7}));
    EXPECT_EQ(tok.decode({1, 8}), "<s> ab");
    EXPECT_EQ(tok.decode_token(8, -1), "ab");
    EXPECT_EQ(tok.decode_token(8, 4), " ab");
}

TEST(Tokenizer, UnknownCharactersFuseIntoOneUnk) {
    TempDir d;
    json t;
    t["added_tokens"] = json::array();
    t["model"] = {{"type", "BPE"},
                  {"vocab", {{"<unk>", 0}, {"a", 1}}},
                  {"merges", json::array()},
                  {"unk_token", "<unk>"},
                  {"fuse_unk", true}};
    Tokenizer fused = load_json(d, t);
    EXPECT_EQ(fused.encode("xyaz"), (std::vector<int32_t>{0, 1, 0}));
    t["model"]["fuse_unk"] = false;
    Tokenizer separate = load_json(d, t);
    EXPECT_EQ(separate.encode("xyaz"), (std::vector<int32_t>{0, 0, 1, 0}));
    EXPECT_EQ(separate.decode({1, 0, 1}), "a <unk> a");  // no decoder: joined by spaces
}

}  // namespace
