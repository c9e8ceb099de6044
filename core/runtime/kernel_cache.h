// Compiled kernels shared between the Sessions of one graph.
//
// Why: the graph-level search runs hundreds of whole plans that differ from
// each other in a few groups. Compiling is the expensive part of building a
// Session (oneDNN JIT-compiles its primitives and reorders every weight), so
// a kernel compiled for one plan is reused by every later plan that has the
// same group on the same backend.
//
// A kernel is keyed by its backend, its nodes and the inputs and outputs the
// Session switched to the backend's own layout (Kernel::useNative...), since
// a switched kernel runs differently from the plain one. Refusals are kept
// too, so a region no backend takes is asked about once. Kernels are run by
// one Session at a time (they are not reentrant), which the search's single
// measuring thread guarantees.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/runtime/backend.h"

namespace collage {

class KernelCache {
 public:
  // Kernels no Session holds and none of the last `keepSessions` Sessions
  // asked for are dropped, so memory stays bounded over a long search.
  explicit KernelCache(int keepSessions = 12) : keepSessions_(keepSessions) {}

  // The kernel for `request` on `backend`, with the given input and output
  // positions switched to the backend's native layout; compiled (and
  // switched) on first use. A refusal returns null and sets `refusal`.
  // Exceptions from the backend's compile() propagate (and are not kept).
  std::shared_ptr<Kernel> get(Backend& backend, const KernelRequest& request,
                               const std::vector<size_t>& nativeInputs,
                               const std::vector<size_t>& nativeOutputs, std::string* refusal);

  // A Session starts building: the clock that ages entries moves on.
  void beginSession();

  int compiled() const { return compiled_; }  // compile() calls made
  int reused() const { return reused_; }      // answers from the cache
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::shared_ptr<Kernel> kernel;
    std::string refusal;
    int64_t lastUse = 0;
  };
  int keepSessions_;
  int64_t clock_ = 0;
  int compiled_ = 0;
  int reused_ = 0;
  std::map<std::string, Entry> entries_;
};

}  // namespace collage
