// What tests/support/op_rank.hpp says the same way on every backend.
#include "op_rank.hpp"

namespace weft::test {

void PrintTo(const Placement& placement, std::ostream* os) {
  *os << placement.ranks << (placement.ranks == 1 ? " rank" : " ranks");
  if (!placement.engine.empty()) *os << ", " << placement.engine << " engine";
}

::testing::AssertionResult opsSucceeded(weft_comm_t comm) {
  weft_result_t async = WEFT_SUCCESS;
  if (const weft_result_t rc = weft_comm_get_async_error(comm, &async); rc != WEFT_SUCCESS)
    return ::testing::AssertionFailure() << "weft_comm_get_async_error: " << weft_get_last_error(nullptr);
  if (async == WEFT_SUCCESS) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "an op failed after it was issued (error " << async
                                       << "): " << weft_get_last_error(nullptr);
}

}  // namespace weft::test
