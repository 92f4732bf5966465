// Reading tokenizer.json (and tokenizer_config.json) into Tokenizer::Impl.
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "io/tokenizer_impl.hpp"

namespace cortiq::io::tok {

namespace {

using nlohmann::json;

// GPT-2's pre-tokenizer pattern, as in tokenizers' ByteLevel.
constexpr const char* kByteLevelPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

json read_json(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    CORTIQ_CHECK(f.good(), "tokenizer: cannot open {}", path);
    std::stringstream ss;
    ss << f.rdbuf();
    try {
        return json::parse(ss.str());
    } catch (const json::exception& e) {
        CORTIQ_FAIL("tokenizer: {}: invalid JSON: {}", path, e.what());
    }
}

std::string type_of(const json& j) {
    auto t = j.find("type");
    return t != j.end() && t->is_string() ? t->get<std::string>() : std::string();
}

template <class T>
T get_or(const json& j, const char* key, T def) {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? def : it->get<T>();
}

// An integer of tokenizer.json in [lo, hi] (hi < INT64_MAX). Floats and
// out-of-range values are refused here: converting them would be undefined.
int64_t get_integer(const json& v, const std::string& where, const char* what, int64_t lo,
                    int64_t hi) {
    CORTIQ_CHECK(v.is_number_integer(), "tokenizer: {}: {} must be an integer, got {}", where, what,
                 v.dump());
    const bool huge =
        v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    const int64_t x = huge ? hi + 1 : v.get<int64_t>();
    CORTIQ_CHECK(x >= lo && x <= hi, "tokenizer: {}: {} {} is out of range", where, what, v.dump());
    return x;
}

int32_t get_token_id(const json& v, const std::string& where, const char* what) {
    return static_cast<int32_t>(
        get_integer(v, where, what, 0, std::numeric_limits<int32_t>::max() - 1));
}

// {"String": s} or {"Regex": r}.
Regex parse_pattern(const json& p, const std::string& where) {
    if (p.contains("String")) return Regex(p["String"].get<std::string>(), true);
    if (p.contains("Regex")) return Regex(p["Regex"].get<std::string>(), false);
    CORTIQ_FAIL("tokenizer: {}: pattern must be String or Regex", where);
}

void parse_normalizer(const json& j, const std::string& where, Normalizer& out) {
    if (j.is_null()) return;
    const std::string type = type_of(j);
    NormalizerStep st;
    if (type == "Sequence") {
        for (const auto& n : j.at("normalizers")) parse_normalizer(n, where, out);
        return;
    } else if (type == "Prepend") {
        st.kind = NormalizerStep::Kind::prepend;
        st.text = j.at("prepend").get<std::string>();
    } else if (type == "Replace") {
        st.kind = NormalizerStep::Kind::replace;
        st.pattern = parse_pattern(j.at("pattern"), where);
        st.text = j.at("content").get<std::string>();
    } else if (type == "Strip") {
        st.kind = NormalizerStep::Kind::strip;
        st.left = get_or(j, "strip_left", false);
        st.right = get_or(j, "strip_right", false);
    } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
        st.kind = NormalizerStep::Kind::unicode;
        st.form = type == "NFC"    ? UnicodeForm::nfc
                  : type == "NFD"  ? UnicodeForm::nfd
                  : type == "NFKC" ? UnicodeForm::nfkc
                                   : UnicodeForm::nfkd;
        try {
            unicode_form_check(st.form);
        } catch (const Error& e) {
            CORTIQ_FAIL("{}: {}", where, e.what());
        }
    } else {
        CORTIQ_FAIL("tokenizer: {}: unsupported normalizer type '{}'", where, type);
    }
    out.steps.push_back(std::move(st));
}

SplitBehavior parse_behavior(const std::string& s, const std::string& where) {
    if (s == "Removed") return SplitBehavior::removed;
    if (s == "Isolated") return SplitBehavior::isolated;
    if (s == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
    if (s == "MergedWithNext") return SplitBehavior::merged_with_next;
    if (s == "Contiguous") return SplitBehavior::contiguous;
    CORTIQ_FAIL("tokenizer: {}: unknown split behavior '{}'", where, s);
}

void parse_pre_tokenizer(const json& j, const std::string& where, PreTokenizer& out) {
    if (j.is_null()) return;
    const std::string type = type_of(j);
    PreTokenizerStep st;
    if (type == "Sequence") {
        for (const auto& p : j.at("pretokenizers")) parse_pre_tokenizer(p, where, out);
        return;
    } else if (type == "ByteLevel") {
        st.kind = PreTokenizerStep::Kind::byte_level;
        st.add_prefix_space = get_or(j, "add_prefix_space", false);
        st.use_regex = get_or(j, "use_regex", true);
        if (st.use_regex) st.pattern = Regex(kByteLevelPattern, false);
    } else if (type == "Split") {
        st.kind = PreTokenizerStep::Kind::split;
        st.pattern = parse_pattern(j.at("pattern"), where);
        st.behavior = parse_behavior(j.at("behavior").get<std::string>(), where);
        st.invert = get_or(j, "invert", false);
    } else if (type == "Metaspace") {
        st.kind = PreTokenizerStep::Kind::metaspace;
        st.replacement = get_or<std::string>(j, "replacement", "\u2581");
        const std::string scheme = get_or<std::string>(j, "prepend_scheme", "");
        if (scheme.empty()) {
            const bool add = get_or(j, "add_prefix_space", true);
            st.prepend = add ? PreTokenizerStep::Prepend::always : PreTokenizerStep::Prepend::never;
        } else if (scheme == "always") {
            st.prepend = PreTokenizerStep::Prepend::always;
        } else if (scheme == "first") {
            st.prepend = PreTokenizerStep::Prepend::first;
        } else if (scheme == "never") {
            st.prepend = PreTokenizerStep::Prepend::never;
        } else {
            CORTIQ_FAIL("tokenizer: {}: unknown prepend_scheme '{}'", where, scheme);
        }
        st.split = get_or(j, "split", true);
        st.pattern = Regex(st.replacement, true);
    } else {
        CORTIQ_FAIL("tokenizer: {}: unsupported pre_tokenizer type '{}'", where, type);
    }
    out.steps.push_back(std::move(st));
}

void parse_decoder(const json& j, const std::string& where, Decoder& out) {
    if (j.is_null()) return;
    out.present = true;
    const std::string type = type_of(j);
    DecoderStep st;
    if (type == "Sequence") {
        for (const auto& d : j.at("decoders")) parse_decoder(d, where, out);
        return;
    } else if (type == "ByteLevel") {
        st.kind = DecoderStep::Kind::byte_level;
    } else if (type == "Replace") {
        st.kind = DecoderStep::Kind::replace;
        st.pattern = parse_pattern(j.at("pattern"), where);
        st.content = j.at("content").get<std::string>();
    } else if (type == "ByteFallback") {
        st.kind = DecoderStep::Kind::byte_fallback;
    } else if (type == "Fuse") {
        st.kind = DecoderStep::Kind::fuse;
    } else if (type == "Strip") {
        st.kind = DecoderStep::Kind::strip;
        st.content = j.at("content").get<std::string>();
        for (auto [key, dst] : {std::pair{"start", &st.start}, std::pair{"stop", &st.stop}}) {
            const auto it = j.find(key);
            *dst = it == j.end() || it->is_null()
                       ? 0
                       : static_cast<size_t>(get_integer(*it, where, key, 0, 1 << 20));
        }
    } else if (type == "Metaspace") {
        st.kind = DecoderStep::Kind::metaspace;
        st.content = get_or<std::string>(j, "replacement", "\u2581");
        const std::string scheme = get_or<std::string>(j, "prepend_scheme", "");
        st.prepend = scheme.empty() ? get_or(j, "add_prefix_space", true) : scheme != "never";
    } else {
        CORTIQ_FAIL("tokenizer: {}: unsupported decoder type '{}'", where, type);
    }
    out.steps.push_back(std::move(st));
}

// Special tokens added before (prefix) and after (suffix) a single sequence.
void parse_post_processor(const json& j, const std::string& where, PostProcessor& out) {
    if (j.is_null()) return;
    const std::string type = type_of(j);
    if (type == "Sequence") {
        for (const auto& p : j.at("processors")) parse_post_processor(p, where, out);
    } else if (type == "ByteLevel") {
        // Only trims offsets.
    } else if (type == "TemplateProcessing") {
        PostProcessor t;
        bool after = false;
        const json& specials = j.at("special_tokens");
        for (const auto& piece : j.at("single")) {
            if (piece.contains("Sequence")) {
                after = true;
            } else if (piece.contains("SpecialToken")) {
                const auto name = piece["SpecialToken"].at("id").get<std::string>();
                CORTIQ_CHECK(specials.contains(name),
                             "tokenizer: {}: template names unknown special token '{}'", where,
                             name);
                for (const auto& id : specials[name].at("ids")) {
                    (after ? t.suffix : t.prefix).push_back(get_token_id(id, where, "token id"));
                }
            }
        }
        out.prefix.insert(out.prefix.begin(), t.prefix.begin(), t.prefix.end());
        out.suffix.insert(out.suffix.end(), t.suffix.begin(), t.suffix.end());
    } else if (type == "BertProcessing" || type == "RobertaProcessing") {
        out.prefix.insert(out.prefix.begin(), get_token_id(j.at("cls").at(1), where, "cls id"));
        out.suffix.push_back(get_token_id(j.at("sep").at(1), where, "sep id"));
    } else {
        CORTIQ_FAIL("tokenizer: {}: unsupported post_processor type '{}'", where, type);
    }
}

// bos_token / eos_token of tokenizer_config.json: a string, an AddedToken
// object, or null. Returns false when the key is absent.
bool config_token(const json& cfg, const char* key, const Tokenizer::Impl& impl, int32_t& id) {
    auto it = cfg.find(key);
    if (it == cfg.end()) return false;
    std::string name;
    if (it->is_string()) {
        name = it->get<std::string>();
    } else if (it->is_object() && it->contains("content")) {
        name = (*it)["content"].get<std::string>();
    } else {
        id = -1;
        return true;
    }
    id = -1;
    for (const auto& a : impl.added) {
        if (a.content == name) {
            id = a.id;
            return true;
        }
    }
    id = impl.model.token_to_id(name);
    return true;
}

int32_t find_named(const Tokenizer::Impl& impl, std::initializer_list<const char*> names) {
    for (const char* n : names) {
        for (const auto& a : impl.added) {
            if (a.content == n) return a.id;
        }
    }
    return -1;
}

void build(const json& root, const std::string& path, Tokenizer::Impl& impl) {
    impl.path = path;
    CORTIQ_CHECK(root.is_object() && root.contains("model"), "tokenizer: {}: no model", path);
    impl.model = BpeModel::from_json(root["model"], path);
    parse_normalizer(root.value("normalizer", json()), path, impl.normalizer);
    parse_pre_tokenizer(root.value("pre_tokenizer", json()), path, impl.pre_tokenizer);
    parse_post_processor(root.value("post_processor", json()), path, impl.post);
    parse_decoder(root.value("decoder", json()), path, impl.decoder);

    impl.vocab_size = impl.model.size();
    for (const auto& a : root.value("added_tokens", json::array())) {
        AddedToken t;
        const json& jid = a.at("id");
        const int64_t id = jid.is_number_integer()
                               ? get_integer(jid, path, "added token id", 0, int64_t{1} << 40)
                               : -1;
        CORTIQ_CHECK(id >= 0 && id < int64_t{impl.model.size()} + 65536,
                     "tokenizer: {}: bad added token id {} (model vocab of {})", path, jid.dump(),
                     impl.model.size());
        t.id = static_cast<int32_t>(id);
        t.content = a.at("content").get<std::string>();
        t.single_word = get_or(a, "single_word", false);
        t.lstrip = get_or(a, "lstrip", false);
        t.rstrip = get_or(a, "rstrip", false);
        t.normalized = get_or(a, "normalized", !get_or(a, "special", false));
        t.special = get_or(a, "special", false);
        if (t.content.empty()) continue;
        t.decode_text = t.normalized ? impl.normalizer.apply(t.content) : t.content;
        impl.vocab_size = std::max(impl.vocab_size, t.id + 1);
        impl.added.push_back(std::move(t));
    }
    for (size_t k = 0; k < impl.added.size(); ++k) impl.added_by_id[impl.added[k].id] = k;
    // The post-processor's ids go straight into every encoded sequence.
    for (const auto* ids : {&impl.post.prefix, &impl.post.suffix})
        for (int32_t id : *ids)
            CORTIQ_CHECK(id >= 0 && id < impl.vocab_size,
                         "tokenizer: {}: post-processor token id {} is outside the vocab (0..{})",
                         path, id, impl.vocab_size - 1);

    // Match order of tokenizers: special tokens first, then the others.
    std::vector<const AddedToken*> raw, norm;
    std::vector<std::string> raw_pat, norm_pat;
    for (int pass = 0; pass < 2; ++pass) {
        for (const auto& a : impl.added) {
            if (a.special != (pass == 0)) continue;
            if (a.normalized) {
                norm.push_back(&a);
                norm_pat.push_back(a.decode_text);
            } else {
                raw.push_back(&a);
                raw_pat.push_back(a.content);
            }
        }
    }
    impl.raw_matcher.build(raw, std::move(raw_pat));
    impl.norm_matcher.build(norm, std::move(norm_pat));
}

}  // namespace

std::unique_ptr<Tokenizer::Impl> load_impl(const std::string& model_dir) {
    namespace fs = std::filesystem;
    fs::path dir(model_dir);
    fs::path file = dir / "tokenizer.json";
    std::error_code ec;
    // A cortiq file carries tokenizer.json (and tokenizer_config.json) in its
    // safetensors metadata.
    std::optional<json> embedded_root, embedded_cfg;
    if (fs::is_regular_file(dir, ec) && dir.extension() == ".safetensors") {
        const auto st = SafetensorsFile::open(model_dir);
        const auto& meta = st.metadata();
        auto it = meta.find("tokenizer.json");
        CORTIQ_CHECK(it != meta.end(),
                     "tokenizer: {} carries no tokenizer (pass --tokenizer FOLDER)", model_dir);
        try {
            embedded_root = json::parse(it->second);
            if (auto c = meta.find("tokenizer_config.json"); c != meta.end())
                embedded_cfg = json::parse(c->second);
        } catch (const json::exception& e) {
            CORTIQ_FAIL("tokenizer: {}: invalid embedded tokenizer JSON: {}", model_dir, e.what());
        }
    } else if (fs::is_regular_file(dir, ec)) {  // a tokenizer.json given directly
        file = dir;
        dir = dir.parent_path();
    }
    const std::string path =
        embedded_root ? model_dir + " (embedded tokenizer.json)" : file.string();
    auto impl = std::make_unique<Tokenizer::Impl>();
    const json root = embedded_root ? *embedded_root : read_json(path);
    try {
        build(root, path, *impl);
    } catch (const json::exception& e) {
        CORTIQ_FAIL("tokenizer: {}: malformed tokenizer.json: {}", path, e.what());
    }

    // BOS / EOS: tokenizer_config.json first, else the post-processor's
    // template, else well-known names among the added tokens.
    bool have_bos = false, have_eos = false;
    const fs::path cfg_path = embedded_root
                                  ? fs::path(model_dir + " (embedded tokenizer_config.json)")
                                  : dir / "tokenizer_config.json";
    if (embedded_root ? embedded_cfg.has_value() : fs::exists(cfg_path, ec)) {
        const json cfg = embedded_root ? *embedded_cfg : read_json(cfg_path.string());
        try {
            if (cfg.is_object()) {
                have_bos = config_token(cfg, "bos_token", *impl, impl->bos);
                have_eos = config_token(cfg, "eos_token", *impl, impl->eos);
            }
        } catch (const json::exception& e) {
            CORTIQ_FAIL("tokenizer: {}: malformed: {}", cfg_path.string(), e.what());
        }
    }
    if (!have_bos) {
        impl->bos =
            !impl->post.prefix.empty()
                ? impl->post.prefix.front()
                : find_named(*impl, {"<s>", "<|begin_of_text|>", "<bos>", "<|startoftext|>"});
    }
    if (!have_eos) {
        impl->eos = !impl->post.suffix.empty()
                        ? impl->post.suffix.back()
                        : find_named(*impl, {"</s>", "<|end_of_text|>", "<eos>", "<|endoftext|>"});
    }
    return impl;
}

}  // namespace cortiq::io::tok
