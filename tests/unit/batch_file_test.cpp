// The OpenAI batch file of `pagellm run-batch` (server/batch_file.h): parsing with one-line errors
// naming the line, the requests refused before they run, and the output lines' shape (vLLM's).
#include <gtest/gtest.h>

#include "common/error.h"
#include "server/batch_file.h"

namespace pagellm::server {
namespace {

using nlohmann::json;

std::string error_of(std::string_view text) {
  try {
    parse_batch_file(text, "batch.jsonl");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    return e.what();
  }
  return "";
}

TEST(BatchFile, ParsesRequestsSkippingBlankLines) {
  const auto r = parse_batch_file(
      "{\"custom_id\": \"a\", \"method\": \"POST\", \"url\": \"/v1/completions\", \"body\": "
      "{\"prompt\": \"x\"}}\r\n\n   \n{\"custom_id\": \"b\", \"method\": \"POST\", \"url\": "
      "\"/v1/chat/completions\", \"body\": {\"messages\": []}, \"extra\": 1}",
      "batch.jsonl");
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].custom_id, "a");
  EXPECT_EQ(r[0].line, 1);
  EXPECT_EQ(r[0].body.at("prompt"), "x");
  EXPECT_EQ(r[1].custom_id, "b");
  EXPECT_EQ(r[1].line, 4);
  EXPECT_EQ(r[1].url, "/v1/chat/completions");
}

TEST(BatchFile, BadLinesFailInOneLineNamingTheLine) {
  const std::string ok =
      "{\"custom_id\": \"a\", \"method\": \"POST\", \"url\": \"/v1/completions\", \"body\": {}}\n";
  EXPECT_NE(error_of(ok + "{not json").find("batch.jsonl:2: not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("[1, 2]").find("batch.jsonl:1: a request must be a JSON object"),
            std::string::npos);
  EXPECT_NE(error_of("{\"method\": \"POST\", \"url\": \"/v1/completions\", \"body\": {}}")
                .find("no \"custom_id\" field"),
            std::string::npos);
  EXPECT_NE(error_of("{\"custom_id\": 7, \"method\": \"POST\", \"url\": \"u\", \"body\": {}}")
                .find("\"custom_id\" must be a string"),
            std::string::npos);
  EXPECT_NE(error_of("{\"custom_id\": \"a\", \"method\": \"POST\", \"url\": \"u\"}")
                .find("no \"body\" field"),
            std::string::npos);
  EXPECT_NE(error_of("{\"custom_id\": \"a\", \"method\": \"POST\", \"url\": \"u\", \"body\": 3}")
                .find("\"body\" must be a JSON object"),
            std::string::npos);
  EXPECT_NE(error_of(ok + ok).find("batch.jsonl:2: custom_id 'a' is used by an earlier line"),
            std::string::npos);
  EXPECT_NE(error_of("\n  \n").find("batch.jsonl: no requests"), std::string::npos);
  EXPECT_EQ(error_of(ok), "");
}

BatchRequestLine request(const std::string& method, const std::string& url, json body) {
  return {1, "id-1", method, url, std::move(body)};
}

TEST(BatchFile, RefusesOtherMethodsEndpointsAndStreams) {
  EXPECT_EQ(batch_request_refusal(request("POST", "/v1/completions", json::object())), "");
  EXPECT_EQ(batch_request_refusal(request("POST", "/v1/embeddings", json::object())), "");
  EXPECT_EQ(batch_request_refusal(request("POST", "/v1/chat/completions", {{"stream", false}})),
            "");
  EXPECT_NE(batch_request_refusal(request("GET", "/v1/completions", json::object())).find("GET"),
            std::string::npos);
  EXPECT_NE(batch_request_refusal(request("POST", "/v1/models", json::object())).find("/v1/models"),
            std::string::npos);
  EXPECT_EQ(batch_request_refusal(request("POST", "/v1/completions", {{"stream", true}})),
            "Request must not be sent in stream mode");
}

TEST(BatchFile, OutputLinesCarryTheBodyOrTheError) {
  const BatchRequestLine r = request("POST", "/v1/completions", json::object());
  const json ok = batch_output(r, 200, {{"object", "text_completion"}});
  EXPECT_EQ(ok.at("custom_id"), "id-1");
  EXPECT_TRUE(ok.at("id").get<std::string>().starts_with("vllm-"));
  EXPECT_EQ(ok.at("response").at("status_code"), 200);
  EXPECT_TRUE(ok.at("response").at("request_id").get<std::string>().starts_with("vllm-batch-"));
  EXPECT_EQ(ok.at("response").at("body").at("object"), "text_completion");
  EXPECT_TRUE(ok.at("error").is_null());
  const json bad = batch_output(r, 404, {{"error", {{"message", "no such model"}}}});
  EXPECT_EQ(bad.at("response").at("status_code"), 404);
  EXPECT_TRUE(bad.at("response").at("body").is_null());
  EXPECT_EQ(bad.at("error").at("error").at("message"), "no such model");
  const json refused = batch_error_output(r, "Request must not be sent in stream mode");
  EXPECT_EQ(refused.at("response").at("status_code"), 400);
  EXPECT_EQ(refused.at("error"), "Request must not be sent in stream mode");
  EXPECT_NE(ok.at("id"), refused.at("id"));
}

}  // namespace
}  // namespace pagellm::server
