// What this process holds in host memory, for the runtime's reports.
#pragma once

#include <cstdint>

namespace cortiq {

// The peak resident set size of this process so far, in bytes.
int64_t peak_rss_bytes();

}  // namespace cortiq
