// The CPU backend's side of tests/support/op_rank.hpp: buffers in host memory, ops done when
// their calls return.
#include <cstdlib>
#include <cstring>

#include "support/multirank.hpp"
#include "support/op_rank.hpp"

namespace weft::test {

std::vector<Placement> backendPlacements(std::vector<int> ranks) {
  std::vector<Placement> out;
  for (int n : ranks) out.push_back(Placement{n, ""});
  return out;
}

std::vector<Placement> backendPlacements() { return backendPlacements({1, 2, 3, 4}); }

std::string placementName(const ::testing::TestParamInfo<Placement>& info) {
  return std::to_string(info.param.ranks) + "ranks";
}

std::string cannotRun(const Placement&) { return {}; }

void OnEveryBackend::SetUp() {}

OpRank openRank(int rank, int ranks, const weft_unique_id_t& id, size_t bytes, const weft_config_t* config) {
  OpRank r;
  r.comm = initRank(rank, ranks, id, config);
  if (r.comm) {
    EXPECT_EQ(weft_mem_alloc(r.comm, bytes, &r.heap), WEFT_SUCCESS) << weft_get_last_error(nullptr);
  }
  r.input = std::malloc(bytes ? bytes : 1);
  return r;
}

void closeRank(OpRank& r) {
  EXPECT_EQ(weft_comm_finalize(r.comm), WEFT_SUCCESS) << weft_get_last_error(nullptr);
  EXPECT_EQ(weft_mem_free(r.comm, r.heap), WEFT_SUCCESS);
  EXPECT_EQ(weft_comm_destroy(r.comm), WEFT_SUCCESS);
  std::free(r.input);
  r = OpRank{};
}

void closeFailedRank(OpRank& r) {
  EXPECT_EQ(weft_comm_destroy(r.comm), WEFT_SUCCESS) << weft_get_last_error(nullptr);
  std::free(r.input);
  r = OpRank{};
}

::testing::AssertionResult finish(const OpRank& r) { return opsSucceeded(r.comm); }

void upload(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

std::vector<uint8_t> download(const void* src, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(src);
  return bytes ? std::vector<uint8_t>(p, p + bytes) : std::vector<uint8_t>{};
}

void poisonBytes(void* dst, size_t bytes) {
  if (bytes) std::memset(dst, 0xff, bytes);
}

BackendCopies::BackendCopies() = default;
BackendCopies::~BackendCopies() {
  for (void* p : buffers_) std::free(p);
}

void* BackendCopies::copyBytes(const void* src, size_t bytes) {
  if (!bytes) return nullptr;
  void* p = std::malloc(bytes);
  std::memcpy(p, src, bytes);
  buffers_.push_back(p);
  return p;
}

}  // namespace weft::test
