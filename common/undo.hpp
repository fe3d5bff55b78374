// Runs on scope exit unless dismissed (armed = false): frees what a half-finished constructor made.
#pragma once

namespace weft {

template <typename F>
struct Undo {
  F f;
  bool armed = true;
  ~Undo() {
    if (armed) f();
  }
};
template <typename F>
Undo(F) -> Undo<F>;

}  // namespace weft
