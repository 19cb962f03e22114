#include "engine/request.h"

namespace pagellm::engine {

bool Request::all_finished() const {
  for (const auto& s : seqs) {
    if (!s->finished()) return false;
  }
  return true;
}

}  // namespace pagellm::engine
