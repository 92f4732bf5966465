#include "quantize/journal.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "blr/sign.hpp"
#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "io/checksum.hpp"
#include "io/safetensors.hpp"

#ifndef CORTIQ_VERSION
#define CORTIQ_VERSION "unknown"
#endif

namespace cortiq::quant {

namespace fs = std::filesystem;

namespace {

constexpr const char* kVersionKey = "cortiq_version";

std::string key_name(int64_t key) {
    return key == kEmbedKey  ? std::string("embedding")
           : key == kHeadKey ? std::string("head")
                             : std::to_string(key);
}

std::string entry_name(int64_t key) {
    return key == kEmbedKey  ? std::string("the embedding")
           : key == kHeadKey ? std::string("the head")
                             : "layer " + std::to_string(key);
}

}  // namespace

const char* program_version() {
    return CORTIQ_VERSION;
}

Journal::Journal(const std::string& out_path, const nlohmann::json& settings, bool resume,
                 bool force)
    : dir_(out_path + ".journal") {
    // What a killed run may have left: the output's temporary file and the
    // journal's own (their writers are gone; live writers' files are kept).
    {
        const fs::path out(out_path);
        io::remove_stale_temp_files(out.parent_path().string(), out.filename().string());
        if (fs::is_directory(dir_)) io::remove_stale_temp_files(dir_);
    }
    nlohmann::json stored = settings;
    stored[kVersionKey] = program_version();
    const std::string settings_path = (fs::path(dir_) / "settings.json").string();
    // A run killed before it wrote its settings left a journal with nothing
    // in it (entries come after the settings): as good as none.
    if (fs::is_directory(dir_) && !fs::exists(settings_path)) fs::remove_all(dir_);
    if (fs::exists(dir_)) {
        if (resume) {
            std::ifstream f(settings_path);
            CORTIQ_CHECK(f.good(),
                         "{}: cannot read the journal's settings; remove {} or pass "
                         "--force to start over",
                         settings_path, dir_);
            const nlohmann::json old =
                nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
            CORTIQ_CHECK(!old.is_discarded() && old.is_object(),
                         "{}: unreadable journal settings; remove {} or pass --force to start over",
                         settings_path, dir_);
            const auto v = old.find(kVersionKey);
            const std::string old_version =
                v != old.end() && v->is_string() ? v->get<std::string>() : "an unknown version";
            CORTIQ_CHECK(old_version == program_version(),
                         "{}: the journal was written by cortiq {}, this is cortiq {}; a resumed "
                         "run must use the same program (pass --force to start over)",
                         settings_path, old_version, program_version());
            CORTIQ_CHECK(old == stored,
                         "{}: the interrupted run used other settings or inputs; pass --force to "
                         "start over",
                         settings_path);
            return;
        }
        CORTIQ_CHECK(force,
                     "{} exists: an interrupted run can continue with --resume (or pass --force to "
                     "start over)",
                     dir_);
        fs::remove_all(dir_);
    }
    std::error_code ec;
    fs::create_directories(dir_, ec);
    CORTIQ_CHECK(!ec, "cannot create journal {}: {}", dir_, ec.message());
    io::write_file_atomic(settings_path, stored.dump(2) + "\n");
}

std::string Journal::file_of(int64_t key) const {
    const std::string file = key == kEmbedKey  ? std::string("embedding.safetensors")
                             : key == kHeadKey ? std::string("head.safetensors")
                                               : "layer_" + std::to_string(key) + ".safetensors";
    CORTIQ_ASSERT(key >= kEmbedKey, "journal key {}", key);
    return (fs::path(dir_) / file).string();
}

std::optional<LayerRecord> Journal::load(int64_t key,
                                         const std::vector<JournalTensor>& expected) const {
    if (dir_.empty()) return std::nullopt;
    const std::string path = file_of(key);
    if (!fs::exists(path)) return std::nullopt;
    const auto f = io::SafetensorsFile::open(path);  // its errors name the file
    const std::string advice =
        fmt::format("remove it to encode {} again, or pass --force to start over", entry_name(key));
    // A damaged payload would otherwise reach the output under a fresh checksum.
    if (const auto c = io::check_checksums(f); !c.ok())
        CORTIQ_FAIL("{}; {}", c.message(path), advice);
    const auto& meta = f.metadata();
    auto meta_of = [&](const char* k) -> const std::string& {
        const auto it = meta.find(k);
        CORTIQ_CHECK(it != meta.end(), "{}: journal entry without '{}' (incomplete); {}", path, k,
                     advice);
        return it->second;
    };
    CORTIQ_CHECK(meta_of("journal_key") == key_name(key),
                 "{}: this entry belongs to {}, not {}; {}", path,
                 meta_of("journal_key") == "head"        ? "the head"
                 : meta_of("journal_key") == "embedding" ? "the embedding"
                                                         : "layer " + meta_of("journal_key"),
                 entry_name(key), advice);
    CORTIQ_CHECK(meta_of(kVersionKey) == program_version(),
                 "{}: written by cortiq {}, this is cortiq {}; pass --force to start over", path,
                 meta_of(kVersionKey), program_version());

    // The tensors: exactly the expected ones, as the entry's own list says.
    std::set<std::string> want;
    for (const auto& e : expected) want.insert(e.name);
    const auto listed = nlohmann::json::parse(meta_of("tensors"), nullptr, false);
    std::set<std::string> listed_names;
    CORTIQ_CHECK(listed.is_array(), "{}: malformed tensor list; {}", path, advice);
    for (const auto& x : listed) {
        CORTIQ_CHECK(x.is_string(), "{}: malformed tensor list; {}", path, advice);
        listed_names.insert(x.get<std::string>());
    }
    CORTIQ_CHECK(listed.size() == f.tensors().size() && listed_names.size() == listed.size(),
                 "{}: holds {} tensors, its list names {}; {}", path, f.tensors().size(),
                 listed.size(), advice);
    for (const auto& t : f.tensors()) {
        CORTIQ_CHECK(want.count(t.name), "{}: tensor '{}' does not belong to {}; {}", path, t.name,
                     entry_name(key), advice);
        CORTIQ_CHECK(listed_names.count(t.name), "{}: tensor '{}' is not in the entry's list; {}",
                     path, t.name, advice);
    }

    const auto reports = nlohmann::json::parse(meta_of("reports"), nullptr, false);
    CORTIQ_CHECK(reports.is_object(), "{}: malformed reports; {}", path, advice);
    LayerRecord rec;
    for (const auto& e : expected) {
        const io::TensorInfo* t = f.find(e.name);
        CORTIQ_CHECK(t, "{}: incomplete entry: no tensor '{}' of {}; {}", path, e.name,
                     entry_name(key), advice);
        CORTIQ_CHECK(t->dtype == io::DType::U8 && t->shape.size() == 1,
                     "{}: tensor '{}' is {} {}, not a U8 payload; {}", path, e.name,
                     io::dtype_name(t->dtype), t->shape_str(), advice);
        const auto b = f.bytes(*t);
        blr::validate_any(b, fmt::format("{}: tensor '{}'", path, e.name), e.m, e.n);
        const auto r = reports.find(e.name);
        CORTIQ_CHECK(r != reports.end(), "{}: incomplete entry: no report of '{}'; {}", path,
                     e.name, advice);
        // Integers where the report has them (converting a float to one
        // would be undefined), before the report is read.
        auto integer = [&](const nlohmann::json& v) { return v.is_number_integer(); };
        CORTIQ_CHECK(r->is_object() && r->contains("shape") && (*r)["shape"].is_array() &&
                         (*r)["shape"].size() == 2 && integer((*r)["shape"][0]) &&
                         integer((*r)["shape"][1]) && r->contains("bits") &&
                         integer((*r)["bits"]) && r->contains("rank") && integer((*r)["rank"]) &&
                         r->contains("paths") && integer((*r)["paths"]),
                     "{}: malformed report of '{}'; {}", path, e.name, advice);
        try {
            rec.reports.push_back(TensorReport::from_json(e.name, *r));
        } catch (const nlohmann::json::exception& ex) {
            CORTIQ_FAIL("{}: malformed report of '{}': {}; {}", path, e.name, ex.what(), advice);
        }
        CORTIQ_CHECK(rec.reports.back().m == e.m && rec.reports.back().n == e.n,
                     "{}: the report of '{}' is of a {}x{} tensor, expected {}x{}; {}", path,
                     e.name, rec.reports.back().m, rec.reports.back().n, e.m, e.n, advice);
        rec.payloads.emplace_back(e.name, std::vector<uint8_t>(b.begin(), b.end()));
    }
    CORTIQ_CHECK(reports.size() == expected.size(), "{}: {} reports for {} tensors; {}", path,
                 reports.size(), expected.size(), advice);
    return rec;
}

void Journal::save(int64_t key, const LayerRecord& rec) const {
    if (dir_.empty()) return;
    io::SafetensorsWriter w;
    w.set_checksums(true);
    nlohmann::json names = nlohmann::json::array();
    for (const auto& [name, bytes] : rec.payloads) {
        w.add(name, io::DType::U8, {static_cast<int64_t>(bytes.size())},
              std::span<const uint8_t>(bytes));
        names.push_back(name);
    }
    nlohmann::json j = nlohmann::json::object();
    for (const auto& r : rec.reports) j[r.name] = r.to_json(true);
    w.set_metadata("reports", j.dump());
    w.set_metadata("tensors", names.dump());
    w.set_metadata("journal_key", key_name(key));
    w.set_metadata(kVersionKey, program_version());
    w.write(file_of(key));  // temporary file, fsync, rename, fsync of the folder
}

void Journal::remove() const {
    if (dir_.empty()) return;
    std::error_code ec;
    fs::remove_all(dir_, ec);
}

}  // namespace cortiq::quant
