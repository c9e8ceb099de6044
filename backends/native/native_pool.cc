#include "backends/native/native_pool.h"

#include <omp.h>

#include <algorithm>
#include <exception>
#include <limits>
#include <string>
#include <vector>

#include "core/ops/conv_geometry.h"

namespace collage::native {

namespace {

// The taps [lo, hi) of one window along one dimension that fall inside the
// input (positions start + t * dilation), and the divisor of AveragePool.
struct Taps {
  int64_t start = 0, lo = 0, hi = 0, count = 0;
};

class DirectPoolStep final : public Step {
 public:
  DirectPoolStep(const NodeBinding& b, const ConvGeometry& g, bool isMax, int threads)
      : x_(b.inputs[0]),
        y_(b.outputs[0]),
        isMax_(isMax),
        threads_(threads),
        label_("'" + b.node.name + "' (" + b.node.op + ")") {
    const bool includePad = !isMax && b.node.attrs.getInt("count_include_pad", 0) != 0;
    planes_ = g.batch * g.inChannels;
    IH_ = g.inputSpatial[0];
    IW_ = g.inputSpatial[1];
    OH_ = g.outputSpatial[0];
    OW_ = g.outputSpatial[1];
    KW_ = g.kernel[1];
    SW_ = g.strides[1];
    DH_ = g.dilations[0];
    DW_ = g.dilations[1];
    for (size_t d = 0; d < 2; ++d) {
      std::vector<Taps>& taps = d == 0 ? rows_ : cols_;
      const int64_t in = g.inputSpatial[d], k = g.kernel[d], s = g.strides[d], dil = g.dilations[d];
      for (int64_t o = 0; o < g.outputSpatial[d]; ++o) {
        Taps t;
        t.start = o * s - g.padsBegin[d];
        t.lo = 0;
        t.hi = k;
        while (t.lo < t.hi && t.start + t.lo * dil < 0) ++t.lo;
        while (t.hi > t.lo && t.start + (t.hi - 1) * dil >= in) --t.hi;
        if (includePad) {
          const int64_t limit = in + g.padsEnd[d];
          for (int64_t i = 0; i < k; ++i)
            if (t.start + i * dil < limit) ++t.count;
        } else {
          t.count = t.hi - t.lo;
        }
        taps.push_back(t);
      }
    }
    // Interior columns: every tap inside the input.
    owBegin_ = OW_;
    owEnd_ = OW_;
    for (int64_t ow = 0; ow < OW_; ++ow)
      if (cols_[ow].lo == 0 && cols_[ow].hi == KW_) {
        if (owBegin_ == OW_) owBegin_ = ow;
        owEnd_ = ow + 1;
      }
    for (int64_t ow = owBegin_; ow < owEnd_; ++ow)
      if (cols_[ow].lo != 0 || cols_[ow].hi != KW_) owEnd_ = owBegin_ = OW_;  // not contiguous
  }

  void run(const BufferTable& buffers) override {
    const float* x = static_cast<const float*>(buffers.ptr[x_]);
    float* y = static_cast<float*>(buffers.ptr[y_]);
    const int64_t inP = IH_ * IW_, outP = OH_ * OW_;
    const int threads = static_cast<int>(std::min<int64_t>(threads_, planes_));
    if (threads <= 1 || planes_ * outP < (1 << 14)) {
      for (int64_t p = 0; p < planes_; ++p) plane(x + p * inP, y + p * outP);
      return;
    }
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t p = 0; p < planes_; ++p) plane(x + p * inP, y + p * outP);
  }

  std::string describe() const override {
    return label_ + " (direct NCHW pooling" +
           (owEnd_ > owBegin_ ? ", " + std::to_string(owEnd_ - owBegin_) + "/" +
                                    std::to_string(OW_) + " columns unchecked"
                              : std::string()) +
           ")";
  }

 private:
  // One (n, c) plane. Per output row: the edge columns element by element,
  // the interior columns tap by tap over the whole row.
  void plane(const float* xc, float* yc) const {
    for (int64_t oh = 0; oh < OH_; ++oh) {
      const Taps& rh = rows_[oh];
      float* yr = yc + oh * OW_;
      for (int64_t ow = 0; ow < owBegin_; ++ow) edge(xc, rh, ow, yr);
      for (int64_t ow = owEnd_; ow < OW_; ++ow) edge(xc, rh, ow, yr);
      if (owEnd_ <= owBegin_) continue;
      const int64_t n = owEnd_ - owBegin_;
      float* out = yr + owBegin_;
      const int64_t base = cols_[owBegin_].start;
      if (rh.hi <= rh.lo) {
        // No row of the window inside the input (only possible with
        // padding as large as the window): the reference's empty window.
        for (int64_t i = 0; i < n; ++i)
          out[i] = isMax_ ? std::numeric_limits<float>::lowest() : 0.0f;
        continue;
      }
      bool first = true;
      for (int64_t th = rh.lo; th < rh.hi; ++th) {
        const float* row = xc + (rh.start + th * DH_) * IW_ + base;
        for (int64_t tw = 0; tw < KW_; ++tw) {
          const float* src = row + tw * DW_;
          if (first) {
            if (SW_ == 1)
              for (int64_t i = 0; i < n; ++i) out[i] = src[i];
            else
              for (int64_t i = 0; i < n; ++i) out[i] = src[i * SW_];
            first = false;
          } else if (isMax_) {
            // (v > best) ? v : best: the reference's "first maximum wins".
            if (SW_ == 1)
              for (int64_t i = 0; i < n; ++i) out[i] = src[i] > out[i] ? src[i] : out[i];
            else if (SW_ == 2)
              for (int64_t i = 0; i < n; ++i) out[i] = src[2 * i] > out[i] ? src[2 * i] : out[i];
            else
              for (int64_t i = 0; i < n; ++i)
                out[i] = src[i * SW_] > out[i] ? src[i * SW_] : out[i];
          } else {
            if (SW_ == 1)
              for (int64_t i = 0; i < n; ++i) out[i] += src[i];
            else if (SW_ == 2)
              for (int64_t i = 0; i < n; ++i) out[i] += src[2 * i];
            else
              for (int64_t i = 0; i < n; ++i) out[i] += src[i * SW_];
          }
        }
      }
      if (!isMax_) {
        const int64_t ch = rh.count;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t count = ch * cols_[owBegin_ + i].count;
          out[i] = count > 0 ? out[i] / static_cast<float>(count) : 0.0f;
        }
      }
    }
  }

  // One output element with bounds from the tap ranges (the reference's loop).
  void edge(const float* xc, const Taps& rh, int64_t ow, float* yr) const {
    const Taps& rw = cols_[ow];
    if (isMax_) {
      float best = std::numeric_limits<float>::lowest();
      bool any = false;
      for (int64_t th = rh.lo; th < rh.hi; ++th) {
        const float* row = xc + (rh.start + th * DH_) * IW_;
        for (int64_t tw = rw.lo; tw < rw.hi; ++tw) {
          const float v = row[rw.start + tw * DW_];
          if (!any || v > best) best = v;
          any = true;
        }
      }
      yr[ow] = best;
    } else {
      float sum = 0.0f;
      for (int64_t th = rh.lo; th < rh.hi; ++th) {
        const float* row = xc + (rh.start + th * DH_) * IW_;
        for (int64_t tw = rw.lo; tw < rw.hi; ++tw) sum += row[rw.start + tw * DW_];
      }
      const int64_t count = rh.count * rw.count;
      yr[ow] = count > 0 ? sum / static_cast<float>(count) : 0.0f;
    }
  }

  int32_t x_, y_;
  bool isMax_;
  int threads_;
  std::string label_;
  int64_t planes_ = 0, IH_ = 0, IW_ = 0, OH_ = 0, OW_ = 0, KW_ = 0, SW_ = 1, DH_ = 1, DW_ = 1;
  int64_t owBegin_ = 0, owEnd_ = 0;
  std::vector<Taps> rows_, cols_;
};

}  // namespace

std::unique_ptr<Step> makeDirectPoolStep(const NodeBinding& b, int threads) {
  const std::string& op = b.node.op;
  if (op != "MaxPool" && op != "AveragePool") return nullptr;
  if (b.inputs.empty() || b.inputs[0] < 0 || b.outputs.empty() || b.outputs[0] < 0) return nullptr;
  for (size_t i = 1; i < b.outputs.size(); ++i)
    if (b.outputs[i] >= 0) return nullptr;  // Indices
  if (b.inputTypes[0].elementType != ElementType::Float32) return nullptr;
  const Shape& x = b.inputTypes[0].shape;
  if (x.size() != 3 && x.size() != 4) return nullptr;
  const ConvGeometry full = ConvGeometry::pool(b.node, x);
  if (full.outputShape() != b.outputTypes[0].shape) return nullptr;
  const ConvGeometry g = full.expandedTo(2);  // a 1D pool as [1, W]
  return std::make_unique<DirectPoolStep>(b, g, op == "MaxPool", threads);
}

}  // namespace collage::native
