#include "server/generation.h"

#include <atomic>
#include <random>

#include "server/openai_serialize.h"
#include "server/routes.h"
#include "server/sse.h"

namespace pagellm::server {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

std::string make_request_id(const std::string& prefix) {
  // Unique per process (counter) and unguessable across restarts (random seed).
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}() * 0x9E3779B97F4A7C15ull ^ std::random_device{}();
  uint64_t x = (counter.fetch_add(1) + 1) * 0xBF58476D1CE4E5B9ull ^ salt;
  x ^= x >> 31;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%08llx", static_cast<unsigned long long>(x),
                static_cast<unsigned long long>(counter.load() & 0xffffffffull));
  return prefix + buf;
}

GenerationCall::GenerationCall(ApiServer& server, std::shared_ptr<ResponseWriter> writer, HttpRequest request,
                               Clock::time_point start, PreparedRequest prepared)
    : server_(server),
      writer_(std::move(writer)),
      request_(std::move(request)),
      start_(start),
      prepared_(std::move(prepared)),
      id_(make_request_id(prepared_.kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-")),
      created_(std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count()) {
  const int n = prepared_.params.n;
  choices_.resize(prepared_.prompts.size() * static_cast<size_t>(n));
  subs_.resize(prepared_.prompts.size());
  for (size_t i = 0; i < subs_.size(); ++i) {
    subs_[i].engine_id = subs_.size() == 1 ? id_ : id_ + "-" + std::to_string(i);
    subs_[i].last_output = start_;
  }
}

GenerationCall::~GenerationCall() = default;

void GenerationCall::start() {
  const int per_prompt = prepared_.params.best_of.value_or(prepared_.params.n);
  num_seqs_ = per_prompt * static_cast<int>(prepared_.prompts.size());
  if (!server_.try_admit(num_seqs_)) {
    num_seqs_ = 0;
    server_.send_error(request_, *writer_,
                       ApiError(429, "the server's request queue is full; retry later", "rate_limit_exceeded", "",
                                "queue_full"),
                       start_);
    done_ = true;
    return;
  }
  auto self = shared_from_this();
  writer_->on_disconnect([self] { self->on_disconnect(); });
  if (prepared_.stream) {
    writer_->start_stream(200, "text/event-stream");
    streaming_started_ = true;
  }
  for (size_t i = 0; i < subs_.size(); ++i) {
    // Runs on the engine thread: hand the delta to this connection's strand and return at once.
    OutputCallback callback = [self, i](RequestOutput&& out) {
      auto shared = std::make_shared<RequestOutput>(std::move(out));
      self->writer_->post([self, i, shared] { self->on_output(i, std::move(*shared)); });
    };
    try {
      server_.engine().add_request(subs_[i].engine_id, PromptInput::from_ids(prepared_.prompts[i].ids),
                                   prepared_.params, std::move(callback), prepared_.options);
    } catch (const Error& e) {
      // Nothing was queued for this prompt; drop the ones that were.
      for (size_t j = 0; j < i; ++j) server_.engine().abort_request(subs_[j].engine_id);
      for (size_t j = i; j < subs_.size(); ++j) subs_[j].finished = true;
      fail(api_error_from(e));
      return;
    }
  }
  // Chat streams open with the assistant role at once; an echo waits for the prompt logprobs that
  // come with the first output when logprobs were asked for.
  if (prepared_.stream && (prepared_.kind == ApiKind::kChat || (prepared_.echo && !prepared_.logprobs))) {
    for (size_t c = 0; c < choices_.size(); ++c) stream_prefix(c);
  }
}

void GenerationCall::on_output(size_t sub_index, RequestOutput&& out) {
  Sub& sub = subs_[sub_index];
  if (sub.finished) return;
  if (out.finished) sub.finished = true;
  if (done_) return;  // already answered (disconnect or failure): only bookkeeping above
  const auto now = Clock::now();
  sub.num_cached_tokens = std::max(sub.num_cached_tokens, out.num_cached_tokens);
  if (!out.prompt_logprobs.empty()) sub.prompt_logprobs = std::move(out.prompt_logprobs);
  bool any_tokens = false;
  const size_t n = static_cast<size_t>(prepared_.params.n);
  for (const CompletionOutput& co : out.outputs) {
    if (co.index < 0 || static_cast<size_t>(co.index) >= n) continue;
    const size_t c = sub_index * n + static_cast<size_t>(co.index);
    Choice& choice = choices_[c];
    any_tokens |= !co.token_ids.empty();
    choice.text += co.text;
    choice.token_ids.insert(choice.token_ids.end(), co.token_ids.begin(), co.token_ids.end());
    if (prepared_.logprobs) choice.logprobs.insert(choice.logprobs.end(), co.logprobs.begin(), co.logprobs.end());
    if (co.finish_reason != FinishReason::kNone) {
      choice.finish = co.finish_reason;
      choice.stop_string = co.stop_reason;
      choice.stop_token = co.stop_token;
    }
    if (prepared_.stream) stream_delta(c, co);
  }
  if (any_tokens) {
    if (!first_token_seen_) {
      first_token_seen_ = true;
      server_.metrics().observe_ttft(seconds_since(start_));
    } else {
      server_.metrics().observe_itl(std::chrono::duration<double>(now - sub.last_output).count());
    }
    sub.last_output = now;
  }
  if (out.finished && (!out.error.empty() || std::any_of(out.outputs.begin(), out.outputs.end(), [](const auto& o) {
                         return o.finish_reason == FinishReason::kError;
                       }))) {
    return fail(ApiError(500, "the engine failed this request: " + (out.error.empty() ? "unknown error" : out.error),
                         "internal_error"));
  }
  if (std::all_of(subs_.begin(), subs_.end(), [](const Sub& s) { return s.finished; })) finish();
}

// The token of a logprobs entry: its text, or "token_id:N" under --return-tokens-as-token-ids
// (tokens that are not valid UTF-8 on their own stay identifiable).
std::string GenerationCall::token_text(int32_t id) const {
  if (server_.config().return_tokens_as_token_ids) return "token_id:" + std::to_string(id);
  return server_.token_text(id);
}

json GenerationCall::chunk_base() const {
  return json{{"id", id_},
              {"object", prepared_.kind == ApiKind::kChat ? "chat.completion.chunk" : "text_completion"},
              {"created", created_},
              {"model", server_.model_name()}};
}

void GenerationCall::stream_prefix(size_t c) {
  Choice& choice = choices_[c];
  if (choice.prefix_sent) return;
  choice.prefix_sent = true;
  json chunk = chunk_base();
  if (prepared_.kind == ApiKind::kChat) {
    chunk["choices"] = json::array(
        {{{"index", c}, {"delta", {{"role", server_.config().response_role}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
  } else {
    if (!prepared_.echo) return;  // completions have no preamble without echo
    const size_t prompt = c / static_cast<size_t>(prepared_.params.n);
    const auto& p = prepared_.prompts[prompt];
    json lp = nullptr;
    if (prepared_.logprobs) {
      append_completion_logprobs(lp, subs_[prompt].prompt_logprobs, p.ids,
                                 [this](int32_t id) { return token_text(id); }, choice.text_offset);
    } else {
      choice.text_offset = p.text.size();
    }
    chunk["choices"] = json::array(
        {{{"index", c}, {"text", p.text}, {"logprobs", lp}, {"finish_reason", nullptr}, {"stop_reason", nullptr}}});
  }
  writer_->write_chunk(sse_event(dump_json(chunk)));
}

// The chat delta of `delta`'s text: {"content"} as it is, or with chat output parsing what the
// choice's parser makes of it ({"reasoning_content", "content", "tool_calls"}, any of them; empty
// while it holds text back). `tool_calls`: the choice has made tool calls.
json GenerationCall::chat_delta_json(Choice& choice, const CompletionOutput& delta, bool& tool_calls) {
  const bool finished = delta.finish_reason != FinishReason::kNone;
  if (!prepared_.chat_output.active()) {
    return delta.text.empty() && finished ? json::object() : json{{"content", delta.text}};
  }
  if (!choice.parser) choice.parser = std::make_shared<ChatOutputStream>(prepared_.chat_output);
  const ChatDelta d = choice.parser->push(delta.text, finished);
  tool_calls = choice.parser->has_tool_calls();
  json out = json::object();
  if (!d.reasoning.empty()) out["reasoning_content"] = d.reasoning;
  if (!d.content.empty()) out["content"] = d.content;
  if (!d.tool_calls.empty()) {
    json calls = json::array();
    for (const ToolCallDelta& t : d.tool_calls) {
      json call = {{"index", t.index}};
      if (t.first) {
        call["id"] = t.id;
        call["type"] = "function";
        call["function"] = {{"name", t.name}, {"arguments", t.arguments}};
      } else {
        call["function"] = {{"arguments", t.arguments}};
      }
      calls.push_back(std::move(call));
    }
    out["tool_calls"] = std::move(calls);
  }
  return out;
}

void GenerationCall::stream_delta(size_t c, const CompletionOutput& delta) {
  Choice& choice = choices_[c];
  const bool finished = delta.finish_reason != FinishReason::kNone;
  const bool new_logprobs = prepared_.logprobs && !delta.token_ids.empty();
  json chat_delta;
  bool tool_calls = false;
  if (prepared_.kind == ApiKind::kChat) {
    chat_delta = chat_delta_json(choice, delta, tool_calls);
    if (chat_delta.empty() && !finished && !new_logprobs) return;
  } else if (delta.text.empty() && !finished && !new_logprobs) {
    return;
  }
  // Echo needs the prompt logprobs, which arrive with the first output: send the prefix now.
  stream_prefix(c);
  json lp = nullptr;
  auto text_of = [this](int32_t id) { return token_text(id); };
  if (prepared_.logprobs) {
    if (prepared_.kind == ApiKind::kChat) lp = chat_logprobs_json(delta.logprobs, text_of);
    else lp = completion_logprobs_json(delta.logprobs, text_of, choice.text_offset);
  }
  json entry = {{"index", c}, {"logprobs", std::move(lp)}, {"finish_reason", finish_reason_json(delta.finish_reason)}};
  if (tool_calls && delta.finish_reason == FinishReason::kStop) entry["finish_reason"] = "tool_calls";
  if (prepared_.kind == ApiKind::kChat) {
    entry["delta"] = std::move(chat_delta);
  } else {
    entry["text"] = delta.text;
  }
  if (finished) entry["stop_reason"] = stop_reason_json(delta.stop_reason, delta.stop_token);
  json chunk = chunk_base();
  chunk["choices"] = json::array({std::move(entry)});
  if (prepared_.include_usage && prepared_.continuous_usage) {
    chunk["usage"] = usage_json(num_prompt_tokens(), num_completion_tokens(), num_cached_tokens());
  }
  writer_->write_chunk(sse_event(dump_json(chunk)));
}

int64_t GenerationCall::num_prompt_tokens() const {
  int64_t n = 0;
  for (const auto& p : prepared_.prompts) n += static_cast<int64_t>(p.ids.size());
  return n;
}

int64_t GenerationCall::num_completion_tokens() const {
  int64_t n = 0;
  for (const auto& c : choices_) n += static_cast<int64_t>(c.token_ids.size());
  return n;
}

int64_t GenerationCall::num_cached_tokens() const {
  int64_t n = 0;
  for (const auto& s : subs_) n += s.num_cached_tokens;
  return n;
}

json GenerationCall::choice_json(size_t c) const {
  const Choice& choice = choices_[c];
  auto text_of = [this](int32_t id) { return token_text(id); };
  json out = {{"index", c},
              {"finish_reason", finish_reason_json(choice.finish)},
              {"stop_reason", stop_reason_json(choice.stop_string, choice.stop_token)}};
  if (prepared_.kind == ApiKind::kChat) {
    out["message"] = chat_message_json(choice);
    if (out["message"].contains("tool_calls") && choice.finish == FinishReason::kStop) {
      out["finish_reason"] = "tool_calls";
    }
    out["logprobs"] = prepared_.logprobs ? chat_logprobs_json(choice.logprobs, text_of) : json(nullptr);
    return out;
  }
  const size_t prompt = c / static_cast<size_t>(prepared_.params.n);
  std::string text = prepared_.echo ? prepared_.prompts[prompt].text + choice.text : choice.text;
  json lp = nullptr;
  if (prepared_.logprobs) {
    size_t offset = 0;
    if (prepared_.echo) {
      append_completion_logprobs(lp, subs_[prompt].prompt_logprobs, prepared_.prompts[prompt].ids, text_of, offset);
    }
    json gen = completion_logprobs_json(choice.logprobs, text_of, offset);
    if (lp.is_null()) {
      lp = std::move(gen);
    } else {
      for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
        for (auto& v : gen[key]) lp[key].push_back(std::move(v));
      }
    }
  }
  out["text"] = std::move(text);
  out["logprobs"] = std::move(lp);
  return out;
}

// A finished chat choice's message: its text, or what chat output parsing makes of it.
json GenerationCall::chat_message_json(const Choice& choice) const {
  json message = {{"role", server_.config().response_role}, {"content", choice.text}};
  if (!prepared_.chat_output.active()) return message;
  ChatMessage m = parse_chat_output(prepared_.chat_output, choice.text);
  message["content"] = m.content ? json(std::move(*m.content)) : json(nullptr);
  if (m.reasoning) message["reasoning_content"] = std::move(*m.reasoning);
  if (!m.tool_calls.empty()) {
    json calls = json::array();
    for (ToolCall& t : m.tool_calls) {
      calls.push_back({{"id", std::move(t.id)},
                       {"type", "function"},
                       {"function", {{"name", std::move(t.name)}, {"arguments", std::move(t.arguments)}}}});
    }
    message["tool_calls"] = std::move(calls);
  }
  return message;
}

json GenerationCall::full_response() const {
  json body = {{"id", id_},
               {"object", prepared_.kind == ApiKind::kChat ? "chat.completion" : "text_completion"},
               {"created", created_},
               {"model", server_.model_name()}};
  json choices = json::array();
  for (size_t c = 0; c < choices_.size(); ++c) choices.push_back(choice_json(c));
  body["choices"] = std::move(choices);
  body["usage"] = usage_json(num_prompt_tokens(), num_completion_tokens(), num_cached_tokens());
  return body;
}

void GenerationCall::finish() {
  if (done_) return;
  done_ = true;
  server_.metrics().observe_e2e(seconds_since(start_));
  server_.metrics().observe_request_tokens(num_prompt_tokens(), num_completion_tokens());
  if (prepared_.stream) {
    if (prepared_.include_usage) {
      json chunk = chunk_base();
      chunk["choices"] = json::array();
      chunk["usage"] = usage_json(num_prompt_tokens(), num_completion_tokens(), num_cached_tokens());
      writer_->write_chunk(sse_event(dump_json(chunk)));
    }
    writer_->write_chunk(sse_done());
    writer_->end_stream();
  } else {
    writer_->respond(200, "application/json", dump_json(full_response()));
  }
  release(200);
}

void GenerationCall::fail(const ApiError& error) {
  if (done_) return;
  done_ = true;
  abort_unfinished();
  if (streaming_started_) {
    // Headers (200) are gone already: the error travels as a final event, then [DONE].
    writer_->write_chunk(sse_event(dump_json(error_body(error))));
    writer_->write_chunk(sse_done());
    writer_->end_stream();
    release(error.status);
  } else {
    server_.send_error(request_, *writer_, error, start_);
    release(-1);  // send_error logged it
  }
}

void GenerationCall::on_disconnect() {
  if (done_) return;
  done_ = true;
  abort_unfinished();
  release(499);  // nginx's "client closed request"
}

void GenerationCall::abort_unfinished() {
  for (const Sub& s : subs_) {
    if (!s.finished) server_.engine().abort_request(s.engine_id);
  }
}

void GenerationCall::release(int status) {
  server_.release(num_seqs_);
  num_seqs_ = 0;
  if (status < 0) return;
  server_.metrics().count_http(status);
  std::string prompt_log;
  if (server_.config().log_prompts) {
    for (const auto& p : prepared_.prompts) prompt_log += p.text;
  }
  server_.log_request(request_, status, num_prompt_tokens(), num_completion_tokens(), start_, prompt_log);
}

}  // namespace pagellm::server
