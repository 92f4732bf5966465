#include "core/error.hpp"

namespace cortiq {

void throw_error(const std::string& msg) {
    throw Error(msg);
}

void throw_invariant(const char* expr, const char* file, int line, const std::string& msg) {
    throw InvariantError(fmt::format("internal error: {} failed at {}:{}{}{}", expr, file, line,
                                     msg.empty() ? "" : ": ", msg));
}

}  // namespace cortiq
