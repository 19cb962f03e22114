// Bounds how long one step of a parallel group may take. A collective that never completes (a peer
// GPU hung, a lost NVLink, a process stopped by a debugger) would otherwise block every rank
// forever; the watchdog calls on_timeout once when a step outlives its deadline, which aborts the
// group's communicators so the blocked ranks fail, the engine reports unhealthy and the server exits
// non-zero. Steps that finish in time cost two atomic stores.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace pagellm::parallel {

class StepWatchdog {
 public:
  // on_timeout(message) runs on the watchdog's thread, at most once.
  StepWatchdog(std::chrono::milliseconds timeout, std::function<void(const std::string&)> on_timeout);
  ~StepWatchdog();
  StepWatchdog(const StepWatchdog&) = delete;
  StepWatchdog& operator=(const StepWatchdog&) = delete;

  void begin_step();
  void end_step();
  bool fired() const { return fired_.load(); }

  // The step timeout of parallel groups: $PAGELLM_STEP_TIMEOUT_S seconds (a positive number), else
  // 300 s, far above any real step (a 70B prefill of 8k tokens takes about a second).
  static std::chrono::milliseconds default_timeout();

 private:
  void loop();

  const std::chrono::milliseconds timeout_;
  const std::function<void(const std::string&)> on_timeout_;
  std::atomic<int64_t> step_start_ns_{-1};  // steady-clock ns; -1 between steps
  std::atomic<bool> fired_{false};
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace pagellm::parallel
