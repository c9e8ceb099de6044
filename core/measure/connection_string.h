// ConnectionString: a PostgreSQL connection string, a postgresql:// URI or a
// key=value conninfo, read as libpq reads it (PQconninfoParse), for the one
// thing in it that must never be shown, saved or sent on: the password.
//
//   "postgresql://bob:p%40ss@db/team?sslmode=require"
//        shown()            postgresql://bob:***@db/team?sslmode=require   messages
//        withoutPassword()  postgresql://bob@db/team?sslmode=require      settings, job environments
//        redact(libpq's error text)  the text, the password as written and as
//                                    libpq decodes it, each replaced
//
// Passwords come from libpq's own means instead (~/.pgpass or PGPASSFILE,
// PGPASSWORD), which every process that connects reads by itself.
//
// The password is found in the text by libpq's rules (the userinfo ends at
// the first '@' before any '/'; a query's `password=`; a key=value
// `password` token, quoted or not), and every rewrite is checked by parsing
// it again with libpq: the other settings must read the same. When they do
// not, the string is rebuilt from libpq's own reading. A URI that libpq reads
// differently from how it looks (an '@' it does not take as the end of the
// user and password: a password holding '@' or '/' not percent-encoded, so
// that libpq takes part of it for the host, port or database) is
// ambiguous(): shown with everything before its last '@' masked, and refused
// by the store.
#pragma once

#include <string>
#include <vector>

namespace collage {

class ConnectionString {
 public:
  explicit ConnectionString(std::string text);

  const std::string& text() const { return text_; }
  // A URI ("postgresql://", "postgres://") or key=value (holds '='), as
  // libpq tells them from a plain database name; else nothing here applies.
  bool isConninfo() const { return uri_ || keyValue_; }
  bool isUri() const { return uri_; }
  // libpq reads it; otherwise parseError() says why, the password redacted.
  bool parses() const { return parses_; }
  const std::string& parseError() const { return parseError_; }
  bool ambiguous() const { return ambiguous_; }
  // It holds a password (as libpq reads it, or where it looks as if it
  // did: an unparseable or ambiguous string with anything in a password's place).
  bool hasPassword() const;

  // For messages: the text with the password as "***".
  const std::string& shown() const { return shown_; }
  // For what is kept or handed on: the text with the password removed, the
  // rest as libpq reads it. An unparseable or ambiguous string gives shown().
  const std::string& withoutPassword() const { return withoutPassword_; }
  // `message` (libpq's error text, which may quote the string or a part of
  // it) with the string and every form of its password replaced.
  std::string redact(std::string message) const;

  // The advice for a password found in a string that is kept or sent on.
  static const char* passwordAdvice();

 private:
  std::string text_;
  bool uri_ = false, keyValue_ = false, parses_ = false, ambiguous_ = false;
  std::string parseError_;
  std::string password_;              // as libpq reads it (parses_)
  std::vector<std::string> secrets_;  // every form of the password, longest first
  std::string shown_, withoutPassword_;
};

}  // namespace collage
