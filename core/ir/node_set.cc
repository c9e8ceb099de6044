#include "core/ir/node_set.h"

#include "core/ir/error.h"

namespace collage {

NodeSet NodeSet::of(int32_t capacity, const std::vector<NodeId>& nodes) {
  NodeSet s(capacity);
  for (NodeId n : nodes) {
    COLLAGE_CHECK(n >= 0 && n < capacity, "node index out of range");
    s.insert(n);
  }
  return s;
}

NodeSet NodeSet::all(int32_t capacity) {
  NodeSet s(capacity);
  for (NodeId n = 0; n < capacity; ++n) s.insert(n);
  return s;
}

int32_t NodeSet::count() const {
  int32_t c = 0;
  for (uint64_t w : words_) c += std::popcount(w);
  return c;
}

bool NodeSet::empty() const {
  for (uint64_t w : words_)
    if (w) return false;
  return true;
}

NodeId NodeSet::first() const { return next(-1); }

NodeId NodeSet::next(NodeId n) const {
  NodeId start = n + 1;
  if (start >= size_) return kNoNode;
  size_t w = static_cast<size_t>(start) >> 6;
  uint64_t bits = words_[w] & (~uint64_t{0} << (start & 63));
  while (true) {
    if (bits) return static_cast<NodeId>(w * 64 + std::countr_zero(bits));
    if (++w >= words_.size()) return kNoNode;
    bits = words_[w];
  }
}

NodeId NodeSet::firstMissing() const {
  for (size_t w = 0; w < words_.size(); ++w) {
    if (~words_[w]) {
      NodeId n = static_cast<NodeId>(w * 64 + std::countr_one(words_[w]));
      return n < size_ ? n : size_;
    }
  }
  return size_;
}

std::vector<NodeId> NodeSet::members() const {
  std::vector<NodeId> out;
  forEach([&](NodeId n) { out.push_back(n); });
  return out;
}

bool NodeSet::intersects(const NodeSet& o) const {
  for (size_t i = 0; i < words_.size() && i < o.words_.size(); ++i)
    if (words_[i] & o.words_[i]) return true;
  return false;
}

bool NodeSet::isSubsetOf(const NodeSet& o) const {
  for (size_t i = 0; i < words_.size(); ++i) {
    uint64_t other = i < o.words_.size() ? o.words_[i] : 0;
    if (words_[i] & ~other) return false;
  }
  return true;
}

NodeSet NodeSet::operator|(const NodeSet& o) const {
  NodeSet r = *this;
  r |= o;
  return r;
}

NodeSet& NodeSet::operator|=(const NodeSet& o) {
  COLLAGE_CHECK(size_ == o.size_, "NodeSet capacities differ");
  for (size_t i = 0; i < words_.size(); ++i) words_[i] |= o.words_[i];
  return *this;
}

NodeSet NodeSet::operator&(const NodeSet& o) const {
  COLLAGE_CHECK(size_ == o.size_, "NodeSet capacities differ");
  NodeSet r = *this;
  for (size_t i = 0; i < words_.size(); ++i) r.words_[i] &= o.words_[i];
  return r;
}

NodeSet NodeSet::operator-(const NodeSet& o) const {
  COLLAGE_CHECK(size_ == o.size_, "NodeSet capacities differ");
  NodeSet r = *this;
  for (size_t i = 0; i < words_.size(); ++i) r.words_[i] &= ~o.words_[i];
  return r;
}

size_t NodeSet::hash() const {
  uint64_t h = 1469598103934665603ull ^ static_cast<uint64_t>(size_);
  for (uint64_t w : words_) {
    h ^= w + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  }
  return static_cast<size_t>(h);
}

std::string NodeSet::toString() const {
  std::string s = "{";
  bool first = true;
  forEach([&](NodeId n) {
    if (!first) s += ",";
    first = false;
    s += std::to_string(n);
  });
  return s + "}";
}

}  // namespace collage
