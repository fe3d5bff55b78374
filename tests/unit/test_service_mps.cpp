// weftd's MPS control daemon (runtime/service/mps.hpp): one that answers where the environment
// says is used and never quit by weftd; without one, and without nvidia-cuda-mps-control to start
// one, weftd says so rather than failing; `off` touches neither.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "runtime/service/mps.hpp"

namespace weft::service {
namespace {

// A directory of its own, removed (with what is in it) at the end.
struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/weft-mps-XXXXXX";
    path = ::mkdtemp(t) ? t : "";
  }
  ~TempDir() { [[maybe_unused]] const int rc = std::system(("rm -rf '" + path + "'").c_str()); }
};

// A socket of `type` listening at dir/control, where an MPS control daemon would (the real one's
// refuses a stream connect with EPROTOTYPE).
int listenAsControl(const std::string& dir, int type = SOCK_SEQPACKET) {
  const int fd = ::socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string path = dir + "/control";
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      (type != SOCK_DGRAM && ::listen(fd, 4) != 0)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

class ServiceMps : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* pipe = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
    const char* path = std::getenv("PATH");
    savedPipe_ = pipe ? pipe : "";
    savedPath_ = path ? path : "";
  }
  void TearDown() override {
    if (savedPipe_.empty())
      unsetenv("CUDA_MPS_PIPE_DIRECTORY");
    else
      setenv("CUDA_MPS_PIPE_DIRECTORY", savedPipe_.c_str(), 1);
    setenv("PATH", savedPath_.c_str(), 1);
  }

 private:
  std::string savedPipe_, savedPath_;
};

TEST_F(ServiceMps, ADaemonThatAnswersIsUsed) {
  TempDir pipe, dir;
  const int fd = listenAsControl(pipe.path);
  ASSERT_GE(fd, 0);
  setenv("CUDA_MPS_PIPE_DIRECTORY", pipe.path.c_str(), 1);
  EXPECT_TRUE(mpsAnswers(pipe.path));
  {
    const Mps mps("auto", dir.path);
    EXPECT_EQ(mps.describe(), "using the MPS control daemon at " + pipe.path);
    EXPECT_EQ(mps.pipeDir(), pipe.path);
  }
  // Not weftd's to quit: still listening.
  EXPECT_TRUE(mpsAnswers(pipe.path));
  ::close(fd);
  EXPECT_FALSE(mpsAnswers(pipe.path));
}

TEST_F(ServiceMps, EveryKindOfControlSocketAnswers) {
  for (const int type : {SOCK_SEQPACKET, SOCK_STREAM, SOCK_DGRAM}) {
    SCOPED_TRACE(type);
    TempDir pipe;
    const int fd = listenAsControl(pipe.path, type);
    ASSERT_GE(fd, 0);
    EXPECT_TRUE(mpsAnswers(pipe.path));
    ::close(fd);
    EXPECT_FALSE(mpsAnswers(pipe.path));  // the path is left, nobody listens
  }
}

TEST_F(ServiceMps, WithoutOneOrTheToolWeftdSaysWhy) {
  TempDir pipe, dir, emptyBin;
  setenv("CUDA_MPS_PIPE_DIRECTORY", pipe.path.c_str(), 1);
  setenv("PATH", emptyBin.path.c_str(), 1);
  const Mps mps("auto", dir.path);
  EXPECT_NE(mps.describe().find("nvidia-cuda-mps-control could not be run"), std::string::npos) << mps.describe();
  EXPECT_EQ(mps.pipeDir(), "");
}

TEST_F(ServiceMps, OffTouchesNothing) {
  TempDir pipe, dir;
  const int fd = listenAsControl(pipe.path);
  setenv("CUDA_MPS_PIPE_DIRECTORY", pipe.path.c_str(), 1);
  const Mps mps("off", dir.path);
  EXPECT_NE(mps.describe().find("off (service_mps)"), std::string::npos);
  EXPECT_EQ(mps.pipeDir(), "");
  ::close(fd);
}

}  // namespace
}  // namespace weft::service
