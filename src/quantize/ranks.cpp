// quantize() under mpirun (docs/distributed.md): what the ranks exchange.
// Rank 0 keeps the journal and writes the file; each layer's tensors are
// dealt out to the ranks (owners_of: largest first, to the least loaded) and every
// payload is broadcast from the rank that encoded it, so that every rank
// holds the same compressed model for the next layer's calibration. Each
// tensor is encoded by exactly the computation one process would do, on the
// same Grams (calib/rank_chain.hpp), so the file does not depend on n.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "dist/comm.hpp"
#include "quantize/steps.hpp"

namespace cortiq::quant {

namespace {

uint64_t get_u64(const std::vector<uint8_t>& b, size_t& at) {
    CORTIQ_ASSERT(at + sizeof(uint64_t) <= b.size(), "a layer record from another rank is short");
    uint64_t v = 0;
    std::memcpy(&v, b.data() + at, sizeof v);
    at += sizeof v;
    return v;
}

// A layer record as bytes and back: [json length][json: names, sizes,
// reports as the journal keeps them, lines too][payloads, in order].
std::vector<uint8_t> record_bytes(const LayerRecord& rec) {
    nlohmann::json j = {{"names", nlohmann::json::array()},
                        {"sizes", nlohmann::json::array()},
                        {"reports", nlohmann::json::array()}};
    for (const auto& [name, bytes] : rec.payloads) {
        j["names"].push_back(name);
        j["sizes"].push_back(bytes.size());
    }
    for (const auto& r : rec.reports) {
        nlohmann::json rj = r.to_json(true);
        rj["name"] = r.name;
        rj["line"] = r.line;
        j["reports"].push_back(std::move(rj));
    }
    const std::string text = j.dump();
    size_t total = sizeof(uint64_t) + text.size();
    for (const auto& [name, bytes] : rec.payloads) total += bytes.size();
    std::vector<uint8_t> b(total);
    const uint64_t n = text.size();
    std::memcpy(b.data(), &n, sizeof n);
    size_t at = sizeof n;
    std::memcpy(b.data() + at, text.data(), text.size());
    at += text.size();
    for (const auto& [name, bytes] : rec.payloads) {
        if (!bytes.empty()) std::memcpy(b.data() + at, bytes.data(), bytes.size());
        at += bytes.size();
    }
    return b;
}

LayerRecord record_of(const std::vector<uint8_t>& b) {
    size_t at = 0;
    const uint64_t n = get_u64(b, at);
    CORTIQ_ASSERT(at + n <= b.size(), "a layer record from another rank is short");
    const auto j = nlohmann::json::parse(b.begin() + static_cast<std::ptrdiff_t>(at),
                                         b.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
    LayerRecord rec;
    for (size_t i = 0; i < j["names"].size(); ++i) {
        const size_t size = j["sizes"][i].get<size_t>();
        CORTIQ_ASSERT(at + size <= b.size(), "a layer record from another rank is short");
        rec.payloads.emplace_back(
            j["names"][i].get<std::string>(),
            std::vector<uint8_t>(b.begin() + static_cast<std::ptrdiff_t>(at),
                                 b.begin() + static_cast<std::ptrdiff_t>(at + size)));
        at += size;
    }
    for (const auto& rj : j["reports"]) {
        TensorReport r = TensorReport::from_json(rj["name"].get<std::string>(), rj);
        r.line = rj["line"].get<std::string>();
        rec.reports.push_back(std::move(r));
    }
    return rec;
}

}  // namespace

void broadcast_record(LayerRecord& rec, int root) {
    if (!dist::distributed()) return;
    std::vector<uint8_t> b;
    if (dist::rank() == root) b = record_bytes(rec);
    dist::broadcast(b, root);
    if (dist::rank() != root) rec = record_of(b);
}

std::optional<LayerRecord> load_journalled(const Journal& journal, int64_t key,
                                           const std::vector<JournalTensor>& expected) {
    if (!dist::distributed()) return journal.load(key, expected);
    std::optional<LayerRecord> old;
    int64_t found = 0;
    if (dist::is_root()) {
        old = journal.load(key, expected);
        found = old ? 1 : 0;
    }
    if (!dist::broadcast(found, 0)) return std::nullopt;
    if (!old) old.emplace();
    broadcast_record(*old, 0);
    return old;
}

std::vector<int> owners_of(const std::vector<GroupJob>& jobs, int ranks) {
    std::vector<size_t> order(jobs.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return jobs[a].w.size() > jobs[b].w.size(); });
    std::vector<int64_t> load(static_cast<size_t>(ranks), 0);
    std::vector<int> owner(jobs.size(), 0);
    for (size_t i : order) {
        const auto least = std::min_element(load.begin(), load.end()) - load.begin();
        owner[i] = static_cast<int>(least);
        load[static_cast<size_t>(least)] += jobs[i].w.size();
    }
    return owner;
}

std::vector<EncodedTensor> encode_on_ranks(
    Run& run, const std::vector<GroupJob>& jobs, const std::vector<std::string>& names,
    const std::vector<int>& owners, const std::vector<double>& drift_alpha, const MatD& h_fit,
    const MatD& h_sel, const std::string& what,
    const std::function<void(size_t, const EncodedTensor&)>& on_done) {
    const QuantizeOptions& o = run.o;
    const int me = dist::rank();
    std::vector<GroupJob> own;
    std::vector<size_t> own_index;
    for (size_t i = 0; i < jobs.size(); ++i)
        if (owners[i] == me) {
            own.push_back(jobs[i]);
            own_index.push_back(i);
        }
    std::vector<EncodedTensor> out(jobs.size());
    if (!own.empty()) {
        auto enc = encode_group(own, h_fit, h_sel, o.enc, o.device, o.jobs, o.gpus, o.profile, what,
                                [](size_t, const encode::Encoded&) {});
        for (size_t k = 0; k < own.size(); ++k) {
            const size_t i = own_index[k];
            out[i] = {std::move(enc[k].payload),
                      report_of(names[i], jobs[i], enc[k], o.enc.method)};
            out[i].report.drift_alpha = drift_alpha[i];
            run.report.encode_stages.merge(enc[k].stages);
        }
    }
    for (size_t i = 0; i < jobs.size(); ++i) {
        LayerRecord one;
        if (me == owners[i]) {
            one.payloads.emplace_back(names[i], std::move(out[i].payload));
            one.reports.push_back(out[i].report);
        }
        broadcast_record(one, owners[i]);
        out[i] = {std::move(one.payloads.at(0).second), one.reports.at(0)};
        on_done(i, out[i]);
    }
    return out;
}

// TuneRanks::fold over the ranks of the job: rank r takes the running value
// from rank r − 1 (rank 0 starts from its own), applies its part and passes
// it to rank r + 1; the last rank's value goes to every rank.
void fold_over_ranks(std::vector<uint8_t>& running,
                     const std::function<void(std::vector<uint8_t>&)>& mine) {
    const int r = dist::rank(), n = dist::size();
    if (r > 0) {
        int64_t bytes = 0;
        dist::recv(&bytes, sizeof bytes, r - 1);
        running.resize(static_cast<size_t>(bytes));
        if (bytes > 0) dist::recv(running.data(), running.size(), r - 1);
    }
    mine(running);
    if (r + 1 < n) {
        const int64_t bytes = static_cast<int64_t>(running.size());
        dist::send(&bytes, sizeof bytes, r + 1);
        if (bytes > 0) dist::send(running.data(), running.size(), r + 1);
    }
    dist::broadcast(running, n - 1);
}

}  // namespace cortiq::quant
