// A native elementwise pass writes every element of an 8-bit output it
// stores channels last. Found by the plan check's solo rerun in plan layouts
// (core/measure/plan_check.h): a QDQ residual join (Q -> DQ -> Add -> Relu ->
// Q) now and then left one spatial position's channels (64 bytes) unwritten,
// in 1 of 300 runs with 1 thread, 8 with 2, 42 with 3. The pass skipped a
// store it took for one computed in place: it compared the operand with the
// destination as if the u8 buffer held floats, and that address could be the
// thread's scratch block, wherever the heap put it. The output is filled
// with a byte no run writes first, so an unwritten element always shows.
#include <gtest/gtest.h>

#include <cstring>

#include "backends/backend_list.h"
#include "backends/native/native_lowering_impl.h"
#include "core/ir/threading.h"
#include "core/measure/kernel_check.h"
#include "core/ops/reference_executor.h"
#include "tests/unit/graph_builder.h"

namespace collage {
namespace {

Tensor channelsLast(const Tensor& t) {
  const Shape& s = t.shape();
  Tensor out(t.type());
  const size_t size = elementSize(t.elementType());
  const int64_t c = s[1], spatial = t.numElements() / (s[0] * c);
  for (int64_t i = 0; i < t.numElements(); ++i) {
    const int64_t n = i / (c * spatial), ch = (i / spatial) % c, p = i % spatial;
    std::memcpy(static_cast<uint8_t*>(out.raw()) + ((n * spatial + p) * c + ch) * size,
                static_cast<const uint8_t*>(t.raw()) + i * size, size);
  }
  return out;
}

TEST(NativeChannelsLast, AQdqJoinWritesEveryElementOfItsChannelsLastOutput) {
  GraphBuilder b;
  const ValueId x = b.input({1, 64, 8, 8});
  const ValueId r = b.input({1, 64, 8, 8});
  Tensor zp(ElementType::UInt8, {});
  zp.data<uint8_t>()[0] = 0;
  const ValueId z = b.graph().addConstant("zp", zp);
  const ValueId q = b.op("QuantizeLinear", {x, b.scalar(0.05f), z});
  const ValueId d = b.op("DequantizeLinear", {q, b.scalar(0.05f), z});
  const ValueId y =
      b.op("QuantizeLinear", {b.op("Relu", {b.op("Add", {d, r})}), b.scalar(0.04f), z});
  const NodeSet nodes = b.finish(y);
  const Graph& g = b.graph();
  const KernelRequest request = KernelRequest::of(g, nodes, "test");
  const std::unique_ptr<Backend> backend = createBackend("native");
  const std::vector<Tensor> values = referenceValues(g, randomInputs(g, 5));
  const Tensor want = channelsLast(values[static_cast<size_t>(y)]);
  for (int threads : {1, 2, 3}) {
    setThreadCount(threads);
    int bad = 0;
    for (int run = 0; run < 300; ++run) {
      CompileResult k = backend->compile(request);
      ASSERT_TRUE(k) << k.refusal;
      std::vector<Tensor> given;
      for (size_t i = 0; i < request.inputs.size(); ++i) {
        const Tensor& v = values[static_cast<size_t>(request.inputs[i])];
        const bool switched = request.inputs[i] == r && k.kernel->nativeInputLayout(i).has_value();
        if (switched) k.kernel->useNativeInputLayout(i);
        given.push_back(switched ? channelsLast(v) : v.clone());
      }
      ASSERT_TRUE(k.kernel->nativeOutputLayout(0).has_value());
      k.kernel->useNativeOutputLayout(0);
      std::vector<Tensor> out(1, Tensor(g.value(y).type));
      std::memset(out[0].raw(), 0xAB, out[0].byteSize());
      std::vector<DLTensor> views;
      for (Tensor& t : given) views.push_back(t.toDLTensor());
      DLTensor outView = out[0].toDLTensor();
      std::vector<const DLTensor*> in;
      for (const DLTensor& d : views) in.push_back(&d);
      std::vector<DLTensor*> outs = {&outView};
      k.kernel->run(in, outs);
      bad += std::memcmp(out[0].raw(), want.raw(), want.byteSize()) != 0 ? 1 : 0;
    }
    EXPECT_EQ(bad, 0) << threads << " thread(s)";
  }
  setThreadCount(0);
}

// A pass whose input is handed over channels last but whose output stays
// plain (a ReLU between a oneDNN convolution that writes channels last and
// one that reads plain) converts that input with a tiled transpose before
// the pass, instead of reading it element by element with the channels'
// stride (11x slower on a 25 MiB tensor); the output is the same to the bit,
// at odd sizes and for the other direction too.
TEST(NativeChannelsLast, AnInputInTheOtherLayoutIsConvertedBeforeThePass) {
  for (const bool inputLast : {true, false}) {
    GraphBuilder b;
    const ValueId x = b.input({2, 19, 7, 5});
    const ValueId y = b.op("Relu", {x});
    const NodeSet nodes = b.finish(y);
    const Graph& g = b.graph();
    const KernelRequest request = KernelRequest::of(g, nodes, "test");
    const std::vector<Tensor> values = referenceValues(g, randomInputs(g, 3));
    const std::unique_ptr<Backend> backend = createBackend("native");
    CompileResult k = backend->compile(request);
    ASSERT_TRUE(k) << k.refusal;
    if (inputLast) k.kernel->useNativeInputLayout(0);
    else k.kernel->useNativeOutputLayout(0);
    const auto* native = dynamic_cast<const native::lowering::NativeKernel*>(k.kernel.get());
    ASSERT_NE(native, nullptr);
    EXPECT_NE(native->describe().find(inputLast ? "input 0 converted from channels last"
                                                : "input 0 converted to channels last"),
              std::string::npos)
        << native->describe();
    Tensor given = inputLast ? channelsLast(values[static_cast<size_t>(x)]) : values[static_cast<size_t>(x)].clone();
    const Tensor want = inputLast ? values[static_cast<size_t>(y)].clone() : channelsLast(values[static_cast<size_t>(y)]);
    Tensor out(g.value(y).type);
    std::memset(out.raw(), 0xAB, out.byteSize());
    DLTensor inView = given.toDLTensor(), outView = out.toDLTensor();
    std::vector<const DLTensor*> in = {&inView};
    std::vector<DLTensor*> outs = {&outView};
    for (int run = 0; run < 2; ++run) {  // the scratch buffer is reused
      k.kernel->run(in, outs);
      EXPECT_EQ(std::memcmp(out.raw(), want.raw(), want.byteSize()), 0) << "input channels last: " << inputLast;
    }
  }
}

}  // namespace
}  // namespace collage
