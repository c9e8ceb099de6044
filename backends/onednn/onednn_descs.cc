#include "backends/onednn/onednn_descs.h"

#include <dnnl_debug.h>

#include <cstdlib>
#include <mutex>
#include <vector>

namespace collage::onednn {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;

memory::dims dimsOf(const Shape& s) {
  if (s.empty()) return {1};  // oneDNN has no rank-0 tensors; a scalar is [1]
  return memory::dims(s.begin(), s.end());
}

memory::dims rowMajorStrides(const memory::dims& d) {
  memory::dims s(d.size(), 1);
  for (size_t i = d.size(); i-- > 1;) s[i - 1] = s[i] * d[i];
  return s;
}

memory::desc plainDesc(const memory::dims& d, memory::data_type type) {
  const memory::dims dims = dimsOf(d);
  return memory::desc(dims, type, rowMajorStrides(dims));
}

memory::desc anyDesc(const memory::dims& d, memory::data_type type) {
  return memory::desc(d, type, memory::format_tag::any);
}

Shape padTo(const Shape& s, size_t rank) {
  Shape r(rank > s.size() ? rank - s.size() : 0, 1);
  r.insert(r.end(), s.begin(), s.end());
  return r;
}

bool samePlainBytes(const memory::desc& a, const memory::desc& b) {
  return a == plainDesc(a.dims()) && b == plainDesc(b.dims()) && a.get_size() == b.get_size();
}

int64_t blockChannels() {
  static const int64_t block =
      dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core ? 16 : 8;
  return block;
}

std::optional<memory::format_tag> nativeTagOf(const memory::desc& md) {
  using tag = memory::format_tag;
  static const tag tags[] = {tag::nCw8c,    tag::nCw16c,   tag::nChw8c, tag::nChw16c,
                             tag::nCdhw8c,  tag::nCdhw16c, tag::nwc,   tag::nhwc,
                             tag::ndhwc};
  for (tag t : tags)
    if (memory::desc(md.dims(), memory::data_type::f32, t, true) == md) return t;
  return std::nullopt;
}

std::optional<NativeLayout> handOverLayoutOf(const memory::desc& md) {
  using tag = memory::format_tag;
  using dt = memory::data_type;
  const dt type = md.data_type();
  const ElementType element = type == dt::f32  ? ElementType::Float32
                              : type == dt::u8 ? ElementType::UInt8
                              : type == dt::s8 ? ElementType::Int8
                                               : ElementType::Undefined;
  if (element == ElementType::Undefined) return std::nullopt;
  const memory::dims dims = md.dims();
  for (tag t : {tag::nwc, tag::nhwc, tag::ndhwc, tag::nCw8c, tag::nCw16c, tag::nChw8c, tag::nChw16c,
                tag::nCdhw8c, tag::nCdhw16c}) {
    if (memory::desc(dims, type, t, true) != md) continue;
    if (!channelBlocked(t)) return channelsLastLayout(Shape(dims.begin(), dims.end()), element);
    std::string name;
    for (memory::dim d : dims) name += (name.empty() ? "" : "x") + std::to_string(d);
    return NativeLayout{"onednn " + std::string(elementTypeName(element)) + " " + name + " " +
                            dnnl_fmt_tag2str(static_cast<dnnl_format_tag_t>(t)),
                        md.get_size()};
  }
  return std::nullopt;
}

std::optional<memory::desc> float32Twin(const memory::desc& md) {
  if (md.data_type() != memory::data_type::bf16) return std::nullopt;
  using tag = memory::format_tag;
  for (tag t : {tag::nCw8c, tag::nCw16c, tag::nChw8c, tag::nChw16c, tag::nCdhw8c, tag::nCdhw16c,
                tag::nwc, tag::nhwc, tag::ndhwc})
    if (memory::desc(md.dims(), memory::data_type::bf16, t, true) == md)
      return memory::desc(md.dims(), memory::data_type::f32, t);
  return std::nullopt;
}

std::optional<memory::format_tag> activationTag(size_t rank) {
  auto probe = [](size_t r) -> std::optional<memory::format_tag> {
    try {
      const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
      memory::dims src{1, 32}, wei{32, 32}, strides, pads;
      for (size_t i = 2; i < r; ++i) {
        src.push_back(14);
        wei.push_back(3);
        strides.push_back(1);
        pads.push_back(1);
      }
      const memory::desc any(src, memory::data_type::f32, memory::format_tag::any);
      const memory::desc w(wei, memory::data_type::f32, memory::format_tag::any);
      dnnl::convolution_forward::desc d(prop_kind::forward_inference, algorithm::convolution_direct,
                                        any, w, memory::desc(), any, strides, pads, pads);
      dnnl::convolution_forward::primitive_desc pd(d, engine);
      return nativeTagOf(pd.src_desc());
    } catch (const dnnl::error&) {
      return std::nullopt;
    }
  };
  static const std::optional<memory::format_tag> tag4 = probe(4), tag5 = probe(5);
  return rank == 4 ? tag4 : rank == 5 ? tag5 : std::nullopt;
}

bool channelBlocked(memory::format_tag tag) {
  using t = memory::format_tag;
  return tag != t::nwc && tag != t::nhwc && tag != t::ndhwc;
}

bool isRef(const dnnl::primitive_desc_base& pd) {
  return std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
}

void warmLazyKernels(const dnnl::primitive_desc_base& pd) {
  if (std::string(pd.impl_info_str()).rfind("gemm:jit", 0) != 0) return;
  static std::once_flag once;
  std::call_once(once, [] {
    // Big enough to take the driver's blocked path, not a gemv or a
    // small-matrix shortcut: 64 x 64 x 64, a few microseconds once warm.
    constexpr int64_t n = 64;
    std::vector<float> a(n * n, 1.0f), b(n * n, 1.0f), c(n * n);
    dnnl::sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    std::vector<uint8_t> ua(n * n, 1);
    std::vector<int8_t> sb(n * n, 1);
    std::vector<int32_t> ic(n * n);
    const int32_t offset = 0;
    dnnl::gemm_u8s8s32('N', 'N', 'F', n, n, n, 1.0f, ua.data(), n, 0, sb.data(), n, 0, 0.0f,
                       ic.data(), n, &offset);
  });
}

std::string kindName(dnnl::primitive::kind k) {
  switch (k) {
    case dnnl::primitive::kind::reorder:
      return "reorder";
    case dnnl::primitive::kind::convolution:
      return "convolution";
    case dnnl::primitive::kind::deconvolution:
      return "deconvolution";
    case dnnl::primitive::kind::eltwise:
      return "eltwise";
    case dnnl::primitive::kind::softmax_v2:
      return "softmax";
    case dnnl::primitive::kind::pooling_v2:
      return "pooling";
    case dnnl::primitive::kind::batch_normalization:
      return "batch_normalization";
    case dnnl::primitive::kind::layer_normalization:
      return "layer_normalization";
    case dnnl::primitive::kind::binary:
      return "binary";
    case dnnl::primitive::kind::matmul:
      return "matmul";
    default:
      return "primitive";
  }
}

ConvLayout convLayoutSetting() {
  const char* v = std::getenv("COLLAGE_ONEDNN_CONV_LAYOUT");
  if (!v) return ConvLayout::Auto;
  const std::string s(v);
  if (s == "plain") return ConvLayout::Plain;
  if (s == "blocked") return ConvLayout::Blocked;
  return ConvLayout::Auto;
}

}  // namespace collage::onednn
