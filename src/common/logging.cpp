#include "common/logging.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace pagellm::log {
namespace {
std::atomic<Level> g_level{Level::kInfo};
std::mutex g_mutex;
const char* tag(Level l) {
  switch (l) {
    case Level::kDebug: return "DEBUG";
    case Level::kInfo: return "INFO";
    case Level::kWarning: return "WARNING";
    case Level::kError: return "ERROR";
  }
  return "?";
}
}  // namespace

void set_level(Level level) { g_level.store(level); }
Level level() { return g_level.load(); }

void write(Level level, std::string_view message) {
  if (level < g_level.load()) return;
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%m-%d %H:%M:%S", &tm);
  std::lock_guard lock(g_mutex);
  std::fprintf(stderr, "%s %s %.*s\n", tag(level), stamp, static_cast<int>(message.size()),
               message.data());
}

}  // namespace pagellm::log
