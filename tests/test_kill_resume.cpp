// `cortiq quantize` (the command-line tool) killed with SIGKILL at random
// moments resumes with --resume into a file byte-identical to an
// uninterrupted run, and a killed run's temporary files do not survive it; a
// write that fails for want of room gives a clear error and no partial
// output, and the run resumes once there is room. Two ways to run out of
// room: a file size limit (RLIMIT_FSIZE, EFBIG; needs no privileges, so it
// always runs) and a small tmpfs (ENOSPC; skipped where mounting is not
// allowed).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli_run.hpp"
#include "require.hpp"
#include "test_files.hpp"

namespace fs = std::filesystem;
using cortiq::test::cli_binary;
using cortiq::test::CliRun;
using cortiq::test::run_cli;

namespace {

const std::string kData = cortiq::test::shared_data().string();
const std::string kModel = kData + "/models/stories260K";
const std::string kCalib = kData + "/text/tinystories-calib.txt";

fs::path tmp_dir(const char* tag) {
    return cortiq::test::scratch_dir("cortiq_kill_", tag);
}

using cortiq::test::slurp;

// The arguments of one small quantize run into `out`. A fixed thread count:
// by default the tool takes the cores that are free at the time, and runs to
// be compared byte for byte must not depend on the machine's load.
std::vector<std::string> quantize_args(const fs::path& out) {
    return {"quantize", kModel, "--calib",   kCalib, "--bpw", "1",  "--samples", "6",
            "--seqlen", "96",   "--threads", "2",    "-q",    "-o", out.string()};
}

std::string joined(const std::vector<std::string>& args) {
    std::string s;
    for (const auto& a : args) s += (s.empty() ? "" : " ") + a;
    return s;
}

// In a forked child: becomes the tool with `args`; exits 127 when it cannot.
[[noreturn]] void exec_cli(const std::string& bin, const std::vector<std::string>& args) {
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(bin.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
}

// Starts the tool with `args`, its output to `log`; returns its pid.
pid_t spawn(const std::vector<std::string>& args, const fs::path& log) {
    const std::string bin = cli_binary();
    const pid_t pid = fork();
    if (pid == 0) {
        const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            ::dup2(fd, 1);
            ::dup2(fd, 2);
        }
        exec_cli(bin, args);
    }
    return pid;
}

// Runs the tool with `args` in a process whose files may not grow past
// `max_bytes` (RLIMIT_FSIZE) and which ignores SIGXFSZ: a write past the
// limit then fails with EFBIG after writing what fits, as a write to a full
// disk fails with ENOSPC, and no privileges are needed. Its output comes
// back through a pipe, which the limit does not cover.
CliRun run_cli_file_limit(const std::vector<std::string>& args, rlim_t max_bytes) {
    int fds[2];
    if (::pipe(fds) != 0) return {-1, std::string("pipe: ") + std::strerror(errno)};
    const std::string bin = cli_binary();
    const pid_t pid = fork();
    if (pid == 0) {
        ::dup2(fds[1], 1);
        ::dup2(fds[1], 2);
        ::close(fds[0]);
        ::close(fds[1]);
        ::signal(SIGXFSZ, SIG_IGN);  // kept across exec
        rlimit lim{};
        ::getrlimit(RLIMIT_FSIZE, &lim);
        lim.rlim_cur = std::min(max_bytes, lim.rlim_max);
        if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) ::_exit(126);
        exec_cli(bin, args);
    }
    ::close(fds[1]);
    std::string out;
    char buf[4096];
    for (ssize_t k; (k = ::read(fds[0], buf, sizeof buf)) != 0;) {
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) break;
        out.append(buf, static_cast<size_t>(k));
    }
    ::close(fds[0]);
    int st = 0;
    ::waitpid(pid, &st, 0);
    return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
}

// A run stopped by a write that found no room (`reason`, the system's
// words): exit status 1 with one clear error naming a file in `dir`, no
// output, no temporary file left in `dir`.
void expect_failed_write(const CliRun& r, const fs::path& dir, const fs::path& out,
                         const std::string& reason) {
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find(reason), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(dir.string()), std::string::npos) << "the error names no file: " << r.out;
    EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(out)) << "partial output";
    for (const auto& e : fs::recursive_directory_iterator(dir))
        EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos)
            << "temporary file left: " << e.path();
}

// Everything in `dir` but the output itself: temporaries, journals.
std::vector<std::string> leftovers(const fs::path& dir, const fs::path& out) {
    std::vector<std::string> v;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.path() != out && e.path().extension() != ".log")
            v.push_back(e.path().filename().string());
    return v;
}

}  // namespace

TEST(KillResume, SigkillAtTenRandomMomentsThenResumeIsByteIdentical) {
    REQUIRE_DATA_AT(kModel);
    const fs::path d = tmp_dir("sig");
    const fs::path ref = d / "ref.safetensors";
    const auto t0 = std::chrono::steady_clock::now();
    auto r = run_cli(joined(quantize_args(ref)));
    ASSERT_EQ(r.code, 0) << r.out;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string want = slurp(ref);

    // Moments drawn over the whole run (startup, calibration, every layer,
    // the final write); the seed is printed so that a failure can be replayed.
    const char* env_seed = std::getenv("CORTIQ_KILL_SEED");
    const unsigned seed = env_seed ? static_cast<unsigned>(std::atoi(env_seed)) : 20240611u;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> when(0.0, seconds);
    int killed_with_journal = 0;
    for (int k = 0; k < 10; ++k) {
        const double at = when(rng);
        SCOPED_TRACE(::testing::Message() << "kill " << k << " at " << at << " s of " << seconds
                                          << " (CORTIQ_KILL_SEED=" << seed << ")");
        const fs::path out = d / ("k" + std::to_string(k) + ".safetensors");
        const pid_t pid = spawn(quantize_args(out), d / "killed.log");
        ASSERT_GT(pid, 0);
        std::this_thread::sleep_for(std::chrono::duration<double>(at));
        ::kill(pid, SIGKILL);
        int st = 0;
        ::waitpid(pid, &st, 0);
        if (fs::exists(out.string() + ".journal")) ++killed_with_journal;
        // The output appears whole or not at all (a rename); a run killed
        // after the rename but before it removed its journal is complete.
        auto args = quantize_args(out);
        args.push_back("--resume");
        if (fs::exists(out)) {
            EXPECT_EQ(slurp(out), want) << "a killed run left a partial output";
            args.push_back("--force");
        }
        r = run_cli(joined(args));
        ASSERT_EQ(r.code, 0) << r.out;
        EXPECT_EQ(slurp(out), want) << "the resumed run differs from the uninterrupted one";
        EXPECT_EQ(leftovers(d, out), std::vector<std::string>{"ref.safetensors"})
            << "temporary files or the journal survived the resumed run";
        fs::remove(out);
    }
    // Most moments land while the journal exists (after the settings are
    // written); if none did, the kills missed the part of the run they test.
    EXPECT_GT(killed_with_journal, 0);
    fs::remove_all(d);
}

TEST(KillResume, LeftoverTemporariesOfADeadRunAreRemoved) {
    REQUIRE_DATA_AT(kModel);
    const fs::path d = tmp_dir("tmp");
    const fs::path out = d / "o.safetensors";
    // A child that exits at once gives a pid that no longer runs.
    const pid_t dead = fork();
    if (dead == 0) ::_exit(0);
    ::waitpid(dead, nullptr, 0);
    const std::string suffix = ".tmp." + std::to_string(dead);
    std::ofstream(out.string() + suffix) << "partial output";
    fs::create_directories(out.string() + ".journal");
    std::ofstream(out.string() + ".journal/layer_3.safetensors" + suffix) << "partial entry";
    std::ofstream(d / ("other.safetensors" + suffix)) << "not ours";
    const std::string live = out.string() + ".tmp." + std::to_string(getpid());
    std::ofstream(live) << "a live writer's";
    auto args = quantize_args(out);
    args.push_back("--resume");
    const auto r = run_cli(joined(args));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_FALSE(fs::exists(out.string() + suffix));
    EXPECT_FALSE(fs::exists(out.string() + ".journal"));
    EXPECT_TRUE(fs::exists(d / ("other.safetensors" + suffix))) << "another file's temporary";
    EXPECT_TRUE(fs::exists(live)) << "a running writer's temporary";
    fs::remove_all(d);
}

TEST(KillResume, FileSizeLimitGivesAClearErrorAndNoPartialOutput) {
    REQUIRE_DATA_AT(kModel);
    const fs::path d = tmp_dir("fsize");
    const fs::path ref = d / "ref.safetensors";
    auto r = run_cli(joined(quantize_args(ref)));
    ASSERT_EQ(r.code, 0) << r.out;
    const std::string want = slurp(ref);
    const fs::path dir = d / "out";
    fs::create_directories(dir);
    const fs::path out = dir / "o.safetensors";
    // Two limits. 4 KiB holds the journal's settings but not its first layer
    // entry (a layer's seven projections at 1 bit per weight are 5.5 KiB of
    // signs alone); a byte short of the output holds every journal entry (each
    // a part of the output) but not the output: the run fails writing it,
    // after writing what fits.
    const rlim_t output_short = want.size() - 1;
    for (const rlim_t limit : {rlim_t{4096}, output_short}) {
        SCOPED_TRACE(::testing::Message() << "files limited to " << limit << " bytes");
        r = run_cli_file_limit(quantize_args(out), limit);
        expect_failed_write(r, dir, out, std::strerror(EFBIG));
        const std::string failed =
            limit == output_short ? out.string() + ": write failed" : out.string() + ".journal/";
        EXPECT_NE(r.out.find(failed), std::string::npos) << r.out;
        // Without the limit, the journal it kept resumes into the same bytes.
        auto args = quantize_args(out);
        args.push_back("--resume");
        r = run_cli(joined(args));
        ASSERT_EQ(r.code, 0) << r.out;
        EXPECT_EQ(slurp(out), want);
        fs::remove(out);
    }
    fs::remove_all(d);
}

TEST(KillResume, FullDiskGivesAClearErrorAndNoPartialOutput) {
    REQUIRE_DATA_AT(kModel);
    const fs::path d = tmp_dir("full");
    const fs::path ref = d / "ref.safetensors";
    auto r = run_cli(joined(quantize_args(ref)));
    ASSERT_EQ(r.code, 0) << r.out;
    const auto out_bytes = fs::file_size(ref);

    const fs::path mnt = d / "mnt";
    fs::create_directories(mnt);
    // Two sizes: one too small for the journal's first entries, one that
    // holds the journal but not the output beside it.
    for (const uintmax_t size : {uintmax_t{24} << 10, out_bytes + (8 << 10)}) {
        SCOPED_TRACE(::testing::Message() << "tmpfs of " << size << " bytes");
        const std::string opts = "size=" + std::to_string(size);
        if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, opts.c_str()) != 0) {
            const int err = errno;  // before remove_all sets its own
            fs::remove_all(d);
            GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(err)
                         << "); FileSizeLimitGivesAClearErrorAndNoPartialOutput runs instead";
        }
        struct Unmount {
            fs::path p;
            ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
        } unmount{mnt};
        const fs::path out = mnt / "o.safetensors";
        r = run_cli(joined(quantize_args(out)));
        expect_failed_write(r, mnt, out, std::strerror(ENOSPC));
        // With room again, the journal it kept resumes into the same bytes.
        const std::string bigger = "size=" + std::to_string(4 * out_bytes + (1 << 20));
        ASSERT_EQ(::mount("tmpfs", mnt.c_str(), "tmpfs", MS_REMOUNT, bigger.c_str()), 0);
        auto args = quantize_args(out);
        args.push_back("--resume");
        r = run_cli(joined(args));
        ASSERT_EQ(r.code, 0) << r.out;
        EXPECT_EQ(slurp(out), slurp(ref));
    }
    fs::remove_all(d);
}
