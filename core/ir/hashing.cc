#include "core/ir/hashing.h"

#include <openssl/evp.h>

#include <cstdio>
#include <fstream>
#include <vector>

#include "core/ir/error.h"

namespace collage {

uint64_t stableHash(std::string_view data) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : data) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string stableHashHex(std::string_view data) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(stableHash(data)));
  return buf;
}

namespace {

std::string toHex(const unsigned char* digest, unsigned len) {
  std::string out;
  char buf[3];
  for (unsigned i = 0; i < len; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", digest[i]);
    out += buf;
  }
  return out;
}

// OpenSSL's EVP digest over chunks.
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr); }
  ~Sha256() { EVP_MD_CTX_free(ctx_); }
  void update(const void* data, size_t len) { EVP_DigestUpdate(ctx_, data, len); }
  std::string hex() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    EVP_DigestFinal_ex(ctx_, digest, &len);
    return toHex(digest, len);
  }

 private:
  EVP_MD_CTX* ctx_;
};

}  // namespace

std::string sha256Hex(std::string_view data) {
  Sha256 s;
  s.update(data.data(), data.size());
  return s.hex();
}

std::string sha256File(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open");
  Sha256 s;
  std::vector<char> buf(1 << 16);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    s.update(buf.data(), static_cast<size_t>(in.gcount()));
  }
  return s.hex();
}

}  // namespace collage
