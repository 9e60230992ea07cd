// Everything a plugin author includes: the C ABI, errors, checked sizes, value helpers, a mask's
// ranges and the three interfaces with their export macros.
// Rule: plugins include only sdk headers, never anything from core/.
#pragma once

#include <lca/abi.h>
#include <lca/checked.hpp>
#include <lca/cp_strategy.hpp>
#include <lca/error.hpp>
#include <lca/kernel.hpp>
#include <lca/mask_provider.hpp>
#include <lca/slice_ranges.hpp>
#include <lca/types.hpp>
