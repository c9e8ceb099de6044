#include "core/runtime/kernel_cache.h"

namespace collage {

namespace {
std::string keyOf(const Backend& backend, const KernelRequest& request, const std::vector<size_t>& in,
                  const std::vector<size_t>& out) {
  std::string key = backend.name() + ":";
  for (NodeId n : request.members()) key += std::to_string(n) + ",";
  key += "|in";
  for (size_t i : in) key += "," + std::to_string(i);
  key += "|out";
  for (size_t o : out) key += "," + std::to_string(o);
  return key;
}
}  // namespace

std::shared_ptr<Kernel> KernelCache::get(Backend& backend, const KernelRequest& request,
                                         const std::vector<size_t>& nativeInputs,
                                         const std::vector<size_t>& nativeOutputs, std::string* refusal) {
  const std::string key = keyOf(backend, request, nativeInputs, nativeOutputs);
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    ++reused_;
    it->second.lastUse = clock_;
    if (refusal) *refusal = it->second.refusal;
    return it->second.kernel;
  }
  ++compiled_;
  CompileResult result = backend.compile(request);
  Entry entry;
  entry.lastUse = clock_;
  entry.refusal = result.refusal;
  if (result.kernel) {
    for (size_t i : nativeInputs) result.kernel->useNativeInputLayout(i);
    for (size_t o : nativeOutputs) result.kernel->useNativeOutputLayout(o);
    entry.kernel = std::move(result.kernel);
  } else if (entry.refusal.empty()) {
    entry.refusal = "no reason given";
  }
  if (refusal) *refusal = entry.refusal;
  return entries_.emplace(key, std::move(entry)).first->second.kernel;
}

void KernelCache::beginSession() {
  ++clock_;
  for (auto it = entries_.begin(); it != entries_.end();) {
    const bool stale = clock_ - it->second.lastUse > keepSessions_;
    const bool held = it->second.kernel && it->second.kernel.use_count() > 1;
    it = stale && !held ? entries_.erase(it) : std::next(it);
  }
}

}  // namespace collage
