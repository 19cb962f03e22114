// Request parsing/validation and response building blocks of the OpenAI-compatible server.
#include "server/openai_protocol.h"

#include <gtest/gtest.h>

#include "server/auth.h"
#include "server/metrics.h"
#include "server/openai_serialize.h"
#include "server/sse.h"

namespace pagellm::server {
namespace {

using nlohmann::json;

ProtocolLimits limits() { return {}; }

CompletionRequest completion(const std::string& body) {
  return parse_completion_request(parse_json_object(body, limits()), limits());
}
ChatRequest chat(const std::string& body) { return parse_chat_request(parse_json_object(body, limits()), limits()); }

// Expects a 400 whose `param` names `param`.
template <typename Fn>
void expect_bad(Fn fn, const std::string& param) {
  try {
    fn();
    FAIL() << "expected ApiError for param " << param;
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400) << e.what();
    EXPECT_EQ(e.type, "invalid_request_error");
    EXPECT_EQ(e.param, param) << e.what();
  }
}

TEST(OpenAIProtocol, ParsesEveryCompletionParameter) {
  auto r = completion(R"({"model":"m","prompt":"hi","max_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":40,
    "min_p":0.1,"n":2,"best_of":3,"stop":["x","yz"],"stop_token_ids":[5],"seed":-3,"presence_penalty":0.5,
    "frequency_penalty":-0.5,"repetition_penalty":1.1,"logprobs":3,"echo":true,"ignore_eos":true,
    "min_tokens":2,"priority":4,"user":"u","some_unknown_field":{"a":1}})");
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "hi");
  EXPECT_TRUE(r.max_tokens_set);
  EXPECT_EQ(r.params.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.params.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.params.top_p, 0.9f);
  EXPECT_EQ(r.params.top_k, 40);
  EXPECT_FLOAT_EQ(r.params.min_p, 0.1f);
  EXPECT_EQ(r.params.n, 2);
  EXPECT_EQ(r.params.best_of, 3);
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"x", "yz"}));
  EXPECT_EQ(r.params.stop_token_ids, (std::vector<int32_t>{5}));
  EXPECT_EQ(r.params.seed, static_cast<uint64_t>(int64_t{-3}));
  EXPECT_FLOAT_EQ(r.params.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.params.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r.params.repetition_penalty, 1.1f);
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_EQ(r.params.logprobs, 3);
  EXPECT_EQ(r.params.prompt_logprobs, 3);  // echo + logprobs
  EXPECT_TRUE(r.echo);
  EXPECT_TRUE(r.params.ignore_eos);
  EXPECT_EQ(r.params.min_tokens, 2);
  EXPECT_EQ(r.options.priority, 4);
  EXPECT_EQ(r.user, "u");
  EXPECT_FALSE(r.stream);
  auto s = completion(R"({"prompt":"x","stream":true,"stream_options":{"include_usage":true}})");
  EXPECT_TRUE(s.stream);
  EXPECT_TRUE(s.include_usage);
}

TEST(OpenAIProtocol, PromptShapes) {
  EXPECT_EQ(completion(R"({"prompt":["a","b"]})").prompts.size(), 2u);
  auto ids = completion(R"({"prompt":[1,2,3]})");
  ASSERT_EQ(ids.prompts.size(), 1u);
  EXPECT_EQ(ids.prompts[0].token_ids, (std::vector<int32_t>{1, 2, 3}));
  auto lists = completion(R"({"prompt":[[1,2],[3]]})");
  ASSERT_EQ(lists.prompts.size(), 2u);
  EXPECT_EQ(lists.prompts[1].token_ids, (std::vector<int32_t>{3}));
  EXPECT_EQ(completion(R"({"prompt":"x","max_completion_tokens":3,"max_tokens":9})").params.max_tokens, 3);
  EXPECT_FALSE(completion(R"({"prompt":"x","max_tokens":null})").max_tokens_set);
  EXPECT_EQ(completion(R"({"prompt":"x","n":2.0})").params.n, 2);
}

TEST(OpenAIProtocol, RejectsMalformedCompletions) {
  auto bad = [](const std::string& body, const std::string& param) {
    expect_bad([&] { completion(body); }, param);
  };
  bad(R"({})", "prompt");
  bad(R"({"prompt":5})", "prompt");
  bad(R"({"prompt":[]})", "prompt");
  bad(R"({"prompt":[[]]})", "prompt");
  bad(R"({"prompt":[1,"a"]})", "prompt");
  bad(R"({"prompt":[-1]})", "prompt");
  bad(R"({"prompt":[1.5]})", "prompt");
  bad(R"({"prompt":[{"a":1}]})", "prompt");
  bad(R"({"prompt":"x","max_tokens":0})", "max_tokens");
  bad(R"({"prompt":"x","max_tokens":-5})", "max_tokens");
  bad(R"({"prompt":"x","max_tokens":"10"})", "max_tokens");
  bad(R"({"prompt":"x","max_tokens":1e30})", "max_tokens");
  bad(R"({"prompt":"x","max_tokens":99999999999999999999})", "max_tokens");
  bad(R"({"prompt":"x","temperature":-1})", "temperature");
  bad(R"({"prompt":"x","temperature":3})", "temperature");
  bad(R"({"prompt":"x","temperature":"hot"})", "temperature");
  bad(R"({"prompt":"x","top_p":0})", "top_p");
  bad(R"({"prompt":"x","top_p":1.5})", "top_p");
  bad(R"({"prompt":"x","top_k":-2})", "top_k");
  bad(R"({"prompt":"x","min_p":2})", "min_p");
  bad(R"({"prompt":"x","n":0})", "n");
  bad(R"({"prompt":"x","n":100000})", "n");
  bad(R"({"prompt":"x","n":2,"best_of":1})", "best_of");
  bad(R"({"prompt":"x","stop":5})", "stop");
  bad(R"({"prompt":"x","stop":[""]})", "stop");
  bad(R"({"prompt":"x","stop":[1]})", "stop");
  bad(R"({"prompt":"x","stop_token_ids":"a"})", "stop_token_ids");
  bad(R"({"prompt":"x","seed":"s"})", "seed");
  bad(R"({"prompt":"x","seed":9223372036854775808.0})", "seed");  // 2^63: no int64
  bad(R"({"prompt":"x","presence_penalty":2.5})", "presence_penalty");
  bad(R"({"prompt":"x","frequency_penalty":-3})", "frequency_penalty");
  bad(R"({"prompt":"x","repetition_penalty":0})", "repetition_penalty");
  bad(R"({"prompt":"x","logprobs":21})", "logprobs");
  bad(R"({"prompt":"x","logprobs":true})", "logprobs");
  bad(R"({"prompt":"x","echo":"yes"})", "echo");
  bad(R"({"prompt":"x","ignore_eos":1})", "ignore_eos");
  bad(R"({"prompt":"x","min_tokens":5,"max_tokens":2})", "min_tokens");
  bad(R"({"prompt":"x","priority":"high"})", "priority");
  bad(R"({"prompt":"x","user":7})", "user");
  bad(R"({"prompt":"x","model":7})", "model");
  bad(R"({"prompt":"x","stream":"true"})", "stream");
  bad(R"({"prompt":"x","stream_options":{"include_usage":true}})", "stream_options");
  bad(R"({"prompt":"x","stream":true,"stream_options":[]})", "stream_options");
  bad(R"({"prompt":"x","stream":true,"n":1,"best_of":2})", "best_of");
  bad(R"({"prompt":"x","suffix":"s"})", "suffix");
}

TEST(OpenAIProtocol, ChatMessages) {
  auto r = chat(R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},
    {"type":"text","text":"b"}]},{"role":"assistant","content":null,"tool_calls":[]},{"role":"tool","content":"t",
    "tool_call_id":"1"}],"logprobs":true,"top_logprobs":2,"max_completion_tokens":4})");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[1]["content"], "a\nb");
  EXPECT_TRUE(r.messages[2]["content"].is_null());
  EXPECT_TRUE(r.messages[2].contains("tool_calls"));
  EXPECT_EQ(r.messages[3]["tool_call_id"], "1");
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.params.logprobs, 2);
  EXPECT_EQ(r.params.max_tokens, 4);
  EXPECT_TRUE(r.add_generation_prompt);
  EXPECT_FALSE(chat(R"({"messages":[{"role":"user","content":"x"}]})").params.logprobs.has_value());
}

TEST(OpenAIProtocol, RejectsMalformedChat) {
  auto bad = [](const std::string& body, const std::string& param) { expect_bad([&] { chat(body); }, param); };
  bad(R"({})", "messages");
  bad(R"({"messages":[]})", "messages");
  bad(R"({"messages":"hi"})", "messages");
  bad(R"({"messages":[5]})", "messages[0]");
  bad(R"({"messages":[{"content":"x"}]})", "messages[0].role");
  bad(R"({"messages":[{"role":"wizard","content":"x"}]})", "messages[0].role");
  bad(R"({"messages":[{"role":"user"}]})", "messages[0].content");
  bad(R"({"messages":[{"role":"user","content":null}]})", "messages[0].content");
  bad(R"({"messages":[{"role":"user","content":7}]})", "messages[0].content");
  bad(R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})", "messages[0].content");
  bad(R"({"messages":[{"role":"user","content":[{"type":"text"}]}]})", "messages[0].content");
  bad(R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})", "top_logprobs");
  bad(R"({"messages":[{"role":"user","content":"x"}],"logprobs":3})", "logprobs");
  bad(R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":1})", "chat_template_kwargs");
  bad(R"({"messages":[{"role":"user","content":"x"}],"add_generation_prompt":true,"continue_final_message":true})",
      "continue_final_message");
}

TEST(OpenAIProtocol, JsonBodyChecks) {
  expect_bad([] { parse_json_object("{not json", limits()); }, "");
  expect_bad([] { parse_json_object("", limits()); }, "");
  expect_bad([] { parse_json_object("[1,2]", limits()); }, "");
  expect_bad([] { parse_json_object("\"str\"", limits()); }, "");
  expect_bad([] { parse_json_object("{\"prompt\":\"\xff\xfe\"}", limits()); }, "");
  // Deep nesting is refused before the parser recurses, even when the body is not valid JSON.
  expect_bad([] { parse_json_object(std::string(100000, '['), limits()); }, "");
  std::string ok_nested = "{\"a\":" + std::string(60, '[') + std::string(60, ']') + "}";
  EXPECT_NO_THROW(parse_json_object(ok_nested, limits()));
  // Brackets inside strings do not count.
  EXPECT_NO_THROW(parse_json_object("{\"a\":\"" + std::string(1000, '[') + "\\\"\"}", limits()));
}

TEST(OpenAIProtocol, TokenizeAndDetokenize) {
  auto t = parse_tokenize_request(json{{"prompt", "x"}, {"add_special_tokens", false}}, limits());
  EXPECT_EQ(t.prompt, "x");
  EXPECT_FALSE(t.add_special_tokens);
  auto m = parse_tokenize_request(json::parse(R"({"messages":[{"role":"user","content":"x"}]})"), limits());
  EXPECT_TRUE(m.messages.has_value());
  expect_bad([] { parse_tokenize_request(json::object(), limits()); }, "prompt");
  EXPECT_EQ(parse_detokenize_request(json{{"tokens", {1, 2}}}).tokens, (std::vector<int32_t>{1, 2}));
  expect_bad([] { parse_detokenize_request(json{{"tokens", "x"}}); }, "tokens");
  expect_bad([] { parse_detokenize_request(json{{"tokens", {-1}}}); }, "tokens");
  expect_bad([] { check_token_ids({1, 600}, 512, "prompt"); }, "prompt");
  EXPECT_NO_THROW(check_token_ids({0, 511}, 512, "prompt"));
}

TEST(OpenAIProtocol, ErrorObjects) {
  json e = error_body(ApiError(404, "no such model", "not_found_error", "model", "model_not_found"));
  EXPECT_EQ(e["error"]["message"], "no such model");
  EXPECT_EQ(e["error"]["type"], "not_found_error");
  EXPECT_EQ(e["error"]["param"], "model");
  EXPECT_EQ(e["error"]["code"], "model_not_found");
  json n = error_body(ApiError(400, "m", "invalid_request_error"));
  EXPECT_TRUE(n["error"]["param"].is_null());
  EXPECT_TRUE(n["error"]["code"].is_null());
  EXPECT_EQ(api_error_from(Error(ErrorKind::kInvalidArgument, "x")).status, 400);
  EXPECT_EQ(api_error_from(Error(ErrorKind::kUnsupported, "x")).status, 400);
  EXPECT_EQ(api_error_from(Error(ErrorKind::kNotFound, "x")).status, 404);
  EXPECT_EQ(api_error_from(Error(ErrorKind::kResourceExhausted, "x")).status, 503);
  EXPECT_EQ(api_error_from(Error(ErrorKind::kInternal, "x")).status, 500);
  // Invalid UTF-8 from user input never breaks serialization.
  EXPECT_NO_THROW(dump_json(error_body(ApiError(400, "bad \xff byte", "invalid_request_error"))));
}

TEST(OpenAISerialize, UsageFinishAndLogprobs) {
  json u = usage_json(5, 7, 3);
  EXPECT_EQ(u["total_tokens"], 12);
  EXPECT_EQ(u["prompt_tokens_details"]["cached_tokens"], 3);
  EXPECT_EQ(finish_reason_json(FinishReason::kStop), "stop");
  EXPECT_EQ(finish_reason_json(FinishReason::kLength), "length");
  EXPECT_TRUE(finish_reason_json(FinishReason::kNone).is_null());
  EXPECT_EQ(stop_reason_json(std::string("END"), std::nullopt), "END");
  EXPECT_EQ(stop_reason_json(std::nullopt, 7), 7);

  auto text = [](int32_t id) { return std::string(1, static_cast<char>('a' + id)); };
  std::vector<TokenLogprobs> lps = {{0, -0.1f, {{0, -0.1f}, {1, -2.0f}}},
                                    {2, -std::numeric_limits<float>::infinity(), {}}};
  size_t offset = 4;
  json c = completion_logprobs_json(lps, text, offset);
  EXPECT_EQ(c["tokens"], json({"a", "c"}));
  EXPECT_EQ(c["text_offset"], json({4, 5}));
  EXPECT_EQ(offset, 6u);
  EXPECT_DOUBLE_EQ(c["token_logprobs"][1].get<double>(), -9999.0);
  EXPECT_EQ(c["top_logprobs"][0].size(), 2u);
  json ch = chat_logprobs_json(lps, text);
  EXPECT_EQ(ch["content"][0]["token"], "a");
  EXPECT_EQ(ch["content"][0]["bytes"], json({97}));
  EXPECT_EQ(ch["content"][0]["top_logprobs"].size(), 2u);

  json echo = nullptr;
  size_t off2 = 0;
  std::vector<std::optional<TokenLogprobs>> prompt_lps = {std::nullopt, TokenLogprobs{1, -1.0f, {}}};
  std::vector<int32_t> prompt_ids = {0, 1};
  append_completion_logprobs(echo, prompt_lps, prompt_ids, text, off2);
  EXPECT_TRUE(echo["token_logprobs"][0].is_null());
  EXPECT_DOUBLE_EQ(echo["token_logprobs"][1].get<double>(), -1.0);
}

TEST(ServerSse, Framing) {
  EXPECT_EQ(sse_event("{\"a\":1}"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
}

TEST(ServerAuth, BearerKeys) {
  EXPECT_TRUE(authorized("", ""));
  EXPECT_TRUE(authorized("Bearer sk-1", "sk-1"));
  EXPECT_TRUE(authorized("bearer  sk-1 ", "sk-1"));
  EXPECT_FALSE(authorized("Bearer sk-2", "sk-1"));
  EXPECT_FALSE(authorized("Bearer sk-1x", "sk-1"));
  EXPECT_FALSE(authorized("Bearer sk-", "sk-1"));
  EXPECT_FALSE(authorized("Basic sk-1", "sk-1"));
  EXPECT_FALSE(authorized("", "sk-1"));
  EXPECT_TRUE(constant_time_equals("abc", "abc"));
  EXPECT_FALSE(constant_time_equals("abc", "abd"));
  EXPECT_FALSE(constant_time_equals("abc", "ab"));
  EXPECT_FALSE(constant_time_equals("", "a"));
}

TEST(ServerMetrics, PrometheusText) {
  Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.5);
  h.observe(5);
  std::string out;
  h.render(out, "x_seconds", "help", "m=\"a\"");
  EXPECT_NE(out.find("# TYPE x_seconds histogram"), std::string::npos);
  EXPECT_NE(out.find("x_seconds_bucket{m=\"a\",le=\"0.1\"} 1\n"), std::string::npos);
  EXPECT_NE(out.find("x_seconds_bucket{m=\"a\",le=\"1\"} 2\n"), std::string::npos);
  EXPECT_NE(out.find("x_seconds_bucket{m=\"a\",le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(out.find("x_seconds_count{m=\"a\"} 3\n"), std::string::npos);
  EXPECT_EQ(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");

  Metrics m("my\"model");
  EngineStats s;
  s.num_running = 3;
  s.kv_usage = 0.25;
  s.requests_finished_stop = 9;
  s.prompt_tokens = 100;
  m.set_engine_stats(s);
  m.observe_ttft(0.02);
  m.count_http(200);
  std::string text = m.render(5, 2);
  EXPECT_NE(text.find("pagellm:num_requests_running{model_name=\"my\\\"model\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("pagellm:kv_cache_usage_perc{model_name=\"my\\\"model\"} 0.25\n"), std::string::npos);
  EXPECT_NE(text.find("finished_reason=\"stop\"} 9\n"), std::string::npos);
  EXPECT_NE(text.find("pagellm:prompt_tokens_total{model_name=\"my\\\"model\"} 100\n"), std::string::npos);
  EXPECT_NE(text.find("pagellm:time_to_first_token_seconds_count{model_name=\"my\\\"model\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("pagellm:http_connections{model_name=\"my\\\"model\"} 5\n"), std::string::npos);
  EXPECT_NE(text.find("status=\"200\"} 1\n"), std::string::npos);
}

TEST(ServerMetrics, EverySeriesAlsoUnderVllmNames) {
  Metrics m("x");
  EngineStats s;
  s.num_running = 2;
  s.num_waiting = 7;
  s.kv_usage = 0.5;
  s.num_kv_blocks = 640;
  s.requests_finished_length = 4;
  s.prompt_tokens = 33;
  s.generation_tokens = 44;
  s.prefix_cache_queries = 10;
  s.prefix_cache_hits = 6;
  s.num_preemptions = 1;
  m.set_engine_stats(s);
  m.set_cache_config(16, "auto", true);
  m.observe_ttft(0.02);
  m.observe_itl(0.01);
  m.observe_e2e(1.5);
  m.observe_request_tokens(100, 20);
  const std::string text = m.render(1, 1);
  const std::string L = "{model_name=\"x\"}";
  for (const std::string& line :
       {"vllm:num_requests_running" + L + " 2\n", "vllm:num_requests_waiting" + L + " 7\n",
        "vllm:kv_cache_usage_perc" + L + " 0.5\n", "vllm:gpu_cache_usage_perc" + L + " 0.5\n",
        "vllm:prompt_tokens_total" + L + " 33\n", "vllm:generation_tokens_total" + L + " 44\n",
        "vllm:prefix_cache_queries_total" + L + " 10\n", "vllm:prefix_cache_hits_total" + L + " 6\n",
        "vllm:num_preemptions_total" + L + " 1\n",
        std::string("vllm:request_success_total{model_name=\"x\",finished_reason=\"length\"} 4\n"),
        "vllm:time_to_first_token_seconds_count" + L + " 1\n",
        "vllm:inter_token_latency_seconds_count" + L + " 1\n",
        "vllm:time_per_output_token_seconds_count" + L + " 1\n",
        "vllm:e2e_request_latency_seconds_sum" + L + " 1.5\n",
        "vllm:request_prompt_tokens_sum" + L + " 100\n",
        std::string("vllm:request_generation_tokens_bucket{model_name=\"x\",le=\"20\"} 1\n"),
        std::string("# TYPE vllm:e2e_request_latency_seconds histogram\n"),
        std::string("vllm:cache_config_info{block_size=\"16\",cache_dtype=\"auto\","
                    "enable_prefix_caching=\"True\",num_gpu_blocks=\"640\"} 1\n")})
    EXPECT_NE(text.find(line), std::string::npos) << line;
  // Series vLLM has no name for stay pagellm's only.
  EXPECT_EQ(text.find("vllm:http_connections"), std::string::npos);
  EXPECT_EQ(text.find("vllm:num_kv_blocks"), std::string::npos);
}

}  // namespace
}  // namespace pagellm::server
