// The driver's parts that do not depend on the backend (encode/driver.hpp).
#include "encode/driver.hpp"

#include "blr/model.hpp"
#include "core/error.hpp"

namespace cortiq::encode::driver {

CandidateRanks candidate_ranks(int64_t m, int64_t n, const Options& o) {
    CandidateRanks ranks;
    if (o.paths != PathsChoice::one) {
        ranks.two_paths = blr::rank_for(m, n, o.bpw, 2);
        CORTIQ_CHECK(ranks.two_paths >= 1 || o.paths != PathsChoice::two,
                     "{}x{} at {} bpw: the budget is below two rank-1 paths", m, n, o.bpw);
    }
    if (o.paths != PathsChoice::two) ranks.one_path = one_path_rank(m, n, o.bpw);
    return ranks;
}

std::pair<size_t, std::string> select(const std::vector<CandidateScore>& scores, Encoded& out) {
    std::string notes;
    for (const CandidateScore& s : scores)
        if (s.paths == 2) {
            out.err_init_sel = s.init_sel;
            notes = fmt::format("init {:.4f}", s.init_sel);
        }
    size_t best = 0;
    for (size_t i = 0; i < scores.size(); ++i) {
        const CandidateScore& s = scores[i];
        (s.paths == 2 ? out.err_p2_sel : out.err_p1_sel) = s.sel;
        if (s.paths == 1 && s.init_sel >= 0)  // CORTIQ_INIT_SEL (driver.hpp)
            notes += fmt::format("{}init1 {:.4f}", notes.empty() ? "" : " ", s.init_sel);
        for (size_t k = 0; k < s.sweep_sel.size(); ++k)  // CORTIQ_SWEEP_SEL
            notes += fmt::format("{}P{}s{} {:.4f}", notes.empty() ? "" : " ", s.paths, k + 1,
                                 s.sweep_sel[k]);
        notes += fmt::format("{}P{} {:.4f}", notes.empty() ? "" : " ", s.paths, s.sel);
        if (i == 0 || s.sel < scores[best].sel) best = i;
    }
    return {best, notes};
}

}  // namespace cortiq::encode::driver
