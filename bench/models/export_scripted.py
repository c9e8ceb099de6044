#!/usr/bin/python3
"""Export small TorchScript models whose control flow PyTorch's exporter
writes as If, Loop and the Sequence ops, for bench/corpus_check.py's
`scripted` set.

Traced models (the zoo) have no control flow: tracing unrolls loops and
takes one branch. Scripted ones keep it, and the exporter writes its own
idioms around it: a list appended to in a loop becomes SequenceEmpty ->
Loop(SequenceInsert) -> ConcatFromSequence, a data-dependent `if` an If
node, a `while` a Loop with a condition. Each model is one such idiom,
with random weights from a fixed seed, one input and PyTorch's outputs:

    <name>.onnx, <name>.input_K.pb, <name>.output_K.pb

written to $XDG_CACHE_HOME/collage-studio/scripted (or
~/.cache/collage-studio/scripted), or to the folder given. Models whose
shapes depend on their data (a loop with `break`) are there on purpose:
Collage plans with static shapes, and the check shows the message they get.

Needs Debian's python3-torch and python3-onnx: run it with /usr/bin/python3.
"""
import os
import sys
import warnings
from typing import List

import onnx
import torch
from onnx import numpy_helper

warnings.filterwarnings("ignore")
torch.manual_seed(0)


class AppendStack(torch.nn.Module):
    """A recurrence over the first dim, its states stacked (a decoder)."""

    def __init__(self):
        super().__init__()
        self.ih = torch.nn.Linear(8, 16)
        self.hh = torch.nn.Linear(16, 16)
        self.out = torch.nn.Linear(16, 8)

    def forward(self, x, h):
        ys: List[torch.Tensor] = []
        for t in range(x.size(0)):
            h = torch.tanh(self.ih(x[t]) + self.hh(h))
            ys.append(self.out(h))
        return torch.stack(ys), h


class AppendCat(torch.nn.Module):
    """Rows transformed one at a time and concatenated."""

    def forward(self, x):
        outs: List[torch.Tensor] = []
        for i in range(x.size(0)):
            outs.append(torch.relu(x[i]) + float(i))
        return torch.cat(outs, 0)


class TwoAppends(torch.nn.Module):
    """Two elements appended per iteration."""

    def forward(self, x):
        outs: List[torch.Tensor] = []
        for i in range(x.size(1)):
            outs.append(x[:, i] * 2.0)
            outs.append(x[:, i] - 1.0)
        return torch.stack(outs, 1)


class DataIf(torch.nn.Module):
    """A branch on the data: an If node with both branches kept."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.b = torch.nn.Conv2d(3, 4, 1)

    def forward(self, x):
        if bool(x.mean() > 0):
            y = self.a(x)
        else:
            y = self.b(x)
        return torch.sigmoid(y)


class WhileCondition(torch.nn.Module):
    """A while loop on the data, with a bound."""

    def forward(self, x):
        i = 0
        while bool(x.abs().sum() < 100.0) and i < 50:
            x = x * 1.5 + 0.1
            i += 1
        return x


class LoopWithBranch(torch.nn.Module):
    """A branch on the iteration number inside a loop."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)

    def forward(self, x):
        for i in range(x.size(0)):
            if i % 2 == 0:
                x = self.lin(x)
            else:
                x = torch.relu(x)
        return x


class GreedyIndices(torch.nn.Module):
    """Greedy decoding: an argmax per step fed back, the indices stacked."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 8)
        self.proj = torch.nn.Linear(8, 10)

    def forward(self, start, steps):
        tokens: List[torch.Tensor] = []
        tok = start
        for _ in range(steps.size(0)):
            tok = torch.argmax(self.proj(self.emb(tok)), dim=-1)
            tokens.append(tok)
        return torch.stack(tokens, 1)


class UnbindLoop(torch.nn.Module):
    """A loop over x.unbind(0): SplitToSequence with keepdims=0."""

    def forward(self, x):
        acc = torch.zeros_like(x[0])
        for row in x.unbind(0):
            acc = acc * 0.5 + row
        return acc


class SplitLoop(torch.nn.Module):
    """A loop over torch.split's pieces, each reduced, then concatenated."""

    def forward(self, x):
        outs: List[torch.Tensor] = []
        for part in torch.split(x, 2, dim=1):
            outs.append(part.sum(1, keepdim=True))
        return torch.cat(outs, 1)


class ListLength(torch.nn.Module):
    """len() of a list built in a loop."""

    def forward(self, x):
        outs: List[torch.Tensor] = []
        for i in range(x.size(0)):
            outs.append(x[i] * 2)
        return torch.stack(outs) / float(len(outs))


class ListIndex(torch.nn.Module):
    """Elements of a list built in a loop, read by index."""

    def forward(self, x):
        outs: List[torch.Tensor] = []
        for i in range(x.size(0)):
            outs.append(torch.tanh(x[i]))
        return outs[-1] + outs[0]


class EarlyBreak(torch.nn.Module):
    """A loop that may stop early: the result's shape is the data's."""

    def forward(self, x):
        outs: List[torch.Tensor] = []
        for i in range(x.size(0)):
            if bool(x[i].sum() > 100.0):
                break
            outs.append(x[i])
        return torch.cat(outs, 0)


MODELS = {
    "append_stack": (AppendStack(), (torch.randn(5, 1, 8), torch.zeros(1, 16))),
    "append_cat": (AppendCat(), (torch.randn(3, 4),)),
    "two_appends": (TwoAppends(), (torch.randn(2, 3),)),
    "data_if": (DataIf(), (torch.randn(1, 3, 8, 8),)),
    "while_condition": (WhileCondition(), (torch.rand(2, 3),)),
    "loop_with_branch": (LoopWithBranch(), (torch.randn(4, 6),)),
    "greedy_indices": (GreedyIndices(), (torch.tensor([3]), torch.zeros(6))),
    "unbind_loop": (UnbindLoop(), (torch.randn(4, 3),)),
    "split_loop": (SplitLoop(), (torch.randn(2, 6),)),
    "list_length": (ListLength(), (torch.randn(3, 2),)),
    "list_index": (ListIndex(), (torch.randn(3, 5),)),
    "early_break": (EarlyBreak(), (torch.randn(3, 4),)),
}


def write_tensor(path, array, name):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array, name).SerializeToString())


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
        "collage-studio", "scripted")
    os.makedirs(out, exist_ok=True)
    for name, (module, args) in MODELS.items():
        module.eval()
        scripted = torch.jit.script(module)
        inputs = [f"input_{k}" for k in range(len(args))]
        path = os.path.join(out, name + ".onnx")
        torch.onnx.export(scripted, args, path, opset_version=13, input_names=inputs)
        with torch.no_grad():
            results = scripted(*args)
        results = results if isinstance(results, tuple) else (results,)
        # The exporter drops an input only its shape was read from (folded).
        kept = [i.name for i in onnx.load(path).graph.input]
        for k, input_name in enumerate(kept):
            a = args[inputs.index(input_name)]
            write_tensor(os.path.join(out, f"{name}.input_{k}.pb"), a.numpy(), input_name)
        for k, r in enumerate(results):
            write_tensor(os.path.join(out, f"{name}.output_{k}.pb"), r.numpy(), f"output_{k}")
        print(path)


if __name__ == "__main__":
    main()
