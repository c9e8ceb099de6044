// ConnectionString against libpq's own reading (PQconninfoParse): a password
// holding '@', '/' and '?', in every place and spelling libpq accepts, is
// never in what is shown, kept or sent on, nor in libpq's error text once
// redacted; the rest of the string reads the same.
#include "core/measure/connection_string.h"

#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <map>

namespace collage {
namespace {

constexpr const char* kSecret = "p@ss/w?rd";
constexpr const char* kEncoded = "p%40ss%2Fw%3Frd";

std::map<std::string, std::string> reading(const std::string& text) {
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(text.c_str(), &error);
  EXPECT_TRUE(options) << text << ": " << (error ? error : "");
  PQfreemem(error);
  std::map<std::string, std::string> out;
  for (PQconninfoOption* o = options; o && o->keyword; ++o)
    if (o->val) out[o->keyword] = o->val;
  PQconninfoFree(options);
  return out;
}

void expectNoSecret(const std::string& text, const std::string& where) {
  EXPECT_EQ(text.find(kSecret), std::string::npos) << where << ": " << text;
  EXPECT_EQ(text.find(kEncoded), std::string::npos) << where << ": " << text;
  EXPECT_EQ(text.find("ss/w"), std::string::npos) << where << ": " << text;
}

// Every spelling libpq reads as the password p@ss/w?rd.
const std::vector<std::string> kForms = {
    "postgresql://bob:p%40ss%2Fw%3Frd@db.example:5432/team?sslmode=require",
    "postgres://bob:p%40ss%2Fw%3Frd@/team?host=/run/pg",
    "postgresql://bob@db.example/team?password=p@ss/w?rd&sslmode=require",
    "postgresql://bob@db.example/team?sslmode=require&password=p%40ss%2Fw%3Frd",
    "postgresql://bob@db.example/team?password=p%40ss%2Fw%3Frd",
    "host=db.example user=bob password='p@ss/w?rd' dbname=team",
    "host=db.example password = p@ss/w?rd dbname=team",
    "password='p@ss/w?rd' host=db.example",
};

TEST(ConnectionString, APasswordInEveryFormIsFoundAsLibpqReadsIt) {
  for (const std::string& form : kForms) {
    SCOPED_TRACE(form);
    ASSERT_EQ(reading(form).at("password"), kSecret);  // libpq agrees it is the password
    const ConnectionString c(form);
    EXPECT_TRUE(c.parses());
    EXPECT_FALSE(c.ambiguous());
    EXPECT_TRUE(c.hasPassword());
    expectNoSecret(c.shown(), "shown");
    EXPECT_NE(c.shown().find("***"), std::string::npos) << c.shown();
    expectNoSecret(c.withoutPassword(), "withoutPassword");
    // Without the password, everything else reads the same.
    std::map<std::string, std::string> expected = reading(form), shown = reading(c.shown());
    expected.erase("password");
    EXPECT_EQ(reading(c.withoutPassword()), expected) << c.withoutPassword();
    EXPECT_EQ(shown.at("password"), "***");
    shown.erase("password");
    EXPECT_EQ(shown, expected);
    // libpq's text quoting the string, or the password either way.
    const std::string message = "could not connect with \"" + form + "\": password \"" + kSecret +
                                "\" (" + kEncoded + ") refused";
    expectNoSecret(c.redact(message), "redact");
    EXPECT_NE(c.redact(message).find(c.shown()), std::string::npos) << c.redact(message);
  }
}

TEST(ConnectionString, TheFormsAreKeptAsWritten) {
  EXPECT_EQ(ConnectionString("postgresql://u:p@h:5432/db").shown(), "postgresql://u:***@h:5432/db");
  EXPECT_EQ(ConnectionString("postgresql://u:p@h:5432/db").withoutPassword(), "postgresql://u@h:5432/db");
  EXPECT_EQ(ConnectionString("postgresql://u@h/db?password=p&sslmode=require").withoutPassword(),
            "postgresql://u@h/db?sslmode=require");
  EXPECT_EQ(ConnectionString("postgresql://u@h/db?sslmode=require&password=p").withoutPassword(),
            "postgresql://u@h/db?sslmode=require");
  EXPECT_EQ(ConnectionString("host=h password='a b' dbname=d").shown(), "host=h password=*** dbname=d");
  EXPECT_EQ(ConnectionString("host=h password='a b' dbname=d").withoutPassword(), "host=h dbname=d");
  // Nothing to hide: as it is.
  for (const char* plain : {"postgresql://h/db", "postgresql://u@/db?host=/run/pg", "host=h dbname=d",
                            "/home/me/measurements.sqlite"}) {
    const ConnectionString c(plain);
    EXPECT_FALSE(c.hasPassword()) << plain;
    EXPECT_EQ(c.shown(), plain);
    EXPECT_EQ(c.withoutPassword(), plain);
    EXPECT_EQ(c.redact(std::string("x ") + plain), std::string("x ") + plain);
  }
  EXPECT_FALSE(ConnectionString("/home/me/measurements.sqlite").isConninfo());
}

// A password with '@' or '/' as is: libpq takes part of it for the host,
// port or database, and would name that part in its errors.
TEST(ConnectionString, AURLThatLibpqReadsOtherwiseIsAmbiguousAndMasked) {
  for (const char* url : {"postgresql://bob:p@ss/w?rd@db.example/team",
                          "postgresql://bob:p@ss%2Fw%3Frd@db.example/team",
                          "postgresql://bob:pw/secret@db.example/team"}) {
    SCOPED_TRACE(url);
    const ConnectionString c(url);
    EXPECT_TRUE(c.ambiguous() || !c.parses());  // the first is not even a URL to libpq
    EXPECT_TRUE(c.hasPassword());
    EXPECT_EQ(c.shown(), "postgresql://***@db.example/team");
    EXPECT_EQ(c.withoutPassword(), c.shown());
    expectNoSecret(c.redact(std::string("bad: \"") + url + "\""), "redact");
    EXPECT_EQ(c.redact("invalid integer value \"pw\" for connection option \"port\"").find("\"pw\""),
              std::string::npos);
  }
}

// libpq's own message for a string it cannot read quotes the bad part: the password.
TEST(ConnectionString, AStringLibpqCannotReadHasItsErrorRedacted) {
  const ConnectionString uri("postgresql://bob:p%zz@ss/w?rd@db.example/team");
  EXPECT_FALSE(uri.parses());
  EXPECT_NE(uri.parseError().find("percent-encoded"), std::string::npos) << uri.parseError();
  EXPECT_EQ(uri.parseError().find("p%zz"), std::string::npos) << uri.parseError();
  EXPECT_EQ(uri.shown().find("p%zz"), std::string::npos) << uri.shown();
  // A misspelt parameter: libpq reads no password, but one is there.
  const ConnectionString misspelt("postgresql://bob@db.example/team?sslmode=require&passwrd=p@ss/w?rd");
  EXPECT_FALSE(misspelt.parses());
  expectNoSecret(misspelt.shown(), "shown");
  expectNoSecret(misspelt.parseError(), "parseError");
  // Nowhere a password could be: as it is, and libpq's message names the part.
  const ConnectionString typo("postgresql://db.example/team?sslmod=require");
  EXPECT_FALSE(typo.parses());
  EXPECT_EQ(typo.shown(), typo.text());
  EXPECT_NE(typo.parseError().find("\"sslmod\""), std::string::npos) << typo.parseError();
  const ConnectionString kv("host=db password='p@ss/w?rd");
  EXPECT_FALSE(kv.parses());
  expectNoSecret(kv.shown(), "shown");
  expectNoSecret(kv.redact("in \"host=db password='p@ss/w?rd\": p@ss/w?rd"), "redact");
}

}  // namespace
}  // namespace collage
