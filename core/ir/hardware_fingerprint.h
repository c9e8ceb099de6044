// The machine a measurement was taken on. Measurements are only reused on a
// machine with the same fingerprint: same CPU, ISA, core and thread counts,
// and the same library versions.
#pragma once

#include <string>

namespace collage {

struct HardwareFingerprint {
  std::string cpuVendor;  // "GenuineIntel"
  std::string cpuModel;   // "Intel(R) Xeon(R) ..."
  std::string isaFlags;   // the ISA extensions that matter for kernels: "avx2 fma avx512f ..."
  int cores = 0;
  int threads = 0;            // the thread count kernels run with
  // The backends' versions and how costs were measured (measurementProtocol):
  // "onednn=2.6.3;openblas=0.3.21;native=0.1;measure=cold-64MiB".
  std::string libraryVersions;

  // Reads /proc/cpuinfo; threads from threadCount(); libraryVersions empty.
  static HardwareFingerprint current();
  // A short stable id of all fields (hex), the database's key.
  std::string id() const;
  std::string toString() const;
  bool operator==(const HardwareFingerprint&) const = default;
};

}  // namespace collage
