#include "quantize/journal.hpp"

#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "io/safetensors.hpp"

namespace cortiq::quant {

namespace fs = std::filesystem;

Journal::Journal(const std::string& out_path, const nlohmann::json& settings, bool resume,
                 bool force)
    : dir_(out_path + ".journal") {
    const fs::path settings_path = fs::path(dir_) / "settings.json";
    if (fs::exists(dir_)) {
        if (resume) {
            std::ifstream f(settings_path);
            nlohmann::json old;
            try {
                old = nlohmann::json::parse(f);
            } catch (const std::exception&) {
                CORTIQ_FAIL("{}: unreadable journal settings; remove it or pass --force", dir_);
            }
            CORTIQ_CHECK(old == settings,
                         "{}: the interrupted run used other settings or inputs; pass --force to "
                         "start over",
                         dir_);
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
    const std::string tmp = settings_path.string() + ".tmp";
    {
        std::ofstream f(tmp);
        f << settings.dump(2) << "\n";
        f.flush();
        CORTIQ_CHECK(f, "cannot write {} (disk full?)", tmp);
    }
    fs::rename(tmp, settings_path, ec);
    CORTIQ_CHECK(!ec, "cannot write {}: {}", settings_path.string(), ec.message());
}

std::string Journal::file_of(int64_t key) const {
    return (fs::path(dir_) / (key < 0 ? std::string("head.safetensors")
                                      : "layer_" + std::to_string(key) + ".safetensors"))
        .string();
}

std::optional<LayerRecord> Journal::load(int64_t key) const {
    const std::string path = file_of(key);
    if (!fs::exists(path)) return std::nullopt;
    const auto f = io::SafetensorsFile::open(path);
    LayerRecord rec;
    for (const auto& t : f.tensors()) {
        const auto b = f.bytes(t);
        rec.payloads.emplace_back(t.name, std::vector<uint8_t>(b.begin(), b.end()));
    }
    const auto it = f.metadata().find("reports");
    CORTIQ_CHECK(it != f.metadata().end(), "{}: journal entry without reports", path);
    const auto j = nlohmann::json::parse(it->second);
    for (const auto& [name, r] : j.items()) rec.reports.push_back(TensorReport::from_json(name, r));
    return rec;
}

void Journal::save(int64_t key, const LayerRecord& rec) const {
    io::SafetensorsWriter w;
    for (const auto& [name, bytes] : rec.payloads)
        w.add(name, io::DType::U8, {static_cast<int64_t>(bytes.size())},
              std::span<const uint8_t>(bytes));
    nlohmann::json j = nlohmann::json::object();
    for (const auto& r : rec.reports) j[r.name] = r.to_json(true);
    w.set_metadata("reports", j.dump());
    w.write(file_of(key));
}

void Journal::remove() const {
    std::error_code ec;
    fs::remove_all(dir_, ec);
}

}  // namespace cortiq::quant
