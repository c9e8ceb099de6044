// NodeSet: a bit set over node indices (64-bit words). Sub-graphs, covered
// sets and search states are NodeSets, so hashing and comparing are cheap.
#pragma once

#include <bit>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/ir/graph.h"

namespace collage {

class NodeSet {
 public:
  NodeSet() = default;
  explicit NodeSet(int32_t capacity) : size_(capacity), words_((capacity + 63) / 64, 0) {}
  static NodeSet of(int32_t capacity, const std::vector<NodeId>& nodes);
  static NodeSet all(int32_t capacity);

  int32_t capacity() const { return size_; }
  bool contains(NodeId n) const {
    return n >= 0 && n < size_ && ((words_[n >> 6] >> (n & 63)) & 1u);
  }
  void insert(NodeId n) { words_[n >> 6] |= uint64_t{1} << (n & 63); }
  void erase(NodeId n) { words_[n >> 6] &= ~(uint64_t{1} << (n & 63)); }
  int32_t count() const;
  bool empty() const;
  // Lowest member, or kNoNode.
  NodeId first() const;
  // Lowest member > n, or kNoNode.
  NodeId next(NodeId n) const;
  // Lowest index not in the set, or capacity() when full.
  NodeId firstMissing() const;
  std::vector<NodeId> members() const;

  bool intersects(const NodeSet& o) const;
  bool isSubsetOf(const NodeSet& o) const;
  NodeSet operator|(const NodeSet& o) const;
  NodeSet operator&(const NodeSet& o) const;
  NodeSet operator-(const NodeSet& o) const;
  NodeSet& operator|=(const NodeSet& o);
  bool operator==(const NodeSet& o) const { return size_ == o.size_ && words_ == o.words_; }
  size_t hash() const;

  // "{3,4,7}"
  std::string toString() const;

  template <class F>
  void forEach(F&& f) const {
    for (size_t w = 0; w < words_.size(); ++w) {
      uint64_t bits = words_[w];
      while (bits) {
        int b = std::countr_zero(bits);
        f(static_cast<NodeId>(w * 64 + b));
        bits &= bits - 1;
      }
    }
  }

 private:
  int32_t size_ = 0;
  std::vector<uint64_t> words_;
};

struct NodeSetHash {
  size_t operator()(const NodeSet& s) const { return s.hash(); }
};

}  // namespace collage
