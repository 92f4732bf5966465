// Text utilities of the tokenizer: UTF-8 validation and lossy decoding (Rust's
// rules), the GPT-2 byte<->unicode map, and the PCRE2 regex wrapper.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstring>

#include "core/error.hpp"
#include "io/tokenizer_impl.hpp"

namespace cortiq::io::tok {

namespace {

bool is_cont(unsigned char c) {
    return (c & 0xC0) == 0x80;
}

// Checks the sequence at s[i]; returns its length when well formed, else 0
// and sets bad to the length of the maximal ill-formed subpart.
size_t check_utf8(std::string_view s, size_t i, size_t& bad) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    bad = 1;
    if (b0 < 0x80) return 1;
    size_t width = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        width = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        width = 3;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        width = 4;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if (i + 1 >= s.size()) return 0;
    const auto b1 = static_cast<unsigned char>(s[i + 1]);
    if (b1 < lo || b1 > hi) return 0;
    for (size_t k = 2; k < width; ++k) {
        bad = k;
        if (i + k >= s.size() || !is_cont(static_cast<unsigned char>(s[i + k]))) return 0;
    }
    if (width == 2) bad = 1;
    return width;
}

}  // namespace

size_t utf8_valid_len(std::string_view s, size_t i) {
    size_t bad = 0;
    return check_utf8(s, i, bad);
}

bool utf8_is_valid(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        // ASCII fast path, 8 bytes at a time.
        while (i + 8 <= s.size()) {
            uint64_t w;
            std::memcpy(&w, s.data() + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= s.size()) break;
        const size_t n = utf8_valid_len(s, i);
        if (n == 0) return false;
        i += n;
    }
    return true;
}

std::string utf8_lossy(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
        size_t bad = 1;
        const size_t n = check_utf8(s, i, bad);
        if (n > 0) {
            out.append(s.substr(i, n));
            i += n;
        } else {
            out.append("\xEF\xBF\xBD");
            i += bad;
        }
    }
    return out;
}

char32_t utf8_next(std::string_view s, size_t& i) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    if (b0 < 0x80) {
        ++i;
        return b0;
    }
    size_t n = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
    if (i + n > s.size()) n = s.size() - i;
    char32_t cp = b0 & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    i += n;
    return cp;
}

void utf8_append(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

bool is_unicode_space(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

bool is_word_char(char32_t cp) {
    if (cp < 0x80) {
        return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
               cp == '_';
    }
    // Rust regex's \w: Alphabetic, marks, decimal digits, connector punctuation,
    // join controls.
    static const Regex word(R"([\p{L}\p{M}\p{Nd}\p{Nl}\p{Pc}\x{200C}\x{200D}])", false);
    std::string s;
    utf8_append(s, cp);
    std::vector<std::pair<size_t, size_t>> m;
    word.find_all(s, m);
    return !m.empty();
}

// ---- byte-level map --------------------------------------------------------

namespace {

struct ByteMap {
    std::array<std::string, 256> to_unicode;
    std::array<int16_t, 512> to_byte{};  // code point -> byte, -1 if none
    ByteMap() {
        to_byte.fill(-1);
        std::array<char32_t, 256> cp{};
        std::array<bool, 256> direct{};
        for (int b = 0; b < 256; ++b) {
            direct[b] = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        }
        int n = 0;
        for (int b = 0; b < 256; ++b) cp[b] = direct[b] ? char32_t(b) : char32_t(256 + n++);
        for (int b = 0; b < 256; ++b) {
            utf8_append(to_unicode[b], cp[b]);
            to_byte[cp[b]] = static_cast<int16_t>(b);
        }
    }
};

const ByteMap& byte_map() {
    static const ByteMap map;
    return map;
}

}  // namespace

const std::array<std::string, 256>& byte_to_unicode() {
    return byte_map().to_unicode;
}

int unicode_to_byte(char32_t cp) {
    return cp < 512 ? byte_map().to_byte[cp] : -1;
}

// ---- Regex -----------------------------------------------------------------

namespace {

// Unicode White_Space, as Oniguruma's \s (PCRE2's \s with UCP adds U+180E).
constexpr const char* kSpaceSet =
    R"(\t\n\x0B\f\r\x20\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// Rewrites \s and \S (outside and inside character classes) to White_Space.
std::string onig_compatible(const std::string& p) {
    std::string out;
    out.reserve(p.size() + 64);
    bool in_class = false;
    for (size_t i = 0; i < p.size(); ++i) {
        const char c = p[i];
        if (c == '\\' && i + 1 < p.size()) {
            const char n = p[++i];
            if (n == 's') {
                out += in_class ? std::string(kSpaceSet) : "[" + std::string(kSpaceSet) + "]";
            } else if (n == 'S' && !in_class) {
                out += "[^" + std::string(kSpaceSet) + "]";
            } else {
                out += c;
                out += n;
            }
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = true;
            out += c;
            // A ']' right after '[' or '[^' is a literal.
            if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
            if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
            continue;
        }
        if (c == ']' && in_class) in_class = false;
        out += c;
    }
    return out;
}

}  // namespace

Regex::Regex(const std::string& pattern, bool literal) {
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    const std::string compiled = literal ? pattern : onig_compatible(pattern);
    int err = 0;
    PCRE2_SIZE off = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(), opts,
                          &err, &off, nullptr);
    if (code_ == nullptr) {
        PCRE2_UCHAR buf[256];
        pcre2_get_error_message(err, buf, sizeof(buf));
        CORTIQ_FAIL("tokenizer: bad regex '{}' at offset {}: {}", pattern, off,
                    reinterpret_cast<const char*>(buf));
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // falls back to the interpreter on failure
}

Regex::~Regex() {
    if (code_ != nullptr) pcre2_code_free(code_);
}

Regex::Regex(Regex&& o) noexcept : code_(o.code_) {
    o.code_ = nullptr;
}

Regex& Regex::operator=(Regex&& o) noexcept {
    if (this != &o) {
        if (code_ != nullptr) pcre2_code_free(code_);
        code_ = o.code_;
        o.code_ = nullptr;
    }
    return *this;
}

namespace {

struct MatchData {
    pcre2_match_data* md;
    explicit MatchData(const pcre2_code* code)
        : md(pcre2_match_data_create_from_pattern(code, nullptr)) {
        CORTIQ_CHECK(md != nullptr, "tokenizer: out of memory for regex match data");
    }
    ~MatchData() { pcre2_match_data_free(md); }
    MatchData(const MatchData&) = delete;
    MatchData& operator=(const MatchData&) = delete;
};

// pcre2_match with a retry through the interpreter if the JIT runs out of stack.
bool match_at(const pcre2_code* code, std::string_view s, size_t start, pcre2_match_data* md,
              size_t& ms, size_t& me) {
    auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
    int rc = pcre2_match(code, subject, s.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        rc = pcre2_match(code, subject, s.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                         nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0) {
        PCRE2_UCHAR buf[256];
        pcre2_get_error_message(rc, buf, sizeof(buf));
        CORTIQ_FAIL("tokenizer: regex match failed: {}", reinterpret_cast<const char*>(buf));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    ms = ov[0];
    me = ov[1];
    return true;
}

}  // namespace

void Regex::find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
    if (code_ == nullptr || !utf8_is_valid(s)) return;  // only valid UTF-8 is searched
    MatchData data(code_);
    // Oniguruma's find_iter: an empty match right where the previous match
    // ended is skipped by advancing one character.
    size_t last_end = 0;
    bool have_last = false;
    size_t last_match_end = 0;
    while (last_end <= s.size()) {
        size_t ms = 0, me = 0;
        if (!match_at(code_, s, last_end, data.md, ms, me)) break;
        if (ms == me && have_last && last_match_end == me) {
            last_end += last_end < s.size() ? std::max<size_t>(1, utf8_valid_len(s, last_end)) : 1;
            continue;
        }
        last_end = me;
        have_last = true;
        last_match_end = me;
        out.emplace_back(ms, me);
    }
}

}  // namespace cortiq::io::tok
