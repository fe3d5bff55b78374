#include <gtest/gtest.h>

#include <map>

#include "common/error.hpp"
#include "common/gpus_visible.hpp"
#include "runtime/launch_env.hpp"

namespace weft {
namespace {

LaunchInfo launch(const std::map<std::string, std::string>& vars) {
  return launchFromEnv([&](const char* n) -> const char* {
    auto it = vars.find(n);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(LaunchEnv, Torchrun) {
  LaunchInfo l = launch({{"RANK", "3"},
                         {"WORLD_SIZE", "8"},
                         {"MASTER_ADDR", "127.0.0.1"},
                         {"MASTER_PORT", "29500"},
                         {"TORCHELASTIC_RUN_ID", "job7"}});
  EXPECT_EQ(l.launcher, "torchrun");
  EXPECT_EQ(l.rank, 3);
  EXPECT_EQ(l.nranks, 8);
  EXPECT_EQ(l.id.root.str(), "127.0.0.1:29501") << "MASTER_PORT + 1: torch's store holds MASTER_PORT";
  LaunchInfo other = launch({{"RANK", "0"},
                             {"WORLD_SIZE", "8"},
                             {"MASTER_ADDR", "127.0.0.1"},
                             {"MASTER_PORT", "29500"},
                             {"TORCHELASTIC_RUN_ID", "job8"}});
  EXPECT_FALSE(secretsEqual(l.id.secret, other.id.secret)) << "different jobs must not share a secret";
}

TEST(LaunchEnv, ExplicitPortAndSecretWin) {
  LaunchInfo a = launch({{"RANK", "0"},
                         {"WORLD_SIZE", "2"},
                         {"MASTER_ADDR", "127.0.0.1"},
                         {"MASTER_PORT", "1000"},
                         {"WEFT_BOOTSTRAP_PORT", "4242"},
                         {"WEFT_BOOTSTRAP_SECRET", "s3cret"}});
  LaunchInfo b = launch({{"RANK", "1"},
                         {"WORLD_SIZE", "2"},
                         {"MASTER_ADDR", "127.0.0.1"},
                         {"MASTER_PORT", "1000"},
                         {"WEFT_BOOTSTRAP_PORT", "4242"},
                         {"WEFT_BOOTSTRAP_SECRET", "s3cret"}});
  EXPECT_EQ(a.id.root.port(), 4242);
  EXPECT_TRUE(secretsEqual(a.id.secret, b.id.secret));
}

TEST(LaunchEnv, SlurmUsesTheFirstNodeAndAPortFromTheJob) {
  LaunchInfo l = launch({{"SLURM_PROCID", "5"},
                         {"SLURM_NTASKS", "16"},
                         {"SLURM_JOB_ID", "1234"},
                         {"SLURM_STEP_ID", "0"},
                         {"SLURM_STEP_NODELIST", "localhost"}});
  EXPECT_EQ(l.launcher, "slurm");
  EXPECT_EQ(l.rank, 5);
  EXPECT_GE(l.id.root.port(), kDerivedPortLow);
  EXPECT_LT(l.id.root.port(), kDerivedPortEnd);
}

// A derived port must not be one the kernel may already have given an outgoing connection
// (Linux's ephemeral ports start at 32768): every job id lands below.
TEST(LaunchEnv, DerivedPortsStayBelowTheEphemeralRange) {
  EXPECT_LE(kDerivedPortEnd, 32768);
  for (int job = 0; job < 3000; ++job) {
    LaunchInfo l = launch({{"OMPI_COMM_WORLD_RANK", "0"},
                           {"OMPI_COMM_WORLD_SIZE", "2"},
                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                           {"OMPI_MCA_ess_base_jobid", std::to_string(job)}});
    ASSERT_GE(l.id.root.port(), kDerivedPortLow) << "job " << job;
    ASSERT_LT(l.id.root.port(), kDerivedPortEnd) << "job " << job;
  }
}

TEST(LaunchEnv, OpenMpiOnOneNodeDefaultsToLoopback) {
  LaunchInfo l = launch({{"OMPI_COMM_WORLD_RANK", "1"},
                         {"OMPI_COMM_WORLD_SIZE", "4"},
                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                         {"OMPI_MCA_ess_base_jobid", "99"}});
  EXPECT_EQ(l.launcher, "openmpi");
  EXPECT_EQ(l.id.root.str().rfind("127.0.0.1:", 0), 0u);
  EXPECT_THROW(launch({{"OMPI_COMM_WORLD_RANK", "1"},
                       {"OMPI_COMM_WORLD_SIZE", "4"},
                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                       {"OMPI_MCA_ess_base_jobid", "99"}}),
               Error)
      << "several nodes and no address";
}

TEST(LaunchEnv, MissingOrBadVariablesAreNamed) {
  try {
    launch({});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("RANK"), std::string::npos);
  }
  try {
    launch({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "5"}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("RANK"), std::string::npos) << e.what();
  }
  EXPECT_THROW(launch({{"RANK", "x"}, {"WORLD_SIZE", "4"}}), Error);
}

TEST(LaunchEnv, SlurmNodelists) {
  EXPECT_EQ(firstHostOfNodelist("gpu[03-05,9],cpu1"), "gpu03");
  EXPECT_EQ(firstHostOfNodelist("node7"), "node7");
  EXPECT_EQ(firstHostOfNodelist("a1,b[1-2]"), "a1");
  EXPECT_EQ(firstHostOfNodelist("n[12]"), "n12");
}

// Ranks placed round-robin on the GPUs each get 100 / (the most ranks on one GPU) of the SMs under
// MPS; none where every rank has a GPU of its own, or where there is no GPU.
TEST(LaunchEnv, RanksThatShareAGpuGetTheirShareOfItsSms) {
  EXPECT_EQ(mpsSharePercent(2, 1), 50);
  EXPECT_EQ(mpsSharePercent(4, 1), 25);
  EXPECT_EQ(mpsSharePercent(3, 1), 33);
  EXPECT_EQ(mpsSharePercent(4, 2), 50);
  EXPECT_EQ(mpsSharePercent(3, 2), 50) << "the GPU with two ranks decides";
  EXPECT_EQ(mpsSharePercent(1, 1), 0);
  EXPECT_EQ(mpsSharePercent(2, 4), 0);
  EXPECT_EQ(mpsSharePercent(4, 0), 0) << "no GPU (the CPU backend)";
}

}  // namespace
}  // namespace weft
