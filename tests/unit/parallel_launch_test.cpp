// Multi-process parallel groups: the wire format of the rendezvous and of each step, the launch
// layout from flags and mpirun's environment, and the TCP rendezvous itself (complete group,
// mismatched flags, missing peer, a peer that goes away).
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <utility>

#include <boost/asio.hpp>
#include <gtest/gtest.h>

#include "common/error.h"
#include "parallel/launch.h"
#include "parallel/rendezvous.h"
#include "parallel/wire.h"
#include "runner/model_loader.h"

namespace pagellm {
namespace {

using namespace std::chrono_literals;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ParallelWire, StepRoundTripsAndBadMessagesAreRefused) {
  const std::vector<int32_t> toks{5, 6, 7}, table{3, 9}, table2{0, 4}, prompt{1, 5, 6, 7};
  engine::SchedulerOutput s;
  engine::ScheduledSeq q;
  q.seq_id = 42;
  q.token_ids = toks;
  q.num_computed_tokens = 1;
  q.block_tables[0] = table;
  q.block_tables[1] = table2;  // a second KV cache group
  q.prompt_token_ids = prompt;
  q.needs_sample = true;
  q.prompt_logprobs = 2;
  q.pooling = PoolingType::kMean;
  q.num_spec_tokens = 2;  // the last two tokens are drafts
  s.seqs = {q};
  s.num_scheduled_tokens = 3;
  s.blocks_to_copy = {{1, 2}};
  s.blocks_to_swap_out = {{4, 0}};
  const std::vector<unsigned char> m = parallel::encode_step(s);
  EXPECT_EQ(parallel::message_type(m), parallel::MessageType::kStep);
  const auto d = parallel::decode_step(m);
  ASSERT_EQ(d->output.seqs.size(), 1u);
  const engine::ScheduledSeq& r = d->output.seqs[0];
  EXPECT_EQ(r.seq_id, 42);
  EXPECT_EQ(std::vector<int32_t>(r.token_ids.begin(), r.token_ids.end()), toks);
  EXPECT_EQ(std::vector<int32_t>(r.block_tables[0].begin(), r.block_tables[0].end()), table);
  EXPECT_EQ(std::vector<int32_t>(r.block_tables[1].begin(), r.block_tables[1].end()), table2);
  EXPECT_TRUE(r.block_tables[2].empty());
  EXPECT_EQ(std::vector<int32_t>(r.prompt_token_ids.begin(), r.prompt_token_ids.end()), prompt);
  EXPECT_TRUE(r.needs_sample);
  EXPECT_EQ(r.prompt_logprobs, 2);
  EXPECT_EQ(r.pooling, PoolingType::kMean);
  EXPECT_EQ(r.num_spec_tokens, 2);
  EXPECT_NE(r.params, nullptr);
  EXPECT_EQ(d->output.blocks_to_copy, s.blocks_to_copy);
  EXPECT_EQ(d->output.blocks_to_swap_out, s.blocks_to_swap_out);
  EXPECT_EQ(parallel::encode_step(d->output), m);

  // As many drafts as tokens leaves no verified row: refused.
  engine::SchedulerOutput all_drafts = s;
  all_drafts.seqs[0].num_spec_tokens = 3;
  EXPECT_NE(error_of([&] { parallel::decode_step(parallel::encode_step(all_drafts)); })
                .find("draft tokens outside a sampled row"),
            std::string::npos);

  auto truncated = m;
  truncated.resize(m.size() - 3);
  EXPECT_NE(error_of([&] { parallel::decode_step(truncated); }).find("parallel message"),
            std::string::npos);
  auto bad_magic = m;
  bad_magic[0] ^= 1;
  EXPECT_NE(error_of([&] { parallel::decode_step(bad_magic); }).find("not a pagellm message"),
            std::string::npos);
  // A huge seq count cannot make the decoder allocate: counts are bounded by the bytes left.
  auto huge = parallel::encode_step(engine::SchedulerOutput{});
  std::memset(huge.data() + huge.size() - 8, 0xff, 8);
  EXPECT_NE(error_of([&] { parallel::decode_step(huge); }).find("count"), std::string::npos);
  EXPECT_NE(error_of([&] { parallel::decode_hello(m); }).find("unexpected message type"),
            std::string::npos);
}

TEST(ParallelLaunch, LayoutsFromNodesAndMpirun) {
  EngineArgs a;
  a.tensor_parallel_size = 4;
  a.pipeline_parallel_size = 2;
  const auto single = parallel::plan_launch(a, {});
  EXPECT_FALSE(single.multi_process());
  EXPECT_EQ(single.num_local_ranks, 8);

  a.nnodes = 2;
  a.node_rank = 1;
  a.master_addr = "10.0.0.1";
  const auto nodes = parallel::plan_launch(a, {});
  EXPECT_EQ(nodes.num_procs, 2);
  // Node 0 hosts the last stage (ranks 4..7, whose rank 4 samples); node 1 the first.
  EXPECT_EQ(nodes.first_rank, 0);
  a.node_rank = 0;
  EXPECT_EQ(parallel::plan_launch(a, {}).first_rank, 4);
  a.node_rank = 1;
  EXPECT_EQ(nodes.num_local_ranks, 4);
  EXPECT_EQ(nodes.first_device, 0);
  EXPECT_EQ(nodes.rendezvous.master_addr, "10.0.0.1");
  EXPECT_EQ(nodes.rendezvous.master_port, 29500);

  EngineArgs m;
  m.tensor_parallel_size = 8;
  const auto mpi = parallel::plan_launch(
      m, {{"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_RANK", "5"},
          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "4000"}});
  EXPECT_EQ(mpi.launcher, "mpirun");
  EXPECT_EQ(mpi.proc_rank, 5);
  EXPECT_EQ(mpi.first_rank, 5);
  EXPECT_EQ(mpi.num_local_ranks, 1);
  EXPECT_EQ(mpi.first_device, 1);
  EXPECT_EQ(mpi.rendezvous.master_addr, "node0");
  EXPECT_EQ(mpi.rendezvous.master_port, 4000);

  // TP=2 x PP=2 under mpirun -np 4: process 0 hosts rank 2 (the last stage's sampling rank), and
  // the four processes host the four ranks.
  EngineArgs tp2pp2;
  tp2pp2.tensor_parallel_size = 2;
  tp2pp2.pipeline_parallel_size = 2;
  std::vector<int> hosted;
  for (int r = 0; r < 4; ++r)
    hosted.push_back(parallel::plan_launch(tp2pp2, {{"OMPI_COMM_WORLD_SIZE", "4"},
                                                    {"OMPI_COMM_WORLD_RANK", std::to_string(r)}})
                         .first_rank);
  EXPECT_EQ(hosted, (std::vector<int>{2, 0, 1, 3}));

  EXPECT_NE(error_of([&] { parallel::plan_launch(m, {{"OMPI_COMM_WORLD_SIZE", "3"}}); })
                .find("do not split evenly"),
            std::string::npos);
  EngineArgs both = a;
  EXPECT_NE(error_of([&] { parallel::plan_launch(both, {{"OMPI_COMM_WORLD_SIZE", "2"}}); })
                .find("not with mpirun"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parallel::plan_launch(m, {{"MASTER_PORT", "x1"}}); }).find("$MASTER_PORT"),
            std::string::npos);
}

int free_port() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor a(io, {boost::asio::ip::tcp::v4(), 0});
  return a.local_endpoint().port();
}

parallel::RendezvousOptions options(int port, int procs, int rank, const std::string& flags,
                                    std::chrono::milliseconds timeout = 10s) {
  parallel::RendezvousOptions o;
  o.master_port = port;
  o.num_procs = procs;
  o.proc_rank = rank;
  o.timeout = timeout;
  o.hello = {rank, procs, parallel::fingerprint(flags), flags};
  return o;
}

TEST(Rendezvous, CompleteGroupGetsTheIdsAndSeesPeersLeave) {
  const int port = free_port();
  std::vector<std::vector<unsigned char>> got1, got2;
  std::unique_ptr<parallel::Channel> w1, w2;
  std::thread t1([&] { w1 = parallel::rendezvous_worker(options(port, 3, 1, "tp=3"), &got1); });
  std::thread t2([&] { w2 = parallel::rendezvous_worker(options(port, 3, 2, "tp=3"), &got2); });
  auto leader = parallel::rendezvous_leader(options(port, 3, 0, "tp=3"), [] {
    return std::vector<std::vector<unsigned char>>{{1, 2, 3}, {4}};
  });
  t1.join();
  t2.join();
  ASSERT_EQ(leader.size(), 2u);
  EXPECT_EQ(got1, (std::vector<std::vector<unsigned char>>{{1, 2, 3}, {4}}));
  EXPECT_EQ(got2, got1);
  // Steps flow leader -> worker; a worker that goes is seen by the leader's watcher.
  leader[0]->send(parallel::encode_shutdown());
  EXPECT_EQ(parallel::message_type(w1->recv()), parallel::MessageType::kShutdown);
  w2->close();
  leader[1]->wait_closed();  // returns: the peer has gone
  EXPECT_NE(error_of([&] { leader[1]->recv(); }).find("closed the connection"), std::string::npos);
}

TEST(Rendezvous, MismatchedFlagsFailEveryProcessWithOneMessage) {
  const int port = free_port();
  std::string worker_error;
  std::thread t([&] {
    std::vector<std::vector<unsigned char>> ids;
    worker_error = error_of([&] { parallel::rendezvous_worker(options(port, 2, 1, "tp=4"), &ids); });
  });
  const std::string leader_error = error_of([&] {
    parallel::rendezvous_leader(options(port, 2, 0, "tp=2"), [] { return std::vector<std::vector<unsigned char>>{}; });
  });
  t.join();
  EXPECT_NE(leader_error.find("different flags: {tp=4} vs the leader's {tp=2}"), std::string::npos)
      << leader_error;
  EXPECT_EQ(worker_error, leader_error);
}

TEST(Rendezvous, MissingPeerAndMissingLeaderTimeOut) {
  const int port = free_port();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_NE(error_of([&] {
              parallel::rendezvous_leader(options(port, 3, 0, "x", 300ms),
                                          [] { return std::vector<std::vector<unsigned char>>{}; });
            }).find("process(es) 1, 2 of 3 did not join"),
            std::string::npos);
  std::vector<std::vector<unsigned char>> ids;
  EXPECT_NE(error_of([&] { parallel::rendezvous_worker(options(port, 2, 1, "x", 300ms), &ids); })
                .find("no leader at 127.0.0.1"),
            std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(ParallelLaunch, MultiProcessOnTheCpuIsRefusedClearly) {
  EngineArgs a;
  a.tensor_parallel_size = 2;
  a.nnodes = 2;
  a.node_rank = 1;
  EXPECT_NE(error_of([&] { runner::run_worker_process(a); }).find("needs --device cuda"),
            std::string::npos);
  a.node_rank = 0;
  EXPECT_NE(error_of([&] { runner::load_model(a); }).find("needs --device cuda"), std::string::npos);
}

}  // namespace
}  // namespace pagellm
