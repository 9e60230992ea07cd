// flex_flash's options (plugins/kernels/flex_flash/options.hpp): what a matrix spec's
// {"kernel": "flex_flash", "options": {...}} gives the plugin as its config_json.
#include "plugins/kernels/flex_flash/options.hpp"

#include <lca/error.hpp>

#include <gtest/gtest.h>

#include <string>

using lca_flex_flash::BackwardChoice;
using lca_flex_flash::ForwardChoice;
using lca_flex_flash::Options;
using lca_flex_flash::parse_options;
using lca_flex_flash::Switch;

namespace {

// The message of the refusal of `config`, or "" where it parses.
std::string refusal(const std::string& config) {
  try {
    parse_options(config);
  } catch (const lca::Error& e) {
    EXPECT_EQ(e.status(), LCA_ERR_INVALID_ARGUMENT) << config;
    return e.what();
  }
  return "";
}

}  // namespace

TEST(FlexOptions, AbsentOptionsAreTheDefaults) {
  for (const char* config : {"", "{}", "null"}) {
    const Options o = parse_options(config);
    EXPECT_EQ(o.forward, ForwardChoice::sm90_auto) << config;
    EXPECT_EQ(o.backward, BackwardChoice::sm90_auto) << config;
    EXPECT_EQ(o.bwd_order, 0) << config;
    EXPECT_EQ(o.bwd_split, Switch::kAuto) << config;
    EXPECT_EQ(o.bwd_match, Switch::kAuto) << config;
    EXPECT_EQ(o.bwd_local, Switch::kAuto) << config;
    EXPECT_EQ(o.dq_first, Switch::kAuto) << config;
    EXPECT_EQ(o.bwd_dv_first, Switch::kAuto) << config;
  }
}

TEST(FlexOptions, EveryForwardAndBackwardValueRoundTrips) {
  for (const char* name : {"mma", "sm90", "sm90_overlap", "sm90_pingpong", "sm90_k128", "sm90_k128_pingpong",
                           "sm90_persistent", "sm90_pair", "sm90_pair64", "sm90_k128_wg3", "sm90_overlap_wg3"}) {
    const Options o = parse_options(std::string(R"({"forward": ")") + name + "\"}");
    EXPECT_NE(o.forward, ForwardChoice::sm90_auto) << name;
    EXPECT_EQ(std::string(lca_flex_flash::forward_choice_name(o.forward)), name);
  }
  for (const char* name : {"mma", "sm90", "sm90_atomic", "sm90_unpaired", "sm90_paired", "sm90_skip", "sm90_noskip",
                           "sm90_rotate"}) {
    const Options o = parse_options(std::string(R"({"backward": ")") + name + "\"}");
    EXPECT_NE(o.backward, BackwardChoice::sm90_auto) << name;
    EXPECT_EQ(std::string(lca_flex_flash::backward_choice_name(o.backward)), name);
    EXPECT_EQ(lca_flex_flash::backward_choice(name), o.backward);
  }
  EXPECT_EQ(lca_flex_flash::backward_choice(""), BackwardChoice::sm90_auto);
}

TEST(FlexOptions, TheScheduleSwitches) {
  const Options o = parse_options(
      R"({"bwd_order": "kv_heads_inner", "bwd_split": "all", "bwd_match": "on", "bwd_local": "off", "dq_first": "on", "bwd_dv_first": "on"})");
  EXPECT_EQ(o.bwd_order, -1);
  EXPECT_EQ(o.bwd_split, Switch::kOn);
  EXPECT_EQ(o.bwd_match, Switch::kOn);
  EXPECT_EQ(o.bwd_local, Switch::kOff);
  EXPECT_EQ(o.dq_first, Switch::kOn);
  EXPECT_EQ(o.bwd_dv_first, Switch::kOn);
  EXPECT_EQ(parse_options(R"({"bwd_order": "kv_heads_outer"})").bwd_order, 1);
  EXPECT_EQ(parse_options(R"({"bwd_order": "kv_heads_2"})").bwd_order, 2);
  EXPECT_EQ(parse_options(R"({"bwd_order": "kv_heads_4"})").bwd_order, 4);
  EXPECT_EQ(parse_options(R"({"bwd_split": "off"})").bwd_split, Switch::kOff);
  // The forward's heads together: 0 absent (the rule), -1 all, else the count; forced counts take
  // the largest divisor of the heads at most the count.
  EXPECT_EQ(parse_options("{}").fwd_order, 0);
  EXPECT_EQ(parse_options(R"({"fwd_order": "heads_outer"})").fwd_order, 1);
  EXPECT_EQ(parse_options(R"({"fwd_order": "heads_8"})").fwd_order, 8);
  EXPECT_EQ(parse_options(R"({"fwd_order": "heads_inner"})").fwd_order, -1);
  EXPECT_EQ(lca_flex_flash::forced_heads_together(-1, 48), 48);
  EXPECT_EQ(lca_flex_flash::forced_heads_together(8, 48), 8);
  EXPECT_EQ(lca_flex_flash::forced_heads_together(16, 12), 12);
  EXPECT_EQ(lca_flex_flash::forced_heads_together(8, 12), 6);
  EXPECT_EQ(lca_flex_flash::forced_heads_together(4, 5), 1);
  EXPECT_EQ(lca_flex_flash::forced_heads_together(1, 64), 1);
  EXPECT_NE(refusal(R"({"fwd_order": "heads_3"})").find("heads_outer, heads_2"), std::string::npos);
  // The forward's row sums: absent -1 (the kernel's rule), by FADD, by the tensor cores.
  EXPECT_EQ(parse_options("{}").fwd_sum, -1);
  EXPECT_EQ(parse_options(R"({"fwd_sum": "fadd"})").fwd_sum, 0);
  EXPECT_EQ(parse_options(R"({"fwd_sum": "mma"})").fwd_sum, 1);
  EXPECT_EQ(parse_options(R"({"fwd_sum": "mma_beside"})").fwd_sum, 2);
  EXPECT_NE(refusal(R"({"fwd_sum": "tensor"})").find("fadd, mma, mma_beside"), std::string::npos);
  // Split-KV's parts: absent or off 1 (none), auto -1 (the rule), else forced.
  EXPECT_EQ(parse_options("{}").fwd_split, -1);
  EXPECT_EQ(parse_options(R"({"fwd_split": "off"})").fwd_split, 1);
  EXPECT_EQ(parse_options(R"({"fwd_split": "auto"})").fwd_split, -1);
  EXPECT_EQ(parse_options(R"({"fwd_split": "parts_3"})").fwd_split, 3);
  EXPECT_EQ(parse_options(R"({"fwd_split": "long_3"})").fwd_split, 13);
  EXPECT_NE(refusal(R"({"fwd_split": "5"})").find("off, auto, parts_2, parts_3, parts_4, long_2, long_3, long_4"), std::string::npos);
}

TEST(FlexOptions, BadOptionsAreRefusedNamingTheAllowedValues) {
  // An unknown value names the option and every allowed value.
  const std::string fwd = refusal(R"({"forward": "sm90_k256"})");
  EXPECT_NE(fwd.find("'forward'"), std::string::npos) << fwd;
  EXPECT_NE(fwd.find("sm90_k256"), std::string::npos) << fwd;
  EXPECT_NE(fwd.find("sm90_overlap_wg3"), std::string::npos) << fwd;
  const std::string split = refusal(R"({"bwd_split": "on"})");
  EXPECT_NE(split.find("off, all"), std::string::npos) << split;
  // A value of the wrong type is refused like an unknown one.
  EXPECT_NE(refusal(R"({"dq_first": true})").find("'dq_first'"), std::string::npos);
  EXPECT_NE(refusal(R"({"bwd_dv_first": "yes"})").find("'bwd_dv_first'"), std::string::npos);
  // An unknown option names the known ones.
  const std::string unknown = refusal(R"({"fwd": "sm90_k128"})");
  EXPECT_NE(unknown.find("unknown option 'fwd'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("forward, backward, fwd_order"), std::string::npos) << unknown;
  // Not an object, not JSON.
  EXPECT_NE(refusal(R"(["forward"])").find("JSON object"), std::string::npos);
  EXPECT_NE(refusal("{forward: mma}").find("not valid JSON"), std::string::npos);
}
