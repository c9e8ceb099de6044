// Recurrent layers: RNN, GRU and LSTM, as PyTorch and tf2onnx export them.
// One kernel walks the time steps of each direction; the three ops differ
// only in their gate count and in how a step combines the gates.
//
//   X [T, B, I] (layout 1: [B, T, I])    W [D, G*H, I]    R [D, G*H, H]
//   B [D, 2*G*H] (Wb then Rb)            sequence_lens [B]
//   initial_h [D, B, H]   LSTM: initial_c [D, B, H], P [D, 3*H] (i, o, f)
//   Y [T, D, B, H] (layout 1: [B, T, D, H])    Y_h, Y_c [D, B, H] (layout 1: [B, D, H])
//
// Gate order in W, R and B: GRU z, r, h; LSTM i, o, f, c. Steps past a batch
// entry's sequence length leave zeros in Y and keep that entry's last state
// in Y_h / Y_c. Arithmetic is in double, stored in the tensors' type.
#include <algorithm>
#include <cmath>

#include "core/ops/op_helpers.h"
#include "core/ops/op_registry.h"
#include "core/ops/type_dispatch.h"

namespace collage {
namespace {

using Inputs = std::vector<const Tensor*>;
using Outputs = std::vector<Tensor*>;
using Types = std::vector<TensorType>;

enum class Cell { Rnn, Gru, Lstm };

int gateCount(Cell c) { return c == Cell::Rnn ? 1 : c == Cell::Gru ? 3 : 4; }
int activationCount(Cell c) { return c == Cell::Rnn ? 1 : c == Cell::Gru ? 2 : 3; }

// An activation of the activations attribute, with its alpha/beta.
struct Activation {
  std::string name;
  double alpha = 0, beta = 0;

  double operator()(double x) const {
    if (name == "Sigmoid") return 1.0 / (1.0 + std::exp(-x));
    if (name == "Tanh") return std::tanh(x);
    if (name == "Relu") return std::max(0.0, x);
    if (name == "Affine") return alpha * x + beta;
    if (name == "LeakyRelu") return x >= 0 ? x : alpha * x;
    if (name == "ThresholdedRelu") return x > alpha ? x : 0.0;
    if (name == "ScaledTanh") return alpha * std::tanh(beta * x);
    if (name == "HardSigmoid") return std::clamp(alpha * x + beta, 0.0, 1.0);
    if (name == "Elu") return x >= 0 ? x : alpha * (std::exp(x) - 1.0);
    if (name == "Softsign") return x / (1.0 + std::fabs(x));
    return std::log1p(std::exp(x));  // Softplus (names are checked when parsed)
  }
};

// The activations for every direction: the attribute's list, or the op's
// defaults. Alpha and beta values are consumed in order by the functions
// that take them; a missing one gets the default of the ONNX op of that name.
std::vector<Activation> activationsOf(const Node& node, Cell cell, int dirs) {
  std::vector<std::string> names;
  if (const Attribute* a = node.attrs.find("activations"))
    if (auto* v = std::get_if<std::vector<std::string>>(a)) names = *v;
  const int per = activationCount(cell);
  if (names.empty()) {
    const std::vector<std::string> defaults =
        cell == Cell::Rnn ? std::vector<std::string>{"Tanh"}
        : cell == Cell::Gru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                            : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
    for (int d = 0; d < dirs; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  }
  if (static_cast<int>(names.size()) == per && dirs == 2) names.insert(names.end(), names.begin(), names.end());
  if (static_cast<int>(names.size()) != per * dirs)
    throw Error(nodeLabel(node) + "activations lists " + std::to_string(names.size()) +
                " functions, expected " + std::to_string(per * dirs) + " (" + std::to_string(per) +
                " per direction)");
  const std::vector<float> alphas = node.attrs.getFloats("activation_alpha", {});
  const std::vector<float> betas = node.attrs.getFloats("activation_beta", {});
  size_t ai = 0, bi = 0;
  std::vector<Activation> out;
  for (const auto& name : names) {
    Activation a{name};
    auto alpha = [&](double fallback) { return ai < alphas.size() ? alphas[ai++] : fallback; };
    auto beta = [&](double fallback) { return bi < betas.size() ? betas[bi++] : fallback; };
    if (name == "Affine") {
      a.alpha = alpha(1.0);
      a.beta = beta(0.0);
    } else if (name == "LeakyRelu") {
      a.alpha = alpha(0.01);
    } else if (name == "ThresholdedRelu" || name == "Elu") {
      a.alpha = alpha(1.0);
    } else if (name == "ScaledTanh") {
      a.alpha = alpha(1.0);
      a.beta = beta(1.0);
    } else if (name == "HardSigmoid") {
      a.alpha = alpha(0.2);
      a.beta = beta(0.5);
    } else if (name != "Sigmoid" && name != "Tanh" && name != "Relu" && name != "Softsign" &&
               name != "Softplus") {
      throw Unsupported(nodeLabel(node) + "activation '" + name + "' is not supported");
    }
    out.push_back(a);
  }
  return out;
}

int directionCount(const Node& node) {
  const std::string d = node.attrs.getString("direction", "forward");
  if (d == "forward" || d == "reverse") return 1;
  if (d == "bidirectional") return 2;
  throw Error(nodeLabel(node) + "direction must be forward, reverse or bidirectional, not '" + d + "'");
}

struct RnnDims {
  int64_t steps, batch, input, hidden, dirs;
  bool batchFirst;
};

RnnDims rnnDims(const Node& node, Cell cell, const Types& in) {
  const int64_t g = gateCount(cell);
  requireTypeIn(node, kFloatTypes, in[0].elementType);
  if (in[0].rank() != 3 || in[1].rank() != 3 || in[2].rank() != 3)
    throw Error(nodeLabel(node) + "X, W and R must be 3-D, not " + in[0].toString() + ", " +
                in[1].toString() + ", " + in[2].toString());
  RnnDims d;
  d.batchFirst = node.attrs.getInt("layout", 0) != 0;
  d.steps = in[0].shape[d.batchFirst ? 1 : 0];
  d.batch = in[0].shape[d.batchFirst ? 0 : 1];
  d.input = in[0].shape[2];
  d.dirs = directionCount(node);
  d.hidden = node.attrs.getInt("hidden_size", in[2].shape[2]);
  auto expect = [&](size_t i, const Shape& shape, const char* what) {
    if (i >= in.size() || in[i].elementType == ElementType::Undefined) return;
    const bool isIndex = std::string(what) == "sequence_lens";
    if (in[i].shape != shape || (!isIndex && in[i].elementType != in[0].elementType))
      throw Error(nodeLabel(node) + what + " must be " +
                  (isIndex ? shapeToString(shape) : TensorType{in[0].elementType, shape}.toString()) +
                  ", not " + in[i].toString());
    if (isIndex) requireIndexType(node, in[i], what);
  };
  const int64_t D = d.dirs, H = d.hidden, B = d.batch;
  const Shape state = d.batchFirst ? Shape{B, D, H} : Shape{D, B, H};
  expect(1, {D, g * H, d.input}, "W");
  expect(2, {D, g * H, H}, "R");
  expect(3, {D, 2 * g * H}, "B");
  expect(4, {B}, "sequence_lens");
  expect(5, state, "initial_h");
  if (cell == Cell::Lstm) {
    expect(6, state, "initial_c");
    expect(7, {D, 3 * H}, "P");
  }
  activationsOf(node, cell, static_cast<int>(D));
  return d;
}

Types inferRnn(const Node& node, Cell cell, const Types& in) {
  const RnnDims d = rnnDims(node, cell, in);
  const ElementType t = in[0].elementType;
  const Shape y = d.batchFirst ? Shape{d.batch, d.steps, d.dirs, d.hidden}
                               : Shape{d.steps, d.dirs, d.batch, d.hidden};
  const Shape state = d.batchFirst ? Shape{d.batch, d.dirs, d.hidden} : Shape{d.dirs, d.batch, d.hidden};
  Types out{{t, y}, {t, state}};
  if (cell == Cell::Lstm) out.push_back({t, state});
  return out;
}

template <class T>
void runRnnTyped(const Node& node, Cell cell, const Inputs& in, const Outputs& out) {
  Types types;
  for (const Tensor* t : in) types.push_back(t ? t->type() : TensorType{});
  const RnnDims d = rnnDims(node, cell, types);
  const int64_t G = gateCount(cell), H = d.hidden, I = d.input, B = d.batch, T_ = d.steps;
  const std::vector<Activation> acts = activationsOf(node, cell, static_cast<int>(d.dirs));
  const int per = activationCount(cell);
  const bool hasClip = node.attrs.has("clip");
  const double clip = node.attrs.getFloat("clip", 0.0f);
  const bool linearBeforeReset = node.attrs.getInt("linear_before_reset", 0) != 0;
  const bool inputForget = node.attrs.getInt("input_forget", 0) != 0;
  const std::string direction = node.attrs.getString("direction", "forward");
  auto has = [&](size_t i) { return i < in.size() && in[i] != nullptr; };
  const T* X = in[0]->data<T>();
  const T* W = in[1]->data<T>();
  const T* R = in[2]->data<T>();
  const T* Bias = has(3) ? in[3]->data<T>() : nullptr;
  const std::vector<int64_t> lens = has(4) ? in[4]->toInts() : std::vector<int64_t>(B, T_);
  for (int64_t b = 0; b < B; ++b)
    if (lens[b] < 0 || lens[b] > T_)
      throw Error(nodeLabel(node) + "sequence_lens[" + std::to_string(b) + "] = " +
                  std::to_string(lens[b]) + " is out of range for " + std::to_string(T_) + " steps");
  const T* H0 = has(5) ? in[5]->data<T>() : nullptr;
  const T* C0 = cell == Cell::Lstm && has(6) ? in[6]->data<T>() : nullptr;
  const T* P = cell == Cell::Lstm && has(7) ? in[7]->data<T>() : nullptr;
  T* Y = out.size() > 0 && out[0] ? out[0]->data<T>() : nullptr;
  T* Yh = out.size() > 1 && out[1] ? out[1]->data<T>() : nullptr;
  T* Yc = out.size() > 2 && out[2] ? out[2]->data<T>() : nullptr;
  if (Y) std::fill(Y, Y + out[0]->numElements(), T(0));

  // Index helpers for the two layouts.
  auto xAt = [&](int64_t t, int64_t b) { return d.batchFirst ? (b * T_ + t) * I : (t * B + b) * I; };
  auto yAt = [&](int64_t t, int64_t dir, int64_t b) {
    return d.batchFirst ? ((b * T_ + t) * d.dirs + dir) * H : ((t * d.dirs + dir) * B + b) * H;
  };
  auto stateAt = [&](int64_t dir, int64_t b) {
    return d.batchFirst ? (b * d.dirs + dir) * H : (dir * B + b) * H;
  };
  auto clipped = [&](double v) { return hasClip ? std::clamp(v, -clip, clip) : v; };

  std::vector<double> h(static_cast<size_t>(H)), c(static_cast<size_t>(H)), gates(static_cast<size_t>(G * H)),
      hr(static_cast<size_t>(H));
  for (int64_t dir = 0; dir < d.dirs; ++dir) {
    const bool reverse = direction == "reverse" || dir == 1;
    const T* w = W + dir * G * H * I;
    const T* r = R + dir * G * H * H;
    const T* wb = Bias ? Bias + dir * 2 * G * H : nullptr;
    const T* rb = Bias ? wb + G * H : nullptr;
    const T* p = P ? P + dir * 3 * H : nullptr;
    const Activation& f = acts[static_cast<size_t>(dir * per)];
    const Activation& g = acts[static_cast<size_t>(dir * per + (per > 1 ? 1 : 0))];
    const Activation& hAct = acts[static_cast<size_t>(dir * per + (per > 2 ? 2 : 0))];
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = 0; j < H; ++j) {
        h[j] = H0 ? static_cast<double>(H0[stateAt(dir, b) + j]) : 0.0;
        c[j] = C0 ? static_cast<double>(C0[stateAt(dir, b) + j]) : 0.0;
      }
      const int64_t len = lens[b];
      for (int64_t s = 0; s < len; ++s) {
        const int64_t t = reverse ? len - 1 - s : s;
        const T* x = X + xAt(t, b);
        // gates = x W^T + Wb (+ h R^T + Rb, except GRU's candidate gate
        // whose recurrent term depends on the reset gate).
        for (int64_t k = 0; k < G * H; ++k) {
          double v = wb ? static_cast<double>(wb[k]) : 0.0;
          for (int64_t i = 0; i < I; ++i) v += static_cast<double>(x[i]) * static_cast<double>(w[k * I + i]);
          const bool gruCandidate = cell == Cell::Gru && k >= 2 * H;
          if (!gruCandidate) {
            if (rb) v += static_cast<double>(rb[k]);
            for (int64_t i = 0; i < H; ++i) v += h[i] * static_cast<double>(r[k * H + i]);
          }
          gates[k] = v;
        }
        if (cell == Cell::Rnn) {
          for (int64_t j = 0; j < H; ++j) h[j] = f(clipped(gates[j]));
        } else if (cell == Cell::Gru) {
          std::vector<double> z(H), rr(H);
          for (int64_t j = 0; j < H; ++j) {
            z[j] = f(clipped(gates[j]));
            rr[j] = f(clipped(gates[H + j]));
          }
          for (int64_t j = 0; j < H; ++j) {
            const int64_t k = 2 * H + j;
            double rec = 0;
            if (linearBeforeReset) {
              for (int64_t i = 0; i < H; ++i) rec += h[i] * static_cast<double>(r[k * H + i]);
              if (rb) rec += static_cast<double>(rb[k]);
              rec *= rr[j];
            } else {
              for (int64_t i = 0; i < H; ++i) rec += rr[i] * h[i] * static_cast<double>(r[k * H + i]);
              if (rb) rec += static_cast<double>(rb[k]);
            }
            hr[j] = g(clipped(gates[k] + rec));
          }
          for (int64_t j = 0; j < H; ++j) h[j] = (1.0 - z[j]) * hr[j] + z[j] * h[j];
        } else {
          for (int64_t j = 0; j < H; ++j) {
            const double pi = p ? static_cast<double>(p[j]) : 0.0;
            const double po = p ? static_cast<double>(p[H + j]) : 0.0;
            const double pf = p ? static_cast<double>(p[2 * H + j]) : 0.0;
            const double ig = f(clipped(gates[j] + pi * c[j]));
            const double fg = inputForget ? 1.0 - ig : f(clipped(gates[2 * H + j] + pf * c[j]));
            const double cand = g(clipped(gates[3 * H + j]));
            c[j] = fg * c[j] + ig * cand;
            const double og = f(clipped(gates[H + j] + po * c[j]));
            h[j] = og * hAct(c[j]);
          }
        }
        if (Y)
          for (int64_t j = 0; j < H; ++j) Y[yAt(t, dir, b) + j] = static_cast<T>(h[j]);
      }
      for (int64_t j = 0; j < H; ++j) {
        if (Yh) Yh[stateAt(dir, b) + j] = static_cast<T>(h[j]);
        if (Yc) Yc[stateAt(dir, b) + j] = static_cast<T>(c[j]);
      }
    }
  }
}

void addRecurrent(OpRegistry& r, const std::string& name, Cell cell) {
  OpSchema s;
  s.name = name;
  s.kind = OpKind::Opaque;
  s.minInputs = 3;
  s.maxInputs = cell == Cell::Lstm ? 8 : 6;
  s.minOutputs = 0;
  s.maxOutputs = cell == Cell::Lstm ? 3 : 2;
  s.attributes = {{"activation_alpha", AttributeType::Floats, std::nullopt},
                  {"activation_beta", AttributeType::Floats, std::nullopt},
                  {"activations", AttributeType::Strings, std::nullopt},
                  {"clip", AttributeType::Float, std::nullopt},
                  {"direction", AttributeType::String, Attribute(std::string("forward"))},
                  {"hidden_size", AttributeType::Int, std::nullopt},
                  {"layout", AttributeType::Int, Attribute(int64_t{0})}};
  if (cell == Cell::Gru)
    s.attributes.push_back({"linear_before_reset", AttributeType::Int, Attribute(int64_t{0})});
  if (cell == Cell::Lstm)
    s.attributes.push_back({"input_forget", AttributeType::Int, Attribute(int64_t{0})});
  s.infer = [cell](const Node& node, const Types& in) { return inferRnn(node, cell, in); };
  s.reference = [cell](const Node& node, const Inputs& in, const Outputs& out) {
    visitType<kFloatTypes>(node, in[0]->elementType(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      runRnnTyped<T>(node, cell, in, out);
    });
  };
  s.flops = [cell](const Node& node, const Types& in, const Types&) {
    const RnnDims d = rnnDims(node, cell, in);
    const double g = gateCount(cell);
    return 2.0 * d.dirs * d.steps * d.batch * g * d.hidden * (d.input + d.hidden);
  };
  r.add(std::move(s));
}

}  // namespace

void registerRecurrentOps(OpRegistry& r) {
  addRecurrent(r, "RNN", Cell::Rnn);
  addRecurrent(r, "GRU", Cell::Gru);
  addRecurrent(r, "LSTM", Cell::Lstm);
}

}  // namespace collage
