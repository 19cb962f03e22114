#include "cli/sampling_flags.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "common/error.h"

namespace pagellm::cli {

void SamplingFlags::add_to(CLI::App& app) {
  auto add = [&](CLI::Option* opt, void (*copy)(const SamplingParams&, SamplingParams&)) {
    options_.emplace_back(opt, copy);
  };
  SamplingParams& v = values_;
  add(app.add_option("--max-tokens", v.max_tokens, "tokens to generate per sample"),
      [](const SamplingParams& f, SamplingParams& p) { p.max_tokens = f.max_tokens; });
  add(app.add_option("--min-tokens", v.min_tokens, "tokens before EOS/stop may end a sample"),
      [](const SamplingParams& f, SamplingParams& p) { p.min_tokens = f.min_tokens; });
  add(app.add_option("--temperature", v.temperature, "0 = greedy"),
      [](const SamplingParams& f, SamplingParams& p) { p.temperature = f.temperature; });
  add(app.add_option("--top-p", v.top_p, "nucleus sampling mass, (0, 1]"),
      [](const SamplingParams& f, SamplingParams& p) { p.top_p = f.top_p; });
  add(app.add_option("--top-k", v.top_k, "keep the k most likely tokens (-1 = all)"),
      [](const SamplingParams& f, SamplingParams& p) { p.top_k = f.top_k; });
  add(app.add_option("--min-p", v.min_p, "drop tokens below min_p × the top probability"),
      [](const SamplingParams& f, SamplingParams& p) { p.min_p = f.min_p; });
  add(app.add_option("--repetition-penalty", v.repetition_penalty, "> 1 discourages repeats"),
      [](const SamplingParams& f, SamplingParams& p) {
        p.repetition_penalty = f.repetition_penalty;
      });
  add(app.add_option("--presence-penalty", v.presence_penalty, "[-2, 2]"),
      [](const SamplingParams& f, SamplingParams& p) { p.presence_penalty = f.presence_penalty; });
  add(app.add_option("--frequency-penalty", v.frequency_penalty, "[-2, 2]"),
      [](const SamplingParams& f, SamplingParams& p) {
        p.frequency_penalty = f.frequency_penalty;
      });
  add(app.add_option("--n", v.n, "samples per prompt"),
      [](const SamplingParams& f, SamplingParams& p) { p.n = f.n; });
  add(app.add_option("--stop", v.stop, "stop string (repeatable)"),
      [](const SamplingParams& f, SamplingParams& p) { p.stop = f.stop; });
  add(app.add_option("--logprobs", v.logprobs,
                     "top-N logprobs per generated token in the JSONL output (N <= 20)"),
      [](const SamplingParams& f, SamplingParams& p) { p.logprobs = f.logprobs; });
  add(app.add_flag("--ignore-eos", v.ignore_eos, "keep generating past EOS"),
      [](const SamplingParams& f, SamplingParams& p) { p.ignore_eos = f.ignore_eos; });
}

void SamplingFlags::apply(SamplingParams& params) const {
  for (const auto& [opt, copy] : options_) {
    if (opt->count() > 0) copy(values_, params);
  }
}

namespace {

template <typename T>
constexpr bool kIsInteger = std::is_integral_v<T> && !std::is_same_v<T, bool>;
template <typename T>
struct IntegerList : std::false_type {};
template <typename T>
struct IntegerList<std::vector<T>> : std::bool_constant<kIsInteger<T>> {};

// An integer of type T from a JSON number: 3 or 3.0, as the server takes them. False for anything
// else, for fractions and for values outside T's range (nlohmann's get<T>() converts a float
// outside that range with undefined behaviour).
template <typename T>
bool json_integer(const nlohmann::json& v, T& out) {
  using Limits = std::numeric_limits<T>;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(Limits::max())) return false;
    out = static_cast<T>(u);
    return true;
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if constexpr (std::is_unsigned_v<T>) {
      if (i < 0 || static_cast<uint64_t>(i) > static_cast<uint64_t>(Limits::max())) return false;
    } else if (i < static_cast<int64_t>(Limits::min()) || i > static_cast<int64_t>(Limits::max())) {
      return false;
    }
    out = static_cast<T>(i);
    return true;
  }
  if (v.is_number_float()) {
    // Past 2^53 a double holds only some integers: such values must be written as integers.
    const double d = v.get<double>();
    if (!(std::fabs(d) < 9007199254740992.0) || std::floor(d) != d) return false;
    return json_integer(nlohmann::json(static_cast<int64_t>(d)), out);
  }
  return false;
}

template <typename T>
void read_field(const nlohmann::json& obj, const char* key, T& out, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return;
  const auto not_integer = [&] {
    invalid_argument(where + ": field '" + key + "' must be " +
                     (IntegerList<T>::value ? "a list of integers" : "an integer") +
                     " in range, got " + it->dump());
  };
  if constexpr (kIsInteger<T>) {
    if (!json_integer(*it, out)) not_integer();
  } else if constexpr (IntegerList<T>::value) {
    if (!it->is_array()) not_integer();
    T values(it->size());
    for (size_t i = 0; i < values.size(); ++i)
      if (!json_integer((*it)[i], values[i])) not_integer();
    out = std::move(values);
  } else {
    try {
      out = it->get<T>();
    } catch (const nlohmann::json::exception&) {
      invalid_argument(where + ": field '" + key + "' has the wrong type");
    }
  }
}

template <typename T>
void read_optional(const nlohmann::json& obj, const char* key, std::optional<T>& out,
                   const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return;
  T value{};
  read_field(obj, key, value, where);
  out = value;
}

}  // namespace

void apply_sampling_json(const nlohmann::json& obj, SamplingParams& p, const std::string& where) {
  read_field(obj, "max_tokens", p.max_tokens, where);
  read_field(obj, "min_tokens", p.min_tokens, where);
  read_field(obj, "temperature", p.temperature, where);
  read_field(obj, "top_p", p.top_p, where);
  read_field(obj, "top_k", p.top_k, where);
  read_field(obj, "min_p", p.min_p, where);
  read_field(obj, "presence_penalty", p.presence_penalty, where);
  read_field(obj, "frequency_penalty", p.frequency_penalty, where);
  read_field(obj, "repetition_penalty", p.repetition_penalty, where);
  read_field(obj, "n", p.n, where);
  read_optional(obj, "best_of", p.best_of, where);
  // Seeds: any 64-bit integer, negative ones taken modulo 2^64 as the server takes them.
  if (auto it = obj.find("seed"); it != obj.end() && !it->is_null()) {
    uint64_t seed = 0;
    int64_t signed_seed = 0;
    if (!json_integer(*it, seed)) {
      if (!json_integer(*it, signed_seed))
        invalid_argument(where + ": field 'seed' must be a 64-bit integer, got " + it->dump());
      seed = static_cast<uint64_t>(signed_seed);
    }
    p.seed = seed;
  }
  read_optional(obj, "logprobs", p.logprobs, where);
  read_optional(obj, "prompt_logprobs", p.prompt_logprobs, where);
  read_field(obj, "stop_token_ids", p.stop_token_ids, where);
  read_field(obj, "ignore_eos", p.ignore_eos, where);
  read_field(obj, "include_stop_str_in_output", p.include_stop_str_in_output, where);
  read_field(obj, "skip_special_tokens", p.skip_special_tokens, where);
  if (auto it = obj.find("stop"); it != obj.end() && !it->is_null()) {
    if (it->is_string()) {
      p.stop = {it->get<std::string>()};
    } else {
      read_field(obj, "stop", p.stop, where);
    }
  }
}

}  // namespace pagellm::cli
