#include "core/memory_usage.hpp"

#include <sys/resource.h>

namespace cortiq {

int64_t peak_rss_bytes() {
    rusage u{};
    if (getrusage(RUSAGE_SELF, &u) != 0) return -1;
    return static_cast<int64_t>(u.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace cortiq
