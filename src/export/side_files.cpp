// config.json for the exported folder. It stays the text the model came with
// (Qwen3.5's text_config nesting, dtype and all), with one exception: a tied
// model quantized with its head holds a compressed lm_head.weight of its own,
// which transformers would ignore (tying the head to the embedding) unless
// the config says the head is not tied.
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "export/steps.hpp"

namespace cortiq::hf {

namespace {

// Sets obj["tie_word_embeddings"] false where it is true, or where it is
// absent and `add`; returns whether obj changed.
bool untie(nlohmann::ordered_json& obj, bool add) {
    const auto it = obj.find("tie_word_embeddings");
    if (it == obj.end()) {
        if (add) obj["tie_word_embeddings"] = false;
        return add;
    }
    if (it->is_boolean() && !it->get<bool>()) return false;
    *it = false;
    return true;
}

}  // namespace

std::string export_config(const std::string& stored, bool has_head, const std::string& what,
                          bool& untied) {
    untied = false;
    if (!has_head) return stored;
    nlohmann::ordered_json j;
    try {
        j = nlohmann::ordered_json::parse(stored);
    } catch (const nlohmann::json::exception& e) {
        CORTIQ_FAIL("{}: the config is not valid JSON: {}", what, e.what());
    }
    CORTIQ_CHECK(j.is_object(), "{}: the config is not a JSON object", what);
    // Absent at the top level: transformers' default differs between model
    // classes, so the stored head is made explicit.
    bool changed = untie(j, /*add=*/true);
    if (auto t = j.find("text_config"); t != j.end() && t->is_object())
        changed |= untie(*t, /*add=*/false);
    if (!changed) return stored;
    untied = true;
    return j.dump(2) + "\n";
}

}  // namespace cortiq::hf
