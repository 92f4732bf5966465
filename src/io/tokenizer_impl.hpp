// Internals of io::Tokenizer, shared by tokenizer*.cpp: UTF-8 helpers, the
// GPT-2 byte<->unicode map, a PCRE2 regex wrapper, and the pipeline stages of
// the Hugging Face `tokenizers` library (normalizers, pre-tokenizers, the BPE
// model, post-processor, decoders). Each stage mirrors the library's semantics
// for the options it supports; unsupported configurations fail at load time.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "io/tokenizer.hpp"

struct pcre2_real_code_8;

namespace cortiq::io::tok {

// ---- UTF-8 ---------------------------------------------------------------

// Length of the well-formed UTF-8 sequence at s[i], or 0 if s[i..] starts
// with an ill-formed (or truncated) sequence.
size_t utf8_valid_len(std::string_view s, size_t i);
bool utf8_is_valid(std::string_view s);
// Like Rust's String::from_utf8_lossy: one U+FFFD per maximal ill-formed
// subpart.
std::string utf8_lossy(std::string_view s);
// Decodes the (valid) code point at s[i] and advances i.
char32_t utf8_next(std::string_view s, size_t& i);
void utf8_append(std::string& out, char32_t cp);
// Unicode White_Space (Rust's char::is_whitespace).
bool is_unicode_space(char32_t cp);
// A word character as Rust regex's Unicode \w sees it.
bool is_word_char(char32_t cp);

// ---- GPT-2 byte-level map --------------------------------------------------

// UTF-8 encoding of the code point that byte b maps to.
const std::array<std::string, 256>& byte_to_unicode();
// The byte a code point stands for, or -1 if it is not in the map.
int unicode_to_byte(char32_t cp);

// ---- Regex (PCRE2, UTF + UCP, JIT) ------------------------------------------
// Patterns are Oniguruma's (as tokenizers uses); \s and \S are rewritten to
// Unicode White_Space, since PCRE2's \s also takes U+180E.

class Regex {
  public:
    Regex() = default;
    // literal: match the pattern text as a plain string.
    Regex(const std::string& pattern, bool literal);
    ~Regex();
    Regex(Regex&& o) noexcept;
    Regex& operator=(Regex&& o) noexcept;
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;

    bool empty() const { return code_ == nullptr; }
    // Every match of a left-to-right scan over valid UTF-8 `s`, with the
    // Oniguruma iterator's rule for empty matches; appended to out.
    void find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const;

  private:
    pcre2_real_code_8* code_ = nullptr;
};

// ---- Pipeline pieces ------------------------------------------------------

// A piece of text during pre-tokenisation. at_start: begins at offset 0 of the
// original input (Metaspace's prepend_scheme "first" needs it).
struct Piece {
    std::string text;
    bool at_start = false;
};

// tokenizers' SplitDelimiterBehavior.
enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

// Splits `in` by the pattern's matches (invert: by the gaps) with the given
// behaviour; empty pieces are dropped. Appends to out.
void split_piece(const Piece& in, const Regex& re, SplitBehavior behavior, bool invert,
                 std::vector<Piece>& out);

// The Unicode normalization forms (UAX #15) of the NFC / NFD / NFKC / NFKD
// normalizers (tokenizer_unicode.cpp, through ICU).
enum class UnicodeForm { nfc, nfd, nfkc, nfkd };
const char* unicode_form_name(UnicodeForm form);
// Fails when ICU cannot provide the form (its data missing), so that a
// tokenizer.json needing it is refused at load time.
void unicode_form_check(UnicodeForm form);
// s (valid UTF-8) in the given form.
std::string unicode_normalize(std::string s, UnicodeForm form);

struct NormalizerStep {
    enum class Kind { prepend, replace, strip, unicode };
    Kind kind = Kind::unicode;
    std::string text;                     // prepend: the prefix; replace: the content
    Regex pattern;                        // replace
    bool left = false;                    // strip
    bool right = false;                   // strip
    UnicodeForm form = UnicodeForm::nfc;  // unicode
};

struct Normalizer {
    std::vector<NormalizerStep> steps;
    bool empty() const { return steps.empty(); }
    std::string apply(std::string s) const;
};

struct PreTokenizerStep {
    enum class Kind { byte_level, split, metaspace };
    Kind kind = Kind::byte_level;
    bool add_prefix_space = false;                     // byte_level
    bool use_regex = true;                             // byte_level
    Regex pattern;                                     // split; byte_level with use_regex
    SplitBehavior behavior = SplitBehavior::isolated;  // split
    bool invert = false;                               // split
    std::string replacement;                           // metaspace (UTF-8 of one char)
    enum class Prepend { always, first, never } prepend = Prepend::always;  // metaspace
    bool split = true;                                                      // metaspace
};

struct PreTokenizer {
    std::vector<PreTokenizerStep> steps;
    void apply(std::vector<Piece>& pieces) const;
};

struct DecoderStep {
    enum class Kind { byte_level, replace, byte_fallback, fuse, strip, metaspace };
    Kind kind = Kind::fuse;
    Regex pattern;        // replace
    std::string content;  // replace: replacement; strip: the char; metaspace: replacement
    size_t start = 0;     // strip
    size_t stop = 0;      // strip
    bool prepend = true;  // metaspace: prepend_scheme != never
};

struct Decoder {
    bool present = false;
    std::vector<DecoderStep> steps;
    // Decodes token strings to text. raw: keep bytes as they are (byte-level
    // and byte-fallback pieces are not validated, so an incomplete UTF-8
    // sequence can come out); first: tokens[0] starts the decoded text (the
    // leading-space strip of Strip / Metaspace applies only then).
    std::string decode(std::vector<std::string> tokens, bool raw, bool first) const;
};

// Heterogeneous string lookup for unordered_map<std::string, ...>.
struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept {
        return std::hash<std::string_view>{}(s);
    }
};
template <class V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;
using WordCache = StringMap<std::vector<int32_t>>;

// The BPE model of tokenizers (models/bpe), without dropout.
class BpeModel {
  public:
    // j: the "model" object of tokenizer.json; where: the file, for messages.
    static BpeModel from_json(const nlohmann::json& j, const std::string& where);

    // Appends the ids of one pre-tokenised word. cache may be null.
    void tokenize(std::string_view word, std::vector<int32_t>& out, WordCache* cache) const;
    int32_t token_to_id(std::string_view token) const;  // -1 if absent
    const std::string* id_to_token(int32_t id) const;   // null if absent
    int32_t size() const { return static_cast<int32_t>(id_to_token_.size()); }

  private:
    struct MergeTarget {
        int32_t rank;
        int32_t new_id;
    };
    static uint64_t pair_key(int32_t a, int32_t b) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    }
    const MergeTarget* find_merge(int32_t a, int32_t b) const;
    void merge_word(std::string_view word, std::vector<int32_t>& out) const;

    StringMap<int32_t> vocab_;
    std::vector<std::string> id_to_token_;
    std::unordered_map<uint64_t, MergeTarget> merges_;
    std::array<int32_t, 256> byte_ids_{};  // <0xXX> tokens, -1 if absent
    std::string unk_token_;
    bool has_unk_ = false;
    bool fuse_unk_ = false;
    bool byte_fallback_ = false;
    bool ignore_merges_ = false;
    std::string prefix_;  // continuing_subword_prefix
    std::string suffix_;  // end_of_word_suffix
};

struct AddedToken {
    int32_t id = -1;
    std::string content;
    // What decode passes to the decoder: the normalised content for a
    // normalized token (as tokenizers' simple_id_to_token), else the content.
    std::string decode_text;
    bool single_word = false;
    bool lstrip = false;
    bool rstrip = false;
    bool normalized = false;
    bool special = false;
};

// One split of the input: plain text (id < 0) or an added token.
struct Segment {
    std::string text;
    int32_t id = -1;
    bool at_start = false;
};

// Finds added tokens the way tokenizers' AddedVocabulary does: leftmost-
// longest matches, then the single_word / lstrip / rstrip rules.
class AddedMatcher {
  public:
    void build(const std::vector<const AddedToken*>& tokens, std::vector<std::string> patterns);
    bool empty() const { return patterns_.empty(); }
    // Splits seg (a plain segment) into plain and token segments; appends.
    void split(Segment seg, std::vector<Segment>& out) const;

  private:
    std::vector<const AddedToken*> tokens_;
    std::vector<std::string> patterns_;
    std::array<std::vector<int32_t>, 256> by_first_byte_;  // pattern indices, longest first
};

// The post-processor's single-sequence template: ids before and after the text.
struct PostProcessor {
    std::vector<int32_t> prefix;
    std::vector<int32_t> suffix;
};

}  // namespace cortiq::io::tok

namespace cortiq::io {

struct Tokenizer::Impl {
    std::string path;  // tokenizer.json
    tok::BpeModel model;
    std::vector<tok::AddedToken> added;
    std::unordered_map<int32_t, size_t> added_by_id;  // id -> index into added
    tok::AddedMatcher raw_matcher;                    // tokens with normalized = false
    tok::AddedMatcher norm_matcher;                   // tokens with normalized = true
    tok::Normalizer normalizer;
    tok::PreTokenizer pre_tokenizer;
    tok::PostProcessor post;
    tok::Decoder decoder;
    int32_t vocab_size = 0;
    int32_t bos = -1;
    int32_t eos = -1;

    const tok::AddedToken* added_token(int32_t id) const;
    // Token string of an id (added tokens first), null if unknown.
    const std::string* token_string(int32_t id) const;
    void encode_text(std::string_view text, std::vector<int32_t>& out) const;
};

namespace tok {
// Reads MODEL_DIR/tokenizer.json (MODEL_DIR may also be that file) and
// tokenizer_config.json beside it when present.
std::unique_ptr<Tokenizer::Impl> load_impl(const std::string& model_dir);
}  // namespace tok

}  // namespace cortiq::io
