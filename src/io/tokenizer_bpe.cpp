// The BPE model of the Hugging Face tokenizers library (models/bpe): vocab,
// merges by rank through a priority queue, byte fallback, unk fusing,
// continuing-subword prefix / end-of-word suffix, ignore_merges.
#include <nlohmann/json.hpp>
#include <queue>

#include "core/error.hpp"
#include "io/tokenizer_impl.hpp"

namespace cortiq::io::tok {

namespace {

std::string opt_string(const nlohmann::json& j, const char* key) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return {};
    return it->get<std::string>();
}

bool opt_bool(const nlohmann::json& j, const char* key) {
    auto it = j.find(key);
    return it != j.end() && !it->is_null() && it->get<bool>();
}

}  // namespace

BpeModel BpeModel::from_json(const nlohmann::json& j, const std::string& where) {
    BpeModel m;
    if (auto t = j.find("type"); t != j.end() && !t->is_null()) {
        CORTIQ_CHECK(t->get<std::string>() == "BPE",
                     "tokenizer: {}: unsupported model type '{}' (only BPE)", where,
                     t->get<std::string>());
    }
    auto vocab = j.find("vocab");
    CORTIQ_CHECK(vocab != j.end() && vocab->is_object(), "tokenizer: {}: model has no vocab",
                 where);
    int32_t max_id = -1;
    m.vocab_.reserve(vocab->size());
    for (auto it = vocab->begin(); it != vocab->end(); ++it) {
        CORTIQ_CHECK(it.value().is_number_integer(),
                     "tokenizer: {}: id {} of '{}' is not an integer", where, it.value().dump(),
                     it.key());
        const auto id = it.value().get<int64_t>();
        // Ids index a table of tokens: dense in every real vocab, so an id far
        // beyond the vocab's size is refused rather than allocated for.
        const int64_t limit =
            std::min<int64_t>(int64_t{1} << 30, 2 * static_cast<int64_t>(vocab->size()) + 65536);
        CORTIQ_CHECK(id >= 0 && id < limit, "tokenizer: {}: bad id {} for '{}' (vocab of {})",
                     where, id, it.key(), vocab->size());
        m.vocab_[it.key()] = static_cast<int32_t>(id);
        max_id = std::max(max_id, static_cast<int32_t>(id));
    }
    m.id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string());
    for (const auto& [tok, id] : m.vocab_) m.id_to_token_[static_cast<size_t>(id)] = tok;

    m.unk_token_ = opt_string(j, "unk_token");
    m.has_unk_ = j.contains("unk_token") && !j["unk_token"].is_null();
    m.prefix_ = opt_string(j, "continuing_subword_prefix");
    m.suffix_ = opt_string(j, "end_of_word_suffix");
    m.fuse_unk_ = opt_bool(j, "fuse_unk");
    m.byte_fallback_ = opt_bool(j, "byte_fallback");
    m.ignore_merges_ = opt_bool(j, "ignore_merges");
    for (int b = 0; b < 256; ++b) m.byte_ids_[b] = m.token_to_id(fmt::format("<0x{:02X}>", b));

    auto merges = j.find("merges");
    if (merges != j.end() && !merges->is_null()) {
        CORTIQ_CHECK(merges->is_array(), "tokenizer: {}: merges is not an array", where);
        m.merges_.reserve(merges->size());
        int32_t rank = 0;
        for (const auto& e : *merges) {
            std::string a, b;
            if (e.is_string()) {
                const auto s = e.get<std::string>();
                const size_t sp = s.find(' ');
                CORTIQ_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos,
                             "tokenizer: {}: bad merge '{}' at rank {}", where, s, rank);
                a = s.substr(0, sp);
                b = s.substr(sp + 1);
            } else {
                CORTIQ_CHECK(e.is_array() && e.size() == 2, "tokenizer: {}: bad merge at rank {}",
                             where, rank);
                a = e[0].get<std::string>();
                b = e[1].get<std::string>();
            }
            const int32_t ia = m.token_to_id(a), ib = m.token_to_id(b);
            CORTIQ_CHECK(ia >= 0 && ib >= 0 && b.size() >= m.prefix_.size(),
                         "tokenizer: {}: merge '{}' + '{}' uses a token outside the vocab", where,
                         a, b);
            const std::string merged = a + b.substr(m.prefix_.size());
            const int32_t inew = m.token_to_id(merged);
            CORTIQ_CHECK(inew >= 0, "tokenizer: {}: merged token '{}' is not in the vocab", where,
                         merged);
            m.merges_.insert_or_assign(pair_key(ia, ib), MergeTarget{rank, inew});
            ++rank;
        }
    }
    return m;
}

int32_t BpeModel::token_to_id(std::string_view token) const {
    auto it = vocab_.find(token);
    return it == vocab_.end() ? -1 : it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
    if (id < 0 || id >= size()) return nullptr;
    const std::string& s = id_to_token_[static_cast<size_t>(id)];
    // Holes in the id range are empty strings; "" is never a real token.
    return s.empty() ? nullptr : &s;
}

const BpeModel::MergeTarget* BpeModel::find_merge(int32_t a, int32_t b) const {
    auto it = merges_.find(pair_key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out, WordCache* cache) const {
    if (word.empty()) return;
    if (ignore_merges_) {
        if (const int32_t id = token_to_id(word); id >= 0) {
            out.push_back(id);
            return;
        }
    }
    constexpr size_t kMaxCached = 256;  // as tokenizers' BPE cache
    if (cache != nullptr && word.size() < kMaxCached) {
        if (auto it = cache->find(word); it != cache->end()) {
            out.insert(out.end(), it->second.begin(), it->second.end());
            return;
        }
        const size_t mark = out.size();
        merge_word(word, out);
        cache->emplace(std::string(word), std::vector<int32_t>(out.begin() + mark, out.end()));
        return;
    }
    merge_word(word, out);
}

void BpeModel::merge_word(std::string_view w, std::vector<int32_t>& out) const {
    // Symbols of the word as a linked list over an array.
    struct Symbol {
        int32_t id;
        int32_t prev;
        int32_t next;
        bool alive;
    };
    std::vector<Symbol> syms;
    syms.reserve(w.size());
    auto add = [&](int32_t id) {
        const auto n = static_cast<int32_t>(syms.size());
        if (n > 0) syms.back().next = n;
        syms.push_back({id, n - 1, -1, true});
    };

    int32_t unk_id = -1;
    auto unk_lookup = [&] {
        const int32_t id = token_to_id(unk_token_);
        CORTIQ_CHECK(id >= 0, "tokenizer: unk token '{}' is not in the vocab", unk_token_);
        return id;
    };
    bool pending_unk = false;
    std::string buf;
    size_t i = 0;
    while (i < w.size()) {
        const size_t at = i;
        size_t n = utf8_valid_len(w, at);
        if (n == 0) n = 1;  // not reached for valid input
        i = at + n;
        const bool is_first = at == 0;
        const bool is_last = i >= w.size();
        std::string_view s = w.substr(at, n);
        if ((!is_first && !prefix_.empty()) || (is_last && !suffix_.empty())) {
            buf.clear();
            if (!is_first) buf += prefix_;
            buf += s;
            if (is_last) buf += suffix_;
            s = buf;
        }
        if (const int32_t id = token_to_id(s); id >= 0) {
            if (pending_unk) {
                add(unk_id);
                pending_unk = false;
            }
            add(id);
            continue;
        }
        if (byte_fallback_) {
            bool all = true;
            for (char c : s) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
            if (all) {
                // As tokenizers: a pending unk is not flushed before these.
                for (char c : s) add(byte_ids_[static_cast<unsigned char>(c)]);
                continue;
            }
        }
        if (has_unk_) {
            if (pending_unk && !fuse_unk_) add(unk_id);
            if (!pending_unk || !fuse_unk_) unk_id = unk_lookup();
            pending_unk = true;
        }
    }
    if (pending_unk) add(unk_id);

    // merge_all: lowest rank first, then leftmost; stale entries are skipped.
    struct Cand {
        int32_t rank;
        int32_t pos;
        int32_t new_id;
    };
    auto worse = [](const Cand& a, const Cand& b) {
        return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
    };
    std::priority_queue<Cand, std::vector<Cand>, decltype(worse)> queue(worse);
    for (size_t k = 0; k + 1 < syms.size(); ++k) {
        if (const MergeTarget* m = find_merge(syms[k].id, syms[k + 1].id)) {
            queue.push({m->rank, static_cast<int32_t>(k), m->new_id});
        }
    }
    while (!queue.empty()) {
        const Cand top = queue.top();
        queue.pop();
        Symbol& cur = syms[static_cast<size_t>(top.pos)];
        if (!cur.alive || cur.next < 0) continue;
        const int32_t next_pos = cur.next;
        const Symbol right = syms[static_cast<size_t>(next_pos)];
        const MergeTarget* m = find_merge(cur.id, right.id);
        if (m == nullptr || m->new_id != top.new_id) continue;
        cur.id = top.new_id;
        cur.next = right.next;
        syms[static_cast<size_t>(next_pos)].alive = false;
        if (right.next >= 0) syms[static_cast<size_t>(right.next)].prev = top.pos;
        if (cur.prev >= 0) {
            if (const MergeTarget* pm =
                    find_merge(syms[static_cast<size_t>(cur.prev)].id, cur.id)) {
                queue.push({pm->rank, cur.prev, pm->new_id});
            }
        }
        if (cur.next >= 0) {
            if (const MergeTarget* nm =
                    find_merge(cur.id, syms[static_cast<size_t>(cur.next)].id)) {
                queue.push({nm->rank, top.pos, nm->new_id});
            }
        }
    }
    for (const auto& s : syms) {
        if (s.alive) out.push_back(s.id);
    }
}

}  // namespace cortiq::io::tok
