#include "parallel/step_watchdog.h"

#include <cstdlib>

namespace pagellm::parallel {

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

StepWatchdog::StepWatchdog(std::chrono::milliseconds timeout,
                           std::function<void(const std::string&)> on_timeout)
    : timeout_(timeout), on_timeout_(std::move(on_timeout)), thread_([this] { loop(); }) {}

StepWatchdog::~StepWatchdog() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StepWatchdog::begin_step() { step_start_ns_.store(now_ns()); }

void StepWatchdog::end_step() { step_start_ns_.store(-1); }

std::chrono::milliseconds StepWatchdog::default_timeout() {
  if (const char* env = std::getenv("PAGELLM_STEP_TIMEOUT_S")) {
    char* end = nullptr;
    const double s = std::strtod(env, &end);
    if (end != env && *end == '\0' && s > 0 && s < 1e7)
      return std::chrono::milliseconds(int64_t(s * 1000));
  }
  return std::chrono::seconds(300);
}

void StepWatchdog::loop() {
  // Checks a few times per timeout, at least every second.
  const auto period = std::min<std::chrono::milliseconds>(std::chrono::seconds(1), timeout_ / 4 + std::chrono::milliseconds(1));
  std::unique_lock lock(mutex_);
  while (!cv_.wait_for(lock, period, [&] { return stop_; })) {
    const int64_t start = step_start_ns_.load();
    if (start < 0 || fired_.load()) continue;
    const auto elapsed = std::chrono::nanoseconds(now_ns() - start);
    if (elapsed < timeout_) continue;
    fired_.store(true);
    lock.unlock();
    on_timeout_("a step of the parallel group has run for " +
                std::to_string(std::chrono::duration_cast<std::chrono::seconds>(elapsed).count()) +
                " s (limit " + std::to_string(timeout_.count() / 1000.0).substr(0, 6) +
                " s, $PAGELLM_STEP_TIMEOUT_S): a collective is stuck; aborting the group");
    lock.lock();
  }
}

}  // namespace pagellm::parallel
