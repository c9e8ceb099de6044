// The CUDA decode attention kernel's host side (cuda_decode_attention.h):
// the native analysis read into a plan, the launch chosen, and the two
// kernels written as CUDA C++ for NVRTC. No CUDA header, no device.
#include "backends/cuda_fusion/cuda_decode_attention.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "backends/native/native_attention.h"
#include "backends/native/native_decode_attention.h"

namespace collage::cuda_fusion {

namespace {

DecodeView viewOf(int slot, const native::StridedView& v) {
  DecodeView d;
  d.slot = slot;
  for (size_t a = 0; a < 4 && a < v.strides.size(); ++a) d.strides[a] = v.strides[a];
  return d;
}

std::string floatLiteral(float f) {
  uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
  char text[48];
  std::snprintf(text, sizeof text, "__int_as_float(0x%08xu)", bits);
  return text;
}

// "b * 4096LL + h * 64LL + d": a view's offset in the named indices, the
// terms of zero stride left out.
std::string offset(const DecodeView& v, const char* b, const char* h, const char* i,
                   const char* j) {
  const char* names[4] = {b, h, i, j};
  std::string out;
  for (int a = 0; a < 4; ++a) {
    if (v.strides[a] == 0) continue;
    if (!out.empty()) out += " + ";
    out += std::string(names[a]);
    if (v.strides[a] != 1) out += " * " + std::to_string(v.strides[a]) + "LL";
  }
  return out.empty() ? "0LL" : out;
}

std::string slotPointer(const char* type, int slot) {
  return "((const " + std::string(type) + "*)a.p[" + std::to_string(slot) + "])";
}

}  // namespace

int64_t cudaDecodeMinKeysFromEnvironment() {
  const char* e = std::getenv("COLLAGE_CUDA_DECODE_MIN_KEYS");
  if (!e) return kCudaDecodeMinKeysPerSplit;
  const long long n = std::atoll(e);
  return n >= 1 ? n : kCudaDecodeMinKeysPerSplit;
}

std::pair<int64_t, int64_t> splitKeys(int64_t L, int64_t P, int64_t s) {
  return {s * L / P, (s + 1) * L / P};
}

int64_t chooseSplits(int64_t L, int64_t groups, int multiprocessors, int64_t minKeysPerSplit) {
  const int64_t blocks = std::max<int64_t>(1, multiprocessors) * kCudaDecodeBlocksPerMultiprocessor;
  const int64_t g = std::max<int64_t>(1, groups);
  const int64_t wanted = (blocks + g - 1) / g;
  const int64_t most = std::max<int64_t>(1, L / std::max<int64_t>(1, minKeysPerSplit));
  return std::max<int64_t>(1, std::min(wanted, most));
}

int64_t CudaDecodePlan::mergeBlocks() const {
  return std::clamp<int64_t>(
      (mergeElements() + kCudaDecodeMergeThreads - 1) / kCudaDecodeMergeThreads, 1, 65535);
}

void planLaunch(CudaDecodePlan& plan, int multiprocessors, int64_t minKeysPerSplit) {
  const int64_t R = plan.rows(), outputs = R * plan.Dv;
  int threads = 128;
  while ((outputs + threads - 1) / threads > kCudaDecodeMaxAccumulators &&
         threads < kCudaDecodeMaxThreads)
    threads *= 2;
  const int64_t accumulators = (outputs + threads - 1) / threads;
  if (accumulators > kCudaDecodeMaxAccumulators) {
    plan.refusal = "cuda decode attention: a block computes " + std::to_string(R) + " rows (" +
                   std::to_string(plan.kvGroup) + " query heads per KV head x " +
                   std::to_string(plan.Sq) + " queries) of " + std::to_string(plan.Dv) +
                   " columns, " + std::to_string(outputs) + " outputs: over the " +
                   std::to_string(kCudaDecodeMaxThreads * kCudaDecodeMaxAccumulators) +
                   " its threads keep in registers";
    return;
  }
  if (plan.groups() > 65535) {
    plan.refusal = "cuda decode attention: " + std::to_string(plan.groups()) +
                   " (batch x KV head) groups, over the grid's 65535";
    return;
  }
  // Shared memory: Q's rows, a tile of K (rows padded by one float so that
  // the threads of a warp, reading one column of consecutive keys, hit
  // distinct banks), the tile's scores, and per row m, l and the rescale.
  auto shared = [&](int64_t tile) {
    return static_cast<size_t>(4 * (R * plan.D + tile * (plan.D + 1) + R * tile + 3 * R));
  };
  int tile = 32;
  while (tile > 8 && shared(tile) > kCudaDecodeMaxSharedBytes) tile /= 2;
  if (shared(tile) > kCudaDecodeMaxSharedBytes) {
    plan.refusal = "cuda decode attention: " + std::to_string(R) + " rows of Q (" +
                   std::to_string(plan.kvGroup) + " query heads per KV head x " +
                   std::to_string(plan.Sq) + " queries) of width " + std::to_string(plan.D) +
                   " and a tile of " + std::to_string(tile) + " keys need " +
                   std::to_string(shared(tile)) + " bytes of shared memory per block, over the " +
                   std::to_string(kCudaDecodeMaxSharedBytes) + " a block has";
    return;
  }
  plan.threads = threads;
  plan.accumulators = static_cast<int>(accumulators);
  plan.keysPerTile = tile;
  plan.sharedBytes = shared(tile);
  plan.splits = chooseSplits(plan.L, plan.groups(), multiprocessors, minKeysPerSplit);
}

CudaDecodePlan planDecodeAttention(const KernelRequest& request, int multiprocessors) {
  CudaDecodePlan plan;
  // The native analysis, on one thread: its refusals are this kernel's.
  CompileResult native = native::compileAttention(request, 1);
  if (!native) {
    plan.refusal = native.refusal;
    return plan;
  }
  const auto* d = dynamic_cast<const native::DecodeAttentionKernel*>(native.kernel.get());
  if (!d) {
    plan.refusal = "cuda decode attention: more query rows than " +
                   std::to_string(native::kDecodeMaxQueries) +
                   " (the decode kernel's most; the flash attention has no CUDA version): " +
                   native::describeAttentionKernel(*native.kernel);
    return plan;
  }
  plan.B = d->B;
  plan.H = d->H;
  plan.Hkv = d->Hkv;
  plan.kvGroup = d->kvGroup;
  plan.Sq = d->Sq;
  plan.L = d->L;
  plan.D = d->D;
  plan.Dv = d->Dv;
  plan.qScale = d->qScale;
  plan.q = viewOf(d->qSlot, d->q);
  plan.k = viewOf(d->kSlot, d->k);
  plan.v = viewOf(d->vSlot, d->v);
  plan.numInputs = d->numInputs;
  plan.constants = d->constants;
  plan.o = viewOf(static_cast<int>(plan.outputSlot()), d->o);
  for (const native::ScoreOp& op : d->ops) {
    DecodeScoreOp c;
    c.kind = op.kind == native::ScoreOp::Scale ? DecodeScoreOp::Scale
             : op.kind == native::ScoreOp::Add ? DecodeScoreOp::Add
                                               : DecodeScoreOp::Select;
    c.scale = op.scale;
    if (op.kind != native::ScoreOp::Scale) c.operand = viewOf(op.slot, op.view);
    if (op.kind == native::ScoreOp::Select) c.fill = viewOf(op.fillSlot, op.fillView);
    c.scoresWhereTrue = op.scoresWhereTrue;
    plan.ops.push_back(c);
  }
  planLaunch(plan, multiprocessors, cudaDecodeMinKeysFromEnvironment());
  return plan;
}

std::string CudaDecodePlan::describe() const {
  std::ostringstream s;
  s << "cuda decode attention B=" << B << " H=" << H << " Hkv=" << Hkv << " Sq=" << Sq << " L=" << L
    << " D=" << D << " Dv=" << Dv << ", " << splits << " split(s) x " << groups() << " group(s) of "
    << rows() << " row(s), " << threads << " threads, tiles of " << keysPerTile << " keys, "
    << accumulators << " accumulator(s) a thread, " << sharedBytes << " shared bytes, "
    << ops.size() << " score op(s)";
  return s.str();
}

std::string decodeAttentionSource(const CudaDecodePlan& p) {
  const int64_t R = p.rows();
  std::ostringstream s;
  s << "// " << p.describe() << "\n"
    << "#define COLLAGE_NEG_INF __int_as_float(0xff800000u)\n"
    << "#define COLLAGE_NAN __int_as_float(0x7fc00000u)\n"
    << "struct Args { void* p[" << p.slots() << "]; };\n"
    << "constexpr int THREADS = " << p.threads << ", TK = " << p.keysPerTile << ", R = " << R
    << ", D = " << p.D << ", DV = " << p.Dv << ", NACC = " << p.accumulators << ";\n"
    << "constexpr long long L = " << p.L << "LL, P = " << p.splits << "LL, G = " << p.groups()
    << "LL, HKV = " << p.Hkv << "LL, KVGROUP = " << p.kvGroup << "LL, SQ = " << p.Sq << "LL;\n";

  // The score ops on score s of row (b, h, i), key j, in the graph's order.
  s << "__device__ __forceinline__ float scoreOps(const Args& a, float s, long long b, long long "
       "h, "
       "long long i, long long j) {\n";
  for (const DecodeScoreOp& op : p.ops) {
    if (op.kind == DecodeScoreOp::Scale) {
      s << "  s *= " << floatLiteral(op.scale) << ";\n";
    } else if (op.kind == DecodeScoreOp::Add) {
      s << "  s += " << slotPointer("float", op.operand.slot) << "["
        << offset(op.operand, "b", "h", "i", "j") << "];\n";
    } else {
      s << "  if (" << slotPointer("bool", op.operand.slot) << "["
        << offset(op.operand, "b", "h", "i", "j")
        << "] != " << (op.scoresWhereTrue ? "true" : "false")
        << ") s = " << slotPointer("float", op.fill.slot) << "["
        << offset(op.fill, "b", "h", "i", "j") << "];\n";
    }
  }
  s << "  return s;\n}\n";

  // The partial kernel: block (split, group).
  s << "extern \"C\" __global__ void __launch_bounds__(THREADS) " << kDecodePartialEntry
    << "(Args a) {\n"
    << "  __shared__ float qs[R * D];\n"
    << "  __shared__ float ks[TK * (D + 1)];\n"
    << "  __shared__ float ss[R * TK];\n"
    << "  __shared__ float rmax[R], rsum[R], ralpha[R];\n"
    << "  const float* Q = " << slotPointer("float", p.q.slot) << ";\n"
    << "  const float* K = " << slotPointer("float", p.k.slot) << ";\n"
    << "  const float* V = " << slotPointer("float", p.v.slot) << ";\n"
    << "  float* part = (float*)a.p[" << p.workspaceSlot() << "];\n"
    << "  const int t = threadIdx.x;\n"
    << "  const long long split = blockIdx.x, grp = blockIdx.y, b = grp / HKV, g = grp % HKV;\n"
    // splitKeys(L, P, split)
    << "  const long long j0 = split * L / P, j1 = (split + 1) * L / P;\n"
    << "  for (int x = t; x < R * D; x += THREADS) {\n"
    << "    const int r = x / D, d = x % D;\n"
    << "    const long long h = g * KVGROUP + r / SQ, i = r % SQ;\n"
    << "    (void)h;\n    (void)i;\n"
    << "    qs[x] = Q[" << offset(p.q, "b", "h", "i", "d") << "] * " << floatLiteral(p.qScale)
    << ";\n"
    << "  }\n"
    << "  for (int r = t; r < R; r += THREADS) { rmax[r] = COLLAGE_NEG_INF; rsum[r] = 0.0f; }\n"
    << "  float acc[NACC];\n"
    << "#pragma unroll\n"
    << "  for (int c = 0; c < NACC; ++c) acc[c] = 0.0f;\n"
    << "  const float* kg = K + " << offset(p.k, "b", "g", "0LL", "0LL") << ";\n"
    << "  const float* vg = V + " << offset(p.v, "b", "g", "0LL", "0LL") << ";\n"
    << "  __syncthreads();\n"
    << "  for (long long jb = j0; jb < j1; jb += TK) {\n"
    << "    const int nk = j1 - jb < TK ? (int)(j1 - jb) : TK;\n"
    // The tile's K rows, each read once for every row of the group.
    << "    for (int x = t; x < nk * D; x += THREADS) {\n"
    << "      const int j = x / D, d = x % D;\n"
    << "      const long long key = jb + j;\n"
    << "      ks[j * (D + 1) + d] = kg["
    << offset({-1, {0, 0, p.k.strides[2], p.k.strides[3]}}, "0LL", "0LL", "key", "d") << "];\n"
    << "    }\n"
    << "    __syncthreads();\n"
    // Scores of (row, key), then the score ops.
    << "    for (int x = t; x < R * TK; x += THREADS) {\n"
    << "      const int r = x / TK, j = x % TK;\n"
    << "      if (j >= nk) continue;\n"
    << "      const float* qr = qs + r * D;\n"
    << "      const float* kr = ks + j * (D + 1);\n"
    << "      float s = 0.0f;\n"
    << "      for (int d = 0; d < D; ++d) s += qr[d] * kr[d];\n"
    << "      const long long h = g * KVGROUP + r / SQ, i = r % SQ;\n"
    << "      ss[x] = scoreOps(a, s, b, h, i, jb + j);\n"
    << "    }\n"
    << "    __syncthreads();\n"
    // Online softmax per row: new max, the old terms' rescale, exp(s - max).
    << "    for (int r = t; r < R; r += THREADS) {\n"
    << "      float* sr = ss + r * TK;\n"
    << "      float m = rmax[r];\n"
    << "      for (int j = 0; j < nk; ++j) m = sr[j] > m ? sr[j] : m;\n"
    << "      const float alpha = rmax[r] == COLLAGE_NEG_INF ? 0.0f : expf(rmax[r] - m);\n"
    << "      float sum = 0.0f;\n"
    << "      for (int j = 0; j < nk; ++j) {\n"
    << "        const float e = m == COLLAGE_NEG_INF ? 0.0f : expf(sr[j] - m);\n"
    << "        sr[j] = e;\n"
    << "        sum += e;\n"
    << "      }\n"
    << "      rsum[r] = rsum[r] * alpha + sum;\n"
    << "      rmax[r] = m;\n"
    << "      ralpha[r] = alpha;\n"
    << "    }\n"
    << "    __syncthreads();\n"
    // acc = acc * alpha + P . V: consecutive threads read consecutive columns.
    << "#pragma unroll\n"
    << "    for (int c = 0; c < NACC; ++c) {\n"
    << "      const int x = t + c * THREADS;\n"
    << "      if (x < R * DV) {\n"
    << "        const int r = x / DV, d = x % DV;\n"
    << "        const float* pr = ss + r * TK;\n"
    << "        float y = acc[c] * ralpha[r];\n"
    << "        for (int j = 0; j < nk; ++j) {\n"
    << "          const long long key = jb + j;\n"
    << "          y += pr[j] * vg["
    << offset({-1, {0, 0, p.v.strides[2], p.v.strides[3]}}, "0LL", "0LL", "key", "d") << "];\n"
    << "        }\n"
    << "        acc[c] = y;\n"
    << "      }\n"
    << "    }\n"
    << "    __syncthreads();\n"
    << "  }\n"
    // The block's (m, l, acc) to the workspace [group][split][row].
    << "  const long long tile = (grp * P + split) * R;\n"
    << "  for (int r = t; r < R; r += THREADS) {\n"
    << "    part[tile + r] = rmax[r];\n"
    << "    part[G * P * R + tile + r] = rsum[r];\n"
    << "  }\n"
    << "#pragma unroll\n"
    << "  for (int c = 0; c < NACC; ++c) {\n"
    << "    const int x = t + c * THREADS;\n"
    << "    if (x < R * DV) part[2 * G * P * R + tile * DV + x] = acc[c];\n"
    << "  }\n"
    << "}\n";

  // The merge: one thread per output element (row of a group, column).
  s << "extern \"C\" __global__ void " << kDecodeMergeEntry << "(Args a) {\n"
    << "  const float* part = (const float*)a.p[" << p.workspaceSlot() << "];\n"
    << "  float* out = (float*)a.p[" << p.outputSlot() << "];\n"
    << "  const long long total = G * R * DV;\n"
    << "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
    << "  for (long long x = (long long)blockIdx.x * blockDim.x + threadIdx.x; x < total; x += "
       "stride) {\n"
    << "    const long long row = x / DV, d = x % DV, grp = row / R, r = row % R;\n"
    << "    const float* pm = part + grp * P * R + r;\n"
    << "    const float* pl = part + G * P * R + grp * P * R + r;\n"
    << "    const float* pa = part + 2 * G * P * R + (grp * P * R + r) * DV + d;\n"
    << "    float m = COLLAGE_NEG_INF;\n"
    << "    for (long long q = 0; q < P; ++q) m = m < pm[q * R] ? pm[q * R] : m;\n"
    << "    float l = 0.0f;\n"
    << "    for (long long q = 0; q < P; ++q)\n"
    << "      if (pm[q * R] != COLLAGE_NEG_INF) l += pl[q * R] * expf(pm[q * R] - m);\n"
    // Every score -inf: 0 / 0, as the reference's softmax.
    << "    const float inv = l > 0.0f ? 1.0f / l : COLLAGE_NAN;\n"
    << "    float y = 0.0f;\n"
    << "    for (long long q = 0; q < P; ++q)\n"
    << "      if (pm[q * R] != COLLAGE_NEG_INF) y += pa[q * R * DV] * (expf(pm[q * R] - m) * "
       "inv);\n"
    << "    if (!(l > 0.0f)) y = inv;\n"
    << "    const long long b = grp / HKV, g = grp % HKV, h = g * KVGROUP + r / SQ, i = r % SQ;\n"
    << "    (void)b;\n    (void)h;\n    (void)i;\n"
    << "    out[" << offset(p.o, "b", "h", "i", "d") << "] = y;\n"
    << "  }\n"
    << "}\n";
  return s.str();
}

}  // namespace collage::cuda_fusion
