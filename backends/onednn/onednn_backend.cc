#include "core/backend.h"

namespace collage {

std::unique_ptr<Backend> createNativeBackendPlaceholder();

std::unique_ptr<Backend> createOneDnnBackend() { return nullptr; }

}  // namespace collage
