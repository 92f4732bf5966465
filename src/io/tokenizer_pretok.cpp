// Splitting the input before the model: added tokens (AddedVocabulary),
// normalizers, and pre-tokenizers (ByteLevel, Split, Metaspace), each with the
// semantics of the Hugging Face tokenizers library.
#include <algorithm>

#include "core/error.hpp"
#include "io/tokenizer_impl.hpp"

namespace cortiq::io::tok {

// ---- split by pattern ---------------------------------------------------------

void split_piece(const Piece& in, const Regex& re, SplitBehavior behavior, bool invert,
                 std::vector<Piece>& out) {
    const std::string& s = in.text;
    // (start, end, is_match) covering the whole text, as tokenizers' Pattern::find_matches.
    struct Span {
        size_t start, end;
        bool match;
    };
    std::vector<Span> spans;
    {
        std::vector<std::pair<size_t, size_t>> m;
        re.find_all(s, m);
        size_t prev = 0;
        for (auto [ms, me] : m) {
            if (prev != ms) spans.push_back({prev, ms, false});
            spans.push_back({ms, me, true});
            prev = me;
        }
        if (prev != s.size()) spans.push_back({prev, s.size(), false});
    }
    if (invert) {
        for (auto& sp : spans) sp.match = !sp.match;
    }
    // (start, end, remove)
    std::vector<Span> parts;
    parts.reserve(spans.size());
    switch (behavior) {
        case SplitBehavior::removed:
            parts = spans;
            break;
        case SplitBehavior::isolated:
            for (const auto& sp : spans) parts.push_back({sp.start, sp.end, false});
            break;
        case SplitBehavior::contiguous: {
            bool prev_match = false;
            for (const auto& sp : spans) {
                if (sp.match == prev_match && !parts.empty()) {
                    parts.back().end = sp.end;
                } else {
                    parts.push_back({sp.start, sp.end, false});
                }
                prev_match = sp.match;
            }
            break;
        }
        case SplitBehavior::merged_with_previous: {
            bool prev_match = false;
            for (const auto& sp : spans) {
                if (sp.match && !prev_match && !parts.empty()) {
                    parts.back().end = sp.end;
                } else {
                    parts.push_back({sp.start, sp.end, false});
                }
                prev_match = sp.match;
            }
            break;
        }
        case SplitBehavior::merged_with_next: {
            bool prev_match = false;
            for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
                if (it->match && !prev_match && !parts.empty()) {
                    parts.back().start = it->start;
                } else {
                    parts.push_back({it->start, it->end, false});
                }
                prev_match = it->match;
            }
            std::reverse(parts.begin(), parts.end());
            break;
        }
    }
    for (const auto& p : parts) {
        if (p.match || p.end == p.start) continue;  // removed, or empty
        out.push_back({s.substr(p.start, p.end - p.start), in.at_start && p.start == 0});
    }
}

// ---- normalizer -----------------------------------------------------------------

namespace {

std::string replace_all(const std::string& s, const Regex& re, const std::string& content) {
    std::vector<std::pair<size_t, size_t>> m;
    re.find_all(s, m);
    if (m.empty()) return s;
    std::string out;
    out.reserve(s.size() + m.size() * content.size());
    size_t prev = 0;
    for (auto [ms, me] : m) {
        out.append(s, prev, ms - prev);
        out.append(content);
        prev = me;
    }
    out.append(s, prev, std::string::npos);
    return out;
}

}  // namespace

std::string Normalizer::apply(std::string s) const {
    for (const auto& st : steps) {
        switch (st.kind) {
            case NormalizerStep::Kind::prepend:
                if (!s.empty()) s.insert(0, st.text);
                break;
            case NormalizerStep::Kind::replace:
                s = replace_all(s, st.pattern, st.text);
                break;
            case NormalizerStep::Kind::strip: {
                size_t b = 0, e = s.size();
                if (st.left) {
                    while (b < e) {
                        size_t j = b;
                        if (!is_unicode_space(utf8_next(s, j))) break;
                        b = j;
                    }
                }
                if (st.right) {
                    while (e > b) {
                        size_t j = e - 1;
                        while (j > b && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) --j;
                        size_t k = j;
                        if (!is_unicode_space(utf8_next(s, k))) break;
                        e = j;
                    }
                }
                s = s.substr(b, e - b);
                break;
            }
            case NormalizerStep::Kind::unicode:
                s = unicode_normalize(std::move(s), st.form);
                break;
        }
    }
    return s;
}

// ---- pre-tokenizer ----------------------------------------------------------------

void PreTokenizer::apply(std::vector<Piece>& pieces) const {
    std::vector<Piece> next;
    for (const auto& st : steps) {
        next.clear();
        next.reserve(pieces.size());
        for (auto& p : pieces) {
            switch (st.kind) {
                case PreTokenizerStep::Kind::byte_level: {
                    if (st.add_prefix_space && (p.text.empty() || p.text[0] != ' ')) {
                        p.text = " " + p.text;
                    }
                    const size_t first = next.size();
                    if (st.use_regex) {
                        split_piece(p, st.pattern, SplitBehavior::isolated, false, next);
                    } else if (!p.text.empty()) {
                        next.push_back(std::move(p));
                    }
                    const auto& map = byte_to_unicode();
                    for (size_t k = first; k < next.size(); ++k) {
                        std::string mapped;
                        mapped.reserve(next[k].text.size() * 2);
                        for (char c : next[k].text) mapped += map[static_cast<unsigned char>(c)];
                        next[k].text = std::move(mapped);
                    }
                    break;
                }
                case PreTokenizerStep::Kind::split:
                    split_piece(p, st.pattern, st.behavior, st.invert, next);
                    break;
                case PreTokenizerStep::Kind::metaspace: {
                    std::string t;
                    t.reserve(p.text.size() + 8);
                    for (char c : p.text) {
                        if (c == ' ') {
                            t += st.replacement;
                        } else {
                            t.push_back(c);
                        }
                    }
                    const bool starts = t.compare(0, st.replacement.size(), st.replacement) == 0;
                    if (!starts &&
                        (st.prepend == PreTokenizerStep::Prepend::always ||
                         (st.prepend == PreTokenizerStep::Prepend::first && p.at_start))) {
                        t.insert(0, st.replacement);
                    }
                    Piece q{std::move(t), p.at_start};
                    if (st.split) {
                        split_piece(q, st.pattern, SplitBehavior::merged_with_next, false, next);
                    } else if (!q.text.empty()) {
                        next.push_back(std::move(q));
                    }
                    break;
                }
            }
        }
        pieces.swap(next);
    }
}

// ---- added tokens ----------------------------------------------------------------

void AddedMatcher::build(const std::vector<const AddedToken*>& tokens,
                         std::vector<std::string> patterns) {
    tokens_ = tokens;
    patterns_ = std::move(patterns);
    for (auto& v : by_first_byte_) v.clear();
    for (size_t k = 0; k < patterns_.size(); ++k) {
        if (patterns_[k].empty()) continue;
        by_first_byte_[static_cast<unsigned char>(patterns_[k][0])].push_back(
            static_cast<int32_t>(k));
    }
    // Longest first; among equal lengths the earlier pattern wins.
    for (auto& v : by_first_byte_) {
        std::stable_sort(v.begin(), v.end(), [&](int32_t a, int32_t b) {
            return patterns_[a].size() > patterns_[b].size();
        });
    }
}

namespace {

// Start of the run of white space that ends s[..end].
size_t space_run_before(std::string_view s, size_t end) {
    size_t b = end;
    while (b > 0) {
        size_t j = b - 1;
        while (j > 0 && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) --j;
        size_t k = j;
        if (!is_unicode_space(utf8_next(s, k))) break;
        b = j;
    }
    return b;
}

// End of the run of white space that starts at s[begin].
size_t space_run_after(std::string_view s, size_t begin) {
    size_t e = begin;
    while (e < s.size()) {
        size_t j = e;
        if (!is_unicode_space(utf8_next(s, j))) break;
        e = j;
    }
    return e;
}

bool word_before(std::string_view s, size_t end) {
    if (end == 0) return false;
    size_t j = end - 1;
    while (j > 0 && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) --j;
    return is_word_char(utf8_next(s, j));
}

bool word_after(std::string_view s, size_t begin) {
    if (begin >= s.size()) return false;
    return is_word_char(utf8_next(s, begin));
}

}  // namespace

void AddedMatcher::split(Segment seg, std::vector<Segment>& out) const {
    const std::string& s = seg.text;
    const size_t n = s.size();
    size_t start_offset = 0;
    size_t pos = 0;
    while (pos < n) {
        // Leftmost-longest match at or after pos.
        size_t mstart = n;
        int32_t k = -1;
        for (size_t p = pos; p < n && k < 0; ++p) {
            for (int32_t cand : by_first_byte_[static_cast<unsigned char>(s[p])]) {
                const std::string& pat = patterns_[cand];
                if (s.compare(p, pat.size(), pat) == 0) {
                    k = cand;
                    mstart = p;
                    break;
                }
            }
        }
        if (k < 0) break;
        size_t mend = mstart + patterns_[k].size();
        pos = mend;  // the scan resumes after the match, accepted or not
        const AddedToken& t = *tokens_[k];
        if (t.single_word && (word_before(s, mstart) || word_after(s, mend))) continue;
        if (t.lstrip) mstart = std::max(space_run_before(s, mstart), start_offset);
        if (t.rstrip) mend = space_run_after(s, mend);
        if (mstart < start_offset) continue;  // overlaps the previous token's strip
        if (start_offset < mstart) {
            out.push_back({s.substr(start_offset, mstart - start_offset), -1,
                           seg.at_start && start_offset == 0});
        }
        out.push_back({s.substr(mstart, mend - mstart), t.id, seg.at_start && mstart == 0});
        start_offset = mend;
        pos = std::max(pos, mend);
    }
    if (start_offset == 0) {
        out.push_back(std::move(seg));
    } else if (start_offset < n) {
        out.push_back({s.substr(start_offset), -1, false});
    }
}

}  // namespace cortiq::io::tok
