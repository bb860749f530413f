// The built `kda` tool, run as a user would (`kda run <operator> ...`): golden files of every
// operator pass --check, generated problems print the error and timing tables, and bad input
// (an unknown operator, an option of another operator, a bad kernel) gives one `kda: error:` line
// and a non-zero exit.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "golden_dir.hpp"
#include "io/host_problem.hpp"
#include "io/safetensors.hpp"

namespace {

struct CliResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Unique per process: ctest runs the tests of this file in parallel processes.
std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "kda_test_cli_" + std::to_string(::getpid()) + "_" + name;
}

// Runs `kda <args>`; stdout through a pipe, stderr through a file. `shell` runs before it in the
// same shell (e.g. "ulimit -v 1000000; ").
CliResult run_kda(const std::string& args, const std::string& shell = "") {
  const std::string err_path = temp_path("stderr.txt");
  const std::string command = shell + "'" + KDA_CLI_PATH + "' " + args + " 2>'" + err_path + "'";
  CliResult r;
  std::FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = read_text(err_path);
  std::filesystem::remove(err_path);
  return r;
}

std::vector<std::string> lines_starting_with(const std::string& text, const std::string& prefix) {
  std::vector<std::string> found;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) == 0) found.push_back(line);
  }
  return found;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const std::string kWy = "run chunk_bwd_wy_dqkg ";
const std::string kIntra = "run chunk_bwd_intra ";

// chunk_bwd_intra's golden files: $KDA_INTRA_GOLDEN_DIR, else ../shared/golden-intra beside
// the golden files of chunk_bwd_wy_dqkg.
std::string intra_golden_dir() {
  const char* env = std::getenv("KDA_INTRA_GOLDEN_DIR");
  return env && *env ? std::string(env) : kda::testing::golden_dir() + "-intra";
}

// Runs `kda run <op> --shape <shape> --backend cpu --repeat 1 --output path` (`run_op` is
// "run <op> ") and reads the file back (inputs and out.* tensors), for tests that edit it and run
// it again.
kda::io::SafetensorsFile generated_file(const std::string& run_op, const std::string& shape_args,
                                        const std::string& path) {
  const CliResult r =
      run_kda(run_op + shape_args + " --backend cpu --repeat 1 --output '" + path + "'");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  kda::io::SafetensorsFile file;
  EXPECT_TRUE(kda::io::read_safetensors(path, &file).ok());
  return file;
}

struct GoldenCase {
  const char* op;
  const char* file;  // in the operator's golden folder, without ".safetensors"
  int outputs;
};

const GoldenCase kGoldenCases[] = {
    {"chunk_bwd_wy_dqkg", "fixed_b2_t128_k64_bt64_fp32", 6},
    {"chunk_bwd_wy_dqkg", "tail_t100_k32_v48_bt16_fp32", 6},
    {"chunk_bwd_wy_dqkg", "varlen_5seq_k64_bt32_fp32", 6},
    {"chunk_bwd_wy_dqkg", "gva_h2_hv4_k32_bt32_fp32", 6},
    {"chunk_bwd_wy_dqkg", "svf_k64_v32_bt64_fp32", 6},
    {"chunk_bwd_wy_dqkg", "fixed_t192_k64_bt64_fp16", 6},
    {"chunk_bwd_wy_dqkg", "varlen_3seq_k128_bt64_bf16", 6},
    {"chunk_bwd_intra", "fixed_b2_t150_k128_bt64_bf16", 4},
    {"chunk_bwd_intra", "fixed_t192_k64_bt64_fp16_safe", 4},
    {"chunk_bwd_intra", "gva_h2_hv4_k64_bt32_fp32", 4},
    {"chunk_bwd_intra", "k100_t130_bt64_fp16_betaf32_diag", 4},
    {"chunk_bwd_intra", "tail_t100_k32_bt16_fp32", 4},
    {"chunk_bwd_intra", "varlen_4seq_k32_bt16_fp32_safe", 4},
};

// For the test names gtest and ctest print.
void PrintTo(const GoldenCase& c, std::ostream* out) {
  *out << c.op << "/" << c.file;
}

class CliGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(CliGolden, CheckPassesOnCpu) {
  const GoldenCase& c = GetParam();
  const std::string dir =
      std::string(c.op) == "chunk_bwd_intra" ? intra_golden_dir() : kda::testing::golden_dir();
  const std::string path = dir + "/" + c.file + ".safetensors";
  ASSERT_TRUE(std::filesystem::exists(path)) << "golden file missing: " << path;
  const CliResult r =
      run_kda("run " + std::string(c.op) + " --input '" + path + "' --check --backend cpu");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "check against the file's out.* tensors, golden bar")) << r.out;
  EXPECT_TRUE(contains(r.out, "PASS: all " + std::to_string(c.outputs) + " outputs within the bar"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "median")) << r.out;
}

INSTANTIATE_TEST_SUITE_P(Golden, CliGolden, ::testing::ValuesIn(kGoldenCases),
                         [](const auto& param_info) {
                           return std::string(param_info.param.op) + "_" + param_info.param.file;
                         });

TEST(Cli, ShapeRunChecksAgainstTheReferenceAndPrintsTheTables) {
  const CliResult r = run_kda(
      kWy + "--shape 1,100,3,32,48 --chunk-size 16 --dtype fp32 --backend cpu --repeat 2 --check");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* part : {"B=1 T=100 H=3 HV=3 K=32 V=48 BT=16 NT=7", "cpu-ref (float64)",
                           "SPEC pass bar", "every row", "err_ratio", "dv_out", "PASS",
                           "timing: cpu, 2 timed runs", "median", "min", "bytes", "GB/s"}) {
    EXPECT_TRUE(contains(r.out, part)) << "missing '" << part << "' in:\n" << r.out;
  }
  EXPECT_TRUE(contains(r.err, "kda: running cpu")) << "progress lines go to stderr: " << r.err;
}

TEST(Cli, VarlenGvaStateVFirstBf16) {
  const CliResult r =
      run_kda(kWy +
              "--shape 1,150,2,32,32 --heads-v 4 --seqlens 60,1,89 --chunk-size 32 --dtype bf16 "
              "--h-dtype x --beta-dtype fp32 --state-v-first --chunk-indices --scale 0.2 --seed 3 "
              "--backend cpu --repeat 1 --check");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "3 sequences, chunk_indices given")) << r.out;
  EXPECT_TRUE(contains(r.out, "X=bfloat16 h=bfloat16 beta=float32")) << r.out;
  EXPECT_TRUE(contains(r.out, "PASS")) << r.out;
}

TEST(Cli, LargeProblemIsCheckedOnSampledChunks) {
  // 256 chunks x 4 heads: above the full-check threshold.
  const CliResult r = run_kda(
      kWy + "--shape 1,4096,4,16,16 --chunk-size 16 --dtype fp16 --backend cpu --repeat 1 --check");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "8 sampled chunks of 256 (first, last, 6 at random; all 4 heads)"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "PASS")) << r.out;
}

TEST(Cli, OutputFileRunsAgainAndCatchesWrongResults) {
  const std::string path = temp_path("out.safetensors");
  CliResult r = run_kda(kWy +
                        "--shape 2,70,2,16,24 --chunk-size 32 --dtype fp16 --backend cpu "
                        "--repeat 1 --output '" +
                        path + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  r = run_kda(kWy + "--input '" + path + "' --backend cpu --check");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "the file's out.* tensors")) << r.out;

  // Spoil one expected output: --check fails with 1, a plain run still exits 0.
  kda::io::SafetensorsFile file;
  ASSERT_TRUE(kda::io::read_safetensors(path, &file).ok());
  kda::io::HostTensor& dq = file.tensors.at("out.dq");
  for (int64_t i = 0; i < dq.numel(); ++i) dq.set(i, dq.at(i) * 1.01);
  ASSERT_TRUE(kda::io::write_safetensors(path, file).ok());
  r = run_kda(kWy + "--input '" + path + "' --backend cpu --check");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "FAIL")) << r.out;
  EXPECT_TRUE(contains(r.err, "kda: check failed")) << r.err;
  r = run_kda(kWy + "--input '" + path + "' --backend cpu");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  std::filesystem::remove(path);
}

// A file's out.* tensors: a wrong dtype is an error naming it (not a numeric FAIL), and a file
// with only some of them has every output checked against cpu-ref too.
TEST(Cli, OutputTensorsOfTheWrongDtypeOrMissingOnesAreNotPassedOver) {
  const std::string path = temp_path("outs.safetensors");
  const kda::io::SafetensorsFile original =
      generated_file(kWy, "--shape 1,40,2,16,8 --chunk-size 16 --dtype fp32", path);
  ASSERT_FALSE(::testing::Test::HasFailure());

  kda::io::SafetensorsFile file = original;
  file.tensors.erase("out.dA");
  ASSERT_TRUE(kda::io::write_safetensors(path, file).ok());
  CliResult r = run_kda(kWy + "--input '" + path + "' --backend cpu --check");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "5 of 6 outputs in the file")) << r.out;
  EXPECT_TRUE(contains(r.out, "check against cpu-ref")) << r.out;

  file = original;
  kda::io::HostTensor& dq = file.tensors.at("out.dq");
  kda::io::HostTensor as_f16(kda::DType::f16, dq.shape);
  for (int64_t i = 0; i < dq.numel(); ++i) as_f16.set(i, dq.at(i));
  dq = as_f16;
  ASSERT_TRUE(kda::io::write_safetensors(path, file).ok());
  r = run_kda(kWy + "--input '" + path + "' --backend cpu --check");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "tensor \"out.dq\" has dtype F16, but the output is F32")) << r.err;
  std::filesystem::remove(path);
}

// SPEC: NaN in an output does not fail where the inputs held NaN. cpu and cpu-ref propagate it to
// the same elements; the check compares the rest.
TEST(Cli, NanInAnInputPropagatesAndTheCheckStillPasses) {
  const std::string path = temp_path("nan.safetensors");
  kda::io::SafetensorsFile file =
      generated_file(kWy, "--shape 2,64,2,16,16 --chunk-size 32 --dtype fp32", path);
  ASSERT_FALSE(::testing::Test::HasFailure());
  for (auto it = file.tensors.begin(); it != file.tensors.end();) {
    it = it->first.rfind("out.", 0) == 0 ? file.tensors.erase(it) : std::next(it);
  }
  file.tensors.at("h").set(5, std::nan(""));
  ASSERT_TRUE(kda::io::write_safetensors(path, file).ok());
  const CliResult r = run_kda(kWy + "--input '" + path + "' --backend cpu --check");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "PASS: all 6 outputs")) << r.out;
  std::filesystem::remove(path);
}

// A file naming an input twice is refused, naming the tensor: the header's last entry was taken
// (here a second q holding k's values, appended to the data section) and the run went on with it,
// exit 0.
TEST(Cli, FileNamingATensorTwiceIsRefused) {
  for (const auto& [run_op, shape] :
       {std::pair{kWy, "--shape 1,40,2,16,8 --chunk-size 16 --dtype fp32"},
        std::pair{kIntra, "--shape 1,40,2,16 --chunk-size 16 --dtype fp32"}}) {
    SCOPED_TRACE(run_op);
    const std::string path = temp_path("twice.safetensors");
    generated_file(run_op, shape, path);
    ASSERT_FALSE(::testing::Test::HasFailure());
    const std::string bytes = read_text(path);
    uint64_t length = 0;
    for (int i = 0; i < 8; ++i) length |= uint64_t{static_cast<uint8_t>(bytes[i])} << (8 * i);
    const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, length));
    std::string data = bytes.substr(8 + length);
    nlohmann::json second_q = header.at("k");
    const uint64_t begin = second_q["data_offsets"][0], end = second_q["data_offsets"][1];
    second_q["data_offsets"] = {data.size(), data.size() + end - begin};
    data += data.substr(begin, end - begin);
    const std::string text = header.dump();
    const std::string twice = text.substr(0, text.size() - 1) + ",\"q\":" + second_q.dump() + "}";
    std::string prefix(8, '\0');
    for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>(uint64_t{twice.size()} >> (8 * i));
    std::ofstream(path, std::ios::binary) << prefix << twice << data;

    const CliResult r = run_kda(run_op + "--input '" + path + "' --backend cpu --repeat 1");
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_TRUE(contains(
        r.err, "kda: error: safetensors: " + path + ": tensor \"q\" appears twice in the header"))
        << r.err;
    std::filesystem::remove(path);
  }
}

// -o never overwrites the --input file (it once replaced a golden file's reference outputs with
// ours), whatever the spelling of the path, and an output path that cannot be written is refused
// before the run, not after it.
TEST(Cli, OutputNeverOverwritesTheInputAndIsCheckedBeforeTheRun) {
  const std::string dir = temp_path("outdir");
  std::filesystem::create_directories(dir + "/sub");
  const std::string path = dir + "/in.safetensors";
  generated_file(kWy, "--shape 1,40,2,16,8 --chunk-size 16 --dtype fp32", path);
  ASSERT_FALSE(::testing::Test::HasFailure());
  const std::string before = read_text(path);
  std::filesystem::create_hard_link(path, dir + "/hard.safetensors");
  std::filesystem::create_symlink(path, dir + "/soft.safetensors");
  const std::string input = kWy + "--input '" + path + "' --backend cpu --repeat 1 --check ";
  for (const std::string& same : {path, dir + "/sub/../in.safetensors", dir + "//in.safetensors",
                                  dir + "/hard.safetensors", dir + "/soft.safetensors"}) {
    SCOPED_TRACE(same);
    const CliResult r = run_kda(input + "-o '" + same + "'");
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_TRUE(contains(r.err, "kda: error: -o: '" + same + "' is the --input file")) << r.err;
    EXPECT_FALSE(contains(r.err, "kda: running")) << "refused after the run: " << r.err;
    EXPECT_EQ(read_text(path), before) << "the input file was changed";
  }
  for (const auto& [out, why] : std::vector<std::pair<std::string, std::string>>{
           {"/nonexistent/dir/out.safetensors", "its directory does not exist"},
           {dir + "/sub", "is a directory"},
           {dir + "/in.safetensors/x", "its directory " + path + " is not a directory"}}) {
    SCOPED_TRACE(out);
    const CliResult r = run_kda(input + "-o '" + out + "'");
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_TRUE(contains(r.err, "kda: error: -o: cannot write '" + out + "': " + why)) << r.err;
    EXPECT_FALSE(contains(r.err, "kda: running")) << "refused after the run: " << r.err;
  }
  // Another path is written, and the input stays as it was.
  const CliResult r = run_kda(input + "-o '" + dir + "/sub/out.safetensors'");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(std::filesystem::exists(dir + "/sub/out.safetensors"));
  EXPECT_EQ(read_text(path), before);
  std::filesystem::remove_all(dir);
}

// The files in `dir`, hidden ones included (a temporary file left behind is hidden).
std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  return names;
}

// -o's file is created before the run, beside the target: a path that passes every check short
// of creating a file there (as root, /proc/version, an existing file, and /sys/x.st in a
// directory access() calls writable) failed only after the run ("cannot write /proc/version: No
// such file or directory"). No temporary file is left, whether a run is refused after -o's file
// was created or writes it.
TEST(Cli, OutputFileIsCreatedBeforeTheRun) {
  const std::string small_intra = kIntra + "--shape 1,64,2,16 --chunk-size 16 --dtype fp32 ";
  for (const std::string out : {"/proc/version", "/sys/x.st"}) {
    SCOPED_TRACE(out);
    if (!std::filesystem::exists(std::filesystem::path(out).parent_path())) continue;
    const CliResult r = run_kda(small_intra + "--backend cpu --repeat 1 -o " + out);
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    const std::vector<std::string> errors = lines_starting_with(r.err, "kda: error: ");
    ASSERT_EQ(errors.size(), 1u) << r.err;
    EXPECT_TRUE(contains(errors[0], "cannot write")) << errors[0];
    EXPECT_TRUE(contains(errors[0], out)) << errors[0];
    EXPECT_FALSE(contains(r.err, "kda: running")) << "refused after the run: " << r.err;
  }
  const std::string dir = temp_path("created");
  std::filesystem::create_directories(dir);
  CliResult r = run_kda(small_intra + "--backend cpu-ref --check -o '" + dir + "/out.safetensors'");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_TRUE(files_in(dir).empty()) << files_in(dir).front();
  r = run_kda(small_intra + "--backend cpu --repeat 1 -o '" + dir + "/out.safetensors'");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"out.safetensors"});
  std::filesystem::remove_all(dir);
}

// A write past the file-size limit (ulimit -f) is refused with a message, and its partial file
// removed: SIGXFSZ killed kda and left a hidden ".out.safetensors.partial-PID-0" behind.
TEST(Cli, OutputPastTheFileSizeLimitLeavesNoPartialFile) {
  const std::string dir = temp_path("fsize");
  std::filesystem::create_directories(dir);
  // 40 blocks: 20 or 40 KB, by the shell's block size; the file is about 130 KB.
  const CliResult r = run_kda(kIntra + "--shape 1,64,2,16 --chunk-size 16 --backend cpu " +
                                  "--repeat 1 -o '" + dir + "/out.safetensors'",
                              "ulimit -f 40; ");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "kda: error: safetensors: cannot write " + dir +
                                  "/out.safetensors: File too large (the partial file was "
                                  "removed)"))
      << r.err;
  EXPECT_TRUE(files_in(dir).empty()) << files_in(dir).front();
  std::filesystem::remove_all(dir);
}

// --check on cpu-ref compares with the file's out.* tensors, the only reference there is: a file
// without them, or without some, is refused before the run (it printed "check skipped" and
// exited 0, as a pass would); with all of them it is a real check. Without --check, cpu-ref
// runs and says that nothing was checked.
TEST(Cli, CheckOnCpuRefNeedsEveryExpectedOutput) {
  const std::string path = temp_path("cpuref.safetensors");
  const kda::io::SafetensorsFile original =
      generated_file(kWy, "--shape 1,40,2,16,8 --chunk-size 16 --dtype fp32", path);
  ASSERT_FALSE(::testing::Test::HasFailure());
  const std::string run = kWy + "--input '" + path + "' --backend cpu-ref --check";
  CliResult r = run_kda(run);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "PASS: all 6 outputs")) << r.out;

  kda::io::SafetensorsFile file = original;
  file.tensors.erase("out.dA");
  file.tensors.erase("out.db");
  ASSERT_TRUE(kda::io::write_safetensors(path, file).ok());
  r = run_kda(run);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_TRUE(contains(r.err,
                       "kda: error: --check: nothing to check cpu-ref's outputs out.db, "
                       "out.dA against (the file has no out.* tensor for them)"))
      << r.err;
  EXPECT_FALSE(contains(r.err, "kda: running")) << "refused after the run: " << r.err;

  for (auto it = file.tensors.begin(); it != file.tensors.end();) {
    it = it->first.rfind("out.", 0) == 0 ? file.tensors.erase(it) : std::next(it);
  }
  ASSERT_TRUE(kda::io::write_safetensors(path, file).ok());
  r = run_kda(run);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_TRUE(contains(r.err,
                       "--check: nothing to check cpu-ref's outputs against (the file has "
                       "no out.* tensors)"))
      << r.err;
  r = run_kda(kWy + "--input '" + path + "' --backend cpu-ref");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "nothing checked")) << r.out;
  std::filesystem::remove(path);
}

// tools/run-model-shape.sh passes defaults and appends the user's arguments: the last wins.
TEST(Cli, LaterOptionOverridesEarlier) {
  const CliResult r =
      run_kda(kWy + "--shape 1,20,1,8,8 --chunk-size 16 --backend cpu --repeat 5 --repeat 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("2 timed runs"), std::string::npos) << r.out;
}

// The operators as `kda run` lists them: every one of io::ops(), in that order.
std::string operator_list() {
  std::string text;
  for (const kda::io::OpIo* op : kda::io::ops())
    text += (text.empty() ? "" : ", ") + std::string(op->name);
  return text;
}

TEST(Cli, HelpAndVersionExitZero) {
  CliResult r = run_kda("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(contains(r.out, "run")) << r.out;
  r = run_kda("run --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const kda::io::OpIo* op : kda::io::ops()) {
    EXPECT_TRUE(contains(r.out, op->name)) << "kda run --help does not list " << op->name << ":\n"
                                           << r.out;
  }
  EXPECT_TRUE(contains(r.out, "operators: " + operator_list())) << r.out;
  r = run_kda(kWy + "--help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* option : {"--shape", "B,T,H,K,V", "--kernel", "--heads-v", "--state-v-first"}) {
    EXPECT_TRUE(contains(r.out, option)) << "missing '" << option << "' in:\n" << r.out;
  }
  EXPECT_FALSE(contains(r.out, "--safe-gate")) << r.out;
  r = run_kda(kIntra + "--help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* option : {"--shape", "B,T,H,K ", "--kernel", "--heads-v", "--safe-gate"}) {
    EXPECT_TRUE(contains(r.out, option)) << "missing '" << option << "' in:\n" << r.out;
  }
  EXPECT_FALSE(contains(r.out, "--state-v-first")) << r.out;
  r = run_kda("--version");
  EXPECT_EQ(r.exit_code, 0);
}

// --kernel reaches the library: auto runs on any backend (and is printed), a cuda kernel on a cpu
// backend is refused by the library, naming the kernel.
TEST(Cli, KernelChoice) {
  const std::string small = kWy + "--shape 1,40,2,16,16 --chunk-size 16 --dtype fp32 ";
  CliResult r = run_kda(small + "--backend cpu --kernel auto --repeat 1 --check");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "  kernel   auto")) << r.out;
  for (const char* call : {"--backend cpu --kernel sm80_mma", "--backend cpu-ref --kernel simt"}) {
    SCOPED_TRACE(call);
    r = run_kda(small + call);
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    const std::vector<std::string> errors = lines_starting_with(r.err, "kda: error: ");
    ASSERT_EQ(errors.size(), 1u) << r.err;
    const std::string kernel = std::string(call).substr(std::string(call).rfind(' ') + 1);
    EXPECT_TRUE(contains(errors[0], kernel + " is a cuda kernel")) << errors[0];
    EXPECT_TRUE(contains(errors[0], "takes kernel auto")) << errors[0];
  }
}

TEST(Cli, IntraVarlenGvaSafeGateInt32Indices) {
  const CliResult r = run_kda(
      kIntra +
      "--shape 1,150,2,32 --heads-v 4 --seqlens 60,1,89 --chunk-size 32 --dtype bf16 "
      "--beta-dtype fp32 --chunk-indices --index-dtype i32 --safe-gate --strong-every 1 --seed 3 "
      "--backend cpu --repeat 1 --check");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* part : {"operator chunk_bwd_intra (kda_kernels.chunk_kda_bwd_intra",
                           "B=1 T=150 H=2 HV=4 K=32 BT=32 NT=6 (3 sequences, chunk_indices given)",
                           "X=bfloat16 beta=float32", "safe_gate=true", "cpu-ref (float64)",
                           "every row", "out.dg", "PASS: all 4 outputs", "timing: cpu"}) {
    EXPECT_TRUE(contains(r.out, part)) << "missing '" << part << "' in:\n" << r.out;
  }
}

TEST(Cli, IntraLargeProblemIsCheckedOnSampledChunks) {
  const CliResult r = run_kda(
      kIntra + "--shape 1,4096,4,16 --chunk-size 16 --dtype fp16 --backend cpu --repeat 1 --check");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "8 sampled chunks of 256 (first, last, 6 at random; all 4 heads)"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "PASS")) << r.out;
}

// chunk_bwd_epilogue's per-head parameters go whole into the sampled problem, and its sums over
// every chunk (dA_log, ddt_bias) are said not compared rather than compared against a sample.
TEST(Cli, EpilogueLargeProblemIsCheckedOnSampledChunks) {
  const CliResult r = run_kda(
      "run chunk_bwd_epilogue --shape 1,4096,4,16,16 --chunk-size 16 --dtype fp16 "
      "--gate softplus --beta-sigmoid --backend cpu --repeat 1 --check");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* part :
       {"8 sampled chunks of 256 (first, last, 6 at random; all 4 heads)",
        "not compared: out.dA_log, out.ddt_bias (sums over every chunk)", "PASS: all 5 outputs"}) {
    EXPECT_TRUE(contains(r.out, part)) << "missing '" << part << "' in:\n" << r.out;
  }
}

// chunk_bwd_dhu's options reach the problem, and its scan is checked whole however large (each
// chunk depends on the chunks after it, so a sample of chunks is no smaller problem).
TEST(Cli, DhuOptionsAndItsScanIsNeverSampled) {
  CliResult r = run_kda(
      "run chunk_bwd_dhu --shape 1,150,2,20,36 --heads-v 4 --seqlens 60,1,0,89 --chunk-size 32 "
      "--dtype fp16 --chunk-indices --state-v-first --gate-g --no-gk --no-h0 --state-dtype x "
      "--scale 0.2 --backend cpu --repeat 1 --check");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* part : {"operator chunk_bwd_dhu (kda_kernels.chunk_gated_delta_rule_bwd_dhu",
                           "B=1 T=150 H=2 HV=4 K=20 V=36 BT=32 NT=6 (4 sequences, chunk_indices "
                           "given)",
                           "X=float16 h0=none dht=float16  (states stored [.., V, K])",
                           "g=true gk=false", "every row", "PASS: all 3 outputs"}) {
    EXPECT_TRUE(contains(r.out, part)) << "missing '" << part << "' in:\n" << r.out;
  }
  r = run_kda(
      "run chunk_bwd_dhu --shape 1,4096,4,16,16 --chunk-size 16 --dtype bf16 --backend cpu "
      "--repeat 1 --check");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "every row (all 256 chunks x 4 heads; never sampled")) << r.out;
  EXPECT_TRUE(contains(r.out, "PASS: all 3 outputs")) << r.out;
}

// chunk_fwd_h's options reach the problem, and its scan is checked whole however large (each
// chunk depends on the chunks before it).
TEST(Cli, FwdHOptionsAndItsScanIsNeverSampled) {
  CliResult r = run_kda(
      "run chunk_fwd_h --shape 1,150,2,20,36 --heads-v 4 --seqlens 60,1,0,89 --chunk-size 32 "
      "--dtype fp16 --chunk-indices --state-v-first --gate-g --no-gk --state-dtype x "
      "--backend cpu --repeat 1 --check");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* part : {"operator chunk_fwd_h (kda_kernels.chunk_gated_delta_rule_fwd_h",
                           "B=1 T=150 H=2 HV=4 K=20 V=36 BT=32 NT=6 (4 sequences, chunk_indices "
                           "given)",
                           "X=float16 initial_state=float16  (states stored [.., V, K])",
                           "g=true gk=false", "every row", "PASS: all 3 outputs"}) {
    EXPECT_TRUE(contains(r.out, part)) << "missing '" << part << "' in:\n" << r.out;
  }
  r = run_kda(
      "run chunk_fwd_h --shape 1,4096,4,16,16 --chunk-size 16 --dtype bf16 --no-initial-state "
      "--backend cpu --repeat 1 --check");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "X=bfloat16 initial_state=none")) << r.out;
  EXPECT_TRUE(contains(r.out, "every row (all 256 chunks x 4 heads; never sampled")) << r.out;
  EXPECT_TRUE(contains(r.out, "PASS: all 3 outputs")) << r.out;
}

// The options round-trip through the file's metadata (safe_gate, chunk_size), and a spoiled
// expected output fails the check.
TEST(Cli, IntraOutputFileRunsAgainAndCatchesWrongResults) {
  const std::string path = temp_path("intra.safetensors");
  kda::io::SafetensorsFile file =
      generated_file(kIntra, "--shape 2,70,2,16 --chunk-size 32 --dtype fp16 --safe-gate", path);
  ASSERT_FALSE(::testing::Test::HasFailure());
  EXPECT_EQ(file.metadata["safe_gate"], "true");
  CliResult r = run_kda(kIntra + "--input '" + path + "' --backend cpu --check");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "safe_gate=true")) << r.out;
  EXPECT_TRUE(contains(r.out, "PASS: all 4 outputs")) << r.out;

  kda::io::HostTensor& db = file.tensors.at("out.db");
  for (int64_t i = 0; i < db.numel(); ++i) db.set(i, db.at(i) * 1.01);
  ASSERT_TRUE(kda::io::write_safetensors(path, file).ok());
  r = run_kda(kIntra + "--input '" + path + "' --backend cpu --check");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "FAIL")) << r.out;

  // Another operator's file: its tensors are named in the error.
  r = run_kda(kWy + "--input '" + path + "' --backend cpu");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "for chunk_bwd_wy_dqkg")) << r.err;
  std::filesystem::remove(path);
}

// An empty value is refused for every option that takes one, naming the option: '' meant the
// default for --seqlens, --backend and --scale (the run went on, exit 0) and was refused by the
// others (-o, --kernel) each in its own words.
TEST(Cli, EmptyOptionValuesAreRefusedNamingTheOption) {
  const std::vector<std::string> common = {"--chunk-size", "--dtype",  "--beta-dtype", "--seqlens",
                                           "--seed",       "--output", "-o",           "--backend",
                                           "--kernel",     "--repeat"};
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {kWy + "--shape 1,64,2,16,16 ", {"--heads-v", "--h-dtype", "--scale"}},
      {kIntra + "--shape 1,64,2,16 ", {"--heads-v", "--strong-every", "--index-dtype"}}};
  for (const auto& [run_op, own] : cases) {
    std::vector<std::string> options = common;
    options.insert(options.end(), own.begin(), own.end());
    for (const std::string& option : options) {
      SCOPED_TRACE(run_op + option + " ''");
      const CliResult r = run_kda(run_op + "--backend cpu --repeat 1 " + option + " ''");
      EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
      const std::vector<std::string> errors = lines_starting_with(r.err, "kda: error: ");
      ASSERT_EQ(errors.size(), 1u) << r.err;
      const std::string name = option == "-o" ? "--output" : option;
      EXPECT_TRUE(contains(errors[0], "kda: error: " + name + ": ")) << errors[0];
      EXPECT_FALSE(contains(r.err, "kda: running")) << r.err;
    }
    // --input and --shape, each alone.
    const std::string op = run_op.substr(0, run_op.find(" --shape") + 1);
    for (const std::string option : {"--input", "--shape"}) {
      SCOPED_TRACE(op + option + " ''");
      const CliResult r = run_kda(op + option + " ''");
      EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
      EXPECT_TRUE(contains(r.err, "kda: error: " + option + ": expected a value, got ''")) << r.err;
    }
  }
}

// The memory guard compares with the address-space limit (ulimit -v) where it leaves less than
// physical memory: a shape that fit the machine but not the limit was admitted and failed late
// with a bare "out of memory" (exit 3, after 7 to 47 s at larger shapes).
TEST(Cli, MemoryGuardHonoursTheAddressSpaceLimit) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer reserves terabytes of address space: nothing starts under "
                  "ulimit -v";
#endif
  const double physical =
      static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  if (physical < 4e9) GTEST_SKIP() << "the shapes below must fit this machine's memory";
  const std::string limit = "ulimit -v 1000000; ";  // KiB: about 1 GB
  const std::string bound = "the process's address-space limit (ulimit -v) is 1.0 GB";
  const std::string sparse = temp_path("sparse_600mb.safetensors");
  {
    std::ofstream(sparse, std::ios::binary).put('\0');
    std::filesystem::resize_file(sparse, 600'000'000);  // sparse: no disk used
  }
  const std::vector<std::pair<std::string, std::string>> calls = {
      {kWy + "--shape 1,16384,16,128,128 --backend cpu --repeat 1",
       "--shape: the problem needs 1.6 GB of host memory, " + bound},
      {kIntra + "--shape 1,32768,16,128 --backend cpu --repeat 1",
       "--shape: the problem needs 2.4 GB of host memory, " + bound},
      {kIntra + "--input '" + sparse + "'",
       "--input: reading it needs about 1.8 GB of host memory (three times the file's 0.6 GB), " +
           bound}};
  for (const auto& [args, message] : calls) {
    SCOPED_TRACE(args);
    const CliResult r = run_kda(args, limit);
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_TRUE(contains(r.err, "kda: error: " + message)) << r.err;
  }
  std::filesystem::remove(sparse);
}

struct BadCall {
  std::string args;
  int exit_code;
  std::string message;  // part of the error line
};

TEST(Cli, BadInputGivesOneErrorLineAndANonZeroExit) {
  const std::string garbage = temp_path("garbage.safetensors");
  {
    // Header length 16, then 16 bytes that are not JSON.
    const std::string bytes("\x10\0\0\0\0\0\0\0{not json at all}", 8 + 17);
    std::ofstream(garbage, std::ios::binary) << bytes;
  }
  const std::string small = kWy + "--shape 1,64,2,16,16 --chunk-size 16 --dtype fp32 ";
  const std::string small_intra = kIntra + "--shape 1,64,2,16 --chunk-size 16 --dtype fp32 ";
  // Four times this machine's memory, but sparse: no disk used, refused before reading (and
  // too large for even an overcommitting allocator, were the check ever lost).
  const std::string sparse = temp_path("sparse.safetensors");
  {
    std::ofstream(sparse, std::ios::binary).put('\0');
    std::filesystem::resize_file(sparse, 4 * static_cast<uintmax_t>(sysconf(_SC_PHYS_PAGES)) *
                                             static_cast<uintmax_t>(sysconf(_SC_PAGE_SIZE)));
  }
  const std::string operators = "(operators: " + operator_list() + ")";
  std::vector<BadCall> calls = {
      {kWy + "--input '" + garbage + "'", 2,
       "safetensors: " + garbage + ": header is not valid JSON"},
      {kWy + "--input /nonexistent/x.safetensors", 2, "no such file"},
      {kWy + "--input '" + ::testing::TempDir() + "'", 2, "is a directory"},
      {kWy + "--bogus", 2, "--bogus: not an option of chunk_bwd_wy_dqkg"},
      {"", 2, "subcommand is required"},
      // The operator: missing, unknown, or after an option.
      {"run", 2, "run: name the operator first: kda run <operator> [options] " + operators},
      {"run --bogus", 2, "run: name the operator first"},
      {"run --shape 1,64,2,16,16", 2, "run: name the operator first"},
      {"run chunk_kda_bwd_wy_dqkg_fused --shape 1,64,2,16,16", 2,
       "unknown operator 'chunk_kda_bwd_wy_dqkg_fused' " + operators},
      {"run --shape 1,64,2,16,16 chunk_bwd_wy_dqkg", 2,
       "run: '--shape' before the operator; the options come after it"},
      {kWy + "chunk_bwd_intra", 2, "unexpected argument 'chunk_bwd_intra' for chunk_bwd_wy_dqkg"},
      {kWy, 2, "run chunk_bwd_wy_dqkg: give --input FILE.safetensors or --shape B,T,H,K,V"},
      {kIntra, 2, "run chunk_bwd_intra: give --input FILE.safetensors or --shape B,T,H,K"},
      // An option of another operator.
      {small + "--safe-gate", 2,
       "--safe-gate: not an option of chunk_bwd_wy_dqkg (it is one of chunk_bwd_intra)"},
      {small + "--strong-every 2", 2, "--strong-every: not an option of chunk_bwd_wy_dqkg"},
      {small_intra + "--state-v-first", 2,
       "--state-v-first: not an option of chunk_bwd_intra (it is one of chunk_bwd_wy_dqkg, "
       "chunk_bwd_epilogue, chunk_bwd_dhu, chunk_fwd_h)"},
      {small_intra + "--scale=0.5", 2, "--scale: not an option of chunk_bwd_intra"},
      {small_intra + "--h-dtype fp32", 2, "--h-dtype: not an option of chunk_bwd_intra"},
      // --kernel
      {small + "--kernel tensor", 2, "--kernel: expected auto, simt or sm80_mma, got 'tensor'"},
      {small + "--backend cpu --kernel sm80_mma", 2, "kernel: sm80_mma is a cuda kernel"},
      {kWy + "--shape 1,2,3", 2, "--shape: expected five integers B,T,H,K,V"},
      {kIntra + "--shape 1,2,3,4,5", 2, "--shape: expected four integers B,T,H,K"},
      {kWy + "--shape 1,x,2,16,16", 2, "--shape: expected comma-separated integers"},
      {kWy + "--shape 1,64,2,16,16 --dtype fp8", 2, "--dtype: expected bf16, fp16 or fp32"},
      {kWy + "--shape 1,64,2,16,16 --h-dtype fp64", 2, "--h-dtype"},
      {kWy + "--shape 1,64,2,16,16 --seqlens 10,20", 2, "--seqlens: lengths sum to 30"},
      {kIntra + "--shape 1,64,2,16 --seqlens 10,20", 2,
       "--seqlens: lengths sum to 30; --shape must then be 1,30,H,K, got"},
      {kWy + "--shape 1,64,2,16,16 --chunk-indices", 2, "--chunk-indices: needs --seqlens"},
      {kWy + "--shape 1,64,2,16,16 --scale abc", 2, "--scale"},
      {kWy + "--shape 1,64,2,16,16 --repeat 0", 2, "--repeat"},
      {kWy + "--input x.safetensors --dtype fp16", 2, "excludes"},
      {kIntra + "--input x.safetensors --safe-gate", 2, "excludes"},
      {small + "--backend tpu", 2, "--backend: expected cpu-ref, cpu or cuda"},
      // --chunk-size: the allowed values, named by the option (100000000 was blamed on
      // --shape by the memory estimate; 10^23 was clamped to 2^63 - 1 by CLI11).
      {kWy + "--shape 1,64,2,16,16 --chunk-size 48 --backend cpu", 2,
       "--chunk-size: expected 16, 32 or 64, got '48'"},
      {small + "--chunk-size 100000000 --backend cpu", 2,
       "--chunk-size: expected 16, 32 or 64, got '100000000'"},
      {small + "--chunk-size 100000000000000000000000", 2,
       "--chunk-size: expected 16, 32 or 64, got '100000000000000000000000'"},
      {small + "--chunk-size -64", 2, "--chunk-size: expected 16, 32 or 64, got '-64'"},
      {small_intra + "--chunk-size 0", 2, "--chunk-size: expected 16, 32 or 64, got '0'"},
      // --check with nothing to check against: not a pass.
      {small + "--backend cpu-ref --check", 2,
       "--check: nothing to check cpu-ref's outputs against"},
      {small_intra + "--backend cpu-ref --check", 2,
       "--check: nothing to check cpu-ref's outputs against"},
      {kWy + "--shape 1,64,3,16,16 --heads-v 4 --backend cpu", 2, "argument 'v'"},
      {kWy + "--shape 1,64,2,300,16 --backend cpu", 2, "argument 'q'"},
      {kIntra + "--shape 1,64,3,16 --heads-v 4 --backend cpu", 2, "argument 'g'"},
      {kIntra + "--shape 1,64,2,300 --backend cpu", 2, "argument 'q'"},
      {kWy + "--shape 100000,100000,64,128,128", 2, "host memory"},
      {kIntra + "--shape 100000,100000,64,128", 2, "host memory"},
      {small_intra + "--index-dtype i16", 2, "--index-dtype: expected i64 or i32, got 'i16'"},
      {small_intra + "--strong-every -1", 2, "--strong-every: expected an integer >= 0"},
      // Out of range: CLI11 alone would clamp these to 2^64 - 1 and run.
      {small + "--seed -1", 2, "--seed: expected an integer from 0 to 18446744073709551615"},
      {small + "--seed 18446744073709551616", 2, "--seed: expected an integer"},
      {kWy + "--input '" + sparse + "'", 2, "--input: reading it needs about"},
      {small + "--heads-v 0", 2, "--heads-v: expected a positive number of value heads, got '0'"},
      {small + "--heads-v -2", 2, "--heads-v: expected a positive number"},
      {small_intra + "--heads-v 0", 2, "--heads-v: expected a positive number"},
  };
  if (KDA_WITH_CUDA == 0) {
    calls.push_back({small + "--backend cuda", 2, "cuda backend not built"});
  }
  for (const BadCall& c : calls) {
    SCOPED_TRACE("kda " + c.args);
    const CliResult r = run_kda(c.args);
    EXPECT_EQ(r.exit_code, c.exit_code) << r.err;
    const std::vector<std::string> errors = lines_starting_with(r.err, "kda: error: ");
    ASSERT_EQ(errors.size(), 1u) << "stderr:\n" << r.err;
    EXPECT_TRUE(contains(errors[0], c.message)) << errors[0];
  }
  std::filesystem::remove(garbage);
  std::filesystem::remove(sparse);
}

}  // namespace
