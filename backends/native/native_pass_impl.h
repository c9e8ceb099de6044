// Internal to the native backend's fused pass (native_pass.h): the compiled
// pass's state, shared by its two halves,
//
//   native_pass_plan.cc  build() and plan(): the one-time planning (loop
//                        dims, node classes, evaluation lists, slots,
//                        caches, per-thread state), done at compile time;
//   native_pass.cc       the evaluator and run(): the loops that execute
//                        the plan, block by block, on the backend's threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "backends/native/native_byte_table.h"
#include "backends/native/native_pass.h"

namespace collage::native {
namespace pass {

// Elements per block along the innermost dim.
constexpr int kMaxBlock = 512;

struct Operand {
  const float* p;
  bool vec;
};

// Work items a pass is cut into per thread: enough that dynamic
// scheduling evens out a thread that is descheduled or draws heavier items.
constexpr int64_t kItemsPerThread = 8;

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

}  // namespace pass

struct CompiledPass::Impl {
  PassProgram prog;
  int threads = 1;
  // Set where the pass runs as a table lookup (native_byte_table.h); the
  // plan below is then made but not run.
  std::unique_ptr<ByteTable> table;

  // Loop dims: outer then inner; the last inner dim is the vector dim.
  std::vector<int64_t> outerSizes, innerSizes;
  bool elementwise = false;
  int64_t rows = 1, vecLen = 1, chunkLen = 1, chunksPerRow = 1, items = 1;
  int64_t tileRows = 1, rowGroups = 1;
  int64_t total = 0;
  int block = pass::kMaxBlock;

  // Every offset form (leaf bases, indirect offsets, stores), over loop dims.
  std::vector<int64_t> formC;
  std::vector<std::vector<int64_t>> formOuter, formInner;  // coefficients per loop dim
  std::vector<pass::LeafInfo> leafInfo;
  std::vector<int32_t> storeForm;

  std::vector<uint8_t> uniform, vec;
  std::vector<int> level;
  int levels = 0;
  std::vector<std::vector<pass::Entry>> uniformLists;  // per level: uniform non-reduce nodes
  std::vector<pass::LoopPlan> loops;                     // loops[l - 1] accumulates level-l reductions
  pass::LoopPlan finalLoop;
  std::vector<int32_t> rowStores;
  int slotCount = 0;
  int cacheCount = 0;
  bool stream = false;  // non-temporal stores for outputs larger than the caches
  int64_t innerTotal = 1;

  std::vector<pass::ThreadState> states;
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

  // Planning (native_pass_plan.cc), done once by the constructor.
  void build();
  std::vector<Affine> gatherForms();
  void orderLoopDims(const std::vector<Affine>& forms);
  void splitWork();
  void plan();
  void classifyNodes();
  void planSweeps();
  void allocateThreadStates();
  // Bit i: `form` varies along inner dim i.
  uint64_t innerMaskOf(int32_t form) const;
  class SweepPlanner;

  // Running (native_pass.cc).
  void evalEntries(const std::vector<pass::Entry>& entries, int n, pass::ThreadState& ts, const int64_t* off,
                   const BufferTable& buffers, int64_t pos = 0) const;
  const float* loadLeaf(const IrNode& node, bool isVec, int m, float* o, const int64_t* off,
                        const BufferTable& buffers) const;
  void sweep(const pass::LoopPlan& loop, int64_t vb, int64_t ve, pass::ThreadState& ts,
             const BufferTable& buffers) const;
  void runItem(int64_t item, pass::ThreadState& ts, const BufferTable& buffers) const;
  void runTile(int64_t group, int64_t chunk, pass::ThreadState& ts, const BufferTable& buffers) const;
  void rowOffsets(int64_t row, int64_t* out) const;
  void storeBlock(const pass::LoopPlan& loop, int n, pass::ThreadState& ts, const BufferTable& buffers) const;
};

}  // namespace collage::native
