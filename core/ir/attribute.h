// Node attributes, named as ONNX names them (kernel_shape, group, axes, ...).
// Defaults from the op registry are filled in at import, so a kernel or a
// pattern never has to know an ONNX default.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/ir/tensor.h"

namespace collage {

class Graph;

// A graph attribute (If's branches, Loop's and Scan's body) is an imported
// subgraph, shared (immutable) between the copies of a node. See graph.h
// ("Subgraphs") for how it reads values of the enclosing graph.
using Attribute = std::variant<int64_t, float, std::string, std::vector<int64_t>,
                               std::vector<float>, std::vector<std::string>, Tensor,
                               std::shared_ptr<const Graph>>;

enum class AttributeType { Int, Float, String, Ints, Floats, Strings, Tensor, Graph };

AttributeType attributeTypeOf(const Attribute& a);
std::string_view attributeTypeName(AttributeType t);
// "3", "[1,1]", "NOTSET", "0.5"; a graph prints as "graph(<digest>)", a
// digest of its whole content, so signatures that include it stay exact.
std::string attributeToString(const Attribute& a);

class AttributeMap {
 public:
  bool has(const std::string& name) const { return map_.count(name) != 0; }
  const Attribute* find(const std::string& name) const;
  void set(const std::string& name, Attribute value) { map_[name] = std::move(value); }
  void erase(const std::string& name) { map_.erase(name); }

  // Typed getters. Without a fallback a missing attribute or a wrong type throws Error.
  int64_t getInt(const std::string& name) const;
  int64_t getInt(const std::string& name, int64_t fallback) const;
  float getFloat(const std::string& name) const;
  float getFloat(const std::string& name, float fallback) const;
  std::string getString(const std::string& name) const;
  std::string getString(const std::string& name, const std::string& fallback) const;
  std::vector<int64_t> getInts(const std::string& name) const;
  std::vector<int64_t> getInts(const std::string& name, const std::vector<int64_t>& fallback) const;
  std::vector<float> getFloats(const std::string& name) const;
  std::vector<float> getFloats(const std::string& name, const std::vector<float>& fallback) const;
  const Tensor& getTensor(const std::string& name) const;
  const Graph& getGraph(const std::string& name) const;

  auto begin() const { return map_.begin(); }
  auto end() const { return map_.end(); }
  size_t size() const { return map_.size(); }
  // "{group=1, kernel_shape=[3,3]}"
  std::string toString() const;

 private:
  std::map<std::string, Attribute> map_;
};

}  // namespace collage
