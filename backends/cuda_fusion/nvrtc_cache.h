// Generated CUDA C++ compiled to PTX by NVRTC, and kept on disk so a kernel
// is compiled once per machine, not once per process: the measurer's worker
// processes, the Session and the next run of the tool all find it there.
//
// NVRTC needs no GPU: it compiles for a virtual architecture
// (cuda::targetArchitecture()), and the driver JITs the PTX for the device
// when the module is loaded.
//
// The key is a hash of exactly what determines the PTX: the source (which
// the generator derives from the group's structure alone), the target
// architecture, the options and the NVRTC version.
#pragma once

#include <mutex>
#include <string>

namespace collage::cuda_fusion {

struct CompiledPtx {
  std::string ptx;  // empty when compilation failed
  std::string key;  // the cache key (64 hex digits)
  bool fromCache = false;
  std::string error;  // NVRTC's status and log when it failed
};

// One NVRTC compilation, no cache. The log (warnings, errors) goes to *log.
std::string compileToPtx(const std::string& source, const std::string& architecture,
                         std::string* log);

class PtxCache {
 public:
  // $COLLAGE_CUDA_CACHE, else $XDG_CACHE_HOME/collage-studio/cuda_fusion,
  // else ~/.cache/collage-studio/cuda_fusion.
  static std::string defaultDirectory();
  explicit PtxCache(std::string directory = defaultDirectory());

  static std::string keyOf(const std::string& source, const std::string& architecture);

  // PTX for `source`: read from the directory when there, else compiled and
  // written there (atomically: a concurrent reader sees all or nothing).
  CompiledPtx get(const std::string& source, const std::string& architecture);

  const std::string& directory() const { return directory_; }
  int compilations() const;  // NVRTC runs by this object
  int hits() const;          // answers read from disk

 private:
  std::string directory_;
  mutable std::mutex mutex_;
  int compilations_ = 0;
  int hits_ = 0;
};

}  // namespace collage::cuda_fusion
