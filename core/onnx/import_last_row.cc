#include "core/onnx/import_last_row.h"

#include <set>
#include <vector>

namespace collage {

namespace {

bool isConstant(const Graph& g, ValueId v) { return v != kNoValue && g.value(v).isConstant(); }

// A constant operand that broadcasts along the row axis `rowAxis` of an
// output of rank `rank`: it has no such axis, or one of size 1.
bool rowFree(const Graph& g, ValueId c, size_t rank, size_t rowAxis) {
  const Shape& s = g.value(c).type.shape;
  if (s.size() + (rank - rowAxis) <= rank) return true;  // too short to reach the row axis
  return s[s.size() - (rank - rowAxis)] == 1;
}

}  // namespace

std::string keepLastRow(Graph& graph, const std::string& output) {
  ValueId out = kNoValue;
  for (ValueId v : graph.outputs())
    if (graph.value(v).name == output) out = v;
  if (out == kNoValue) return "no output '" + output + "'";
  const size_t rank = graph.value(out).type.shape.size();
  if (rank < 2) return "output '" + output + "' has no row axis";
  const size_t rowAxis = rank - 2;
  if (graph.value(out).type.shape[rowAxis] <= 1) return "output '" + output + "' has one row";
  static const std::set<std::string> kUnary = {"Cast", "Tanh", "Relu", "Sigmoid", "Identity"};
  static const std::set<std::string> kBinary = {"Add", "Sub", "Mul", "Div"};
  // The chain from the product to the output, output side first.
  std::vector<NodeId> chain;
  ValueId at = out;
  for (;;) {
    const NodeId n = graph.value(at).producer;
    if (n == kNoNode) return "output '" + output + "' is not made by a weight product";
    const Node& node = graph.node(n);
    if (graph.value(at).type.shape.size() != rank ||
        graph.value(at).consumers.size() > (at == out ? 0u : 1u))
      return "value '" + graph.value(at).name + "' on the way to '" + output +
             "' is read elsewhere or reshaped";
    chain.push_back(n);
    if (node.op == "MatMul" || node.op == "Gemm") {
      if (node.inputs.size() < 2 || !isConstant(graph, node.inputs[1]) ||
          isConstant(graph, node.inputs[0]))
        return "node '" + node.name + "' (" + node.op + ") is not a product by a constant weight";
      if (node.op == "Gemm" && node.attrs.getInt("transA", 0) != 0)
        return "node '" + node.name + "' (Gemm) transposes its activation";
      if (node.op == "Gemm" && node.inputs.size() > 2 && node.inputs[2] != kNoValue &&
          !rowFree(graph, node.inputs[2], rank, rowAxis))
        return "node '" + node.name + "' (Gemm) adds a bias with rows";
      break;
    }
    if (kUnary.count(node.op) && node.inputs.size() == 1) {
      at = node.inputs[0];
      continue;
    }
    if (kBinary.count(node.op) && node.inputs.size() == 2) {
      const bool c0 = isConstant(graph, node.inputs[0]), c1 = isConstant(graph, node.inputs[1]);
      if (c0 != c1 && rowFree(graph, c0 ? node.inputs[0] : node.inputs[1], rank, rowAxis)) {
        at = c0 ? node.inputs[1] : node.inputs[0];
        continue;
      }
    }
    return "node '" + node.name + "' (" + node.op + ") between the weight product and '" + output +
           "' is not elementwise with a constant";
  }
  const NodeId product = chain.back();
  const ValueId x = graph.node(product).inputs[0];
  const Shape xShape = graph.value(x).type.shape;
  if (xShape.size() != rank) return "the product's activation is not of the output's rank";
  const int64_t rows = xShape[rowAxis];
  // The last row of the activation: Gather(x, [rows - 1], axis = the row axis).
  Tensor index(TensorType{ElementType::Int64, {1}});
  index.data<int64_t>()[0] = rows - 1;
  const ValueId indices = graph.addConstant(output + "/last_row_index", std::move(index));
  Shape oneRow = xShape;
  oneRow[rowAxis] = 1;
  const ValueId lastRow =
      graph.addValue(output + "/last_row", {graph.value(x).type.elementType, oneRow});
  Node gather;
  gather.name = output + "/last_row";
  gather.op = "Gather";
  gather.attrs.set("axis", Attribute(static_cast<int64_t>(rowAxis)));
  gather.inputs = {x, indices};
  gather.outputs = {lastRow};
  graph.mutableNode(product).inputs[0] = lastRow;
  for (NodeId n : chain)
    for (ValueId v : graph.node(n).outputs)
      if (v != kNoValue) graph.mutableValue(v).type.shape[rowAxis] = 1;
  graph.addNode(std::move(gather));
  graph.finalize();
  return "";
}

}  // namespace collage
