// Decoders of the Hugging Face tokenizers library: each step maps the list of
// token strings to a new list (decode_chain), and the result is concatenated.
#include "io/tokenizer_impl.hpp"

namespace cortiq::io::tok {

namespace {

using Tokens = std::vector<std::string>;

std::string join(const Tokens& tokens, std::string_view sep) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
        if (i > 0) out.append(sep);
        out.append(tokens[i]);
    }
    return out;
}

// ByteLevel: map every char back to its byte (a token with a char outside the
// map is taken as it is), then decode the bytes lossily unless raw.
Tokens byte_level(const Tokens& tokens, bool raw) {
    std::string bytes;
    for (const auto& t : tokens) {
        const size_t mark = bytes.size();
        bool ok = true;
        size_t i = 0;
        while (i < t.size()) {
            const int b = unicode_to_byte(utf8_next(t, i));
            if (b < 0) {
                ok = false;
                break;
            }
            bytes.push_back(static_cast<char>(b));
        }
        if (!ok) {
            bytes.resize(mark);
            bytes.append(t);
        }
    }
    return {raw ? std::move(bytes) : utf8_lossy(bytes)};
}

int byte_token(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    auto hex = [](char c) {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
    };
    const int hi = hex(t[3]), lo = hex(t[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// ByteFallback: runs of <0xXX> tokens become their bytes when those form valid
// UTF-8, else one U+FFFD per byte (raw: the bytes as they are).
Tokens byte_fallback(Tokens tokens, bool raw) {
    Tokens out;
    out.reserve(tokens.size());
    std::string pending;
    size_t count = 0;
    auto flush = [&] {
        if (count == 0) return;
        if (raw || utf8_is_valid(pending)) {
            out.push_back(pending);
        } else {
            for (size_t k = 0; k < count; ++k) out.emplace_back("\xEF\xBF\xBD");
        }
        pending.clear();
        count = 0;
    };
    for (auto& t : tokens) {
        const int b = byte_token(t);
        if (b >= 0) {
            pending.push_back(static_cast<char>(b));
            ++count;
        } else {
            flush();
            out.push_back(std::move(t));
        }
    }
    flush();
    return out;
}

// Strip: removes up to `start` leading and `stop` trailing copies of a char.
void strip(Tokens& tokens, char32_t c, size_t start, size_t stop) {
    for (auto& t : tokens) {
        std::vector<std::pair<size_t, char32_t>> chars;  // (byte offset, code point)
        size_t i = 0;
        while (i < t.size()) {
            const size_t at = i;
            chars.emplace_back(at, utf8_next(t, i));
        }
        size_t cut_start = 0;
        for (size_t k = 0; k < start && k < chars.size() && chars[k].second == c; ++k) {
            cut_start = k + 1;
        }
        size_t cut_stop = chars.size();
        for (size_t k = 0; k < stop && k < chars.size(); ++k) {
            const size_t idx = chars.size() - k - 1;
            if (chars[idx].second != c) break;
            cut_stop = idx;
        }
        if (cut_stop <= cut_start) {
            t.clear();
            continue;
        }
        const size_t b = cut_start < chars.size() ? chars[cut_start].first : t.size();
        const size_t e = cut_stop < chars.size() ? chars[cut_stop].first : t.size();
        t = t.substr(b, e - b);
    }
}

}  // namespace

std::string Decoder::decode(std::vector<std::string> tokens, bool raw, bool first) const {
    if (!present) {
        std::string s = join(tokens, " ");
        return first || s.empty() ? s : " " + s;
    }
    for (const auto& st : steps) {
        switch (st.kind) {
            case DecoderStep::Kind::byte_level:
                tokens = byte_level(tokens, raw);
                break;
            case DecoderStep::Kind::replace:
                for (auto& t : tokens) {
                    std::vector<std::pair<size_t, size_t>> m;
                    st.pattern.find_all(t, m);
                    if (m.empty()) continue;
                    std::string out;
                    size_t prev = 0;
                    for (auto [ms, me] : m) {
                        out.append(t, prev, ms - prev);
                        out.append(st.content);
                        prev = me;
                    }
                    out.append(t, prev, std::string::npos);
                    t = std::move(out);
                }
                break;
            case DecoderStep::Kind::byte_fallback:
                tokens = byte_fallback(std::move(tokens), raw);
                break;
            case DecoderStep::Kind::fuse:
                tokens = {join(tokens, "")};
                break;
            case DecoderStep::Kind::strip: {
                size_t i = 0;
                const char32_t c = st.content.empty() ? U' ' : utf8_next(st.content, i);
                // A streamed piece is neither the start (unless first) nor the end.
                strip(tokens, c, first ? st.start : 0, raw ? 0 : st.stop);
                break;
            }
            case DecoderStep::Kind::metaspace: {
                size_t j = 0;
                const char32_t rep = st.content.empty() ? U'\u2581' : utf8_next(st.content, j);
                for (size_t k = 0; k < tokens.size(); ++k) {
                    const std::string& t = tokens[k];
                    const bool drop = k == 0 && first && st.prepend;
                    std::string out;
                    size_t i = 0;
                    while (i < t.size()) {
                        const size_t at = i;
                        const size_t n = utf8_valid_len(t, at);
                        if (n == 0) {  // raw byte from an earlier step
                            out.push_back(t[i++]);
                            continue;
                        }
                        const char32_t cp = utf8_next(t, i);
                        if (cp == rep) {
                            if (!drop) out.push_back(' ');
                        } else {
                            out.append(t, at, i - at);
                        }
                    }
                    tokens[k] = std::move(out);
                }
                break;
            }
        }
    }
    return join(tokens, "");
}

}  // namespace cortiq::io::tok
