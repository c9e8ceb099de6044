// Our channels-last -> plain transpose (backends/onednn/channels_transpose.h)
// gives oneDNN's reorder's bytes for every shape it claims, edges included,
// and claims nothing else.
#include <gtest/gtest.h>

#include <omp.h>

#include <cstring>

#include "backends/onednn/channels_transpose.h"

namespace collage::onednn {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

TEST(ChannelsTranspose, MatchesOneDnnsReorderOnEveryRankAndEdge) {
  const int restore = omp_get_max_threads();
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  struct Case {
    memory::dims dims;
    tag from, to;
    dt type;
  };
  const std::vector<Case> cases = {
      {{1, 1024, 14, 14}, tag::acdb, tag::abcd, dt::f32},  // many channels, a small image
      {{2, 37, 5, 3}, tag::acdb, tag::abcd, dt::s32},      // no multiple of 8 anywhere, two images
      {{3, 13, 9}, tag::acb, tag::abc, dt::f32},           // 1-D
      {{1, 20, 3, 4, 5}, tag::acdeb, tag::abcde, dt::f32}, // 3-D
      {{1, 8, 16, 16}, tag::acdb, tag::abcd, dt::f32},     // whole tiles only
      {{1, 1024, 14, 14}, tag::abcd, tag::acdb, dt::u8},   // bytes into channels last
      {{2, 37, 5, 7}, tag::abcd, tag::acdb, dt::s8},       // edges on both sides of the 16x16 tiles
      {{1, 48, 33}, tag::acb, tag::abc, dt::u8},           // bytes to plain
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.dims));
    const memory::desc from(c.dims, c.type, c.from), to(c.dims, c.type, c.to);
    const std::optional<ChannelsTranspose> t = channelsTransposeOf(from, to);
    ASSERT_TRUE(t.has_value());
    memory a(from, engine), want(to, engine), got(to, engine);
    auto* bytes = static_cast<uint8_t*>(a.get_data_handle());
    for (size_t i = 0; i < from.get_size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + i / 251);
    dnnl::reorder(a, want).execute(stream, a, want);
    stream.wait();
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      std::memset(got.get_data_handle(), 0, to.get_size());
      runChannelsTranspose(*t, a.get_data_handle(), got.get_data_handle());
      EXPECT_EQ(std::memcmp(got.get_data_handle(), want.get_data_handle(), to.get_size()), 0) << threads << " threads";
    }
  }
  omp_set_num_threads(restore);
}

TEST(ChannelsTranspose, ClaimsOnlyTheReordersItDoesFaster) {
  const memory::dims d{1, 16, 4, 4};
  EXPECT_FALSE(channelsTransposeOf(memory::desc(d, dt::f32, tag::abcd), memory::desc(d, dt::f32, tag::acdb)));
  EXPECT_FALSE(channelsTransposeOf(memory::desc(d, dt::bf16, tag::acdb), memory::desc(d, dt::bf16, tag::abcd)));
  EXPECT_FALSE(channelsTransposeOf(memory::desc(d, dt::u8, tag::aBcd16b), memory::desc(d, dt::u8, tag::abcd)));
  EXPECT_FALSE(channelsTransposeOf(memory::desc(d, dt::f32, tag::aBcd16b), memory::desc(d, dt::f32, tag::abcd)));
  EXPECT_FALSE(channelsTransposeOf(memory::desc(d, dt::s32, tag::acdb), memory::desc(d, dt::f32, tag::abcd)));
  const memory::dims one{1, 1, 4, 4};  // one channel: the layouts hold the same bytes
  EXPECT_FALSE(channelsTransposeOf(memory::desc(one, dt::f32, tag::acdb), memory::desc(one, dt::f32, tag::abcd)));
  EXPECT_TRUE(channelsTransposeOf(memory::desc(d, dt::f32, tag::acdb), memory::desc(d, dt::f32, tag::abcd)));
  // Plain memory described by its row-major strides, as the int8 kernels do.
  EXPECT_TRUE(channelsTransposeOf(memory::desc(d, dt::u8, memory::dims{256, 16, 4, 1}), memory::desc(d, dt::u8, tag::acdb)));
}

}  // namespace
}  // namespace collage::onednn
