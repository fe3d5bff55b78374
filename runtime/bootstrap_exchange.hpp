// The bootstrap, as the transport layer asks for it (transport::Exchange).
#pragma once

#include "bootstrap.hpp"
#include "transport/net/backend.hpp"

namespace weft {

class BootstrapExchange final : public transport::Exchange {
 public:
  explicit BootstrapExchange(Bootstrap& boot) : boot_(boot) {}
  int rank() const override { return boot_.rank(); }
  int nranks() const override { return boot_.nranks(); }
  void allGather(const void* mine, size_t bytes, void* all) override { boot_.allGather(mine, bytes, all); }

 private:
  Bootstrap& boot_;
};

}  // namespace weft
