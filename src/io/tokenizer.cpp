// io::Tokenizer: the encode / decode pipeline of the Hugging Face tokenizers
// library over the stages in tokenizer_impl.hpp.
#include "io/tokenizer.hpp"

#include "core/error.hpp"
#include "io/tokenizer_impl.hpp"

namespace cortiq::io {

using tok::Piece;
using tok::Segment;

const tok::AddedToken* Tokenizer::Impl::added_token(int32_t id) const {
    auto it = added_by_id.find(id);
    return it == added_by_id.end() ? nullptr : &added[it->second];
}

const std::string* Tokenizer::Impl::token_string(int32_t id) const {
    if (const tok::AddedToken* a = added_token(id)) return &a->decode_text;
    return model.id_to_token(id);
}

void Tokenizer::Impl::encode_text(std::string_view text, std::vector<int32_t>& out) const {
    // 1. Added tokens in the raw text; 2. normalise the rest and find the
    // normalised added tokens; 3. pre-tokenise; 4. BPE per word.
    std::vector<Segment> segs;
    Segment whole{std::string(text), -1, true};
    if (raw_matcher.empty()) {
        segs.push_back(std::move(whole));
    } else {
        raw_matcher.split(std::move(whole), segs);
    }
    tok::WordCache cache;
    std::vector<Segment> parts;
    std::vector<Piece> pieces;
    for (auto& seg : segs) {
        if (seg.id >= 0) {
            out.push_back(seg.id);
            continue;
        }
        if (!normalizer.empty()) seg.text = normalizer.apply(std::move(seg.text));
        parts.clear();
        if (norm_matcher.empty()) {
            parts.push_back(std::move(seg));
        } else {
            norm_matcher.split(std::move(seg), parts);
        }
        for (auto& part : parts) {
            if (part.id >= 0) {
                out.push_back(part.id);
                continue;
            }
            if (part.text.empty()) continue;
            pieces.clear();
            pieces.push_back({std::move(part.text), part.at_start});
            pre_tokenizer.apply(pieces);
            for (const auto& p : pieces) model.tokenize(p.text, out, &cache);
        }
    }
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Tokenizer Tokenizer::load(const std::string& model_dir) {
    return Tokenizer(tok::load_impl(model_dir));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 8);
    if (add_special) ids = impl_->post.prefix;
    // Invalid UTF-8 cannot come from a Python str; take it as from_utf8_lossy would.
    if (tok::utf8_is_valid(text)) {
        impl_->encode_text(text, ids);
    } else {
        impl_->encode_text(tok::utf8_lossy(text), ids);
    }
    if (add_special) ids.insert(ids.end(), impl_->post.suffix.begin(), impl_->post.suffix.end());
    return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
        const std::string* s = impl_->token_string(id);
        if (s == nullptr) continue;  // unknown ids are dropped, as tokenizers does
        if (skip_special) {
            // tokenizers looks the decode text up among the special contents,
            // so a special token whose normalised form differs is kept.
            const tok::AddedToken* a = impl_->added_token(id);
            if (a != nullptr && a->special && a->decode_text == a->content) continue;
        }
        tokens.push_back(*s);
    }
    return impl_->decoder.decode(std::move(tokens), /*raw=*/false, /*first=*/true);
}

std::string Tokenizer::decode_token(int32_t id, int32_t prev_id) const {
    const std::string* s = impl_->token_string(id);
    if (s == nullptr) return {};
    if (const tok::AddedToken* a = impl_->added_token(id); a != nullptr && *s == a->content) {
        return *s;
    }
    const bool first = prev_id < 0 || is_special(prev_id);
    return impl_->decoder.decode({*s}, /*raw=*/true, first);
}

int32_t Tokenizer::token_to_id(std::string_view token) const {
    for (const auto& a : impl_->added) {
        if (a.content == token) return a.id;
    }
    return impl_->model.token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
    if (const tok::AddedToken* a = impl_->added_token(id)) return a->content;
    const std::string* s = impl_->model.id_to_token(id);
    return s == nullptr ? std::string() : *s;
}

bool Tokenizer::is_special(int32_t id) const {
    const tok::AddedToken* a = impl_->added_token(id);
    return a != nullptr && a->special;
}

int32_t Tokenizer::vocab_size() const {
    return impl_->vocab_size;
}
int32_t Tokenizer::bos_id() const {
    return impl_->bos;
}
int32_t Tokenizer::eos_id() const {
    return impl_->eos;
}

}  // namespace cortiq::io
