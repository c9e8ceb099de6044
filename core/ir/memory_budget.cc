#include "core/ir/memory_budget.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/ir/error.h"

namespace collage {

namespace {

constexpr const char* kLimitVariable = "COLLAGE_MEMORY_LIMIT";

// MemAvailable in kB, from /proc/meminfo; nullopt-like SIZE_MAX when absent.
size_t memInfoAvailable() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  size_t value = 0;
  std::string unit;
  while (in >> key >> value) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return value * 1024;
  }
  return SIZE_MAX;
}

// A cgroup v2 file holding a number ("max" or absent: SIZE_MAX).
size_t cgroupNumber(const char* path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return SIZE_MAX;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  return end && *end == '\0' ? static_cast<size_t>(v) : SIZE_MAX;
}

size_t environmentLimit() {
  const char* text = std::getenv(kLimitVariable);
  if (!text || !*text) return SIZE_MAX;
  return parseByteCount(text, std::string("$") + kLimitVariable);
}

}  // namespace

size_t parseByteCount(const std::string& text, const std::string& what) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  std::string unit = text.substr(i);
  unit.erase(std::remove(unit.begin(), unit.end(), ' '), unit.end());
  int shift = -1;
  if (unit.empty() || unit == "B" || unit == "bytes") shift = 0;
  if (unit == "KiB") shift = 10;
  if (unit == "MiB") shift = 20;
  if (unit == "GiB") shift = 30;
  if (i == 0 || i > 18 || shift < 0)
    throw Error(what + ": '" + text + "' is not a byte count (bytes, or a number with KiB, MiB or GiB)");
  const unsigned long long n = std::strtoull(text.substr(0, i).c_str(), nullptr, 10);
  if (n > (std::numeric_limits<size_t>::max() >> shift)) throw Error(what + ": '" + text + "' is too large");
  return static_cast<size_t>(n) << shift;
}

std::string describeBytes(size_t bytes) {
  static const char* const units[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " bytes";
  double v = static_cast<double>(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %s", v, units[u]);
  return text;
}

AvailableMemory availableMemory() {
  AvailableMemory m{SIZE_MAX, "unknown"};
  auto take = [&](size_t bytes, const char* source) {
    if (bytes < m.bytes) m = {bytes, source};
  };
  take(memInfoAvailable(), "MemAvailable in /proc/meminfo");
  const size_t max = cgroupNumber("/sys/fs/cgroup/memory.max");
  const size_t current = cgroupNumber("/sys/fs/cgroup/memory.current");
  if (max != SIZE_MAX && current != SIZE_MAX)
    take(max > current ? max - current : 0, "the cgroup's memory.max less its memory.current");
  take(environmentLimit(), "$COLLAGE_MEMORY_LIMIT");
  return m;
}

std::string memoryRefusal(const std::vector<TensorBytes>& tensors, const AvailableMemory& available) {
  size_t total = 0;
  const TensorBytes* largest = nullptr;
  for (const TensorBytes& t : tensors) {
    total = total > SIZE_MAX - t.bytes ? SIZE_MAX : total + t.bytes;
    if (!largest || t.bytes > largest->bytes) largest = &t;
  }
  if (!largest || total <= available.bytes) return "";
  std::string why = largest->what + " is " + describeBytes(largest->bytes);
  if (total > largest->bytes) why += ", " + describeBytes(total) + " in all";
  return why + ", and " + describeBytes(available.bytes) + " is available (" + available.source + ")";
}

std::string memoryRefusal(const std::vector<TensorBytes>& tensors) {
  size_t total = 0;
  for (const TensorBytes& t : tensors) total = total > SIZE_MAX - t.bytes ? SIZE_MAX : total + t.bytes;
  if (total < kMemInfoBytes) {
    const size_t limit = environmentLimit();
    if (limit == SIZE_MAX) return "";
    return memoryRefusal(tensors, AvailableMemory{limit, "$COLLAGE_MEMORY_LIMIT"});
  }
  return memoryRefusal(tensors, availableMemory());
}

std::string nodeMemoryRefusal(const Graph& graph, const Node& node) {
  std::vector<TensorBytes> outputs;
  for (ValueId v : node.outputs)
    if (v != kNoValue)
      outputs.push_back({"output '" + graph.value(v).name + "' " + graph.value(v).type.toString(),
                         graph.value(v).type.byteSize()});
  const std::string why = memoryRefusal(outputs);
  return why.empty() ? "" : "node '" + node.name + "' (" + node.op + "): " + why;
}

}  // namespace collage
