#include "core/ir/attribute.h"

#include <sstream>

#include "core/ir/error.h"
#include "core/ir/graph.h"

namespace collage {

AttributeType attributeTypeOf(const Attribute& a) { return static_cast<AttributeType>(a.index()); }

std::string_view attributeTypeName(AttributeType t) {
  switch (t) {
    case AttributeType::Int: return "int";
    case AttributeType::Float: return "float";
    case AttributeType::String: return "string";
    case AttributeType::Ints: return "ints";
    case AttributeType::Floats: return "floats";
    case AttributeType::Strings: return "strings";
    case AttributeType::Tensor: return "tensor";
    case AttributeType::Graph: return "graph";
  }
  return "?";
}

namespace {
template <class T>
std::string listToString(const std::vector<T>& v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  os << "]";
  return os.str();
}
}  // namespace

std::string attributeToString(const Attribute& a) {
  std::ostringstream os;
  switch (attributeTypeOf(a)) {
    case AttributeType::Int: os << std::get<int64_t>(a); break;
    case AttributeType::Float: os << std::get<float>(a); break;
    case AttributeType::String: os << std::get<std::string>(a); break;
    case AttributeType::Ints: return listToString(std::get<std::vector<int64_t>>(a));
    case AttributeType::Floats: return listToString(std::get<std::vector<float>>(a));
    case AttributeType::Strings: return listToString(std::get<std::vector<std::string>>(a));
    case AttributeType::Tensor: return std::get<Tensor>(a).toString();
    case AttributeType::Graph: {
      const auto& g = std::get<std::shared_ptr<const Graph>>(a);
      return g ? "graph(" + g->digest() + ")" : std::string("graph(null)");
    }
  }
  return os.str();
}

const Attribute* AttributeMap::find(const std::string& name) const {
  auto it = map_.find(name);
  return it == map_.end() ? nullptr : &it->second;
}

namespace {
template <class T>
const T& getAs(const AttributeMap& m, const std::string& name, AttributeType want) {
  const Attribute* a = m.find(name);
  if (!a) throw Error("missing attribute '" + name + "'");
  if (const T* v = std::get_if<T>(a)) return *v;
  throw Error("attribute '" + name + "' is " +
              std::string(attributeTypeName(attributeTypeOf(*a))) + ", expected " +
              std::string(attributeTypeName(want)));
}
}  // namespace

int64_t AttributeMap::getInt(const std::string& n) const {
  return getAs<int64_t>(*this, n, AttributeType::Int);
}
int64_t AttributeMap::getInt(const std::string& n, int64_t fb) const {
  return has(n) ? getInt(n) : fb;
}
float AttributeMap::getFloat(const std::string& n) const {
  const Attribute* a = find(n);
  if (a && std::holds_alternative<int64_t>(*a)) return static_cast<float>(std::get<int64_t>(*a));
  return getAs<float>(*this, n, AttributeType::Float);
}
float AttributeMap::getFloat(const std::string& n, float fb) const {
  return has(n) ? getFloat(n) : fb;
}
std::string AttributeMap::getString(const std::string& n) const {
  return getAs<std::string>(*this, n, AttributeType::String);
}
std::string AttributeMap::getString(const std::string& n, const std::string& fb) const {
  return has(n) ? getString(n) : fb;
}
std::vector<int64_t> AttributeMap::getInts(const std::string& n) const {
  return getAs<std::vector<int64_t>>(*this, n, AttributeType::Ints);
}
std::vector<int64_t> AttributeMap::getInts(const std::string& n,
                                           const std::vector<int64_t>& fb) const {
  return has(n) ? getInts(n) : fb;
}
std::vector<float> AttributeMap::getFloats(const std::string& n) const {
  return getAs<std::vector<float>>(*this, n, AttributeType::Floats);
}
std::vector<float> AttributeMap::getFloats(const std::string& n,
                                           const std::vector<float>& fb) const {
  return has(n) ? getFloats(n) : fb;
}
const Tensor& AttributeMap::getTensor(const std::string& n) const {
  return getAs<Tensor>(*this, n, AttributeType::Tensor);
}

const Graph& AttributeMap::getGraph(const std::string& n) const {
  const auto& g = getAs<std::shared_ptr<const Graph>>(*this, n, AttributeType::Graph);
  if (!g) throw Error("attribute '" + n + "' holds no graph");
  return *g;
}

std::string AttributeMap::toString() const {
  std::string s = "{";
  bool first = true;
  for (const auto& [k, v] : map_) {
    if (!first) s += ", ";
    first = false;
    s += k + "=" + attributeToString(v);
  }
  return s + "}";
}

}  // namespace collage
