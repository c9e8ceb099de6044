// The evaluator's loops compare floats in selects (clamps, ReLU-like ops,
// the range reduction of exp): with the default -ftrapping-math GCC will not
// if-convert them and leaves the loops scalar. Nothing here reads the FP
// exception flags, so this file gives them up (first, so that every function
// in it, headers included, shares the options and still inlines).
#pragma GCC optimize("no-trapping-math")

#include "backends/native/native_pass.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>

#include "backends/native/native_math.h"
#include "core/ir/error.h"

namespace collage::native {

// ---------------------------------------------------------------------------
// Affine

void Affine::addScaled(const Affine& o, int64_t mul) {
  c += o.c * mul;
  if (o.a.size() > a.size()) a.resize(o.a.size(), 0);
  for (size_t d = 0; d < o.a.size(); ++d) a[d] += o.a[d] * mul;
}

void Affine::addCoef(size_t d, int64_t v) {
  if (d >= a.size()) a.resize(d + 1, 0);
  a[d] += v;
}

bool Affine::isConstant() const {
  for (int64_t v : a)
    if (v != 0) return false;
  return true;
}

void Affine::trim() {
  while (!a.empty() && a.back() == 0) a.pop_back();
}

bool Affine::operator==(const Affine& o) const {
  if (c != o.c) return false;
  const size_t n = std::max(a.size(), o.a.size());
  for (size_t d = 0; d < n; ++d)
    if (coef(d) != o.coef(d)) return false;
  return true;
}

const char* opName(Op op) {
  static const char* const names[] = {
      "Leaf", "Const", "Relu", "Neg", "Abs", "Sign", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt",
      "Reciprocal", "Erf", "Floor", "Ceil", "Sin", "Cos", "Softplus", "Softsign", "HardSwish",
      "Not", "LeakyRelu", "Elu", "Selu", "HardSigmoid", "Gelu", "GeluTanh", "Clip", "ToBool",
      "Square", "Add", "Sub", "Mul", "Div", "Mod", "FMod", "Pow", "Max", "Min", "Equal",
      "Less", "Greater", "LessEq", "GreaterEq", "And", "Or", "Xor", "PRelu", "Where", "ReduceSum",
      "ReduceMax", "ReduceMin", "ReduceProd"};
  const size_t i = static_cast<size_t>(op);
  return i < sizeof(names) / sizeof(names[0]) ? names[i] : "?";
}

namespace {

// Elements per block along the innermost dim.
constexpr int kMaxBlock = 512;

struct Operand {
  const float* p;
  bool vec;
};

// ---- Elementwise loop helpers (each a plain loop GCC vectorises). ----

// The loops live in small out-of-line functions, one per op and operand
// shape: inside the (huge) evaluator GCC would stop inlining the math and
// leave the loops scalar.
template <class F>
__attribute__((noinline)) void loopV(float* __restrict o, const float* __restrict x, int n, F f) {
  for (int j = 0; j < n; ++j) o[j] = f(x[j]);
}
template <class F>
__attribute__((noinline)) void loopVV(float* __restrict o, const float* __restrict x,
                                      const float* __restrict y, int n, F f) {
  for (int j = 0; j < n; ++j) o[j] = f(x[j], y[j]);
}
template <class F>
__attribute__((noinline)) void loopVS(float* __restrict o, const float* __restrict x, float y, int n, F f) {
  for (int j = 0; j < n; ++j) o[j] = f(x[j], y);
}
template <class F>
__attribute__((noinline)) void loopSV(float* __restrict o, float x, const float* __restrict y, int n, F f) {
  for (int j = 0; j < n; ++j) o[j] = f(x, y[j]);
}

template <class F>
inline bool un(float* o, Operand a, int n, F f) {
  if (a.vec) {
    loopV(o, a.p, n, f);
    return true;
  }
  o[0] = f(a.p[0]);
  return false;
}

template <class F>
inline bool bin(float* o, Operand a, Operand b, int n, F f) {
  if (a.vec && b.vec) {
    loopVV(o, a.p, b.p, n, f);
    return true;
  }
  if (a.vec) {
    loopVS(o, a.p, b.p[0], n, f);
    return true;
  }
  if (b.vec) {
    loopSV(o, a.p[0], b.p, n, f);
    return true;
  }
  o[0] = f(a.p[0], b.p[0]);
  return false;
}

inline float b2f(bool v) { return v ? 1.0f : 0.0f; }

template <class T>
inline float loadAs(const void* base, int64_t i) {
  return static_cast<float>(static_cast<const T*>(base)[i]);
}

// Reads element i of a buffer of `type` as float.
inline float loadAny(const void* base, ElementType type, int64_t i) {
  switch (type) {
    case ElementType::Float32: return loadAs<float>(base, i);
    case ElementType::Float64: return loadAs<double>(base, i);
    case ElementType::Int8: return loadAs<int8_t>(base, i);
    case ElementType::Int16: return loadAs<int16_t>(base, i);
    case ElementType::Int32: return loadAs<int32_t>(base, i);
    case ElementType::Int64: return loadAs<int64_t>(base, i);
    case ElementType::UInt8: return loadAs<uint8_t>(base, i);
    case ElementType::UInt16: return loadAs<uint16_t>(base, i);
    case ElementType::UInt32: return loadAs<uint32_t>(base, i);
    case ElementType::UInt64: return loadAs<uint64_t>(base, i);
    case ElementType::Bool: return static_cast<const uint8_t*>(base)[i] ? 1.0f : 0.0f;
    default: return 0.0f;
  }
}

inline int64_t loadIndex(const void* base, ElementType type, int64_t i, int64_t dim) {
  int64_t v = type == ElementType::Int32 ? static_cast<const int32_t*>(base)[i]
                                         : static_cast<const int64_t*>(base)[i];
  return v < 0 ? v + dim : v;
}

template <class T>
void gatherStrided(float* __restrict o, const void* base, int64_t off, int64_t stride, int n) {
  const T* p = static_cast<const T*>(base) + off;
  if (stride == 1) {
    for (int j = 0; j < n; ++j) o[j] = static_cast<float>(p[j]);
  } else {
    for (int j = 0; j < n; ++j) o[j] = static_cast<float>(p[j * stride]);
  }
}

void loadStrided(float* o, const void* base, ElementType type, int64_t off, int64_t stride, int n) {
  switch (type) {
    case ElementType::Float32: gatherStrided<float>(o, base, off, stride, n); return;
    case ElementType::Float64: gatherStrided<double>(o, base, off, stride, n); return;
    case ElementType::Int8: gatherStrided<int8_t>(o, base, off, stride, n); return;
    case ElementType::Int16: gatherStrided<int16_t>(o, base, off, stride, n); return;
    case ElementType::Int32: gatherStrided<int32_t>(o, base, off, stride, n); return;
    case ElementType::Int64: gatherStrided<int64_t>(o, base, off, stride, n); return;
    case ElementType::UInt8: gatherStrided<uint8_t>(o, base, off, stride, n); return;
    case ElementType::UInt16: gatherStrided<uint16_t>(o, base, off, stride, n); return;
    case ElementType::UInt32: gatherStrided<uint32_t>(o, base, off, stride, n); return;
    case ElementType::UInt64: gatherStrided<uint64_t>(o, base, off, stride, n); return;
    case ElementType::Bool: {
      const uint8_t* p = static_cast<const uint8_t*>(base) + off;
      for (int j = 0; j < n; ++j) o[j] = p[j * stride] ? 1.0f : 0.0f;
      return;
    }
    default:
      for (int j = 0; j < n; ++j) o[j] = 0.0f;
  }
}

// Writes n values (or one value repeated, when !src.vec) converted to `type`.
// With `stream`, contiguous float runs go out as non-temporal stores: an
// output larger than the caches is then written without first being read
// into them (a third less memory traffic for an elementwise pass).
void storeValues(void* base, ElementType type, int64_t off, int64_t stride, Operand src, int n,
                 bool stream = false) {
  if (type == ElementType::Float32) {
    float* __restrict d = static_cast<float*>(base) + off;
    if (stride == 1 && src.vec) {
#ifdef __AVX__
      if (stream && (reinterpret_cast<uintptr_t>(d) & 31) == 0) {
        int j = 0;
        for (; j + 8 <= n; j += 8) _mm256_stream_ps(d + j, _mm256_loadu_ps(src.p + j));
        for (; j < n; ++j) d[j] = src.p[j];
        return;
      }
#endif
      if (d != src.p) std::memcpy(d, src.p, static_cast<size_t>(n) * sizeof(float));
    } else if (src.vec) {
      for (int j = 0; j < n; ++j) d[j * stride] = src.p[j];
    } else {
      const float v = src.p[0];
      for (int j = 0; j < n; ++j) d[j * stride] = v;
    }
    return;
  }
  if (type == ElementType::Bool) {
    uint8_t* d = static_cast<uint8_t*>(base) + off;
    for (int j = 0; j < n; ++j) d[j * stride] = src.p[src.vec ? j : 0] != 0.0f ? 1 : 0;
    return;
  }
  // Stores of other types are never planned (the lowering keeps them off).
}

struct Entry {
  int32_t node;
  int32_t slot;   // >= 0: a slot; -1: none (direct leaf); -2: the uniform array
  int32_t store;  // >= 0: computed in place into this store's destination
  int32_t cache = -1;       // >= 0: the node's row cache (written, or read when cacheRead)
  bool cacheRead = false;
};

struct LoopPlan {
  std::vector<Entry> entries;
  std::vector<int32_t> reductions;  // accumulated at the end of each block
  std::vector<int32_t> stores;      // done at the end of each block (final loop)
};

struct LeafInfo {
  int32_t form;                      // base offset form
  std::vector<int32_t> indForms;     // one per indirect
  bool direct = false;               // float32, no indirect, vector stride 1
};

// Per-thread arrays are written on every block: each gets whole cache
// lines of its own, so threads never share (and ping-pong) a line.
template <class T>
struct LineAllocator {
  using value_type = T;
  LineAllocator() = default;
  template <class U>
  LineAllocator(const LineAllocator<U>&) {}
  T* allocate(size_t n) {
    const size_t bytes = std::max<size_t>(64, (n * sizeof(T) + 63) / 64 * 64);
    return static_cast<T*>(std::aligned_alloc(64, bytes));
  }
  void deallocate(T* p, size_t) { std::free(p); }
  template <class U>
  bool operator==(const LineAllocator<U>&) const {
    return true;
  }
};
template <class T>
using LineVector = std::vector<T, LineAllocator<T>>;

struct ThreadState {
  float* slots = nullptr;
  LineVector<float> uni;
  LineVector<double> acc;
  LineVector<Operand> opnd;
  LineVector<int64_t> rowOff, blkBase, off, tileOff;
  LineVector<float> rowCache;  // values of cached nodes over the row's inner space
  LineVector<int64_t> innerIdx;
};

}  // namespace

struct CompiledPass::Impl {
  PassProgram prog;
  int threads = 1;

  // Loop dims: outer then inner; the last inner dim is the vector dim.
  std::vector<int64_t> outerSizes, innerSizes;
  bool elementwise = false;
  int64_t rows = 1, vecLen = 1, chunkLen = 1, chunksPerRow = 1, items = 1;
  int64_t tileRows = 1, rowGroups = 1;
  int64_t total = 0;
  int block = kMaxBlock;

  // Every offset form (leaf bases, indirect offsets, stores), over loop dims.
  std::vector<int64_t> formC;
  std::vector<std::vector<int64_t>> formOuter, formInner;  // coefficients per loop dim
  std::vector<LeafInfo> leafInfo;
  std::vector<int32_t> storeForm;

  std::vector<uint8_t> uniform, vec;
  std::vector<int> level;
  int levels = 0;
  std::vector<std::vector<Entry>> uniformLists;  // per level: uniform non-reduce nodes
  std::vector<LoopPlan> loops;                     // loops[l - 1] accumulates level-l reductions
  LoopPlan finalLoop;
  std::vector<int32_t> rowStores;
  int slotCount = 0;
  int cacheCount = 0;
  bool stream = false;  // non-temporal stores for outputs larger than the caches
  int64_t innerTotal = 1;

  std::vector<ThreadState> states;
  std::vector<float*> slotMemory;

  struct IndexCheck {
    int32_t buffer;
    ElementType type;
    int64_t count, dim;
  };
  std::vector<IndexCheck> indexChecks;

  ~Impl() {
    for (float* p : slotMemory) std::free(p);
  }

  void build();
  void plan();
  void evalEntries(const std::vector<Entry>& entries, int n, ThreadState& ts, const int64_t* off,
                   const BufferTable& buffers, int64_t pos = 0) const;
  void sweep(const LoopPlan& loop, int64_t vb, int64_t ve, ThreadState& ts,
             const BufferTable& buffers) const;
  void runItem(int64_t item, ThreadState& ts, const BufferTable& buffers) const;
  void runTile(int64_t group, int64_t chunk, ThreadState& ts, const BufferTable& buffers) const;
  void rowOffsets(int64_t row, int64_t* out) const;
  void storeBlock(const LoopPlan& loop, int n, ThreadState& ts, const BufferTable& buffers) const;
};

// Orders the iteration dims (outer, then inner with the vector dim last),
// drops unit dims and merges adjacent dims every form walks contiguously.
void CompiledPass::Impl::build() {
  const size_t rank = prog.dims.size();
  std::vector<bool> isInner(rank, false);
  for (int d : prog.inner) {
    COLLAGE_CHECK(d >= 0 && static_cast<size_t>(d) < rank, "inner dim out of range");
    isInner[d] = true;
  }
  elementwise = prog.inner.empty();

  // Gather forms in program terms.
  std::vector<Affine> forms;
  leafInfo.resize(prog.leaves.size());
  for (size_t i = 0; i < prog.leaves.size(); ++i) {
    const Leaf& l = prog.leaves[i];
    leafInfo[i].form = static_cast<int32_t>(forms.size());
    forms.push_back(l.off);
    for (const Indirect& ind : l.ind) {
      leafInfo[i].indForms.push_back(static_cast<int32_t>(forms.size()));
      forms.push_back(ind.off);
      bool known = false;
      for (const IndexCheck& c : indexChecks)
        known = known || (c.buffer == ind.buffer && c.dim == ind.dim);
      if (!known) indexChecks.push_back({ind.buffer, ind.type, ind.count, ind.dim});
    }
  }
  for (const Store& s : prog.stores) {
    storeForm.push_back(static_cast<int32_t>(forms.size()));
    forms.push_back(s.off);
  }

  // Dim order: outer dims in program order, then inner dims in the reduction's order.
  std::vector<int> outerDims, innerDims;
  for (size_t d = 0; d < rank; ++d)
    if (!isInner[d] && prog.dims[d] > 1) outerDims.push_back(static_cast<int>(d));
  for (int d : prog.inner)
    if (prog.dims[d] > 1) innerDims.push_back(d);

  // Merge adjacent dims of one group when every form allows it.
  auto mergeGroup = [&](const std::vector<int>& dims) {
    std::vector<int64_t> sizes;
    std::vector<std::vector<int64_t>> coefs(forms.size());
    for (int d : dims) {
      const int64_t size = prog.dims[d];
      bool merge = !sizes.empty();
      for (size_t f = 0; merge && f < forms.size(); ++f)
        merge = coefs[f].back() == forms[f].coef(d) * size;
      if (merge) {
        sizes.back() *= size;
        for (size_t f = 0; f < forms.size(); ++f) coefs[f].back() = forms[f].coef(d);
      } else {
        sizes.push_back(size);
        for (size_t f = 0; f < forms.size(); ++f) coefs[f].push_back(forms[f].coef(d));
      }
    }
    return std::make_pair(sizes, coefs);
  };
  auto [oSizes, oCoefs] = mergeGroup(outerDims);
  auto [iSizes, iCoefs] = mergeGroup(innerDims);
  if (elementwise && !oSizes.empty()) {
    // The vector dim of an elementwise pass is the last run of dims that
    // every form reads and writes contiguously, merged: a channel shuffle
    // on [C, H, W] then streams rows of H*W, not of W, so a short last dim
    // does not pay the per-row cost every few elements.
    iSizes.assign(1, oSizes.back());
    oSizes.pop_back();
    for (size_t f = 0; f < forms.size(); ++f) {
      iCoefs[f].assign(1, oCoefs[f].back());
      oCoefs[f].pop_back();
    }
  }
  if (iSizes.empty()) {
    // A pass over a single element (or whose inner dims are all of size 1).
    iSizes.push_back(1);
    for (auto& c : iCoefs) c.push_back(0);
  }
  outerSizes = oSizes;
  innerSizes = iSizes;
  formC.resize(forms.size());
  formOuter = oCoefs;
  formInner = iCoefs;
  for (size_t f = 0; f < forms.size(); ++f) formC[f] = forms[f].c;

  rows = 1;
  for (int64_t s : outerSizes) rows *= s;
  vecLen = innerSizes.back();
  total = rows;
  for (int64_t s : innerSizes) total *= s;
  for (int64_t d : prog.dims)
    if (d == 0) total = 0;

  // Elementwise passes cut the vector dim into chunks so that short-row and
  // flat tensors alike give every thread work.
  chunkLen = vecLen;
  chunksPerRow = 1;
  if (elementwise && threads > 1) {
    const int64_t targetItems = 8LL * threads;
    const int64_t groups = rows / std::min<int64_t>(rows, 16);
    if (groups < targetItems && vecLen > 2 * kMaxBlock) {
      const int64_t want = (targetItems + groups - 1) / groups;
      int64_t len = (vecLen + want - 1) / want;
      len = std::max<int64_t>(kMaxBlock, (len + kMaxBlock - 1) / kMaxBlock * kMaxBlock);
      chunkLen = len;
      chunksPerRow = (vecLen + len - 1) / len;
    }
  }
  // A leaf read (or a store written) across the vector dim with a large
  // stride but contiguously along the last outer dim (a transpose): walk
  // tiles of consecutive rows so each cache line fetched serves the whole tile.
  tileRows = 1;
  if (elementwise && !outerSizes.empty() && vecLen > 1) {
    bool transposed = false;
    for (size_t f = 0; f < forms.size(); ++f) {
      // Only when a row's reads span more than L2 holds; smaller
      // transposes stay cached and run faster untiled.
      const int64_t vs = std::llabs(formInner[f].back());
      transposed = transposed ||
                   (vs > 8 && std::llabs(formOuter[f].back()) == 1 && vs * vecLen * 4 > (int64_t{1} << 22));
    }
    if (transposed) tileRows = std::min<int64_t>(16, outerSizes.back());
  }
  rowGroups = (rows + tileRows - 1) / tileRows;
  items = total == 0 ? 0 : rowGroups * chunksPerRow;

  for (size_t i = 0; i < prog.leaves.size(); ++i) {
    const Leaf& l = prog.leaves[i];
    leafInfo[i].direct = l.type == ElementType::Float32 && l.ind.empty() &&
                         formInner[leafInfo[i].form].back() == 1 && vecLen > 1;
  }
}

// Classifies nodes (row-uniform or varying along the inner dims; varying
// along the vector dim or not), levels them by the reductions they depend
// on and lays out each loop's evaluation list with slot reuse.
void CompiledPass::Impl::plan() {
  const size_t n = prog.nodes.size();
  const size_t innerRank = innerSizes.size();
  uniform.assign(n, 1);
  vec.assign(n, 0);
  level.assign(n, 0);
  std::vector<uint64_t> innerMask(n, 0);  // bit i: depends on inner dim i
  auto formInnerMask = [&](int32_t f) {
    uint64_t m = 0;
    for (size_t i = 0; i < innerRank; ++i)
      if (formInner[f][i] != 0 && innerSizes[i] > 1) m |= uint64_t{1} << i;
    return m;
  };
  for (size_t i = 0; i < n; ++i) {
    const IrNode& node = prog.nodes[i];
    uint64_t m = 0;
    int lv = 0;
    if (node.op == Op::Leaf) {
      const LeafInfo& li = leafInfo[node.leaf];
      m = formInnerMask(li.form);
      for (int32_t f : li.indForms) m |= formInnerMask(f);
    } else {
      for (int32_t c : node.in) {
        if (c < 0) continue;
        COLLAGE_CHECK(static_cast<size_t>(c) < i, "IR not topological");
        m |= innerMask[c];
        lv = std::max(lv, level[c]);
      }
    }
    if (isReduce(node.op)) {
      m = 0;
      lv += 1;
    }
    innerMask[i] = m;
    level[i] = lv;
    uniform[i] = m == 0;
    vec[i] = (m >> (innerRank - 1)) & 1;
    levels = std::max(levels, lv);
  }
  if (elementwise) COLLAGE_CHECK(levels == 0, "reduction in an elementwise pass");

  uniformLists.assign(levels + 1, {});
  for (size_t i = 0; i < n; ++i)
    if (uniform[i] && !isReduce(prog.nodes[i].op))
      uniformLists[level[i]].push_back(Entry{static_cast<int32_t>(i), -2, -1});

  // Row caching: a reduction pass sweeps each row several times (once per
  // reduction level, once for the outputs). A varying node computed in one
  // sweep and needed again in a later one (Exp in a Softmax, x - mean in a
  // LayerNorm, the residual sum feeding a LayerNorm) is kept for the row in
  // a per-thread buffer instead of being recomputed.
  innerTotal = 1;
  for (int64_t sz : innerSizes) innerTotal *= sz;
  const bool canCache = levels > 0 && innerTotal <= 16384;
  std::vector<int> producedIn(n, -1);  // the sweep that first computes a node
  std::vector<int32_t> cacheOf(n, -1);
  std::vector<uint8_t> stopped(n, 0);
  auto cacheable = [&](size_t id) {
    const IrNode& node = prog.nodes[id];
    return vec[id] && !isReduce(node.op) && !(node.op == Op::Leaf && leafInfo[node.leaf].direct);
  };

  // The varying cone of a set of roots for sweep `sweepIndex`, in topological
  // order; it stops at nodes an earlier sweep computed and caches.
  auto cone = [&](const std::vector<int32_t>& roots, int sweepIndex) {
    std::vector<uint8_t> need(n, 0);
    std::fill(stopped.begin(), stopped.end(), 0);
    for (int32_t r : roots)
      if (!uniform[r]) need[r] = 1;
    for (size_t i = n; i-- > 0;) {
      if (!need[i]) continue;
      if (canCache && producedIn[i] >= 0 && producedIn[i] < sweepIndex && cacheable(i) &&
          (cacheOf[i] >= 0 || cacheCount < 8)) {
        if (cacheOf[i] < 0) cacheOf[i] = cacheCount++;
        stopped[i] = 1;
        continue;
      }
      for (int32_t c : prog.nodes[i].in)
        if (c >= 0 && !uniform[c]) need[c] = 1;
    }
    std::vector<int32_t> list;
    for (size_t i = 0; i < n; ++i)
      if (need[i]) {
        list.push_back(static_cast<int32_t>(i));
        if (!stopped[i] && producedIn[i] < 0) producedIn[i] = sweepIndex;
      }
    return list;
  };

  // Assigns slots with reuse: a slot is freed after its node's last use.
  auto layout = [&](const std::vector<int32_t>& list, const std::vector<int32_t>& endUses,
                    const std::vector<int32_t>& inPlaceStore) {
    std::vector<Entry> entries;
    std::vector<int> lastUse(n, -1);
    const int end = static_cast<int>(list.size());
    for (int pos = 0; pos < end; ++pos)
      for (int32_t c : prog.nodes[list[pos]].in)
        if (c >= 0 && !uniform[c]) lastUse[c] = pos;
    for (int32_t r : endUses)
      if (r >= 0 && !uniform[r]) lastUse[r] = end;
    std::vector<int32_t> slotOf(n, -1);
    std::vector<int32_t> freeSlots;
    int used = 0;
    for (int pos = 0; pos < end; ++pos) {
      const int32_t id = list[pos];
      const IrNode& node = prog.nodes[id];
      Entry e{id, -1, -1};
      if (stopped[id]) {
        e.cache = cacheOf[id];
        e.cacheRead = true;
      } else if (inPlaceStore[id] >= 0) {
        e.store = inPlaceStore[id];
      } else if (!(node.op == Op::Leaf && leafInfo[node.leaf].direct)) {
        if (!freeSlots.empty()) {
          e.slot = freeSlots.back();
          freeSlots.pop_back();
        } else {
          e.slot = used++;
        }
        slotOf[id] = e.slot;
      }
      entries.push_back(e);
      // Operands whose last use is this node give their slot back (after
      // the output's slot was taken, so a node never writes over its input).
      for (int32_t c : node.in)
        if (c >= 0 && !uniform[c] && lastUse[c] == pos && slotOf[c] >= 0) {
          freeSlots.push_back(slotOf[c]);
          slotOf[c] = -1;
        }
    }
    slotCount = std::max(slotCount, used);
    return entries;
  };

  std::vector<int32_t> noInPlace(n, -1);
  loops.assign(levels, {});
  for (int l = 1; l <= levels; ++l) {
    LoopPlan& loop = loops[l - 1];
    std::vector<int32_t> childRoots;
    for (size_t i = 0; i < n; ++i)
      if (isReduce(prog.nodes[i].op) && level[i] == l) {
        loop.reductions.push_back(static_cast<int32_t>(i));
        childRoots.push_back(prog.nodes[i].in[0]);
      }
    loop.entries = layout(cone(childRoots, l - 1), childRoots, noInPlace);
  }

  // Final loop: stores that vary along the inner dims.
  int64_t storedBytes = 0;
  for (const Store& st : prog.stores) storedBytes += total * static_cast<int64_t>(elementSize(st.type));
  stream = storedBytes >= (int64_t{16} << 20);
  std::vector<int32_t> finalRoots;
  std::vector<int32_t> inPlace(n, -1);
  for (size_t s = 0; s < prog.stores.size(); ++s) {
    const Store& st = prog.stores[s];
    const bool varying = !uniform[st.node] || formInnerMask(storeForm[s]) != 0;
    if (!varying) {
      rowStores.push_back(static_cast<int32_t>(s));
      continue;
    }
    finalLoop.stores.push_back(static_cast<int32_t>(s));
    finalRoots.push_back(st.node);
    const IrNode& node = prog.nodes[st.node];
    const bool directLeaf = node.op == Op::Leaf && leafInfo[node.leaf].direct;
    if (!stream && !uniform[st.node] && vec[st.node] && !directLeaf && st.type == ElementType::Float32 &&
        formInner[storeForm[s]].back() == 1 && inPlace[st.node] < 0)
      inPlace[st.node] = static_cast<int32_t>(s);
  }
  finalLoop.entries = layout(cone(finalRoots, levels), finalRoots, inPlace);
  // The sweep that computes a cached node writes it to its row cache.
  for (int l = 0; l < levels; ++l)
    for (Entry& e : loops[l].entries)
      if (!e.cacheRead && cacheOf[e.node] >= 0 && producedIn[e.node] == l) e.cache = cacheOf[e.node];

  block = slotCount <= 12 ? kMaxBlock : kMaxBlock / 2;

  states.resize(static_cast<size_t>(std::max(1, threads)));
  for (ThreadState& ts : states) {
    const size_t bytes =
        static_cast<size_t>(std::max(1, slotCount)) * static_cast<size_t>(block) * sizeof(float);
    ts.slots = static_cast<float*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
    slotMemory.push_back(ts.slots);
    ts.uni.assign(n, 0.0f);
    ts.acc.assign(n, 0.0);
    ts.rowCache.assign(static_cast<size_t>(cacheCount) * static_cast<size_t>(innerTotal), 0.0f);
    ts.opnd.assign(n, Operand{nullptr, false});
    for (size_t i = 0; i < n; ++i)
      if (uniform[i]) ts.opnd[i] = Operand{&ts.uni[i], false};
    ts.rowOff.assign(formC.size(), 0);
    ts.blkBase.assign(formC.size(), 0);
    ts.off.assign(formC.size(), 0);
    ts.tileOff.assign(formC.size() * static_cast<size_t>(tileRows), 0);
    ts.innerIdx.assign(innerRank, 0);
  }
}

// Evaluates a list of entries over n elements (n == 1 for uniform lists),
// with offsets `off` for the block's first element.
void CompiledPass::Impl::evalEntries(const std::vector<Entry>& entries, int n, ThreadState& ts,
                                     const int64_t* off, const BufferTable& buffers,
                                     int64_t pos) const {
  for (const Entry& e : entries) {
    const IrNode& node = prog.nodes[e.node];
    float* o;
    if (e.cache >= 0) {
      float* c = ts.rowCache.data() + static_cast<size_t>(e.cache) * innerTotal + pos;
      if (e.cacheRead) {
        ts.opnd[e.node] = Operand{c, true};
        continue;
      }
      o = c;
    } else if (e.slot == -2)
      o = &ts.uni[e.node];
    else if (e.store >= 0)
      o = static_cast<float*>(buffers.ptr[prog.stores[e.store].buffer]) + off[storeForm[e.store]];
    else if (e.slot >= 0)
      o = ts.slots + static_cast<size_t>(e.slot) * block;
    else
      o = nullptr;
    const bool isVec = e.slot != -2 && vec[e.node];
    const int m = isVec ? n : 1;
    Operand a{nullptr, false}, b{nullptr, false}, c{nullptr, false};
    if (node.in[0] >= 0) a = ts.opnd[node.in[0]];
    if (node.in[1] >= 0) b = ts.opnd[node.in[1]];
    if (node.in[2] >= 0) c = ts.opnd[node.in[2]];
    const float p0 = node.p0, p1 = node.p1;
    bool rv = false;
    switch (node.op) {
      case Op::Leaf: {
        const Leaf& leaf = prog.leaves[node.leaf];
        const LeafInfo& li = leafInfo[node.leaf];
        const void* base = buffers.ptr[leaf.buffer];
        const int64_t o0 = off[li.form];
        if (li.direct && isVec) {
          ts.opnd[e.node] = Operand{static_cast<const float*>(base) + o0, true};
          continue;
        }
        const int64_t vs = formInner[li.form].back();
        bool blockConstantIndex = true;
        for (int32_t f : li.indForms) blockConstantIndex = blockConstantIndex && formInner[f].back() == 0;
        if (blockConstantIndex) {
          // No index varies along the block (an embedding lookup): one
          // offset for the block, then a plain (often direct) read.
          int64_t at = o0;
          for (size_t k = 0; k < leaf.ind.size(); ++k) {
            const Indirect& ind = leaf.ind[k];
            at += ind.mul * loadIndex(buffers.ptr[ind.buffer], ind.type, off[li.indForms[k]], ind.dim);
          }
          if (isVec && vs == 1 && leaf.type == ElementType::Float32) {
            ts.opnd[e.node] = Operand{static_cast<const float*>(base) + at, true};
            continue;
          }
          loadStrided(o, base, leaf.type, at, isVec ? vs : 0, m);
        } else {
          for (int j = 0; j < m; ++j) {
            int64_t at = o0 + j * vs;
            for (size_t k = 0; k < leaf.ind.size(); ++k) {
              const Indirect& ind = leaf.ind[k];
              const int32_t f = li.indForms[k];
              at += ind.mul * loadIndex(buffers.ptr[ind.buffer], ind.type,
                                        off[f] + j * formInner[f].back(), ind.dim);
            }
            o[j] = loadAny(base, leaf.type, at);
          }
        }
        rv = isVec;
        break;
      }
      case Op::Const: o[0] = p0; rv = false; break;
      case Op::Relu: rv = un(o, a, m, [](float x) { return x > 0.0f ? x : 0.0f; }); break;
      case Op::Neg: rv = un(o, a, m, [](float x) { return -x; }); break;
      case Op::Abs: rv = un(o, a, m, [](float x) { return std::fabs(x); }); break;
      case Op::Sign:
        rv = un(o, a, m, [](float x) { return b2f(0.0f < x) - b2f(x < 0.0f); });
        break;
      case Op::Sigmoid: rv = un(o, a, m, [](float x) { return fastSigmoid(x); }); break;
      case Op::Tanh: rv = un(o, a, m, [](float x) { return fastTanh(x); }); break;
      case Op::Exp: rv = un(o, a, m, [](float x) { return fastExp(x); }); break;
      case Op::Log: rv = un(o, a, m, [](float x) { return fastLog(x); }); break;
      case Op::Sqrt: rv = un(o, a, m, [](float x) { return std::sqrt(x); }); break;
      case Op::Reciprocal: rv = un(o, a, m, [](float x) { return 1.0f / x; }); break;
      case Op::Erf: rv = un(o, a, m, [](float x) { return fastErf(x); }); break;
      case Op::Floor: rv = un(o, a, m, [](float x) { return std::floor(x); }); break;
      case Op::Ceil: rv = un(o, a, m, [](float x) { return std::ceil(x); }); break;
      case Op::Sin: rv = un(o, a, m, [](float x) { return std::sin(x); }); break;
      case Op::Cos: rv = un(o, a, m, [](float x) { return std::cos(x); }); break;
      case Op::Softplus:
        rv = un(o, a, m, [](float x) { return x > 30.0f ? x : fastLog(1.0f + fastExp(x)); });
        break;
      case Op::Softsign: rv = un(o, a, m, [](float x) { return x / (1.0f + std::fabs(x)); }); break;
      case Op::HardSwish:
        rv = un(o, a, m, [](float x) {
          return x * std::max(0.0f, std::min(1.0f, x / 6.0f + 0.5f));
        });
        break;
      case Op::Not: rv = un(o, a, m, [](float x) { return b2f(x == 0.0f); }); break;
      case Op::LeakyRelu: rv = un(o, a, m, [p0](float x) { return x < 0.0f ? p0 * x : x; }); break;
      case Op::Elu:
        rv = un(o, a, m, [p0](float x) { return x < 0.0f ? p0 * (fastExp(x) - 1.0f) : x; });
        break;
      case Op::Selu:
        rv = un(o, a, m, [p0, p1](float x) {
          return x > 0.0f ? p1 * x : p1 * (p0 * fastExp(x) - p0);
        });
        break;
      case Op::HardSigmoid:
        rv = un(o, a, m, [p0, p1](float x) {
          return std::max(0.0f, std::min(1.0f, p0 * x + p1));
        });
        break;
      case Op::Gelu:
        rv = un(o, a, m, [](float x) {
          return 0.5f * x * (1.0f + fastErf(x * 0.7071067811865476f));
        });
        break;
      case Op::GeluTanh:
        rv = un(o, a, m, [](float x) {
          return 0.5f * x * (1.0f + fastTanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
        });
        break;
      case Op::Clip:
        rv = un(o, a, m, [p0, p1](float x) {
          x = x < p0 ? p0 : x;
          return x > p1 ? p1 : x;
        });
        break;
      case Op::ToBool: rv = un(o, a, m, [](float x) { return b2f(x != 0.0f); }); break;
      case Op::Square: rv = un(o, a, m, [](float x) { return x * x; }); break;
      case Op::Add: rv = bin(o, a, b, m, [](float x, float y) { return x + y; }); break;
      case Op::Sub: rv = bin(o, a, b, m, [](float x, float y) { return x - y; }); break;
      case Op::Mul: rv = bin(o, a, b, m, [](float x, float y) { return x * y; }); break;
      case Op::Div: rv = bin(o, a, b, m, [](float x, float y) { return x / y; }); break;
      case Op::Mod:
        rv = bin(o, a, b, m, [](float x, float y) {
          float r = std::fmod(x, y);
          if (r != 0.0f && ((r < 0.0f) != (y < 0.0f))) r += y;
          return r;
        });
        break;
      case Op::FMod: rv = bin(o, a, b, m, [](float x, float y) { return std::fmod(x, y); }); break;
      case Op::Pow:
        rv = bin(o, a, b, m, [](float x, float y) { return y == 2.0f ? x * x : std::pow(x, y); });
        break;
      case Op::Max: rv = bin(o, a, b, m, [](float x, float y) { return x < y ? y : x; }); break;
      case Op::Min: rv = bin(o, a, b, m, [](float x, float y) { return y < x ? y : x; }); break;
      case Op::Equal: rv = bin(o, a, b, m, [](float x, float y) { return b2f(x == y); }); break;
      case Op::Less: rv = bin(o, a, b, m, [](float x, float y) { return b2f(x < y); }); break;
      case Op::Greater: rv = bin(o, a, b, m, [](float x, float y) { return b2f(x > y); }); break;
      case Op::LessEq: rv = bin(o, a, b, m, [](float x, float y) { return b2f(x <= y); }); break;
      case Op::GreaterEq: rv = bin(o, a, b, m, [](float x, float y) { return b2f(x >= y); }); break;
      case Op::And:
        rv = bin(o, a, b, m, [](float x, float y) { return b2f(x != 0.0f && y != 0.0f); });
        break;
      case Op::Or:
        rv = bin(o, a, b, m, [](float x, float y) { return b2f(x != 0.0f || y != 0.0f); });
        break;
      case Op::Xor:
        rv = bin(o, a, b, m, [](float x, float y) { return b2f((x != 0.0f) != (y != 0.0f)); });
        break;
      case Op::PRelu:
        rv = bin(o, a, b, m, [](float x, float s) { return x < 0.0f ? s * x : x; });
        break;
      case Op::Where: {
        const int sc = a.vec ? 1 : 0, sx = b.vec ? 1 : 0, sy = c.vec ? 1 : 0;
        rv = a.vec || b.vec || c.vec;
        const int k = rv ? m : 1;
        for (int j = 0; j < k; ++j) o[j] = a.p[j * sc] != 0.0f ? b.p[j * sx] : c.p[j * sy];
        break;
      }
      case Op::ReduceSum:
      case Op::ReduceMax:
      case Op::ReduceMin:
      case Op::ReduceProd:
        COLLAGE_CHECK(false, "a reduction in an evaluation list");
    }
    ts.opnd[e.node] = Operand{o, rv};
  }
}

namespace {

inline void accumulate(Op op, double& acc, Operand x, int n) {
  switch (op) {
    case Op::ReduceSum: {
      if (!x.vec) {
        acc += static_cast<double>(x.p[0]) * n;
        return;
      }
      float s = 0.0f;
      const float* __restrict p = x.p;
#pragma omp simd reduction(+ : s)
      for (int j = 0; j < n; ++j) s += p[j];
      acc += s;
      return;
    }
    case Op::ReduceMax: {
      float m = -std::numeric_limits<float>::infinity();
      const float* __restrict p = x.p;
      const int k = x.vec ? n : 1;
#pragma omp simd reduction(max : m)
      for (int j = 0; j < k; ++j) m = p[j] > m ? p[j] : m;
      if (m > acc) acc = m;
      return;
    }
    case Op::ReduceMin: {
      float m = std::numeric_limits<float>::infinity();
      const float* __restrict p = x.p;
      const int k = x.vec ? n : 1;
#pragma omp simd reduction(min : m)
      for (int j = 0; j < k; ++j) m = p[j] < m ? p[j] : m;
      if (m < acc) acc = m;
      return;
    }
    case Op::ReduceProd: {
      for (int j = 0; j < n; ++j) acc *= x.p[x.vec ? j : 0];
      return;
    }
    default: return;
  }
}

inline double reduceInit(Op op) {
  switch (op) {
    case Op::ReduceMax: return -std::numeric_limits<double>::infinity();
    case Op::ReduceMin: return std::numeric_limits<double>::infinity();
    case Op::ReduceProd: return 1.0;
    default: return 0.0;
  }
}

}  // namespace

// Sweeps the inner space of one row between vb and ve along the vector dim.
void CompiledPass::Impl::sweep(const LoopPlan& loop, int64_t vb, int64_t ve, ThreadState& ts,
                               const BufferTable& buffers) const {
  const size_t innerRank = innerSizes.size();
  const size_t forms = formC.size();
  int64_t outerCombos = 1;
  for (size_t i = 0; i + 1 < innerRank; ++i) outerCombos *= innerSizes[i];
  std::fill(ts.innerIdx.begin(), ts.innerIdx.end(), 0);
  for (int64_t combo = 0; combo < outerCombos; ++combo) {
    for (size_t f = 0; f < forms; ++f) {
      int64_t o = ts.rowOff[f];
      for (size_t i = 0; i + 1 < innerRank; ++i) o += ts.innerIdx[i] * formInner[f][i];
      ts.blkBase[f] = o;
    }
    for (int64_t j0 = vb; j0 < ve; j0 += block) {
      const int n = static_cast<int>(std::min<int64_t>(block, ve - j0));
      for (size_t f = 0; f < forms; ++f) ts.off[f] = ts.blkBase[f] + j0 * formInner[f].back();
      evalEntries(loop.entries, n, ts, ts.off.data(), buffers, combo * vecLen + j0);
      for (int32_t r : loop.reductions)
        accumulate(prog.nodes[r].op, ts.acc[r], ts.opnd[prog.nodes[r].in[0]], n);
      storeBlock(loop, n, ts, buffers);
    }
    for (size_t i = innerRank - 1; i-- > 0;) {
      if (++ts.innerIdx[i] < innerSizes[i]) break;
      ts.innerIdx[i] = 0;
    }
  }
}

void CompiledPass::Impl::storeBlock(const LoopPlan& loop, int n, ThreadState& ts,
                                    const BufferTable& buffers) const {
  for (int32_t s : loop.stores) {
    const Store& st = prog.stores[s];
    const Operand src = ts.opnd[st.node];
    const int32_t f = storeForm[s];
    if (src.p == static_cast<float*>(buffers.ptr[st.buffer]) + ts.off[f] && src.vec) continue;
    storeValues(buffers.ptr[st.buffer], st.type, ts.off[f], formInner[f].back(), src, n, stream);
  }
}

// Offsets of every form at the start of a row, from its outer coordinates.
void CompiledPass::Impl::rowOffsets(int64_t row, int64_t* out) const {
  const size_t forms = formC.size();
  for (size_t f = 0; f < forms; ++f) out[f] = formC[f];
  int64_t r = row;
  for (size_t d = outerSizes.size(); d-- > 0;) {
    const int64_t coord = r % outerSizes[d];
    r /= outerSizes[d];
    if (coord == 0) continue;
    for (size_t f = 0; f < forms; ++f) out[f] += coord * formOuter[f][d];
  }
}

void CompiledPass::Impl::runItem(int64_t item, ThreadState& ts, const BufferTable& buffers) const {
  const int64_t group = item / chunksPerRow;
  const int64_t chunk = item % chunksPerRow;
  if (tileRows > 1) {
    runTile(group, chunk, ts, buffers);
    return;
  }
  rowOffsets(group, ts.rowOff.data());
  auto evalUniform = [&](int l) { evalEntries(uniformLists[l], 1, ts, ts.rowOff.data(), buffers); };
  evalUniform(0);
  for (int l = 1; l <= levels; ++l) {
    const LoopPlan& loop = loops[l - 1];
    for (int32_t red : loop.reductions) ts.acc[red] = reduceInit(prog.nodes[red].op);
    sweep(loop, 0, vecLen, ts, buffers);
    for (int32_t red : loop.reductions) {
      const IrNode& node = prog.nodes[red];
      ts.uni[red] = static_cast<float>(ts.acc[red] / node.divisor);
    }
    evalUniform(l);
  }
  const int64_t vb = chunk * chunkLen;
  const int64_t ve = std::min(vecLen, vb + chunkLen);
  sweep(finalLoop, vb, ve, ts, buffers);
  if (chunk == 0)
    for (int32_t s : rowStores) {
      const Store& st = prog.stores[s];
      storeValues(buffers.ptr[st.buffer], st.type, ts.rowOff[storeForm[s]], 0, ts.opnd[st.node], 1);
    }
}

// Elementwise passes only: tileRows consecutive rows block by block.
void CompiledPass::Impl::runTile(int64_t group, int64_t chunk, ThreadState& ts,
                                 const BufferTable& buffers) const {
  const size_t forms = formC.size();
  const int64_t r0 = group * tileRows;
  const int64_t r1 = std::min(rows, r0 + tileRows);
  for (int64_t r = r0; r < r1; ++r) rowOffsets(r, ts.tileOff.data() + (r - r0) * forms);
  const int64_t vb = chunk * chunkLen;
  const int64_t ve = std::min(vecLen, vb + chunkLen);
  for (int64_t j0 = vb; j0 < ve; j0 += block) {
    const int n = static_cast<int>(std::min<int64_t>(block, ve - j0));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t* rowOff = ts.tileOff.data() + (r - r0) * forms;
      evalEntries(uniformLists[0], 1, ts, rowOff, buffers);
      for (size_t f = 0; f < forms; ++f) ts.off[f] = rowOff[f] + j0 * formInner[f].back();
      evalEntries(finalLoop.entries, n, ts, ts.off.data(), buffers);
      storeBlock(finalLoop, n, ts, buffers);
    }
  }
  if (chunk == 0)
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t* rowOff = ts.tileOff.data() + (r - r0) * forms;
      evalEntries(uniformLists[0], 1, ts, rowOff, buffers);
      for (int32_t s : rowStores) {
        const Store& st = prog.stores[s];
        storeValues(buffers.ptr[st.buffer], st.type, rowOff[storeForm[s]], 0, ts.opnd[st.node], 1);
      }
    }
}

namespace {
// Orders a thread's non-temporal stores before whatever reads the output next.
inline void fence() {
#ifdef __AVX__
  _mm_sfence();
#endif
}
}  // namespace

CompiledPass::CompiledPass(PassProgram program, int threads) : impl_(std::make_unique<Impl>()) {
  impl_->prog = std::move(program);
  impl_->threads = std::max(1, threads);
  impl_->build();
  impl_->plan();
}

CompiledPass::~CompiledPass() = default;

void CompiledPass::run(const BufferTable& buffers) {
  Impl& im = *impl_;
  if (im.items == 0) return;
  for (const Impl::IndexCheck& c : im.indexChecks) {
    const void* p = buffers.ptr[c.buffer];
    for (int64_t i = 0; i < c.count; ++i) {
      const int64_t v = c.type == ElementType::Int32 ? static_cast<const int32_t*>(p)[i]
                                                     : static_cast<const int64_t*>(p)[i];
      if (v < -c.dim || v >= c.dim)
        throw Error("pass " + im.prog.label + ": index " + std::to_string(v) +
                    " is out of range for dimension " + std::to_string(c.dim));
    }
  }
  const int64_t work = im.total * static_cast<int64_t>(im.prog.nodes.size() + 1);
  const int threads = im.items > 1 && work >= (int64_t{1} << 15) ? im.threads : 1;
  if (threads == 1) {
    for (int64_t it = 0; it < im.items; ++it) im.runItem(it, im.states[0], buffers);
    if (im.stream) fence();
    return;
  }
  // Dynamic: on a machine shared with other work a descheduled thread's
  // share is taken over instead of being waited for.
  const int64_t grain = std::max<int64_t>(1, im.items / (8LL * threads));
#pragma omp parallel num_threads(threads)
  {
    ThreadState& ts = im.states[static_cast<size_t>(omp_get_thread_num())];
#pragma omp for schedule(dynamic, grain) nowait
    for (int64_t it = 0; it < im.items; ++it) im.runItem(it, ts, buffers);
    if (im.stream) fence();
  }
}

std::string CompiledPass::describe() const {
  const Impl& im = *impl_;
  std::ostringstream os;
  os << "pass " << im.prog.label << ": outer [";
  for (size_t i = 0; i < im.outerSizes.size(); ++i) os << (i ? "x" : "") << im.outerSizes[i];
  os << "] inner [";
  for (size_t i = 0; i < im.innerSizes.size(); ++i) os << (i ? "x" : "") << im.innerSizes[i];
  os << "] " << im.prog.nodes.size() << " nodes, " << im.levels << " reduction level(s), "
     << im.slotCount << " slots";
  if (im.cacheCount) os << ", " << im.cacheCount << " row-cached value(s)";
  if (im.tileRows > 1) os << ", tiles of " << im.tileRows << " rows";
  if (im.stream) os << ", streaming stores";
  return os.str();
}

}  // namespace collage::native
