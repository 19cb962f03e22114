// The messages between the processes of a multi-process (multi-node) parallel group, as bytes:
// the rendezvous handshake (a worker's hello, the leader's welcome with the NCCL ids) and each
// step's SchedulerOutput, which the leader sends to every worker process. Decoding validates every
// length and count against the message size (untrusted input from the network: the decoders are
// fuzzed) and throws pagellm::Error (kInvalidArgument) naming what is wrong.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "engine/scheduler_output.h"

namespace pagellm::parallel {

constexpr uint32_t kWireMagic = 0x504c4c4d;  // "PLLM"
constexpr uint32_t kWireVersion = 3;  // 2: num_spec_tokens per seq; 3: a block table per KV group
// No message is larger: a step of 16M tokens with block tables and prompts fits well below it.
constexpr size_t kMaxMessageBytes = size_t(1) << 30;

enum class MessageType : uint8_t { kHello = 1, kWelcome = 2, kStep = 3, kShutdown = 4 };

// A worker process introduces itself: which process it is, of how many, and a fingerprint of the
// flags every process must share (model, parallel sizes, dtype, lengths, ...).
struct Hello {
  int32_t proc_rank = 0;
  int32_t num_procs = 0;
  uint64_t fingerprint = 0;
  std::string summary;  // the fingerprinted flags in words, for the mismatch message
};

// The leader's answer: an error (the worker exits with it), or the NCCL ids of the group.
struct Welcome {
  std::string error;                              // empty = accepted
  std::vector<std::vector<unsigned char>> ids;    // opaque NCCL ids, in the order the runner uses
};

std::vector<unsigned char> encode_hello(const Hello& h);
std::vector<unsigned char> encode_welcome(const Welcome& w);
std::vector<unsigned char> encode_shutdown();
// The step as the workers need it: everything a runner reads except the sampling parameters
// (workers never sample), with prompt token ids (they decide the prompt-logprob rows).
std::vector<unsigned char> encode_step(const engine::SchedulerOutput& step);

MessageType message_type(const std::vector<unsigned char>& message);
Hello decode_hello(const std::vector<unsigned char>& message);
Welcome decode_welcome(const std::vector<unsigned char>& message);

// A decoded step that owns the memory its SchedulerOutput's spans point into.
struct DecodedStep {
  engine::SchedulerOutput output;
  std::deque<std::vector<int32_t>> storage;  // token ids, block tables, prompts (stable addresses)
  SamplingParams params;                      // the placeholder every seq points to
};
std::unique_ptr<DecodedStep> decode_step(const std::vector<unsigned char>& message);

}  // namespace pagellm::parallel
