// Cell statuses and their record names; see status.hpp.
#include "core/run/status.hpp"

#include <array>
#include <stdexcept>
#include <utility>

namespace lca::core {
namespace {

constexpr std::array<std::pair<CellStatus, const char*>, 8> kNames{{
    {CellStatus::ok, "ok"},
    {CellStatus::unsupported, "X"},
    {CellStatus::out_of_memory, "E"},
    {CellStatus::fail, "FAIL"},
    {CellStatus::error, "ERROR"},
    {CellStatus::crash, "CRASH"},
    {CellStatus::timeout, "TIMEOUT"},
    {CellStatus::planned, "plan"},
}};

}  // namespace

const char* to_string(CellStatus status) {
  for (const auto& [s, name] : kNames)
    if (s == status) return name;
  return "ERROR";  // unreachable for a valid enumerator
}

std::optional<CellStatus> cell_status_from_string(std::string_view name) {
  for (const auto& [s, known] : kNames)
    if (name == known) return s;
  return std::nullopt;
}

CellStatus parse_cell_status(std::string_view name) {
  if (auto s = cell_status_from_string(name)) return *s;
  std::string known;
  for (const auto& [s, n] : kNames) known += (known.empty() ? "" : ", ") + std::string(n);
  throw std::runtime_error("unknown cell status '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace lca::core
