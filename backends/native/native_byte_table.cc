#include "backends/native/native_byte_table.h"

#include <omp.h>

#include <algorithm>
#include <set>
#include <utility>

#include "backends/native/native_lowering.h"

namespace collage::native {

namespace {

// Fewer elements run as the float pass.
constexpr int64_t kMinElements = 4096;

bool isByte(ElementType t) { return t == ElementType::UInt8 || t == ElementType::Int8; }

// Whether `off` walks the iteration space of `dims` as one dense layout:
// no constant term, and the strides of the dims that are not 1 a
// permutation of a contiguous layout's.
bool dense(const Affine& off, const std::vector<int64_t>& dims) {
  if (off.c != 0) return false;
  std::vector<std::pair<int64_t, int64_t>> strides;  // (stride, size)
  for (size_t d = 0; d < dims.size(); ++d)
    if (dims[d] != 1) strides.emplace_back(off.coef(d), dims[d]);
  std::sort(strides.begin(), strides.end());
  int64_t expected = 1;
  for (const auto& [stride, size] : strides) {
    if (stride != expected) return false;
    expected *= size;
  }
  return true;
}

Affine trimmed(Affine a) {
  a.trim();
  return a;
}

}  // namespace

std::unique_ptr<ByteTable> ByteTable::of(const PassProgram& program, int threads) {
  const size_t leaves = program.leaves.size();
  if (!program.mayUseTable || !program.inner.empty() || leaves < 1 || leaves > 2 || program.stores.size() != 1) return nullptr;
  for (const IrNode& n : program.nodes)
    if (isReduce(n.op)) return nullptr;
  const Store& store = program.stores[0];
  if (!isByte(store.type)) return nullptr;
  const Affine off = trimmed(store.off);
  for (const Leaf& l : program.leaves)
    if (!isByte(l.type) || !l.ind.empty() || !(trimmed(l.off) == off)) return nullptr;
  if (!dense(off, program.dims)) return nullptr;
  int64_t count = 1;
  for (int64_t d : program.dims) count *= d;
  const int64_t entries = leaves == 2 ? 65536 : 256;
  // Not for a small tensor, where the table's first reads (64 KB for a
  // pair) would outweigh the pass.
  if (count < kMinElements) return nullptr;

  auto t = std::make_unique<ByteTable>();
  t->count_ = count;
  t->threads_ = std::max(1, threads);
  t->out_ = store.buffer;
  for (size_t k = 0; k < leaves; ++k) t->in_[k] = program.leaves[k].buffer;
  t->label_ = program.label;

  // The pass itself over every input: leaf 0 the index's high byte, leaf 1 its low one.
  PassProgram enumerate = program;
  enumerate.mayUseTable = false;
  enumerate.dims = {entries};
  enumerate.inner.clear();
  std::vector<std::vector<uint8_t>> bytes(leaves, std::vector<uint8_t>(static_cast<size_t>(entries)));
  for (int64_t i = 0; i < entries; ++i) {
    bytes[0][static_cast<size_t>(i)] = static_cast<uint8_t>(leaves == 2 ? i >> 8 : i);
    if (leaves == 2) bytes[1][static_cast<size_t>(i)] = static_cast<uint8_t>(i & 255);
  }
  BufferTable buffers;
  for (size_t k = 0; k < leaves; ++k) {
    Leaf& l = enumerate.leaves[k];
    l.buffer = static_cast<int32_t>(k);
    l.off = Affine{0, {1}};
    buffers.ptr.push_back(bytes[k].data());
  }
  t->table_.resize(static_cast<size_t>(entries));
  Store& s = enumerate.stores[0];
  s.buffer = static_cast<int32_t>(leaves);
  s.off = Affine{0, {1}};
  buffers.ptr.push_back(t->table_.data());
  CompiledPass(std::move(enumerate), 1).run(buffers);
  return t;
}

void ByteTable::run(const BufferTable& buffers) const {
  const uint8_t* table = table_.data();
  const auto* a = static_cast<const uint8_t*>(buffers.ptr[static_cast<size_t>(in_[0])]);
  const auto* b = in_[1] < 0 ? nullptr : static_cast<const uint8_t*>(buffers.ptr[static_cast<size_t>(in_[1])]);
  auto* y = static_cast<uint8_t*>(buffers.ptr[static_cast<size_t>(out_)]);
  const int64_t n = count_;
  // Below 2^16 elements one thread: waking the others costs more than it saves.
  const int threads = n >= (int64_t{1} << 16) ? threads_ : 1;
  if (b) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = table[static_cast<size_t>(a[i]) << 8 | b[i]];
  } else {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = table[a[i]];
  }
}

std::string ByteTable::describe() const {
  return "pass " + label_ + ": " + std::to_string(count_) + " bytes by a " +
         (in_[1] < 0 ? std::string("256") : std::string("256x256")) + " table of the pass's own results";
}

namespace {

bool scalarConstant(const Graph& g, const Node& node, size_t slot) {
  if (node.inputs.size() <= slot || node.inputs[slot] == kNoValue) return slot == 2;  // a zero point may be absent
  const Value& v = g.value(node.inputs[slot]);
  return v.isConstant() && v.type.numElements() == 1;
}

// The one node that reads `v`, where v is no graph output.
NodeId soleReader(const Graph& g, ValueId v) {
  const Value& val = g.value(v);
  return val.isGraphOutput || val.consumers.size() != 1 ? kNoNode : val.consumers[0];
}

// A DequantizeLinear of a run-time 8-bit tensor, scalar constants, read by `reader` alone.
bool joinInput(const Graph& g, ValueId v, NodeId reader) {
  const NodeId p = g.value(v).producer;
  if (p == kNoNode || soleReader(g, v) != reader) return false;
  const Node& dq = g.node(p);
  if (dq.op != "DequantizeLinear" || !scalarConstant(g, dq, 1) || !scalarConstant(g, dq, 2)) return false;
  const Value& x = g.value(dq.inputs[0]);
  return !x.isConstant() && isByte(x.type.elementType) && inlineRefusal(g, p).empty();
}

}  // namespace

std::vector<std::pair<NodeSet, std::string>> quantizedJoinGroups(const Graph& graph) {
  static const std::set<std::string> joins = {"Add", "Sub", "Mul", "Max", "Min"};
  static const std::set<std::string> activations = {"Relu", "Clip", "LeakyRelu", "HardSigmoid", "HardSwish",
                                                    "Sigmoid", "Tanh", "Neg", "Abs"};
  std::vector<std::pair<NodeSet, std::string>> out;
  for (NodeId n = 0; n < graph.numNodes(); ++n) {
    const Node& join = graph.node(n);
    if (!joins.count(join.op) || join.inputs.size() != 2 || join.inputs[0] == join.inputs[1]) continue;
    const Shape& shape = graph.value(join.outputs[0]).type.shape;
    if (graph.value(join.inputs[0]).type.shape != shape || graph.value(join.inputs[1]).type.shape != shape) continue;
    if (!joinInput(graph, join.inputs[0], n) || !joinInput(graph, join.inputs[1], n) || !inlineRefusal(graph, n).empty())
      continue;
    std::vector<NodeId> members = {graph.value(join.inputs[0]).producer, graph.value(join.inputs[1]).producer, n};
    ValueId v = join.outputs[0];
    for (NodeId next = soleReader(graph, v); next != kNoNode; next = soleReader(graph, v)) {
      const Node& node = graph.node(next);
      if (!inlineRefusal(graph, next).empty() || node.inputs.empty() || node.inputs[0] != v) break;
      if (node.op == "QuantizeLinear") {
        if (scalarConstant(graph, node, 1) && scalarConstant(graph, node, 2) &&
            isByte(graph.value(node.outputs[0]).type.elementType)) {
          members.push_back(next);
          out.emplace_back(NodeSet::of(graph.numNodes(), members), "quantized_join");
        }
        break;
      }
      if (!activations.count(node.op) || node.outputs.size() != 1) break;
      bool constants = true;  // Clip's bounds, ...
      for (size_t i = 1; i < node.inputs.size(); ++i)
        constants = constants && (node.inputs[i] == kNoValue || graph.value(node.inputs[i]).isConstant());
      if (!constants) break;
      members.push_back(next);
      v = node.outputs[0];
    }
  }
  return out;
}

}  // namespace collage::native
