#pragma once
// What a run tells its user: one JSON object per line in RUN_DIR/metrics.jsonl, and a progress
// line (redrawn in place on a terminal, plain lines otherwise).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "weft/data/balance.hpp"
#include "weft/model/moe_comm.hpp"

namespace weft::train {

// A step's mixture-of-experts fields of metrics.jsonl: moe_aux_loss (what the router losses
// added to the training loss; moe_load_balance_loss and moe_z_loss its two parts), per layer
// the fewest and most slots any expert received (moe_tokens_min, moe_tokens_max), and
// moe_dropped_fraction (slots beyond capacity, of all routed).
nlohmann::json moe_metrics(const model::MoeStats& s);

// A packed step's fields of metrics.jsonl: over the data-parallel ranks, the ratio of the most
// to the fewest tokens (padding excluded) and of the most to the least attention FLOPs
// (`flops_per_square` times the sum of n^2 over a rank's documents, padding included), and the
// busiest rank's attention FLOPs; balanced (`unbalanced`: the static layout it replaced) also
// the rows each rank ran, the padding tokens of all ranks, and the static layout's ratios.
// `per_document_ring` > 1: each row runs as the per-document zigzag over that many ranks
// (data::fitted_zigzag), counted so, per (dp, ring) rank.
nlohmann::json packing_metrics(const data::RankRows& layout, const data::RankRows* unbalanced,
                               double flops_per_square, int per_document_ring = 1);

// Replaces `file` (atomically: ckpt::write_file_atomic) by the lines a run starting at
// `start_step` keeps: those of steps up to it, and lines without a step (events) written before
// the first line of a later step. A start from 0 keeps nothing; a last line without its newline,
// torn by a crash, goes too. Returns the number of lines dropped; a missing file, or one with
// nothing to drop, is left as it is.
int64_t drop_redone_metrics(const std::filesystem::path& file, int64_t start_step);

class MetricsLog {
  public:
    MetricsLog() = default;
    // Continues the log of a run that starts at `start_step` (0: from scratch): first drops the
    // lines an earlier attempt wrote for steps after it, which this run redoes, so that each
    // step is in the file once (drop_redone_metrics), then appends.
    MetricsLog(const std::filesystem::path& file, int64_t start_step);
    MetricsLog(const MetricsLog&) = delete;
    MetricsLog& operator=(const MetricsLog&) = delete;
    ~MetricsLog();
    void write(const nlohmann::json& line);

  private:
    std::FILE* f_ = nullptr;
};

class Progress {
  public:
    Progress(int64_t first_step, int64_t total_steps);
    // One line per call: step/total, loss, tokens/s, ETA (and MFU when known).
    void step(int64_t step, double loss, double tokens_per_s, double mfu, double lr);
    void note(const std::string& line);  // a line that must not be overwritten (eval, save)
    void finish();

  private:
    bool tty_;
    bool open_line_ = false;
    bool timing_ = false;  // set at the first step(): first_ and start_ are then that step's
    int64_t first_, total_;
    std::chrono::steady_clock::time_point start_;
};

}  // namespace weft::train
