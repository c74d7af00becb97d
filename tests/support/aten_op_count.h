// Top-level ATen operations (those not called from inside another) issued by a piece of code on
// this thread, counted through RecordFunction: on a GPU each is a kernel launch or a few (a
// `_foreach_` one launches one per chunk of tensors), so their number is what makes a small
// model's optimizer step launch-bound. A view (reshape, select, transpose, …) is an operation
// too but launches nothing: `computing` leaves those out.
// Not experiments/bench/aten_op_counter.h's AtenOpCounter: that one counts every operation by name,
// nested ones included, on every thread (what `bench train` compares with torch.profiler); a
// test of how many launches a step issues wants the outermost calls of the calling thread only.
#pragma once

#include <ATen/record_function.h>

#include <functional>
#include <set>
#include <string>

namespace jacond::test {

struct AtenOpCount {
  int64_t all = 0;        // every top-level operation
  int64_t computing = 0;  // those that are not views or metadata
};

namespace aten_op_count_detail {
inline thread_local int depth = 0;
inline thread_local AtenOpCount counted;

// ATen's view and metadata operations among those our optimizers call: no kernel behind them.
inline bool is_view(const std::string& name) {
  static const std::set<std::string> views = {
      "aten::view",    "aten::reshape", "aten::_reshape_alias", "aten::select",    "aten::squeeze",
      "aten::unsqueeze", "aten::expand", "aten::transpose",     "aten::t",         "aten::as_strided",
      "aten::unbind",  "aten::alias",   "aten::detach",         "aten::narrow",    "aten::slice",
      "aten::permute", "aten::flatten", "aten::numpy_T",        "aten::expand_as", "aten::lift_fresh"};
  return views.count(name) > 0;
}

inline std::unique_ptr<at::ObserverContext> enter(const at::RecordFunction& fn) {
  if (depth++ == 0) {
    ++counted.all;
    if (!is_view(fn.name())) ++counted.computing;
  }
  return nullptr;
}
inline void leave(const at::RecordFunction&, at::ObserverContext*) { --depth; }
}  // namespace aten_op_count_detail

/// The top-level operations `run` issues on this thread.
inline AtenOpCount count_top_level_ops(const std::function<void()>& run) {
  namespace d = aten_op_count_detail;
  d::counted = {};
  const at::CallbackHandle handle =
      at::addThreadLocalCallback(at::RecordFunctionCallback(d::enter, d::leave).scopes({at::RecordScope::FUNCTION}));
  run();
  at::removeCallback(handle);
  return d::counted;
}

}  // namespace jacond::test
