// Stable hashes (the same across builds, machines and runs), for database
// keys and file identities. std::hash makes no such promise.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace collage {

// 64-bit FNV-1a.
uint64_t stableHash(std::string_view data);
// 16 hex digits of stableHash.
std::string stableHashHex(std::string_view data);
// SHA-256 of a file's bytes as 64 hex digits (a model's identity in a plan).
std::string sha256File(const std::string& path);
std::string sha256Hex(std::string_view data);

}  // namespace collage
