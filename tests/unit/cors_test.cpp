// CORS policy (server/cors.h): simple-response headers, preflight answers and refusals, flag lists.
#include <gtest/gtest.h>

#include "common/error.h"
#include "server/cors.h"

namespace pagellm::server {
namespace {

TEST(Cors, DefaultAllowsEveryOriginWithAWildcard) {
  CorsPolicy p;
  EXPECT_EQ(p.response_headers("http://localhost:3000"), "Access-Control-Allow-Origin: *\r\n");
  EXPECT_EQ(p.response_headers(""), "");
  const auto pre = p.preflight("http://a.example", "POST", "content-type, authorization");
  EXPECT_EQ(pre.status, 200);
  EXPECT_NE(pre.headers.find("Access-Control-Allow-Methods: DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT"),
            std::string::npos);
  EXPECT_NE(pre.headers.find("Access-Control-Allow-Headers: content-type, authorization"), std::string::npos);
  EXPECT_NE(pre.headers.find("Access-Control-Max-Age: 600"), std::string::npos);
}

TEST(Cors, ListedOriginsAreEchoedAndOthersRefused) {
  CorsPolicy p;
  p.allowed_origins = {"https://app.example"};
  p.allowed_methods = {"GET", "POST"};
  p.allowed_headers = {"Content-Type"};
  EXPECT_EQ(p.response_headers("https://app.example"),
            "Access-Control-Allow-Origin: https://app.example\r\nVary: Origin\r\n");
  EXPECT_EQ(p.response_headers("https://evil.example"), "");
  EXPECT_EQ(p.preflight("https://evil.example", "POST", "").status, 400);
  EXPECT_EQ(p.preflight("https://app.example", "DELETE", "").body, "Disallowed CORS method");
  EXPECT_EQ(p.preflight("https://app.example", "POST", "content-type, x-secret").body,
            "Disallowed CORS headers");
  EXPECT_EQ(p.preflight("https://app.example", "POST", "CONTENT-TYPE").status, 200);
  // A header value cannot smuggle a new line into the response.
  EXPECT_EQ(p.response_headers("https://app.example\r\nSet-Cookie: x"), "");
}

TEST(Cors, CredentialsEchoTheOriginEvenWithAWildcard) {
  CorsPolicy p;
  p.allow_credentials = true;
  EXPECT_EQ(p.response_headers("http://x.example"),
            "Access-Control-Allow-Origin: http://x.example\r\nAccess-Control-Allow-Credentials: "
            "true\r\nVary: Origin\r\n");
}

TEST(Cors, FlagListsAreJsonOrCommaSeparated) {
  EXPECT_EQ(parse_cors_list("[\"https://a\", \"https://b\"]", "--allowed-origins"),
            (std::vector<std::string>{"https://a", "https://b"}));
  EXPECT_EQ(parse_cors_list("GET, POST", "--allowed-methods"), (std::vector<std::string>{"GET", "POST"}));
  EXPECT_THROW(parse_cors_list("[1, 2]", "--allowed-origins"), Error);
  EXPECT_THROW(parse_cors_list("[\"a", "--allowed-origins"), Error);
}

}  // namespace
}  // namespace pagellm::server
