#include "convert.h"

#include <cmath>
#include <functional>
#include <map>

#include <pybind11/stl.h>

#include "common/error.h"
#include "io/hf_config.h"

namespace pagellm::python {

namespace {

const char* type_name(const py::handle& value) { return Py_TYPE(value.ptr())->tp_name; }

// Engine text is UTF-8; "replace" keeps a malformed byte from turning an output into an exception.
py::str utf8(const std::string& text) {
  PyObject* s = PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace");
  if (s == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

// value.cast<T>() with a message naming the field instead of pybind11's generic one.
template <typename T>
T cast_field(const std::string& name, const py::handle& value, const char* expected) {
  try {
    return value.cast<T>();
  } catch (const py::cast_error&) {
    throw py::type_error(name + ": expected " + expected + ", got " + type_name(value));
  }
}

using Setter = std::function<void(EngineArgs&, const std::string&, const py::handle&)>;

template <typename T>
Setter set(T EngineArgs::*field, const char* expected) {
  return [field, expected](EngineArgs& a, const std::string& name, const py::handle& v) {
    a.*field = cast_field<T>(name, v, expected);
  };
}

const std::map<std::string, Setter>& engine_arg_setters() {
  static const std::map<std::string, Setter> setters = {
      {"model", set(&EngineArgs::model, "str")},
      {"tokenizer", set(&EngineArgs::tokenizer, "str")},
      {"revision", set(&EngineArgs::revision, "str")},
      {"tokenizer_revision", set(&EngineArgs::tokenizer_revision, "str")},
      {"download_dir", set(&EngineArgs::download_dir, "str")},
      {"runner", set(&EngineArgs::runner, "str")},
      {"load_format", set(&EngineArgs::load_format, "str")},
      {"dtype", set(&EngineArgs::dtype, "str")},
      {"quantization", set(&EngineArgs::quantization, "str")},
      {"kv_cache_dtype", set(&EngineArgs::kv_cache_dtype, "str")},
      {"calculate_kv_scales", set(&EngineArgs::calculate_kv_scales, "bool")},
      {"seed", set(&EngineArgs::seed, "a non-negative int")},
      {"device", set(&EngineArgs::device, "str")},
      {"max_model_len", set(&EngineArgs::max_model_len, "int")},
      {"block_size", set(&EngineArgs::block_size, "int")},
      {"num_kv_blocks", set(&EngineArgs::num_kv_blocks, "int")},
      {"kv_cache_memory_gib", set(&EngineArgs::kv_cache_memory_gib, "float")},
      {"gpu_memory_utilization", set(&EngineArgs::gpu_memory_utilization, "float")},
      {"swap_space_gib", set(&EngineArgs::swap_space_gib, "float")},
      {"max_num_seqs", set(&EngineArgs::max_num_seqs, "int")},
      {"max_num_batched_tokens", set(&EngineArgs::max_num_batched_tokens, "int")},
      {"enable_prefix_caching", set(&EngineArgs::enable_prefix_caching, "bool")},
      {"disable_hybrid_kv_cache_manager",
       set(&EngineArgs::disable_hybrid_kv_cache_manager, "bool")},
      {"enable_chunked_prefill", set(&EngineArgs::enable_chunked_prefill, "bool")},
      {"long_prefill_token_threshold", set(&EngineArgs::long_prefill_token_threshold, "int")},
      {"scheduling_policy", set(&EngineArgs::scheduling_policy, "str")},
      {"enforce_eager", set(&EngineArgs::enforce_eager, "bool")},
      {"disable_custom_all_reduce", set(&EngineArgs::disable_custom_all_reduce, "bool")},
      {"log_stats", set(&EngineArgs::log_stats, "bool")},
      {"num_threads", set(&EngineArgs::num_threads, "int")},
      {"chat_template", set(&EngineArgs::chat_template, "str")},
      {"tensor_parallel_size", set(&EngineArgs::tensor_parallel_size, "int")},
      {"pipeline_parallel_size", set(&EngineArgs::pipeline_parallel_size, "int")},
      {"max_batches_in_flight", set(&EngineArgs::max_batches_in_flight, "int")},
      {"data_parallel_size", set(&EngineArgs::data_parallel_size, "int")},
      {"default_normalize", set(&EngineArgs::default_normalize, "bool")},
      {"default_pooling",
       [](EngineArgs& a, const std::string& name, const py::handle& v) {
         const auto s = cast_field<std::string>(name, v, "\"LAST\" or \"MEAN\"");
         if (s != "LAST" && s != "MEAN")
           invalid_argument(name + ": expected LAST or MEAN, got " + s);
         a.default_pooling = s == "LAST" ? PoolingType::kLast : PoolingType::kMean;
       }},
      {"speculative_config",  // vLLM's JSON, as text (the package dumps a dict)
       [](EngineArgs& a, const std::string& name, const py::handle& v) {
         a.speculative = SpeculativeConfig::from_json(cast_field<std::string>(name, v, "str"));
       }},
  };
  return setters;
}

template <typename T>
std::optional<T> optional_attr(const py::handle& obj, const char* name) {
  py::object v = obj.attr(name);
  if (v.is_none()) return std::nullopt;
  return cast_field<T>(name, v, "a number");
}

template <typename T>
T attr(const py::handle& obj, const char* name) {
  return cast_field<T>(name, obj.attr(name), "a value of the documented type");
}

std::optional<StructuredOutputs> structured_from_py(const py::handle& obj) {
  if (obj.is_none()) return std::nullopt;
  StructuredOutputs s;
  s.json = optional_attr<std::string>(obj, "json");
  s.json_object = obj.attr("json_object").cast<bool>();
  s.regex = optional_attr<std::string>(obj, "regex");
  s.choice = optional_attr<std::vector<std::string>>(obj, "choice");
  s.grammar = optional_attr<std::string>(obj, "grammar");
  return s;
}

py::object logprobs_to_py(const TokenLogprobs& lp) {
  py::list top;
  for (const auto& [id, value] : lp.top) top.append(py::make_tuple(id, value));
  return py::make_tuple(lp.token_id, lp.logprob, std::move(top));
}

py::tuple completion_to_py(const CompletionOutput& c) {
  py::list logprobs;
  for (const TokenLogprobs& lp : c.logprobs) logprobs.append(logprobs_to_py(lp));
  const char* reason = finish_reason_name(c.finish_reason);
  py::object stop_reason = py::none();
  if (c.stop_reason) {
    stop_reason = py::str(*c.stop_reason);
  } else if (c.stop_token) {
    stop_reason = py::int_(*c.stop_token);
  }
  return py::make_tuple(
      c.index, utf8(c.text), py::cast(c.token_ids), c.cumulative_logprob, std::move(logprobs),
      reason ? py::object(py::str(reason)) : py::object(py::none()), std::move(stop_reason));
}

}  // namespace

EngineArgs engine_args_from_dict(const py::dict& kwargs) {
  EngineArgs args;
  const auto& setters = engine_arg_setters();
  for (const auto& [key, value] : kwargs) {
    const auto name = key.cast<std::string>();
    auto it = setters.find(name);
    if (it == setters.end()) throw py::type_error("unexpected engine argument '" + name + "'");
    if (value.is_none()) continue;  // None keeps the engine's default
    it->second(args, name, value);
  }
  return args;
}

SamplingParams sampling_params_from_py(const py::handle& obj, int max_model_len) {
  SamplingParams p;
  p.n = attr<int>(obj, "n");
  p.best_of = optional_attr<int>(obj, "best_of");
  p.temperature = attr<float>(obj, "temperature");
  // vLLM samples greedily below this temperature.
  if (p.temperature >= 0.0f && p.temperature < 1e-5f) p.temperature = 0.0f;
  p.top_p = attr<float>(obj, "top_p");
  p.top_k = attr<int>(obj, "top_k");
  p.min_p = attr<float>(obj, "min_p");
  p.presence_penalty = attr<float>(obj, "presence_penalty");
  p.frequency_penalty = attr<float>(obj, "frequency_penalty");
  p.repetition_penalty = attr<float>(obj, "repetition_penalty");
  py::object seed = obj.attr("seed");
  // Any Python int is a seed: reduce it modulo 2^64 as vLLM's generator seeding does with its bits.
  if (!seed.is_none()) p.seed = PyLong_AsUnsignedLongLongMask(seed.ptr());
  const std::optional<int> max_tokens = optional_attr<int>(obj, "max_tokens");
  p.max_tokens = max_tokens ? *max_tokens : std::max(max_model_len, 1);
  p.min_tokens = attr<int>(obj, "min_tokens");
  p.stop = attr<std::vector<std::string>>(obj, "stop");
  p.stop_token_ids = attr<std::vector<int32_t>>(obj, "stop_token_ids");
  p.ignore_eos = attr<bool>(obj, "ignore_eos");
  p.include_stop_str_in_output = attr<bool>(obj, "include_stop_str_in_output");
  p.logprobs = optional_attr<int>(obj, "logprobs");
  p.prompt_logprobs = optional_attr<int>(obj, "prompt_logprobs");
  p.skip_special_tokens = attr<bool>(obj, "skip_special_tokens");
  p.detokenize = attr<bool>(obj, "detokenize");
  p.structured_outputs = structured_from_py(obj.attr("structured_outputs"));
  const py::object bias = obj.attr("logit_bias");
  if (!bias.is_none())
    for (const auto& [id, value] : bias.cast<py::dict>())
      p.logit_bias.emplace_back(cast_field<int32_t>("logit_bias", id, "a token id"),
                                cast_field<float>("logit_bias", value, "a number"));
  p.allowed_token_ids = optional_attr<std::vector<int32_t>>(obj, "allowed_token_ids");
  if (auto words = optional_attr<std::vector<std::string>>(obj, "bad_words")) p.bad_words = *words;
  return p;
}

PromptInput prompt_from_py(const py::handle& obj) {
  if (py::isinstance<py::str>(obj)) return PromptInput::from_text(obj.cast<std::string>());
  return PromptInput::from_ids(
      cast_field<std::vector<int32_t>>("prompt_token_ids", obj, "a list of int"));
}

py::tuple output_to_py(const RequestOutput& out) {
  py::object prompt_logprobs = py::none();
  if (!out.prompt_logprobs.empty()) {
    py::list list;
    for (const auto& lp : out.prompt_logprobs) list.append(lp ? logprobs_to_py(*lp) : py::none());
    prompt_logprobs = std::move(list);
  }
  py::list outputs;
  for (const CompletionOutput& c : out.outputs) outputs.append(completion_to_py(c));
  return py::make_tuple(
      out.request_id, utf8(out.prompt), py::cast(out.prompt_token_ids), std::move(prompt_logprobs),
      std::move(outputs), out.finished, out.num_cached_tokens,
      out.error.empty() ? py::object(py::none()) : py::object(py::str(out.error)));
}

py::dict stats_to_py(const EngineStats& s) {
  py::dict d;
  d["num_running"] = s.num_running;
  d["num_waiting"] = s.num_waiting;
  d["num_swapped"] = s.num_swapped;
  d["kv_usage"] = s.kv_usage;
  d["num_kv_blocks"] = s.num_kv_blocks;
  d["num_free_kv_blocks"] =
      static_cast<int>(std::lround((1.0 - s.kv_usage) * static_cast<double>(s.num_kv_blocks)));
  d["prefix_cache_queries"] = s.prefix_cache_queries;
  d["prefix_cache_hits"] = s.prefix_cache_hits;
  d["num_preemptions"] = s.num_preemptions;
  d["prompt_tokens"] = s.prompt_tokens;
  d["generation_tokens"] = s.generation_tokens;
  d["requests_finished_stop"] = s.requests_finished_stop;
  d["requests_finished_length"] = s.requests_finished_length;
  d["requests_finished_abort"] = s.requests_finished_abort;
  d["requests_finished_error"] = s.requests_finished_error;
  d["num_steps"] = s.num_steps;
  return d;
}

py::dict default_sampling_overrides(const std::string& folder) {
  py::dict d;
  if (folder.empty()) return d;
  const io::GenerationConfig g = io::load_generation_config(folder);
  if (g.temperature) d["temperature"] = *g.temperature;
  if (g.top_p) d["top_p"] = *g.top_p;
  if (g.top_k) d["top_k"] = *g.top_k;
  if (g.min_p) d["min_p"] = *g.min_p;
  if (g.repetition_penalty) d["repetition_penalty"] = *g.repetition_penalty;
  if (g.max_new_tokens) d["max_tokens"] = *g.max_new_tokens;
  return d;
}

}  // namespace pagellm::python
