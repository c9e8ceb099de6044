// Same floating-point options as native_pass.cc, so that the inline
// functions both files instantiate (the per-thread vectors) are one code.
#pragma GCC optimize("no-trapping-math")

#include "backends/native/native_pass_impl.h"

#include <algorithm>
#include <cstdlib>

#include "core/ir/error.h"

namespace collage::native {

using namespace pass;

namespace {

// An elementwise pass counts its rows in groups of this many when deciding
// whether to cut its vector dim into chunks.
constexpr int64_t kChunkRowGroup = 16;
// Rows a transposing elementwise pass walks together, and the smallest
// stride (in elements) along the vector dim that counts as transposing ...
constexpr int64_t kTileRows = 16;
constexpr int64_t kTransposeMinStride = 8;
// ... when a row's reads span more than this many bytes (about L2): smaller
// transposes stay cached and run faster untiled.
constexpr int64_t kTransposeSpanBytes = int64_t{1} << 22;
// Row caching (see planSweeps): only for rows of at most this many
// elements, and at most this many cached nodes.
constexpr int64_t kRowCacheMaxElements = 16384;
constexpr int kMaxRowCaches = 8;
// Outputs of a pass storing at least this many bytes are written with
// non-temporal stores.
constexpr int64_t kStreamBytes = int64_t{16} << 20;
// Evaluation lists using more slots than this run on half blocks, so that
// the slots stay in L1.
constexpr int kFullBlockMaxSlots = 12;

}  // namespace

// Orders the iteration dims (outer, then inner with the vector dim last),
// drops unit dims and merges adjacent dims every form walks contiguously;
// then decides how the space is cut into work items.
void CompiledPass::Impl::build() {
  const std::vector<Affine> forms = gatherForms();
  orderLoopDims(forms);
  splitWork();
  for (size_t i = 0; i < prog.leaves.size(); ++i) {
    const Leaf& l = prog.leaves[i];
    leafInfo[i].direct = l.type == ElementType::Float32 && l.ind.empty() &&
                         formInner[leafInfo[i].form].back() == 1 && vecLen > 1;
  }
}

// Every offset form in program terms: each leaf's base and indirect
// offsets, then each store's; the indices' range checks on the way.
std::vector<Affine> CompiledPass::Impl::gatherForms() {
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
  return forms;
}

void CompiledPass::Impl::orderLoopDims(const std::vector<Affine>& forms) {
  const size_t rank = prog.dims.size();
  std::vector<bool> isInner(rank, false);
  for (int d : prog.inner) {
    COLLAGE_CHECK(d >= 0 && static_cast<size_t>(d) < rank, "inner dim out of range");
    isInner[d] = true;
  }
  elementwise = prog.inner.empty();

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
}

void CompiledPass::Impl::splitWork() {
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
    const int64_t targetItems = kItemsPerThread * threads;
    const int64_t groups = rows / std::min<int64_t>(rows, kChunkRowGroup);
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
    for (size_t f = 0; f < formC.size(); ++f) {
      const int64_t vs = std::llabs(formInner[f].back());
      transposed = transposed || (vs > kTransposeMinStride && std::llabs(formOuter[f].back()) == 1 &&
                                  vs * vecLen * 4 > kTransposeSpanBytes);
    }
    if (transposed) tileRows = std::min<int64_t>(kTileRows, outerSizes.back());
  }
  rowGroups = (rows + tileRows - 1) / tileRows;
  items = total == 0 ? 0 : rowGroups * chunksPerRow;
}

uint64_t CompiledPass::Impl::innerMaskOf(int32_t form) const {
  uint64_t m = 0;
  for (size_t i = 0; i < innerSizes.size(); ++i)
    if (formInner[form][i] != 0 && innerSizes[i] > 1) m |= uint64_t{1} << i;
  return m;
}

// Classifies nodes (row-uniform or varying along the inner dims; varying
// along the vector dim or not), levels them by the reductions they depend
// on and lays out each loop's evaluation list with slot reuse.
void CompiledPass::Impl::plan() {
  classifyNodes();
  uniformLists.assign(levels + 1, {});
  for (size_t i = 0; i < prog.nodes.size(); ++i)
    if (uniform[i] && !isReduce(prog.nodes[i].op))
      uniformLists[level[i]].push_back(Entry{static_cast<int32_t>(i), -2, -1});
  planSweeps();
  block = slotCount <= kFullBlockMaxSlots ? kMaxBlock : kMaxBlock / 2;
  allocateThreadStates();
}

void CompiledPass::Impl::classifyNodes() {
  const size_t n = prog.nodes.size();
  const size_t innerRank = innerSizes.size();
  uniform.assign(n, 1);
  vec.assign(n, 0);
  level.assign(n, 0);
  std::vector<uint64_t> innerMask(n, 0);  // bit i: depends on inner dim i
  for (size_t i = 0; i < n; ++i) {
    const IrNode& node = prog.nodes[i];
    uint64_t m = 0;
    int lv = 0;
    if (node.op == Op::Leaf) {
      const LeafInfo& li = leafInfo[node.leaf];
      m = innerMaskOf(li.form);
      for (int32_t f : li.indForms) m |= innerMaskOf(f);
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
}

// The evaluation lists of a pass's sweeps, in order: one per reduction
// level, then the final one. Row caching: a reduction pass sweeps each row
// several times (once per reduction level, once for the outputs). A varying
// node computed in one sweep and needed again in a later one (Exp in a
// Softmax, x - mean in a LayerNorm, the residual sum feeding a LayerNorm) is
// kept for the row in a per-thread buffer instead of being recomputed.
class CompiledPass::Impl::SweepPlanner {
 public:
  explicit SweepPlanner(CompiledPass::Impl& im)
      : im_(im),
        n_(im.prog.nodes.size()),
        canCache_(im.levels > 0 && im.innerTotal <= kRowCacheMaxElements),
        producedIn_(n_, -1),
        cacheOf_(n_, -1),
        stopped_(n_, 0) {}

  // The varying cone of a set of roots for sweep `sweepIndex`, in topological
  // order; it stops at nodes an earlier sweep computed and caches.
  std::vector<int32_t> cone(const std::vector<int32_t>& roots, int sweepIndex) {
    std::vector<uint8_t> need(n_, 0);
    std::fill(stopped_.begin(), stopped_.end(), 0);
    for (int32_t r : roots)
      if (!im_.uniform[r]) need[r] = 1;
    for (size_t i = n_; i-- > 0;) {
      if (!need[i]) continue;
      if (canCache_ && producedIn_[i] >= 0 && producedIn_[i] < sweepIndex && cacheable(i) &&
          (cacheOf_[i] >= 0 || im_.cacheCount < kMaxRowCaches)) {
        if (cacheOf_[i] < 0) cacheOf_[i] = im_.cacheCount++;
        stopped_[i] = 1;
        continue;
      }
      for (int32_t c : im_.prog.nodes[i].in)
        if (c >= 0 && !im_.uniform[c]) need[c] = 1;
    }
    std::vector<int32_t> list;
    for (size_t i = 0; i < n_; ++i)
      if (need[i]) {
        list.push_back(static_cast<int32_t>(i));
        if (!stopped_[i] && producedIn_[i] < 0) producedIn_[i] = sweepIndex;
      }
    return list;
  }

  // Assigns slots with reuse: a slot is freed after its node's last use.
  std::vector<Entry> layout(const std::vector<int32_t>& list, const std::vector<int32_t>& endUses,
                            const std::vector<int32_t>& inPlaceStore) {
    std::vector<Entry> entries;
    const std::vector<int> lastUse = lastUses(list, endUses);
    std::vector<int32_t> slotOf(n_, -1);
    std::vector<int32_t> freeSlots;
    int used = 0;
    for (int pos = 0; pos < static_cast<int>(list.size()); ++pos) {
      const int32_t id = list[pos];
      const IrNode& node = im_.prog.nodes[id];
      Entry e{id, -1, -1};
      if (stopped_[id]) {
        e.cache = cacheOf_[id];
        e.cacheRead = true;
      } else if (inPlaceStore[id] >= 0) {
        e.store = inPlaceStore[id];
      } else if (!directLeaf(id)) {
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
        if (c >= 0 && !im_.uniform[c] && lastUse[c] == pos && slotOf[c] >= 0) {
          freeSlots.push_back(slotOf[c]);
          slotOf[c] = -1;
        }
    }
    im_.slotCount = std::max(im_.slotCount, used);
    return entries;
  }

  // The sweep that computes a cached node writes it to its row cache.
  void markCacheWrites() {
    for (int l = 0; l < im_.levels; ++l)
      for (Entry& e : im_.loops[l].entries)
        if (!e.cacheRead && cacheOf_[e.node] >= 0 && producedIn_[e.node] == l)
          e.cache = cacheOf_[e.node];
  }

  bool directLeaf(size_t id) const {
    const IrNode& node = im_.prog.nodes[id];
    return node.op == Op::Leaf && im_.leafInfo[node.leaf].direct;
  }

 private:
  bool cacheable(size_t id) const {
    return im_.vec[id] && !isReduce(im_.prog.nodes[id].op) && !directLeaf(id);
  }
  // Each varying node's last position in `list` (the list's end for `endUses`).
  std::vector<int> lastUses(const std::vector<int32_t>& list, const std::vector<int32_t>& endUses) const {
    std::vector<int> lastUse(n_, -1);
    const int end = static_cast<int>(list.size());
    for (int pos = 0; pos < end; ++pos)
      for (int32_t c : im_.prog.nodes[list[pos]].in)
        if (c >= 0 && !im_.uniform[c]) lastUse[c] = pos;
    for (int32_t r : endUses)
      if (r >= 0 && !im_.uniform[r]) lastUse[r] = end;
    return lastUse;
  }

  CompiledPass::Impl& im_;
  const size_t n_;
  const bool canCache_;
  std::vector<int> producedIn_;  // the sweep that first computes a node
  std::vector<int32_t> cacheOf_;
  std::vector<uint8_t> stopped_;
};

void CompiledPass::Impl::planSweeps() {
  const size_t n = prog.nodes.size();
  innerTotal = 1;
  for (int64_t sz : innerSizes) innerTotal *= sz;
  SweepPlanner planner(*this);

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
    loop.entries = planner.layout(planner.cone(childRoots, l - 1), childRoots, noInPlace);
  }

  // Final loop: stores that vary along the inner dims.
  int64_t storedBytes = 0;
  for (const Store& st : prog.stores) storedBytes += total * static_cast<int64_t>(elementSize(st.type));
  stream = storedBytes >= kStreamBytes;
  std::vector<int32_t> finalRoots;
  std::vector<int32_t> inPlace(n, -1);
  for (size_t s = 0; s < prog.stores.size(); ++s) {
    const Store& st = prog.stores[s];
    const bool varying = !uniform[st.node] || innerMaskOf(storeForm[s]) != 0;
    if (!varying) {
      rowStores.push_back(static_cast<int32_t>(s));
      continue;
    }
    finalLoop.stores.push_back(static_cast<int32_t>(s));
    finalRoots.push_back(st.node);
    if (!stream && !uniform[st.node] && vec[st.node] && !planner.directLeaf(st.node) &&
        st.type == ElementType::Float32 && formInner[storeForm[s]].back() == 1 && inPlace[st.node] < 0)
      inPlace[st.node] = static_cast<int32_t>(s);
  }
  finalLoop.entries = planner.layout(planner.cone(finalRoots, levels), finalRoots, inPlace);
  planner.markCacheWrites();
}

void CompiledPass::Impl::allocateThreadStates() {
  const size_t n = prog.nodes.size();
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
    ts.innerIdx.assign(innerSizes.size(), 0);
  }
}

}  // namespace collage::native
