#include "core/measure/connection_string.h"

#include <libpq-fe.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>

namespace collage {
namespace {

constexpr size_t npos = std::string::npos;
using Options = std::map<std::string, std::string>;

// libpq's reading of `text`: the options it sets (PQconninfoParse gives
// only those, no defaults), or nullopt and libpq's message.
std::optional<Options> libpqReading(const std::string& text, std::string* error = nullptr) {
  char* message = nullptr;
  PQconninfoOption* options = PQconninfoParse(text.c_str(), &message);
  if (!options) {
    if (error) *error = message ? message : "out of memory";
    if (error && !error->empty() && error->back() == '\n') error->pop_back();
    PQfreemem(message);
    return std::nullopt;
  }
  Options out;
  for (PQconninfoOption* o = options; o->keyword; ++o)
    if (o->val) out[o->keyword] = o->val;
  PQconninfoFree(options);
  return out;
}

Options withoutKey(Options options, const std::string& key) {
  options.erase(key);
  return options;
}

// libpq's conninfo_uri_decode: %XX, never %00; nullopt where libpq refuses.
std::optional<std::string> percentDecoded(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(s[i + 2])))
      return std::nullopt;
    const char c = static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
    if (c == 0) return std::nullopt;
    out += c;
    i += 2;
  }
  return out;
}

// Every byte but RFC 3986's unreserved ones as %XX: how a URL would spell it.
std::string percentEncoded(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// Where a password sits in the text: the value (replaced by "***" to show
// it) and what goes with it (removed to drop it: the ":" before a URI's
// password, a query parameter and its separator, a key=value token).
struct PasswordSpan {
  size_t valueBegin = 0, valueEnd = 0;
  size_t removeBegin = 0, removeEnd = 0;
  std::string decoded;  // as libpq would read the value
};

// The text read by libpq's rules (fe-connect.c), keeping positions.
struct Reading {
  std::vector<PasswordSpan> spans;
  bool ambiguous = false;
  size_t maskBegin = npos, maskEnd = npos;  // URI: after "://" to its last '@'
};

size_t uriPrefixLength(const std::string& s) {
  for (const char* prefix : {"postgresql://", "postgres://"})
    if (s.rfind(prefix, 0) == 0) return std::char_traits<char>::length(prefix);
  return 0;
}

// conninfo_uri_parse_options: the userinfo is what comes before the first
// '@' met before any '/'; the password what follows its first ':'. Then the
// hosts (each with an optional port) up to '/' or '?', the database up to
// '?', and '&'-separated key=value parameters, all percent-decoded.
Reading readUri(const std::string& s, size_t start) {
  Reading r;
  size_t hostStart = start;
  const size_t first = s.find_first_of("@/", start);
  if (first != npos && s[first] == '@') {
    const size_t colon = s.find(':', start);
    if (colon != npos && colon < first) {
      PasswordSpan p;
      p.valueBegin = colon + 1;
      p.valueEnd = first;
      p.removeBegin = colon;
      p.removeEnd = first;
      p.decoded = percentDecoded(s.substr(colon + 1, first - colon - 1)).value_or("");
      r.spans.push_back(p);
    }
    hostStart = first + 1;
  }
  const size_t query = s.find('?', hostStart);
  const size_t queryOrEnd = query == npos ? s.size() : query;
  // An '@' that libpq does not take as the end of the userinfo: the user or
  // password held an '@' or '/' as is, and libpq reads part of it as the
  // host, port or database.
  if (s.find('@', hostStart) < queryOrEnd) r.ambiguous = true;
  // A port that is not a number, with an '@' after it, is the same mistake
  // (libpq's error would name the "port": part of the password).
  const size_t authorityEnd = std::min(queryOrEnd, s.find('/', hostStart));
  const std::string authority = s.substr(hostStart, authorityEnd - hostStart);
  size_t h = 0;
  while (h <= authority.size()) {
    size_t end = authority.find(',', h);
    if (end == npos) end = authority.size();
    std::string host = authority.substr(h, end - h);
    if (!host.empty() && host[0] == '[') host = host.substr(std::min(host.size(), host.find(']') + 1));
    if (const size_t colon = host.find(':'); colon != npos) {
      const std::string port = host.substr(colon + 1);
      if (port.find_first_not_of("0123456789") != npos && s.find('@', hostStart) != npos)
        r.ambiguous = true;
    }
    h = end + 1;
  }
  if (query != npos) {
    bool firstParam = true;
    for (size_t p = query + 1; p <= s.size();) {
      size_t end = s.find('&', p);
      if (end == npos) end = s.size();
      const size_t eq = s.find('=', p);
      if (eq != npos && eq < end &&
          percentDecoded(s.substr(p, eq - p)).value_or("") == "password") {
        PasswordSpan span;
        span.valueBegin = eq + 1;
        span.valueEnd = end;
        // The parameter and one separator: "?password=x&" keeps the '?',
        // "&password=x" goes whole, and a lone "?password=x" takes its '?'.
        const bool last = end == s.size();
        span.removeBegin = firstParam && !last ? p : p - 1;
        span.removeEnd = firstParam && !last ? end + 1 : end;
        span.decoded = percentDecoded(s.substr(eq + 1, end - eq - 1)).value_or("");
        r.spans.push_back(span);
      }
      firstParam = false;
      p = end + 1;
    }
  }
  if (const size_t at = s.rfind('@'); at != npos && at >= start) {
    r.maskBegin = start;
    r.maskEnd = at;
  }
  return r;
}

// conninfo_parse: `key = value` tokens apart by white space; a value is
// either 'quoted' or runs to white space, and a backslash takes the next
// character as it is. nullopt where libpq would refuse the string.
std::optional<Reading> readKeyValue(const std::string& s) {
  Reading r;
  const auto space = [&](size_t i) { return i < s.size() && std::isspace(static_cast<unsigned char>(s[i])); };
  size_t i = 0;
  for (;;) {
    while (space(i)) ++i;
    if (i >= s.size()) break;
    const size_t keyBegin = i;
    while (i < s.size() && s[i] != '=' && !space(i)) ++i;
    const std::string key = s.substr(keyBegin, i - keyBegin);
    while (space(i)) ++i;
    if (i >= s.size() || s[i] != '=') return std::nullopt;
    ++i;
    while (space(i)) ++i;
    const size_t valueBegin = i;
    std::string value;
    if (i < s.size() && s[i] == '\'') {
      ++i;
      for (;;) {
        if (i >= s.size()) return std::nullopt;  // unterminated
        if (s[i] == '\\') {
          if (++i < s.size()) value += s[i++];
        } else if (s[i] == '\'') {
          ++i;
          break;
        } else {
          value += s[i++];
        }
      }
    } else {
      while (i < s.size() && !space(i)) {
        if (s[i] == '\\') {
          if (++i < s.size()) value += s[i++];
        } else {
          value += s[i++];
        }
      }
    }
    if (key == "password") {
      PasswordSpan p;
      p.valueBegin = valueBegin;
      p.valueEnd = i;
      p.removeBegin = keyBegin;
      size_t end = i;
      while (space(end)) ++end;
      p.removeEnd = end;
      p.decoded = value;
      r.spans.push_back(p);
    }
  }
  return r;
}

// Each span's value replaced by `with` (or, `remove`, the span removed),
// back to front; nullopt where spans overlap.
std::optional<std::string> rewritten(std::string s, std::vector<PasswordSpan> spans, bool remove,
                                     const std::string& with = "***") {
  std::sort(spans.begin(), spans.end(),
            [](const PasswordSpan& a, const PasswordSpan& b) { return a.removeBegin > b.removeBegin; });
  size_t limit = s.size();
  for (const PasswordSpan& p : spans) {
    const size_t begin = remove ? p.removeBegin : p.valueBegin;
    const size_t end = remove ? p.removeEnd : p.valueEnd;
    if (end > limit || begin > end) return std::nullopt;
    s.replace(begin, end - begin, remove ? "" : with);
    limit = begin;
  }
  return s;
}

// libpq's options as a key=value conninfo, each value quoted, the password
// left out (or given as `password`).
std::string rebuilt(const Options& options, const std::string& password = "") {
  std::string out;
  for (const auto& [key, value] : options) {
    if (key == "password") continue;
    std::string quoted = "'";
    for (char c : value) {
      if (c == '\'' || c == '\\') quoted += '\\';
      quoted += c;
    }
    out += (out.empty() ? "" : " ") + key + "=" + quoted + "'";
  }
  if (!password.empty()) out += (out.empty() ? "" : " ") + std::string("password=") + password;
  return out;
}

std::string lowered(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Whether a URI libpq cannot read may hold a password somewhere: a
// userinfo ('@'), or the word, in any case, percent-encoded or not. One that
// cannot is shown as it is, so that libpq's message keeps the part it names.
bool mayHoldPassword(const std::string& text) {
  if (text.find('@') != npos || text.find('%') != npos) return true;
  return lowered(text).find("password") != npos;
}

void replaceAll(std::string& s, const std::string& what, const std::string& with) {
  if (what.empty()) return;
  for (size_t p = s.find(what); p != npos; p = s.find(what, p + with.size())) s.replace(p, what.size(), with);
}

}  // namespace

ConnectionString::ConnectionString(std::string text) : text_(std::move(text)) {
  const size_t prefix = uriPrefixLength(text_);
  uri_ = prefix > 0;
  keyValue_ = !uri_ && text_.find('=') != npos;
  shown_ = withoutPassword_ = text_;
  if (!isConninfo()) {
    parses_ = true;  // a database name: nothing in it to hide
    return;
  }
  const std::optional<Options> options = libpqReading(text_, &parseError_);
  parses_ = options.has_value();
  if (parses_ && options->count("password")) password_ = options->at("password");

  std::optional<Reading> reading = uri_ ? std::optional<Reading>(readUri(text_, prefix)) : readKeyValue(text_);
  ambiguous_ = reading && reading->ambiguous;
  if (reading) {
    for (const PasswordSpan& p : reading->spans) {
      const std::string raw = text_.substr(p.valueBegin, p.valueEnd - p.valueBegin);
      secrets_.push_back(raw);
      if (raw.size() >= 2 && raw.front() == '\'' && raw.back() == '\'')
        secrets_.push_back(raw.substr(1, raw.size() - 2));
      secrets_.push_back(p.decoded);
    }
  }
  secrets_.push_back(password_);
  secrets_.push_back(percentEncoded(password_));  // as a URL spells it

  if (parses_ && !ambiguous_) {
    // The rewrites, each read again by libpq: the other settings the same,
    // the password gone (or "***"); else libpq's own reading rebuilt.
    const Options others = withoutKey(*options, "password");
    const auto same = [&](const std::optional<std::string>& s, const char* password) {
      if (!s) return false;
      const std::optional<Options> again = libpqReading(*s);
      if (!again || withoutKey(*again, "password") != others) return false;
      return password ? again->count("password") && again->at("password") == password
                      : !again->count("password");
    };
    const std::vector<PasswordSpan> spans = reading ? reading->spans : std::vector<PasswordSpan>{};
    const std::optional<std::string> removed = rewritten(text_, spans, true);
    withoutPassword_ = same(removed, nullptr) ? *removed : rebuilt(*options);
    shown_ = withoutPassword_;
    if (options->count("password")) {
      const std::optional<std::string> masked = rewritten(text_, spans, false);
      shown_ = same(masked, "***") ? *masked : rebuilt(*options, "***");
    }
  } else if (uri_ && mayHoldPassword(text_)) {
    // libpq cannot read it, or reads it otherwise than it looks: which part
    // is the password is anyone's guess, so all of it is masked but a plain
    // host and database after the last '@'.
    std::string s = text_.substr(0, prefix) + "***";
    if (const size_t at = text_.rfind('@'); at != npos && at >= prefix) {
      const std::string before = text_.substr(prefix, at - prefix);
      secrets_.push_back(before);
      if (const size_t colon = before.find(':'); colon != npos) secrets_.push_back(before.substr(colon + 1));
      const std::string after = text_.substr(at + 1);
      if (after.find_first_of("?=&") == npos) s += "@" + after;
    }
    shown_ = withoutPassword_ = s;
  } else if (const size_t p = lowered(text_).find("password"); p != npos) {
    // A key=value string libpq cannot read: everything from "password" on.
    const std::string tail = text_.substr(p + 8);
    secrets_.push_back(tail);
    if (const size_t eq = tail.find('='); eq != npos) {
      std::string value = tail.substr(eq + 1);
      value.erase(0, value.find_first_not_of(" \t\n'"));
      secrets_.push_back(value.substr(0, value.find_first_of(" \t\n'")));
    }
    shown_ = withoutPassword_ = text_.substr(0, p) + "password=***";
  }
  secrets_.erase(std::remove(secrets_.begin(), secrets_.end(), std::string()), secrets_.end());
  std::sort(secrets_.begin(), secrets_.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  secrets_.erase(std::unique(secrets_.begin(), secrets_.end()), secrets_.end());
  parseError_ = redact(parseError_);
}

bool ConnectionString::hasPassword() const {
  if (!isConninfo()) return false;
  if (parses_ && !ambiguous_) return !password_.empty();
  return shown_ != text_;
}

std::string ConnectionString::redact(std::string message) const {
  if (!isConninfo()) return message;
  replaceAll(message, text_, shown_);
  // libpq quotes what it could not read ("invalid percent-encoded token:
  // \"p%zz\""): a quoted piece of the string that is not in what is shown
  // may be a piece of the password.
  for (size_t open = message.find('"'); open != npos;) {
    const size_t close = message.find('"', open + 1);
    if (close == npos) break;
    const std::string quoted = message.substr(open + 1, close - open - 1);
    if (!quoted.empty() && text_.find(quoted) != npos && shown_.find(quoted) == npos) {
      message.replace(open + 1, quoted.size(), "***");
      open = message.find('"', open + 5);
    } else {
      open = message.find('"', close + 1);
    }
  }
  for (const std::string& secret : secrets_) replaceAll(message, secret, "***");
  return message;
}

const char* ConnectionString::passwordAdvice() {
  return "libpq reads the password from ~/.pgpass (or the file PGPASSFILE names; "
         "host:port:database:user:password, mode 600) or from PGPASSWORD";
}

}  // namespace collage
