// lcahost: the command line. Thin by design: parsing, then a call into core/.
#include "commands.hpp"
#include "core/run/runner.hpp"

#include <lca/checked.hpp>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  // Past a file size limit (ulimit -f, a quota) a write should fail with EFBIG and name the
  // results file, not kill the run with SIGXFSZ before it can say which file.
  std::signal(SIGXFSZ, SIG_IGN);
  lca::app::Options opt;
  CLI::App app{"lca: the long-context attention benchmark.\n"
               "  lcahost --plugins DIR --matrix quick|all|PRESET|FILE.json   run a matrix\n"
               "  lcahost --plugins DIR list | caps | masks                     inspect plugins\n"
               "  lcahost report R.jsonl... --out DIR | compare A.jsonl B.jsonl  charts, summary, regressions"};
  app.set_version_flag("--version", std::string("lca ") + LCA_VERSION + " (" + LCA_GIT_REVISION + ")");
  app.add_option("--plugins", opt.plugins, "Plugin folder (default: $LCA_PLUGIN_DIR or ../plugins beside lcahost)");
  app.add_flag("-v,--verbose", opt.verbose, "More log output (repeat for trace)");
  app.add_flag("-q,--quiet", opt.quiet, "Only warnings and errors");
  app.add_option("--matrix", opt.matrix, "Matrix: quick, all, a preset in <plugins>/matrices, or a JSON file");
  app.add_option("--out", opt.out,
                 "Results as JSON Lines (a .csv twin is written beside it); an existing file is refused unless "
                 "--force, and a file another run is writing is refused");
  app.add_option("--resume", opt.resume, "Continue a run: skip cells already in this .jsonl and append to it");
  app.add_flag("--retry-errors", opt.retry_errors,
               "With --resume: run again the cells recorded ERROR, CRASH or TIMEOUT (their new records are appended; "
               "reports read the last record of a cell)");
  app.add_flag("--force", opt.force, "Overwrite an existing --out file");
  app.add_flag("--isolate", opt.isolate, "Run each cell in a child process (crashes and hangs become records)");
  app.add_option("--cell-timeout", opt.cell_timeout,
                 "Seconds before a cell is killed and recorded as TIMEOUT (0 < s <= 604800); implies --isolate, "
                 "since only a cell in a child process can be stopped")
      ->check(lca::app::finite_number(0.0, 604800.0, true));
  app.add_flag("--dry-run", opt.dry_run, "Print the matrix with skip reasons; run nothing");
  app.add_option("--device", opt.device, "GPU to use: cuda:N (default cuda:0 when a GPU is present; with --cp every rank)");
  app.add_option("--threads", opt.threads, "Threads for CPU kernels, 0 (all, the default) to 4096")
      ->check(CLI::Range(0, 4096));
  app.add_flag("--no-check", opt.no_check, "Skip the reference check");
  app.add_option("--check-max-seqlen", opt.check_max_seqlen,
                 "Check only cells of at most this many tokens (the whole sequence; with --cp, tokens a rank x ranks); "
                 "longer ones run unchecked and say so. 0: every length (default: the matrix's check_max_seqlen, else 0)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  app.add_option("--warmup", opt.warmup, "Untimed calls before the timed ones (default: the matrix's)")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--warmup-ms", opt.warmup_ms,
                 "Warm up for at least this many ms (after --warmup calls), so that GPU clocks settle (default: "
                 "the matrix's)")
      ->check(lca::app::finite_number(0.0, 600000.0));
  app.add_option("--repeats", opt.repeats, "Timed calls whose median is reported (default: the matrix's)")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--repeat-ms", opt.repeat_ms,
                 "Time calls for at least this many ms (after --repeats calls, at most " +
                     std::to_string(lca::core::kMaxTimedCalls) +
                     " calls), so that the median spans the GPU's clock swings at its power limit (default: the "
                     "matrix's)")
      ->check(lca::app::finite_number(0.0, 600000.0));
  app.add_option("--kernels", opt.kernels,
                 "Only these kernels (comma separated): plugin names, or labels of the matrix's kernels")
      ->delimiter(',');
  app.add_option("--kernel-options", opt.kernel_options,
                 "KERNEL=JSON: options for a kernel's rows (a plugin name or a label; repeatable), e.g. "
                 "flex_flash='{\"forward\": \"sm90_k128\"}'; the rows are labelled with them");
  app.add_option("--masks", opt.masks,
                 "Only these masks: specs separated by commas, or --masks repeated. A mask's parameters follow its "
                 "name after ':' and are separated by commas too: a piece that is key=value belongs to the mask "
                 "before it (--masks causal,global_sliding:window=700,global_tokens=333 is two masks)");

  app.add_option("--seqlens", opt.seqlens,
                 "Only these sequence lengths (comma separated), on every device; with --cp, tokens a rank")
      ->delimiter(',')
      ->check(CLI::Range(int64_t(1), lca::max_seqlen));

  app.add_option("--cp", opt.cp, "Context-parallel strategies to run (comma separated, * = all); launch with mpirun")
      ->delimiter(',');
  app.add_option("--cp-kernel", opt.cp_kernel,
                 "Kernel plugin for the strategies' local blocks (default cpu_reference); its device is the run's: "
                 "a cuda kernel (flex_flash) puts each rank on GPU local_rank % GPUs");
  app.add_option("--cp-comm", opt.cp_comm,
                 "Communicator lent to the strategies on GPUs: nccl (default) or mpi (device buffers staged through "
                 "pinned host memory; ranks may share a GPU)")
      ->check(CLI::IsMember({"nccl", "mpi"}));
  app.add_option("--cp-topology", opt.cp_topology, "Ranks per node for hybrid strategies (default: from the launcher)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--cp-options", opt.cp_options, "Strategy options as a JSON object, e.g. '{\"ulysses_degree\":2}'");

  auto* list = app.add_subcommand("list", "Plugins found, with kind, version, library and status");
  list->add_option("--format", opt.format, "table, md or json")->check(CLI::IsMember({"table", "md", "json"}));

  auto* caps = app.add_subcommand("caps", "Kernel capabilities from the manifests");
  caps->add_option("--format", opt.format, "table, md or json")->check(CLI::IsMember({"table", "md", "json"}));
  caps->add_option("--mask", opt.caps_mask, "Only kernels that can run this mask");
  caps->add_flag("--backward", opt.caps_backward, "Only kernels with a backward pass");
  caps->add_option("--dtype", opt.caps_dtype, "Only kernels with this dtype");
  caps->add_option("--device-type", opt.caps_device, "Only cpu or cuda kernels");
  caps->add_option("--head-dim", opt.caps_head_dim, "Only kernels with this head dim");

  auto* masks = app.add_subcommand("masks", "Mask patterns with their parameters; --show draws one");
  masks->add_option("--show", opt.show_mask, "Pattern to draw");
  masks->add_option("--seqlen", opt.show_seqlen, "Tokens for --show (default 64)");
  masks->add_option("--param", opt.show_params, "Parameter k=v (repeatable)");
  masks->add_option("--seed", opt.show_seed, "Seed for --show (default 42)")->check(lca::app::unsigned_64());
  masks->add_option("--png", opt.show_png, "Also write the mask as a PNG");
  masks->add_option("--width", opt.show_width, "Characters across, 1 to 4096 (default 64)")->check(CLI::Range(1, 4096));

  auto* probe = app.add_subcommand(
      "cp-probe", "Communicator bandwidth and latency under mpirun (ring neighbours, all-to-all): "
                  "mpirun -np N lcahost cp-probe --out probe.json");
  probe->fallthrough();
  probe->add_option("--sizes", opt.probe_sizes,
                    "Message sizes, bytes a rank with K/M/G suffixes (default 64K,1M,16M,256M on GPUs; up to 16M on "
                    "the CPU)");
  probe->add_option("--warmup", opt.probe_warmup, "Untimed calls a size (default 3)")->check(CLI::Range(0, 1000));
  probe->add_option("--repeats", opt.probe_repeats, "Timed calls a size, the median kept (default 10)")
      ->check(CLI::Range(1, 10000));

  auto* model = app.add_subcommand(
      "cp-model", "Predicted per-GPU TFLOP/s of each CP strategy at 8..96 GPUs from the mask's layout, the local "
                  "kernel's rate and the links; --validate R.jsonl checks it against measured CP cells");
  model->fallthrough();
  model->add_option("--strategies", opt.model_strategies, "Strategies (comma separated; default all six)")
      ->delimiter(',');
  model->add_option("--worlds", opt.model_worlds, "World sizes (default 8,16,32,64,96)")
      ->delimiter(',')
      ->check(CLI::Range(1, 65536));
  auto* gpn = model->add_option("--gpus-per-node", opt.model_gpus_per_node,
                                "GPUs a node (default 8; --validate: the run's local size)")
                  ->check(CLI::Range(1, 1024));
  model->add_option("--tokens-per-gpu", opt.model_tokens_per_gpu, "Tokens a GPU (default 32768)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  model->add_option("--seqlen", opt.model_seqlen, "Total tokens instead, the same at every world size")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  model->add_option("--heads-q", opt.model_heads_q, "Query heads (default 64)")->check(CLI::Range(1, 4096));
  model->add_option("--heads-kv", opt.model_heads_kv, "KV heads (default 8)")->check(CLI::Range(1, 4096));
  model->add_option("--head-dim", opt.model_head_dim, "Head dim (default 128)")->check(CLI::Range(1, 4096));
  model->add_option("--dtype", opt.model_dtype, "bf16 (default), f16 or f32")
      ->check(CLI::IsMember({"bf16", "f16", "f32"}));
  model->add_option("--pass", opt.model_passes, "fwd, bwd or fwd,bwd (default fwd)")
      ->delimiter(',')
      ->check(CLI::IsMember({"fwd", "bwd"}));
  model->add_option("--seed", opt.model_seed, "Mask seed (default 42, the matrices' default)")
      ->check(lca::app::unsigned_64());
  model->add_option("--probe", opt.model_probe, "Links from a probe file (lcahost cp-probe --out)");
  model->add_option("--rates", opt.model_rates,
                    "Single-GPU results (JSON Lines, repeatable): the local kernel's TFLOP/s for the mask, shape and "
                    "pass at the total length or the nearest");
  model->add_option("--rate-kernel", opt.model_rate_kernel, "The kernel whose rate --rates gives (default flex_flash)");
  model->add_option("--rate-from", opt.model_rate_from,
                    "A mask (e.g. causal_document:dist=chatqa) whose --rates record times a tile for masks that have "
                    "none; such a mask's one-GPU time is then its own tiles at that time (--kernel-time tiles)");
  model->add_option("--rate", opt.model_rate, "The local kernel's TFLOP/s instead of --rates")
      ->check(lca::app::finite_number(0.0, 1e6, true));
  model->add_option("--kernel-time", opt.model_kernel_time,
                    "How a local kernel call is timed: tiles (default: the tiles its schedule computes, at the "
                    "one-GPU time of a tile; needs --rates) or area (its FLOPs at the one-GPU TFLOP/s)")
      ->check(CLI::IsMember({"tiles", "area"}));
  model->add_option("--call-us", opt.model_call_us, "Fixed cost of one local kernel call in us (default 0)")
      ->check(lca::app::finite_number(0.0, 1e6));
  model->add_option("--intra-gbps", opt.model_intra_GBps,
                    "Intra-node GB/s a GPU and direction (default 300: NVLink 4, 450 peak, at p2p efficiency)")
      ->check(lca::app::finite_number(0.0, 1e6, true));
  model->add_option("--intra-us", opt.model_intra_us, "Intra-node latency in us (default 10)")
      ->check(lca::app::finite_number(0.0, 1e6));
  model->add_option("--inter-gbps", opt.model_inter_GBps,
                    "Inter-node GB/s a GPU and direction (default 45: 400 Gb/s InfiniBand a GPU)")
      ->check(lca::app::finite_number(0.0, 1e6, true));
  model->add_option("--inter-us", opt.model_inter_us, "Inter-node latency in us (default 15)")
      ->check(lca::app::finite_number(0.0, 1e6));
  model->add_option("--message-us", opt.model_message_us,
                    "Cost in us of each message a rank posts in a grouped call beyond one each way a peer (group-cast "
                    "segments; default 0)")
      ->check(lca::app::finite_number(0.0, 1e6));
  model->add_option("--memory-gbps", opt.model_hbm_GBps,
                    "GB/s of the engine's memory-bound passes (merges, fills, packing; default 2000)")
      ->check(lca::app::finite_number(0.0, 1e6, true));
  model->add_option("--validate", opt.model_validate,
                    "A CP results file: predict each measured multi-GPU cell and print the error");
  model->add_flag("--breakdown", opt.model_breakdown,
                  "Split the slowest rank's time: the ideal (one GPU / world), imbalance, tiles (cut tiles and fixed "
                  "costs beyond the one-GPU mask's), exposed transfers, memory passes; with --validate, beside the "
                  "measured per-rank kernel and comm ms");
  model->add_option("--json", opt.model_json,
                    "Also write the predictions as JSON to this file (with --validate: each cell measured and predicted, and the summary)");
  model->add_option("--format", opt.format, "table or md")->check(CLI::IsMember({"table", "md"}));

  auto* kmodel = app.add_subcommand(
      "kernel-model", "flex_flash's share of its own full as its schedule predicts it, without a GPU: for a matrix's "
                      "cells (--matrix, --masks, --seqlens), or beside the shares a run measured (--validate R.jsonl)");
  kmodel->fallthrough();
  kmodel->add_option("--validate", opt.kmodel_validate,
                     "Results files (repeatable): predict each measured cell's share of its own full (same run, "
                     "length, heads, head dim, dtype, pass) and print how far apart they are");
  kmodel->add_option("--kernel", opt.kmodel_kernel, "The row (a label) whose cells --validate reads (default flex_flash)");
  kmodel->add_option("--worst", opt.kmodel_worst, "Cells listed a pass, furthest below the prediction (default 10)")
      ->check(CLI::Range(0, 100000));
  kmodel->add_option("--sms", opt.kmodel_sms, "With --matrix: the GPU's SMs (default 132, an H100's)")
      ->check(CLI::Range(1, 4096));
  kmodel->add_option("--l2-mib", opt.kmodel_l2_mib, "With --matrix: the GPU's L2 in MiB (default 50, an H100's)")
      ->check(CLI::Range(1, 1 << 20));

  auto* run_cell = app.add_subcommand("run-cell", "Internal: run one cell and print its result (used by --isolate)");
  run_cell->group("");
  run_cell->add_option("--cell", opt.cell_json, "The cell as JSON")->required();

  // report and compare belong to the report script: every argument after the name goes to it
  // unparsed, --help included (the script prints its own).
  auto* report = app.add_subcommand("report", "Charts (PNG) and summary.md of results: report R.jsonl... --out DIR");
  auto* compare = app.add_subcommand("compare", "B/A cell by cell with the noise band: compare A.jsonl B.jsonl");
  for (auto* sub : {report, compare}) sub->allow_extras()->prefix_command()->set_help_flag();

  app.require_subcommand(0, 1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version end here with 0; any bad command line exits 2, like the errors below.
    return app.exit(e) == 0 ? 0 : 2;
  }
  lca::app::configure_logging(opt);
  opt.argv0 = argv[0];

  try {
    if (*list) return lca::app::cmd_list(opt);
    if (*caps) return lca::app::cmd_caps(opt);
    if (*masks) return lca::app::cmd_masks(opt);
    if (*run_cell) return lca::app::cmd_run_cell(opt);
    if (*kmodel) return lca::app::cmd_kernel_model(opt);
    if (*model) {
      opt.model_gpus_per_node_given = gpn->count() > 0;
      return lca::app::cmd_cp_model(opt);
    }
    if (*probe) {
      opt.cp_probe = true;
      return lca::app::cmd_cp_probe(opt, &argc, &argv);
    }
    if (*report) return lca::app::cmd_script("report", report->remaining());
    if (*compare) return lca::app::cmd_script("compare", compare->remaining());
    if (!opt.cp.empty()) return lca::app::cmd_cp(opt, &argc, &argv);
    if (!opt.matrix.empty() || !opt.resume.empty() || opt.retry_errors) return lca::app::cmd_run(opt);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 2;
  }
  std::cout << app.help();
  return 0;
}
