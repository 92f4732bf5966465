// Errors: exceptions with context for bad input and I/O, an always-on assert
// for broken invariants. One catch at the CLI boundary turns them into a
// message and a non-zero exit.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace cortiq {

// Bad input, I/O failures, unsupported configurations: recoverable, reported.
class Error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// A broken internal invariant: a bug in cortiq, never the user's input.
class InvariantError : public std::logic_error {
  public:
    using std::logic_error::logic_error;
};

[[noreturn]] void throw_error(const std::string& msg);
[[noreturn]] void throw_invariant(const char* expr, const char* file, int line,
                                  const std::string& msg);

}  // namespace cortiq

// CORTIQ_CHECK(cond, "fmt {}", args...): throws cortiq::Error with the message.
#define CORTIQ_CHECK(cond, ...)                                \
    do {                                                       \
        if (!(cond)) [[unlikely]]                              \
            ::cortiq::throw_error(::fmt::format(__VA_ARGS__)); \
    } while (0)

#define CORTIQ_FAIL(...) ::cortiq::throw_error(::fmt::format(__VA_ARGS__))

// Always on, also in release builds: invariants guard the maths.
#define CORTIQ_ASSERT(cond, ...)                                                                 \
    do {                                                                                         \
        if (!(cond)) [[unlikely]]                                                                \
            ::cortiq::throw_invariant(#cond, __FILE__, __LINE__, ::fmt::format("" __VA_ARGS__)); \
    } while (0)
