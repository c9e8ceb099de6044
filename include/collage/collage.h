// Collage Studio's public C++ API (docs/api-cpp.md): load a model and a
// plan, run them in a Session, optimise a model from a program.
// find_package(CollageStudio) and link CollageStudio::collage.
#pragma once

#include "collage/error.h"
#include "collage/generator.h"
#include "collage/model.h"
#include "collage/optimize.h"
#include "collage/pipeline.h"
#include "collage/plan.h"
#include "collage/session.h"
#include "collage/tensor.h"
#include "collage/version.h"
