// What tests/support/op_rank.hpp says the same way on every backend.
#include "op_rank.hpp"

namespace weft::test {

void PrintTo(const Placement& placement, std::ostream* os) {
  *os << placement.ranks << (placement.ranks == 1 ? " rank" : " ranks");
  if (!placement.engine.empty()) *os << ", " << placement.engine << " engine";
}

}  // namespace weft::test
