#include "core/backend.h"

namespace collage {

std::unique_ptr<Backend> createNativeBackendPlaceholder();

std::unique_ptr<Backend> createOpenBlasBackend() { return nullptr; }

}  // namespace collage
