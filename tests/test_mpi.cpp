// `mpirun -np N cortiq quantize` (docs/distributed.md): the file is byte for
// byte the one a single process writes, for N = 1, 2, 3 (Open MPI with
// --oversubscribe, so on any machine, two cores included), tuned
// (block + kd) on stories260K (N = 1, 2, 3) and untuned on tiny-llama-6m
// (N = 2, 3); a rank killed
// mid-run ends the job with mpirun's message naming it and no output file,
// and --resume under mpirun then finishes the same file. Skips where the
// build has no MPI; fails where it has one but mpirun is missing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_run.hpp"
#include "require.hpp"
#include "test_files.hpp"

namespace fs = std::filesystem;
using cortiq::test::run_cli;
using cortiq::test::slurp;

namespace {

const std::string kData = cortiq::test::shared_data().string();

#ifdef CORTIQ_HAVE_MPI
constexpr bool kMpiBuild = true;
#else
constexpr bool kMpiBuild = false;
#endif

#define REQUIRE_MPI()                                                             \
    do {                                                                          \
        if (!kMpiBuild) GTEST_SKIP() << "this build has no MPI (libopenmpi-dev)"; \
        ASSERT_EQ(std::system("command -v mpirun > /dev/null"), 0)                \
            << "the build has MPI but mpirun is not on the PATH (openmpi-bin)";   \
    } while (0)

// mpirun with as many ranks as asked on any machine; root may run it in
// containers and CI.
std::string mpirun(int ranks) {
    return "mpirun --oversubscribe " + std::string(::geteuid() == 0 ? "--allow-run-as-root " : "") +
           "-np " + std::to_string(ranks) + " ";
}

// Runs `command` through the shell, output into `log`; the exit status.
int shell(const std::string& command, const fs::path& log) {
    const int st = std::system((command + " > " + log.string() + " 2>&1").c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

// Under mpirun the tuning mode is written --tune=MODE: Open MPI 4 reads a
// separate "--tune" anywhere on the command line as its own option.
std::string stories_args(const fs::path& out) {
    return kData + "/models/stories260K --calib " + kData +
           "/text/tinystories-calib.txt --bpw 1 --samples 12 --seqlen 64 --tune=block+kd "
           "--tune-epochs 2 --kd-epochs 2 --device cpu -q --force -o " +
           out.string();
}

// Several windows a block-tuning and a distillation step: the ranks tune
// each block and distil together, each adding the gradients of its own
// windows in window order.
std::string stories_batch_args(const fs::path& out) {
    return stories_args(out) + " --tune-batch 3 --kd-batch 3";
}

std::string llama_args(const fs::path& out) {
    return kData + "/models/tiny-llama-6m --calib " + kData +
           "/text/tinystories-calib.txt --bpw 1 --samples 10 --seqlen 96 --tune=none --device "
           "cpu -q --force -o " +
           out.string();
}

// --file-bpw: rank 0 measures and plans, every rank encodes from its text;
// the embedding (stories260K's tied table) is compressed by rank 0 and sent.
std::string planned_args(const fs::path& out) {
    return kData + "/models/stories260K --calib " + kData +
           "/text/tinystories-calib.txt --file-bpw 2.5 --samples 12 --seqlen 64 "
           "--sensitivity-windows 2 --tune=none --device cpu -q --force -o " +
           out.string();
}

// The plain run (2 threads) and mpirun with each of `ranks` ranks (1 thread
// each) write the same bytes.
void expect_same_file_for_any_ranks(std::string (*args)(const fs::path&), const char* tag,
                                    std::vector<int> ranks) {
    const fs::path dir = cortiq::test::scratch_dir("cortiq_mpi_", tag);
    const fs::path one = dir / "plain.safetensors";
    const auto plain = run_cli("quantize " + args(one) + " --threads 2");
    ASSERT_EQ(plain.code, 0) << plain.out;
    const std::string want = slurp(one);
    ASSERT_GT(want.size(), 0u);
    for (int n : ranks) {
        const fs::path out = dir / ("np" + std::to_string(n) + ".safetensors");
        const fs::path log = dir / ("np" + std::to_string(n) + ".log");
        const int rc = shell(
            mpirun(n) + cortiq::test::cli_binary() + " quantize " + args(out) + " --threads 1",
            log);
        ASSERT_EQ(rc, 0) << slurp(log);
        EXPECT_TRUE(slurp(out) == want) << tag << ": " << n << " ranks wrote another file";
        if (n > 1)
            EXPECT_NE(slurp(log).find(std::to_string(n) + " ranks calibrated"), std::string::npos)
                << slurp(log);
        if (n > 1 && args(out).find("--tune-batch") != std::string::npos)
            EXPECT_NE(slurp(log).find("tuned the blocks, distilled"), std::string::npos)
                << slurp(log);
        EXPECT_FALSE(fs::exists(out.string() + ".journal")) << "the journal outlived the run";
    }
    fs::remove_all(dir);
}

// The pid of the process of rank `rank` whose command line holds `marker`.
pid_t rank_pid(int rank, const std::string& marker) {
    for (const auto& e : fs::directory_iterator("/proc")) {
        const std::string name = e.path().filename();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        std::string cmd = slurp(e.path() / "cmdline"), env = slurp(e.path() / "environ");
        if (cmd.find(marker) == std::string::npos || cmd.find("mpirun") != std::string::npos)
            continue;
        const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
        for (size_t at = 0; (at = env.find(want, at)) != std::string::npos; at += want.size())
            if ((at == 0 || env[at - 1] == '\0') &&
                (at + want.size() == env.size() || env[at + want.size()] == '\0'))
                return static_cast<pid_t>(std::stol(name));
    }
    return -1;
}

}  // namespace

TEST(Mpi, TunedStoriesFileIsTheSameForOneTwoAndThreeRanks) {
    REQUIRE_MPI();
    REQUIRE_DATA_AT(kData + "/models/stories260K");
    expect_same_file_for_any_ranks(stories_args, "stories", {1, 2, 3});
}

TEST(Mpi, BlocksTunedTogetherWithSeveralWindowsAStepGiveTheSameFile) {
    REQUIRE_MPI();
    REQUIRE_DATA_AT(kData + "/models/stories260K");
    expect_same_file_for_any_ranks(stories_batch_args, "batch", {2, 3});
}

TEST(Mpi, AnAutoPlanAndACompressedEmbeddingGiveTheSameFileForTwoRanks) {
    REQUIRE_MPI();
    REQUIRE_DATA_AT(kData + "/models/stories260K");
    expect_same_file_for_any_ranks(planned_args, "planned", {2});
}

TEST(Mpi, TinyLlamaFileIsTheSameForTwoAndThreeRanks) {
    REQUIRE_MPI();
    REQUIRE_DATA_AT(kData + "/models/tiny-llama-6m");
    expect_same_file_for_any_ranks(llama_args, "llama", {2, 3});
}

// Rank 1 killed once rank 0 has journalled a layer: mpirun ends the job,
// names the rank, and leaves no output; --resume with two ranks then writes
// the plain run's file.
TEST(Mpi, AKilledRankEndsTheJobAndResumeFinishesTheSameFile) {
    REQUIRE_MPI();
    REQUIRE_DATA_AT(kData + "/models/tiny-llama-6m");
    const fs::path dir = cortiq::test::scratch_dir("cortiq_mpi_", "kill");
    const fs::path plain = dir / "plain.safetensors", out = dir / "killed.safetensors";
    const auto p = run_cli("quantize " + llama_args(plain));
    ASSERT_EQ(p.code, 0) << p.out;

    const fs::path log = dir / "killed.log";
    const std::string command =
        mpirun(2) + cortiq::test::cli_binary() + " quantize " + llama_args(out) + " --threads 1";
    const pid_t job = fork();
    if (job == 0) {
        ::execl("/bin/sh", "sh", "-c", (command + " > " + log.string() + " 2>&1").c_str(),
                static_cast<char*>(nullptr));
        ::_exit(127);
    }
    ASSERT_GT(job, 0);
    // wait for rank 0's first journal entry, then kill rank 1
    const fs::path journal = out.string() + ".journal";
    pid_t victim = -1;
    const auto until = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    while (std::chrono::steady_clock::now() < until) {
        int entries = 0;
        if (fs::is_directory(journal))
            for (const auto& e : fs::directory_iterator(journal))
                entries += e.path().filename().string().rfind("layer_", 0) == 0 &&
                           e.path().extension() == ".safetensors";
        if (entries > 0 && (victim = rank_pid(1, out.string())) > 0) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_GT(victim, 0) << "no journal entry or no rank 1 within 5 minutes: " << slurp(log);
    ASSERT_EQ(::kill(victim, SIGKILL), 0);
    int st = 0;
    ::waitpid(job, &st, 0);
    const std::string said = slurp(log);
    EXPECT_NE(WEXITSTATUS(st), 0) << said;
    EXPECT_NE(said.find("rank 1"), std::string::npos) << "mpirun's message: " << said;
    EXPECT_FALSE(fs::exists(out)) << "a killed job left an output file";
    ASSERT_TRUE(fs::is_directory(journal));

    const fs::path log2 = dir / "resumed.log";
    const int rc = shell(mpirun(2) + cortiq::test::cli_binary() + " quantize " + llama_args(out) +
                             " --threads 1 --resume",
                         log2);
    ASSERT_EQ(rc, 0) << slurp(log2);
    EXPECT_TRUE(slurp(out) == slurp(plain)) << "the resumed file differs from the plain run's";
    fs::remove_all(dir);
}

// A rank that fails (here rank 0: the output's folder does not exist) prints
// one message naming itself and ends every rank: the job exits non-zero
// instead of leaving the other ranks waiting.
TEST(Mpi, ARankThatFailsEndsEveryRankWithOneMessage) {
    REQUIRE_MPI();
    REQUIRE_DATA_AT(kData + "/models/stories260K");
    const fs::path dir = cortiq::test::scratch_dir("cortiq_mpi_", "fail");
    const fs::path log = dir / "fail.log";
    const int rc = shell(mpirun(2) + cortiq::test::cli_binary() + " quantize " +
                             stories_args(dir / "missing" / "out.safetensors"),
                         log);
    const std::string said = slurp(log);
    EXPECT_NE(rc, 0) << said;
    EXPECT_NE(said.find("cortiq: error:"), std::string::npos) << said;
    EXPECT_NE(said.find("(rank 0 of 2; ending every rank)"), std::string::npos) << said;
    EXPECT_FALSE(fs::exists(dir / "missing")) << said;
    fs::remove_all(dir);
}

// GPU ranks are not built: `--device gpu` under mpirun is refused by every
// rank before any work (before the GPU is even looked for), with one message
// that says what runs instead, and leaves no output.
TEST(Mpi, GpuRanksAreRefusedBeforeAnyWork) {
    REQUIRE_MPI();
    REQUIRE_DATA_AT(kData + "/models/stories260K");
    const fs::path dir = cortiq::test::scratch_dir("cortiq_mpi_", "gpu");
    const fs::path log = dir / "gpu.log", out = dir / "out.safetensors";
    std::string args = stories_args(out);
    const size_t at = args.find("--device cpu");
    ASSERT_NE(at, std::string::npos) << args;
    args.replace(at, 12, "--device gpu");
    const int rc = shell(mpirun(2) + cortiq::test::cli_binary() + " quantize " + args, log);
    const std::string said = slurp(log);
    EXPECT_NE(rc, 0) << said;
    EXPECT_NE(said.find("runs with --device cpu only"), std::string::npos) << said;
    EXPECT_EQ(said.find("--device gpu:"), std::string::npos)
        << "the GPU was looked for first: " << said;
    EXPECT_FALSE(fs::exists(out)) << said;
    EXPECT_FALSE(fs::exists(out.string() + ".journal")) << said;
    fs::remove_all(dir);
}
