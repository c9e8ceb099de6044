// Shared by the CUDA backends' tests: a GPU test skips with the reason when
// this process has no device (the CPU-only machines that build everything).
#pragma once

#include <gtest/gtest.h>

#include "backends/cuda_runtime/cuda_device.h"

#define COLLAGE_SKIP_WITHOUT_GPU()                                             \
  do {                                                                         \
    if (!::collage::cuda::deviceAvailable())                                   \
      GTEST_SKIP() << "needs a GPU: " << ::collage::cuda::unavailableReason(); \
  } while (0)
