// What the public API's objects hold (include/collage/), and the one place
// core's errors become the API's: the library's own header, never installed.
#pragma once

#include <exception>
#include <memory>
#include <new>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "collage/error.h"
#include "collage/model.h"
#include "collage/plan.h"
#include "collage/tensor.h"
#include "core/ir/error.h"
#include "core/ir/graph.h"
#include "core/ir/tensor.h"
#include "core/plan/plan.h"

namespace collage::api {

struct Model::Impl {
  std::string path;
  std::map<std::string, Shape> inputShapes;  // the bindings it was imported with
  Graph graph;
  std::vector<TensorInfo> inputs, outputs;
  std::vector<std::string> importNotes;  // the import's notes (dynamic inputs and their binding)
  // Inputs bound to constants, as the optimizer's workers take them
  // ("use_cache_branch:=true", app/cli_common.h's ModelOptions): a merged
  // decoder's step or prompt graph, its branch inlined (Generator::stepModel),
  // and a prompt graph's last-row logits ("logits@last", prefillModel).
  std::vector<std::string> valueBindings;
};

struct Plan::Impl {
  collage::Plan plan;
};

// Runs `body`, turning core's errors (and any other exception, which would
// otherwise cross a C++ / Python boundary unannounced) into api::Error with
// the same message.
template <class Body>
auto translateErrors(Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const api::Error&) {
    throw;
  } catch (const collage::Error& e) {
    throw api::Error(e.what());
  } catch (const std::bad_alloc&) {
    throw api::Error("out of memory");
  } catch (const std::exception& e) {
    throw api::Error(std::string("internal error: ") + e.what());
  }
}

inline Plan wrapPlan(collage::Plan plan) {
  auto impl = std::make_shared<Plan::Impl>();
  impl->plan = std::move(plan);
  return Plan(std::move(impl));
}

// A core tensor handed out as DLPack, without a copy (api/tensor.cc).
api::Tensor handOut(collage::Tensor tensor);

}  // namespace collage::api
