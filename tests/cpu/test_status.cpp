// Live inspection from outside, as an operator sees it: the status pages of running jobs through
// `weftctl queue` and `weftctl diagnose`, a killed job's pages reported dead and cleaned, bad
// pages refused. Nothing here is timed: jobs hold still (a rank waits for a file) until the
// test has looked, and every wait for weftctl to show something is bounded generously.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "support/multirank.hpp"

namespace weft::test {
namespace {

namespace fs = std::filesystem;

constexpr double kPatienceS = 120;  // for anything to show; a loaded CI machine may be slow

// A status directory of this test's own, which its ranks inherit through WEFT_STATUS_DIR; a
// file in it releases the ranks that wait for it.
struct Scratch {
  Scratch() {
    char tmpl[] = "/tmp/weft-status-test-XXXXXX";
    root = mkdtemp(tmpl);
    pages = root + "/pages";
    setenv("WEFT_STATUS_DIR", pages.c_str(), 1);
  }
  ~Scratch() {
    release();
    unsetenv("WEFT_STATUS_DIR");
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  void release(const std::string& name = "go") const { std::ofstream(root + "/" + name) << "go"; }
  std::string root, pages;
};

// A job whose ranks run in the background until it is finished: the release file is written,
// then its ranks are awaited. A launcher process forks them, so that no rank is forked from a
// process where another thread (the test's, running weftctl) may hold a lock the child needs.
class Job {
 public:
  Job(const Scratch& scratch, int nranks, const RankBody& body) : scratch_(scratch) {
    std::fflush(stdout);
    std::fflush(stderr);
    launcher_ = fork();
    if (launcher_ == 0) _exit(runRanks(nranks, body) ? 0 : 1);
  }
  ~Job() { finish(); }
  // Whether every rank exited 0.
  ::testing::AssertionResult finish() {
    if (launcher_ > 0) {
      scratch_.release();
      waitpid(launcher_, &status_, 0);
      launcher_ = 0;
    }
    if (launcher_ < 0) return ::testing::AssertionFailure() << "fork failed";
    if (!WIFEXITED(status_) || WEXITSTATUS(status_) != 0)
      return ::testing::AssertionFailure() << "a rank failed (its output says which)";
    return ::testing::AssertionSuccess();
  }

 private:
  const Scratch& scratch_;
  pid_t launcher_ = -1;
  int status_ = -1;
};

void waitForFile(const std::string& path) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kPatienceS);
  while (!fs::exists(path) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

struct CliRun {
  int status = -1;  // exit status; -1 if it did not exit (a signal: weftctl crashed)
  std::string out;  // stdout and stderr
};

CliRun weftctl(const std::string& args) {
  CliRun r;
  FILE* p = popen((std::string(WEFT_TEST_WEFTCTL) + " " + args + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// The page lines of `weftctl queue --json` (one page a line).
std::vector<std::string> pageLines(const std::string& json) {
  std::vector<std::string> out;
  size_t at = 0;
  while ((at = json.find("\n{\"page\":", at)) != std::string::npos) {
    ++at;
    out.push_back(json.substr(at, json.find('\n', at) - at));
  }
  return out;
}

int field(const std::string& line, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(line, m, std::regex("\"" + name + "\":(-?[0-9]+)"))) return -1;
  return std::stoi(m[1]);
}

// Polls `weftctl queue --json` until `ready` holds for its page lines; returns the last output.
std::string queueUntil(const std::string& dir, const std::function<bool(const std::vector<std::string>&)>& ready) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kPatienceS);
  CliRun r;
  do {
    r = weftctl("queue --json --dir " + dir);
    if (r.status == 0 && ready(pageLines(r.out))) return r.out;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  } while (std::chrono::steady_clock::now() < deadline);
  ADD_FAILURE() << "weftctl queue never showed what the test waits for; last output:\n" << r.out;
  return r.out;
}

size_t countWith(const std::vector<std::string>& lines, const std::string& text) {
  size_t n = 0;
  for (const auto& l : lines) n += l.find(text) != std::string::npos;
  return n;
}

weft_config_t patientConfig() {
  weft_config_t c = WEFT_CONFIG_INITIALIZER;
  c.timeout_s = 600;  // the test releases every wait itself
  return c;
}

constexpr int64_t kStuckCount = 100000;  // floats: above the one-shot size, so a reduce-scatter AllReduce

// A 4-rank job's rank: two ops every rank ends, then an AllReduce (op #2) that rank 3 joins only
// once `go` exists.
// A rank of a 4-rank job, started: its communicator, a 1 MiB heap block, and op #0 (an AllReduce
// of 1000 floats) ended.
void startRank(int rank, int n, const weft_unique_id_t& id, weft_comm_t* comm, void** y) {
  weft_config_t config = patientConfig();
  *comm = initRank(rank, n, id, &config);
  ASSERT_NE(*comm, nullptr);
  WEFT_ASSERT_OK(weft_mem_alloc(*comm, 1 << 20, y));
  const std::vector<float> x(1000, 1.0f);
  WEFT_ASSERT_OK(weft_allreduce(*comm, x.data(), *y, 1000, WEFT_FLOAT32, nullptr));
}

void rankThreeLate(int rank, int n, const weft_unique_id_t& id, const std::string& go) {
  weft_comm_t comm = nullptr;
  void* y = nullptr;
  ASSERT_NO_FATAL_FAILURE(startRank(rank, n, id, &comm, &y));
  std::vector<float> x(kStuckCount, 1.0f);
  WEFT_ASSERT_OK(weft_alltoall(comm, x.data(), y, 100, WEFT_FLOAT32, nullptr));
  if (rank == 3) waitForFile(go);
  WEFT_ASSERT_OK(weft_allreduce(comm, x.data(), y, kStuckCount, WEFT_FLOAT32, nullptr));
  WEFT_ASSERT_OK(weft_comm_destroy(comm));
}

// A 4-rank job: two ops every rank ends, then an AllReduce that rank 3 joins only once released.
TEST(Status, QueueShowsTheJobAndDiagnoseNamesTheRankThatNeverSubmitted) {
  Scratch scratch;
  const std::string go = scratch.root + "/go";
  Job job(scratch, 4, [&](int rank, int n, const weft_unique_id_t& id) { rankThreeLate(rank, n, id, go); });
  const std::string json = queueUntil(scratch.pages, [](const std::vector<std::string>& lines) {
    return lines.size() == 4 && countWith(lines, "\"slots\":[{\"ticket\":2,") == 3 &&
           countWith(lines, "\"state\":\"running\"") == 3;
  });
  const std::vector<std::string> lines = pageLines(json);
  ASSERT_EQ(lines.size(), 4u) << json;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(lines[0], m, std::regex("\"comm\":\"([0-9a-f]{16})\""))) << lines[0];
  const std::string comm = m[1];
  for (const std::string& l : lines) {
    const int rank = field(l, "rank");
    SCOPED_TRACE(l);
    EXPECT_NE(l.find("\"comm\":\"" + comm + "\""), std::string::npos);
    EXPECT_EQ(field(l, "nranks"), 4);
    EXPECT_NE(l.find("\"alive\":true"), std::string::npos);
    EXPECT_NE(l.find("\"comm_state\":\"running\""), std::string::npos);
    EXPECT_EQ(field(l, "ended"), 2);
    EXPECT_NE(l.find("\"ops\":{\"allreduce\":0,\"alltoall\":1,\"allreduce_oneshot\":1,"), std::string::npos);
    EXPECT_NE(l.find("\"timeouts\":0,\"aborts\":0,\"errors\":0"), std::string::npos);
    EXPECT_NE(l.find("\"proxy\":null"), std::string::npos) << "no peer is reached through the proxy";
    // Rank r reaches itself by "self" and every peer of this host by "p2p".
    std::string paths;
    for (int p = 0; p < 4; ++p) paths += std::string(p ? "," : "") + (p == rank ? "\"self\"" : "\"p2p\"");
    EXPECT_NE(l.find("\"paths\":[" + paths + "]"), std::string::npos);
    if (rank == 3) {
      EXPECT_EQ(field(l, "submitted"), 2);
      EXPECT_NE(l.find("\"slots\":[]"), std::string::npos);
    } else {
      EXPECT_EQ(field(l, "submitted"), 3);
      EXPECT_NE(l.find("\"slots\":[{\"ticket\":2,\"op\":\"allreduce\",\"dtype\":\"float32\",\"count\":100000,"
                       "\"bytes\":400000,"),
                std::string::npos);
    }
  }
  const CliRun text = weftctl("queue --dir " + scratch.pages + " --comm " + comm.substr(0, 6));
  EXPECT_EQ(text.status, 0);
  EXPECT_NE(text.out.find("comm " + comm + ": 4 ranks, 4 page(s) here"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("in flight: op #2 allreduce of 100000 float32"), std::string::npos) << text.out;

  const CliRun why = weftctl("diagnose --dir " + scratch.pages);
  EXPECT_EQ(why.status, 0) << why.out;
  EXPECT_NE(why.out.find("ranks 0, 1 and 2 wait in op #2 (allreduce of 100000 float32; rank 0 at "), std::string::npos)
      << why.out;
  EXPECT_NE(why.out.find("Rank 3 never submitted op #2: its last completed op is #1 (alltoall"), std::string::npos)
      << why.out;
  const CliRun whyJson = weftctl("diagnose --json --dir " + scratch.pages + " --comm " + comm);
  EXPECT_NE(whyJson.out.find("\"op\":2,\"cause\":\"never_submitted\",\"ranks\":[3],\"waiting\":[0,1,2]"),
            std::string::npos)
      << whyJson.out;

  // The same counters for Prometheus: one sample per rank and kind, every family typed once.
  const CliRun metrics = weftctl("metrics --dir " + scratch.pages + " --comm " + comm);
  EXPECT_EQ(metrics.status, 0) << metrics.out;
  const std::string page0 = "{comm=\"" + comm + "\",rank=\"0\"";
  for (const std::string& want :
       {std::string("# TYPE weft_ops_total counter\n"), std::string("# TYPE weft_ops_in_flight gauge\n"),
        "weft_ops_total" + page0 + ",kind=\"alltoall\"} 1\n", "weft_ops_total" + page0 + ",kind=\"allreduce\"} 0\n",
        "weft_ops_submitted_total" + page0 + "} 3\n", "weft_ops_submitted_total{comm=\"" + comm + "\",rank=\"3\"} 2\n",
        "weft_ops_in_flight" + page0 + "} 1\n", "weft_timeouts_total" + page0 + "} 0\n",
        "weft_process_alive" + page0 + "} 1\n", std::string("weft_status_pages_refused 0\n")})
    EXPECT_NE(metrics.out.find(want), std::string::npos) << want << " not in:\n" << metrics.out;
  size_t typeLines = 0;
  for (size_t at = metrics.out.find("# TYPE "); at != std::string::npos; at = metrics.out.find("# TYPE ", at + 1))
    typeLines += metrics.out.compare(at, 22, "# TYPE weft_ops_total ") == 0;
  EXPECT_EQ(typeLines, 1u) << metrics.out;
  EXPECT_EQ(metrics.out.find("weft_proxy_"), std::string::npos) << metrics.out;
  std::smatch age;
  ASSERT_TRUE(std::regex_search(
      metrics.out, age, std::regex("weft_oldest_op_age_seconds\\{comm=\"" + comm + "\",rank=\"0\"\\} ([0-9.e+-]+)\n")))
      << metrics.out;
  EXPECT_GT(std::stod(age[1]), 0.0);

  EXPECT_TRUE(job.finish());
  // Destroy removed every page.
  EXPECT_TRUE(pageLines(weftctl("queue --json --dir " + scratch.pages).out).empty());
}

// A job whose ranks reach each other through the host proxy: the pages count what each rank's
// proxy sent, in `weftctl queue` (text and JSON) and `weftctl metrics`.
TEST(Status, PagesCountWhatTheHostProxySent) {
#if !defined(WEFT_TEST_UCX) && !defined(WEFT_TEST_OFI)
  GTEST_SKIP() << "no proxy back-end is built";
#elif defined(WEFT_TEST_SANITIZED)
  GTEST_SKIP() << "the proxy's traffic runs in the normal build only";
#endif
  Scratch scratch;
  const std::string go = scratch.root + "/go";
  Job job(scratch, 2, [&](int rank, int n, const weft_unique_id_t& id) {
    setenv("WEFT_TRANSPORT", "proxy", 1);
    setenv("UCX_TLS", "tcp", 1);
    setenv("FI_PROVIDER", "tcp", 1);
    weft_comm_t comm = nullptr;
    void* y = nullptr;
    ASSERT_NO_FATAL_FAILURE(startRank(rank, n, id, &comm, &y));
    const std::vector<float> x(kStuckCount, 1.0f);
    WEFT_ASSERT_OK(weft_allreduce(comm, x.data(), y, kStuckCount, WEFT_FLOAT32, nullptr));
    waitForFile(go);
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  });
  const std::string json = queueUntil(scratch.pages, [](const std::vector<std::string>& lines) {
    return lines.size() == 2 && countWith(lines, "\"ended\":2,") == 2;
  });
  const std::vector<std::string> lines = pageLines(json);
  ASSERT_EQ(lines.size(), 2u) << json;
  for (const std::string& l : lines) {
    SCOPED_TRACE(l);
    // Op #1's 400 KB went as tiles: messages or writes, and each rank's signals with them.
    const int parts = field(l, "messages"), wire = field(l, "wire_messages"), batches = field(l, "batches");
    EXPECT_GT(parts, 0);
    EXPECT_GT(wire, 0);
    EXPECT_LE(wire, parts) << "a wire message carries one message or a batch of several";
    EXPECT_LE(batches, wire);
    EXPECT_GE(field(l, "writes"), 0);
  }
  const CliRun text = weftctl("queue --dir " + scratch.pages);
  EXPECT_EQ(text.status, 0);
  EXPECT_NE(text.out.find("    host proxy sent "), std::string::npos) << text.out;
  const CliRun metrics = weftctl("metrics --dir " + scratch.pages);
  EXPECT_EQ(metrics.status, 0) << metrics.out;
  EXPECT_NE(metrics.out.find("# TYPE weft_proxy_messages_total counter\n"), std::string::npos) << metrics.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(metrics.out, m,
                                std::regex("weft_proxy_wire_messages_total\\{comm=\"[0-9a-f]{16}\","
                                           "rank=\"1\"\\} ([0-9]+)\n")))
      << metrics.out;
  EXPECT_GT(std::stoull(m[1]), 0u);
  EXPECT_TRUE(job.finish());
}

// A job on two nodes: ranks 0-1 keep their pages on one, ranks 2-3 on the other (each a status
// directory of its own here, reached through a stand-in remote shell). diagnose on the first node
// alone cannot see rank 3; given the other node, it names rank 3 as the one that never submitted.
TEST(Status, DiagnoseGathersTheOtherNodesPages) {
  Scratch scratch;
  const std::string go = scratch.root + "/go", nodeA = scratch.root + "/nodeA", nodeB = scratch.root + "/nodeB";
  // The stand-in for ssh: runs the command here, with the "host"'s status directory.
  const std::string rsh = scratch.root + "/rsh";
  std::ofstream(rsh) << "#!/bin/sh\nhost=\"${1#*@}\"; shift\n"
                     << "[ \"$host\" = down ] && exit 255\n"
                     << "WEFT_STATUS_DIR=" << scratch.root << "/$host exec sh -c \"$*\"\n";
  ASSERT_EQ(chmod(rsh.c_str(), 0700), 0);
  Job job(scratch, 4, [&](int rank, int n, const weft_unique_id_t& id) {
    setenv("WEFT_STATUS_DIR", (rank < 2 ? nodeA : nodeB).c_str(), 1);
    rankThreeLate(rank, n, id, go);
  });
  queueUntil(nodeA, [](const std::vector<std::string>& lines) {
    return lines.size() == 2 && countWith(lines, "\"state\":\"running\"") == 2;
  });
  queueUntil(nodeB, [](const std::vector<std::string>& lines) {
    return lines.size() == 2 && countWith(lines, "\"state\":\"running\"") == 1;
  });
  const CliRun alone = weftctl("diagnose --json --dir " + nodeA);
  EXPECT_NE(alone.out.find("\"cause\":\"in_progress\",\"ranks\":[],\"waiting\":[0,1]"), std::string::npos) << alone.out;
  EXPECT_NE(alone.out.find("ranks 2 and 3, which have no page here"), std::string::npos) << alone.out;

  const std::string hostfile = scratch.root + "/hosts";
  std::ofstream(hostfile) << "# the job's nodes\nnodeB slots=2\n\nnodeB\ndown\n";
  const CliRun both = weftctl("diagnose --json --dir " + nodeA + " --hostfile " + hostfile + " --rsh " + rsh);
  EXPECT_EQ(both.status, 2) << both.out;  // explained, from fewer nodes than asked
  EXPECT_NE(both.out.find("\"op\":2,\"cause\":\"never_submitted\",\"ranks\":[3],\"waiting\":[0,1,2]"),
            std::string::npos)
      << both.out;
  EXPECT_NE(both.out.find("Rank 3 never submitted op #2"), std::string::npos) << both.out;
  // The node that did not answer is named, and the rest is explained anyway.
  EXPECT_NE(both.out.find("down: not gathered: the remote shell exited with status 255"), std::string::npos)
      << both.out;
  EXPECT_NE(both.out.find("Not gathered: down (the remote shell exited with status 255)."), std::string::npos)
      << both.out;
  EXPECT_NE(both.out.find("\"unreachable\":[\"down (the remote shell exited with status 255)\"]"), std::string::npos)
      << both.out;
  const CliRun listed = weftctl("diagnose --dir " + nodeA + " --hosts me@nodeB --rsh " + rsh);
  EXPECT_NE(listed.out.find("pages of ranks 0, 1, 2 and 3 from 1 node ("), std::string::npos) << listed.out;
  // A host that is no host name is refused before anything runs.
  const CliRun odd = weftctl("diagnose --dir " + nodeA + " --hosts 'a;b' --rsh " + rsh);
  EXPECT_NE(odd.status, 0);
  EXPECT_NE(odd.out.find("host 'a;b' is not a plain host name"), std::string::npos) << odd.out;
  EXPECT_TRUE(job.finish());
}

// Ranks 0-2 call an AllReduce where rank 3 calls an All-to-All; an abort ends the hang.
TEST(Status, DiagnoseExplainsRanksThatCalledDifferentOps) {
  Scratch scratch;
  const std::string go = scratch.root + "/go";
  Job job(scratch, 4, [&](int rank, int n, const weft_unique_id_t& id) {
    // With signatures checked the ops would fail at once (tests/cpu/test_disagree.cpp); this is
    // what diagnose says of ranks that hang on it, with the check off.
    setenv("WEFT_CHECK_SIGNATURES", "0", 1);
    weft_comm_t comm = nullptr;
    void* y = nullptr;
    ASSERT_NO_FATAL_FAILURE(startRank(rank, n, id, &comm, &y));
    std::vector<float> x(kStuckCount, 1.0f);
    std::thread aborter([&] {
      waitForFile(go);
      EXPECT_EQ(weft_comm_abort(comm), WEFT_SUCCESS);
    });
    const weft_result_t r = rank == 3 ? weft_alltoall(comm, x.data(), y, 1000, WEFT_FLOAT32, nullptr)
                                      : weft_allreduce(comm, x.data(), y, kStuckCount, WEFT_FLOAT32, nullptr);
    EXPECT_EQ(r, WEFT_ERR_ABORTED) << weft_get_last_error(nullptr);
    aborter.join();
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  });
  queueUntil(scratch.pages, [](const std::vector<std::string>& lines) {
    return lines.size() == 4 && countWith(lines, "\"slots\":[{\"ticket\":1,") == 4 &&
           countWith(lines, "\"state\":\"running\"") == 4;
  });
  const CliRun why = weftctl("diagnose --dir " + scratch.pages);
  EXPECT_EQ(why.status, 0) << why.out;
  EXPECT_NE(why.out.find("ranks 0, 1, 2 and 3 wait in op #1 (rank 0 at "), std::string::npos) << why.out;
  EXPECT_NE(why.out.find("The ranks submitted different ops as op #1: ranks 0, 1 and 2 allreduce of 100000 float32; "
                         "rank 3 alltoall of 1000 float32 per rank."),
            std::string::npos)
      << why.out;
  EXPECT_NE(why.out.find("Likely cause: a mismatch"), std::string::npos) << why.out;
  const CliRun whyJson = weftctl("diagnose --json --dir " + scratch.pages);
  EXPECT_NE(whyJson.out.find("\"op\":1,\"cause\":\"mismatch\",\"ranks\":[3],"), std::string::npos) << whyJson.out;

  EXPECT_TRUE(job.finish());
  EXPECT_TRUE(pageLines(weftctl("queue --json --dir " + scratch.pages).out).empty());
}

std::string readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void writeBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
  chmod(path.c_str(), 0600);
}

// A killed 2-rank job leaves its pages: reported dead, and cleaned, while a live job's page and
// pages weftctl cannot read stay. Bad pages are refused with the reason, and weftctl survives them.
TEST(Status, KilledJobIsReportedDeadAndCleanedAndBadPagesAreRefused) {
  Scratch scratch;
  const std::vector<RankExit> killed = forkRanks(2, [&](int rank, int n, const weft_unique_id_t& id) {
    weft_comm_t comm = initRank(rank, n, id);
    ASSERT_NE(comm, nullptr);
    void* y = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 1 << 16, &y));
    std::vector<float> x(1000, 1.0f);
    WEFT_ASSERT_OK(weft_allreduce(comm, x.data(), y, x.size(), WEFT_FLOAT32, nullptr));
    kill(getpid(), SIGKILL);
  });
  ASSERT_EQ(killed.size(), 2u);
  for (const RankExit& e : killed) EXPECT_FALSE(e.exited);
  const std::string go = scratch.root + "/go";
  Job live(scratch, 1, [&](int rank, int n, const weft_unique_id_t& id) {
    weft_comm_t comm = initRank(rank, n, id);
    ASSERT_NE(comm, nullptr);
    waitForFile(go);
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  });
  const std::string json = queueUntil(scratch.pages, [](const std::vector<std::string>& lines) {
    return lines.size() == 3 && countWith(lines, "\"alive\":true") == 1;
  });
  std::vector<std::string> deadPages;
  for (const std::string& l : pageLines(json)) {
    if (field(l, "nranks") != 2) continue;
    EXPECT_NE(l.find("\"alive\":false,\"liveness\":\"dead\""), std::string::npos) << l;
    EXPECT_EQ(field(l, "ended"), 1) << l;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(l, m, std::regex("\"page\":\"([^\"]+)\"")));
    deadPages.push_back(m[1]);
  }
  ASSERT_EQ(deadPages.size(), 2u) << json;
  const std::string listed = weftctl("queue --dir " + scratch.pages).out;
  EXPECT_NE(listed.find("(dead)"), std::string::npos) << listed;
  auto times = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = listed.find(what); at != std::string::npos; at = listed.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(times("state died running"), 2u) << listed;
  EXPECT_EQ(times("state running"), 1u) << "only the live job's rank runs: " << listed;

  // Bad pages beside them, made from a dead one.
  const std::string page = readBytes(scratch.pages + "/" + deadPages[0]);
  ASSERT_GT(page.size(), 256u);
  writeBytes(scratch.pages + "/junk.page", std::string(page.size(), 'x'));
  writeBytes(scratch.pages + "/short.page", page.substr(0, 100));
  writeBytes(scratch.pages + "/cut.page", page.substr(0, page.size() - 64));
  std::string other = page;
  other[8] = 99;  // the version
  writeBytes(scratch.pages + "/future.page", other);
  std::string torn = page;
  torn[24] |= 1;  // seq odd: a writer that never finished
  writeBytes(scratch.pages + "/torn.page", torn);
  std::string bad = page;
  bad[40] = 7;  // rank 7 of 2
  writeBytes(scratch.pages + "/rank.page", bad);
  const struct {
    const char* name;
    const char* why;
  } refusals[] = {{"junk.page", "not a weft status page (bad magic)"},
                  {"short.page", "truncated: 100 bytes, less than a page's header"},
                  {"cut.page", "truncated or padded"},
                  {"future.page", "written by another weft version (page version 99"},
                  {"torn.page", "never consistent"},
                  {"rank.page", "corrupt: rank 7 of 2"}};
  for (const std::string cmd : {"queue --dir ", "queue --json --dir ", "diagnose --dir "}) {
    const CliRun r = weftctl(cmd + scratch.pages);
    EXPECT_TRUE(r.status == 0 || r.status == 1) << cmd << ": weftctl did not exit normally:\n" << r.out;
    for (const auto& want : refusals) {
      const bool json = cmd.find("--json") != std::string::npos;
      const std::string text = json ? std::string("{\"name\":\"") + want.name + "\",\"why\":\"" + want.why
                                    : std::string("refused ") + scratch.pages + "/" + want.name + ": " + want.why;
      EXPECT_NE(r.out.find(text), std::string::npos) << cmd << " lacks: " << text << "\n" << r.out;
    }
  }
  const CliRun why = weftctl("diagnose --dir " + scratch.pages + " --comm " + deadPages[0].substr(0, 16));
  EXPECT_NE(why.out.find("Likely cause: a dead process"), std::string::npos) << why.out;

  const CliRun clean = weftctl("clean --dir " + scratch.pages);
  EXPECT_EQ(clean.status, 0);
  EXPECT_NE(clean.out.find("2 dead page(s) removed"), std::string::npos) << clean.out;
  for (const std::string& p : deadPages) EXPECT_FALSE(fs::exists(scratch.pages + "/" + p)) << p;
  const std::vector<std::string> left = pageLines(weftctl("queue --json --dir " + scratch.pages).out);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_NE(left[0].find("\"alive\":true"), std::string::npos);
  for (const auto& want : refusals) EXPECT_TRUE(fs::exists(scratch.pages + "/" + want.name)) << want.name;

  EXPECT_TRUE(live.finish());
}

}  // namespace
}  // namespace weft::test
