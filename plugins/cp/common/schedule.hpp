// Ring schedules over the cp members of a context group: a plain ring, or LoongTrain's double
// ring (inner rings of `window` members, an outer ring across windows). Used by context_stage.
// Rule: every member derives its schedule from the same (cp, window); member c computes on
// block[t] at step t and, for t < cp - 1, passes it to send_to[t] while taking the next from
// recv_from[t]; at the end the travelling gradient of the block held goes home.
#pragma once

#include <lca/error.hpp>

#include <string>
#include <vector>

namespace lca::cp {

struct Schedule {
  std::vector<int> block;                // owner of the KV block computed at step t
  std::vector<int> send_to, recv_from;   // exchange after step t (cp - 1 of them)
  int return_to = 0, return_from = 0;    // gradient of the last block held goes to its owner
};

inline Schedule make_schedule(int cp, int me, int window) {
  if (window <= 0 || window > cp) window = cp;
  require(cp % window == 0, LCA_ERR_UNSUPPORTED,
          "window_size " + std::to_string(window) + " does not divide the context degree " +
              std::to_string(cp));
  const int windows = cp / window;
  auto next_of = [&](int x, int k) {  // where member x sends after step k
    const int win = x / window, pos = x % window;
    const bool inner = (k + 1) % window != 0;
    return inner ? win * window + (pos + 1) % window : ((win + 1) % windows) * window + pos;
  };
  std::vector<int> held(cp), moved(cp);
  for (int x = 0; x < cp; ++x) held[x] = x;
  Schedule s;
  for (int k = 0; k < cp; ++k) {
    s.block.push_back(held[me]);
    if (k == cp - 1) break;
    std::vector<int> from(cp);
    for (int x = 0; x < cp; ++x) {
      moved[next_of(x, k)] = held[x];
      from[next_of(x, k)] = x;
    }
    s.send_to.push_back(next_of(me, k));
    s.recv_from.push_back(from[me]);
    held = moved;
  }
  s.return_to = held[me];
  for (int x = 0; x < cp; ++x)
    if (held[x] == me) s.return_from = x;
  return s;
}

}  // namespace lca::cp
