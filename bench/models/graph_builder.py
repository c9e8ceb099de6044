"""Writing ONNX graphs node by node with onnx's helper: the builder that the
decoder scripts share (bench/models/export_decoders.py,
tests/models/decoder/make_models.py and make_generate_model.py), so the
names of nodes, outputs and initializers, and with them the bytes of the
committed test models, come from one place.

    sys.path.insert(0, ".../bench/models")
    from graph_builder import GraphBuilder, decoder_inputs
"""
import numpy as np
from onnx import TensorProto, helper, numpy_helper


class GraphBuilder:
    """Nodes and initializers, each named after its op (or the constant's
    base name) and a running count over both: with `torch_names`, outputs and
    nodes as torch's exporter names them ("/MatMul_3_output_0", node
    "/MatMul_3"), else "matmul_3", node "MatMul_3"."""

    def __init__(self, torch_names=False):
        self.nodes, self.inits, self.count = [], [], 0
        self.torch_names = torch_names

    def const(self, base, array):
        self.count += 1
        name = "%s_%d" % (base, self.count)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def op(self, kind, inputs, output=None, **attrs):
        self.count += 1
        if self.torch_names:
            out = output or "/%s_%d_output_0" % (kind, self.count)
            name = "/%s_%d" % (kind, self.count)
        else:
            out = output or "%s_%d" % (kind.lower(), self.count)
            name = "%s_%d" % (kind, self.count)
        self.nodes.append(helper.make_node(kind, inputs, [out], name=name, **attrs))
        return out

    def dim(self, tensor, axis):
        """Shape(tensor)[axis] as a 1-element int64 tensor, as the exporter computes sizes."""
        return self.op("Unsqueeze", [self.op("Gather", [self.op("Shape", [tensor]), self.const("axis", np.int64(axis))]),
                                     self.const("axes", np.array([0], np.int64))])

    def model(self, name, inputs, outputs, producer):
        """The graph as a model: opset 17, IR version 8."""
        model = helper.make_model(helper.make_graph(self.nodes, name, inputs, outputs, self.inits),
                                  opset_imports=[helper.make_opsetid("", 17)], producer_name=producer)
        model.ir_version = 8
        return model


def decoder_inputs(layers, kv_heads, head_dim, batch, sequence, total, past):
    """A decoder's inputs as exporters write them: input_ids [batch, sequence],
    attention_mask [batch, total], position_ids [batch, sequence] (int64), then
    past_key_values.N.key / .value [batch, kv_heads, past, head_dim] per layer;
    the dims are the names (or sizes) given."""
    i64, f32 = TensorProto.INT64, TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("input_ids", i64, [batch, sequence]),
              helper.make_tensor_value_info("attention_mask", i64, [batch, total]),
              helper.make_tensor_value_info("position_ids", i64, [batch, sequence])]
    for n in range(layers):
        for kv in ("key", "value"):
            inputs.append(helper.make_tensor_value_info("past_key_values.%d.%s" % (n, kv), f32,
                                                        [batch, kv_heads, past, head_dim]))
    return inputs
