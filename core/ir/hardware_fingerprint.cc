#include "core/ir/hardware_fingerprint.h"

#include <fstream>
#include <set>
#include <sstream>

#include "core/ir/hashing.h"
#include "core/ir/threading.h"

namespace collage {

HardwareFingerprint HardwareFingerprint::current() {
  HardwareFingerprint f;
  f.cores = hardwareCores();
  f.threads = threadCount();
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  // Only the extensions that change which kernels a library picks: a flag
  // list with every microcode detail would split the cache needlessly.
  static const std::set<std::string> relevant = {
      "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
      "avx512dq", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8", "avx_vnni"};
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "vendor_id" && f.cpuVendor.empty()) f.cpuVendor = value;
    else if (key == "model name" && f.cpuModel.empty()) f.cpuModel = value;
    else if (key == "flags" && f.isaFlags.empty()) {
      std::istringstream flags(value);
      std::string flag;
      std::set<std::string> present;
      while (flags >> flag)
        if (relevant.count(flag)) present.insert(flag);
      for (const auto& p : present) f.isaFlags += (f.isaFlags.empty() ? "" : " ") + p;
    }
  }
  return f;
}

std::string HardwareFingerprint::id() const {
  return stableHashHex(cpuVendor + "|" + cpuModel + "|" + isaFlags + "|" + std::to_string(cores) +
                       "|" + std::to_string(threads) + "|" + libraryVersions);
}

std::string HardwareFingerprint::toString() const {
  return cpuModel + " (" + cpuVendor + "), " + std::to_string(cores) + " cores, " +
         std::to_string(threads) + " threads, ISA [" + isaFlags + "], " + libraryVersions;
}

}  // namespace collage
