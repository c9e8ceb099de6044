// run_plan model.onnx plan.json: runs a plan with the installed library and
// prints each output's sum, the latency and where the time went. Float inputs
// get the values examples/python/run_plan.py gives them, so both print the same.
#include <collage/collage.h>

#include <cstdio>
#include <map>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) return std::fprintf(stderr, "usage: %s model.onnx plan.json\n", argv[0]), 2;
  try {
    auto model = collage::api::Model::load(argv[1]);
    collage::api::Session session(model, collage::api::Plan::load(argv[2]));
    std::vector<std::vector<float>> data(model.inputs().size());  // read in place by run()
    std::map<std::string, DLTensor> inputs;
    for (size_t k = 0; k < data.size(); ++k) {
      const auto& in = model.inputs()[k];
      int64_t n = 1;
      for (int64_t d : in.shape) n *= d;
      for (int64_t i = 0; i < n; ++i) data[k].push_back(static_cast<float>(i % 17) / 16 - 0.5f);
      inputs[in.name] = DLTensor{data[k].data(),
                                 {kDLCPU, 0},
                                 static_cast<int32_t>(in.shape.size()),
                                 {kDLFloat, 32, 1},
                                 const_cast<int64_t*>(in.shape.data()),
                                 nullptr,
                                 0};
    }
    for (const auto& [name, out] : session.run(inputs)) {
      double sum = 0;
      for (int64_t i = 0; i < out.numElements(); ++i) sum += out.data<float>()[i];
      std::printf("output %s: %lld values, sum %.6f\n", name.c_str(),
                  static_cast<long long>(out.numElements()), sum);
    }
    std::printf("latency %.3f ms, peak memory %zu bytes\n", session.lastLatencyMs(),
                session.peakBytes());
    for (const auto& b : session.placement())
      std::printf("  %-8s %3d groups %4d nodes %5.1f%%\n", b.backend.c_str(), b.groups, b.nodes,
                  100 * b.share);
  } catch (const collage::api::Error& e) {
    return std::fprintf(stderr, "error: %s\n", e.what()), 1;
  }
}
