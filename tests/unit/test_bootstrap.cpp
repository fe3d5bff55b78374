// The bootstrap with threads as ranks: exchange, validation and bounded failure.
#include <dirent.h>
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "runtime/bootstrap.hpp"
#include "runtime/bootstrap_wire.hpp"
#include "runtime/unique_id.hpp"

namespace weft {
namespace {

UniqueId loopbackId() { return createUniqueId("127.0.0.1", ""); }

int openFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

// Joins `n` ranks (threads) with a bootstrap timeout of `timeoutS`; each rank's error, "" if none.
std::vector<std::string> joinAll(const UniqueId& id, int n, double timeoutS) {
  std::vector<std::string> errors(n);
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {
      try {
        auto b = Bootstrap::join(id, r, n, timeoutS);
        b->barrier();
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  return errors;
}

TEST(UniqueId, EncodesAndDecodes) {
  UniqueId id = loopbackId();
  uint8_t bytes[kUniqueIdBytes];
  id.encode(bytes);
  UniqueId back = UniqueId::decode(bytes, "id");
  EXPECT_EQ(back.root.str(), id.root.str());
  EXPECT_TRUE(secretsEqual(back.secret, id.secret));
  bytes[0] ^= 1;
  EXPECT_THROW(UniqueId::decode(bytes, "id"), Error);
  takeListener(id);
}

TEST(Bootstrap, AllGatherAndBarrier) {
  const UniqueId id = loopbackId();
  constexpr int n = 4;
  std::vector<std::vector<int>> got(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {
      try {
        auto b = Bootstrap::join(id, r, n, 10);
        for (int round = 0; round < 3; ++round) {
          int mine = r * 100 + round;
          std::vector<int> all(n);
          b->allGather(&mine, sizeof mine, all.data());
          if (round == 2) got[r] = all;
          b->barrier();
        }
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    ASSERT_EQ(got[r].size(), size_t{n});
    for (int q = 0; q < n; ++q) EXPECT_EQ(got[r][q], q * 100 + 2);
  }
}

TEST(Bootstrap, WrongSecretIsIgnoredAndMismatchedNranksFailsEveryone) {
  const UniqueId id = loopbackId();
  UniqueId wrong = id;
  wrong.secret[0] ^= 0xff;
  std::vector<Code> codes(3, Code::kSuccess);
  std::thread impostor([&] {
    try {
      Bootstrap::join(wrong, 1, 2, 1.0);
    } catch (const Error& e) {
      codes[2] = e.code();
    }
  });
  impostor.join();
  EXPECT_EQ(codes[2], Code::kTimeout) << "an impostor is dropped, never admitted";
  std::thread root([&] {
    try {
      Bootstrap::join(id, 0, 2, 10);
    } catch (const Error& e) {
      codes[0] = e.code();
    }
  });
  std::thread peer([&] {
    try {
      Bootstrap::join(id, 1, 3, 10);
    } catch (const Error& e) {
      codes[1] = e.code();
    }
  });
  root.join();
  peer.join();
  EXPECT_EQ(codes[0], Code::kInvalidUsage);
  EXPECT_EQ(codes[1], Code::kInvalidUsage);
}

TEST(Bootstrap, AMissingRankIsATimeout) {
  const UniqueId id = loopbackId();
  const auto start = std::chrono::steady_clock::now();
  try {
    Bootstrap::join(id, 0, 2, 0.5);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kTimeout);
    EXPECT_NE(std::string(e.what()).find("1 more rank"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

// Rank 0 used to admit one connection at a time, giving each 10 s for its hello: four silent
// connections outlasted a 30 s bootstrap. Now every hello is read at once, each on its own clock.
TEST(Bootstrap, SilentAndSlowConnectionsDelayNoRank) {
  const UniqueId id = loopbackId();
  std::vector<net::Socket> strangers;
  const auto until = net::deadlineIn(10);
  for (int i = 0; i < 100; ++i) strangers.push_back(net::Socket::connectTo(id.root, until));
  const char partial[] = "helo";  // the start of a hello that never ends
  for (int i = 0; i < 10; ++i) strangers[i].sendAll(partial, 4, until);
  // 20 s is below the two 10 s waits the old rank 0 spent on the first two silent connections.
  const std::vector<std::string> errors = joinAll(id, 3, 20);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Each unused weft_get_unique_id used to keep its listening socket for the life of the process.
TEST(UniqueId, UnusedIdsKeepABoundedNumberOfSockets) {
  const int before = openFds();
  // Once its listener is closed, the oldest id's port is free for any process of the machine to
  // take (ctest runs other tests beside this one, which open ports of their own): a rank 0 that
  // finds it taken says so, and the round is tried once more with new ids.
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::vector<UniqueId> ids;
    for (int i = 0; i < 200; ++i) ids.push_back(loopbackId());
    EXPECT_LE(openFds() - before, static_cast<int>(kMaxKeptListeners));
    // The oldest id's listener was closed; its rank 0 listens again on the same port.
    const std::vector<std::string> errors = joinAll(ids.front(), 2, 20);
    for (const UniqueId& id : ids) takeListener(id);
    if (attempt == 0 && errors[0].find("Address already in use") != std::string::npos) continue;
    EXPECT_EQ(errors[0], "");
    EXPECT_EQ(errors[1], "");
    break;
  }
  EXPECT_LE(openFds(), before);
}

// Rank 0's verdict comes off the network: a message without its terminator is read within its
// bounds, and a code weft does not know is an error of its own, not a cast.
TEST(Bootstrap, AVerdictIsReadWithinItsBoundsAndItsCodeChecked) {
  Verdict v{};
  v.code = static_cast<int32_t>(Code::kInvalidUsage);
  memset(v.message, 'x', sizeof v.message);
  const Error e = verdictError(v);
  EXPECT_EQ(e.code(), Code::kInvalidUsage);
  EXPECT_EQ(std::string(e.what()).size(), sizeof v.message);
  v.code = 4242;
  EXPECT_EQ(verdictError(v).code(), Code::kInternal);
  EXPECT_NE(std::string(verdictError(v).what()).find("unknown verdict (4242)"), std::string::npos);
}

// A hello is admitted only with the job's magic and secret, rank 0's build, from a rank not yet
// joined; a rank of the job that runs another build fails the job, naming both.
TEST(Bootstrap, HellosAreCheckedBeforeARankIsAdmitted) {
  Secret secret{};
  secret[0] = 7;
  const std::string build = helloBuild();
  Hello h{kHelloMagic, kBootstrapProtocol, {}, 4, 2, {}};
  memcpy(h.secret, secret.data(), kSecretBytes);
  snprintf(h.build, sizeof h.build, "%s", build.c_str());
  std::string why;
  auto none = [](int) { return false; };
  EXPECT_EQ(checkHello(h, secret, 4, build, none, &why), HelloCheck::kAdmit);
  EXPECT_EQ(checkHello(
                h, secret, 4, build, [](int r) { return r == 2; }, &why),
            HelloCheck::kFailJob);
  EXPECT_NE(why.find("joined twice"), std::string::npos);
  EXPECT_EQ(checkHello(h, secret, 8, build, none, &why), HelloCheck::kFailJob);
  EXPECT_NE(why.find("nranks"), std::string::npos);
  Hello stranger = h;
  stranger.secret[0] = 8;
  EXPECT_EQ(checkHello(stranger, secret, 4, build, none, &why), HelloCheck::kDrop);
  Hello later = h;
  later.protocol = kBootstrapProtocol + 1;
  EXPECT_EQ(checkHello(later, secret, 4, build, none, &why), HelloCheck::kFailJob);
  EXPECT_NE(why.find("rank 2 runs " + build + " (bootstrap protocol " + std::to_string(kBootstrapProtocol + 1)),
            std::string::npos)
      << why;
  Hello other = h;
  snprintf(other.build, sizeof other.build, "weft 0.0.9 (commit 0123456789ab), cpu backend");
  EXPECT_EQ(checkHello(other, secret, 4, build, none, &why), HelloCheck::kFailJob);
  EXPECT_NE(why.find("rank 2 runs weft 0.0.9 (commit 0123456789ab)"), std::string::npos) << why;
  EXPECT_NE(why.find("rank 0 runs " + build), std::string::npos) << why;
  memset(other.build, 'x', sizeof other.build);  // no terminator: read within its bounds
  EXPECT_EQ(checkHello(other, secret, 4, build, none, &why), HelloCheck::kFailJob);
  EXPECT_NE(why.find("runs " + std::string(kBuildBytes, 'x') + " ("), std::string::npos) << why;
}

// Rank 0 of a 2-rank job joins in a thread while this thread, as rank 1, sends `bytes` of `hello`
// (the job's secret filled in) and reads rank 0's verdict; *rootError gets rank 0's error, if
// any. Fails the test where the verdict took the hello's 10 s or the job's 30 s, not a moment.
Verdict verdictFor(Hello hello, size_t bytes, std::optional<Error>* rootError) {
  const UniqueId id = loopbackId();
  const auto start = std::chrono::steady_clock::now();
  std::thread root([&] {
    try {
      Bootstrap::join(id, 0, 2, 30);
    } catch (const Error& e) {
      rootError->emplace(e);
    }
  });
  const auto until = net::deadlineIn(10);
  net::Socket rank1 = net::Socket::connectTo(id.root, until);
  memcpy(hello.secret, id.secret.data(), kSecretBytes);
  rank1.sendAll(&hello, bytes, until);
  Verdict v{};
  rank1.recvAll(&v, sizeof v, until, "rank 0");
  root.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5)) << "a wait, not the verdict";
  return v;
}

// A rank of another weft build fails the job at join, at once: rank 0 says why, and the rank of
// the other build reads the same verdict (an older weft admitted it, and the job ran until the
// ranks disagreed on something and timed out).
TEST(Bootstrap, ARankOfAnotherBuildFailsTheJobAtJoin) {
  Hello h{kHelloMagic, kBootstrapProtocol, {}, 2, 1, {}};
  snprintf(h.build, sizeof h.build, "weft 0.0.9 (commit 0123456789ab), cpu backend");
  std::optional<Error> rootError;
  const Error told = verdictError(verdictFor(h, sizeof h, &rootError));
  const std::string why = "rank 1 runs weft 0.0.9 (commit 0123456789ab), cpu backend (bootstrap protocol " +
                          std::to_string(kBootstrapProtocol) + "), rank 0 runs " + helloBuild();
  EXPECT_EQ(told.code(), Code::kInvalidUsage);
  EXPECT_NE(std::string(told.what()).find(why), std::string::npos) << told.what();
  ASSERT_TRUE(rootError.has_value());
  EXPECT_EQ(rootError->code(), Code::kInvalidUsage);
  EXPECT_NE(std::string(rootError->what()).find(why), std::string::npos) << rootError->what();
}

// A rank of the protocol before builds were compared sends a shorter hello and waits for a
// verdict: rank 0 reads the hello it sent, and tells it at once.
TEST(Bootstrap, ARankOfTheFirstProtocolIsToldAtOnce) {
  std::optional<Error> rootError;
  const Error told = verdictError(verdictFor(Hello{kHelloMagic, 1, {}, 2, 1, {}}, kHelloV1Bytes, &rootError));
  EXPECT_EQ(told.code(), Code::kInvalidUsage);
  EXPECT_NE(std::string(told.what()).find("rank 1 runs an older weft, which names no build (bootstrap protocol 1)"),
            std::string::npos)
      << told.what();
  ASSERT_TRUE(rootError.has_value());
  EXPECT_EQ(rootError->code(), Code::kInvalidUsage);
}

}  // namespace
}  // namespace weft
