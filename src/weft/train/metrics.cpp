#include "weft/train/metrics.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <string_view>

#include "weft/ckpt/atomic.hpp"
#include "weft/core/error.hpp"
#include "weft/data/doc_zigzag.hpp"

namespace weft::train {

nlohmann::json moe_metrics(const model::MoeStats& s) {
    const int64_t E = s.n_experts, layers = E > 0 ? int64_t(s.tokens.size()) / E : 0;
    nlohmann::json lo = nlohmann::json::array(), hi = nlohmann::json::array();
    for (int64_t l = 0; l < layers; ++l) {
        const auto first = s.tokens.begin() + l * E;
        const auto [mn, mx] = std::minmax_element(first, first + E);
        lo.push_back(int64_t(*mn));
        hi.push_back(int64_t(*mx));
    }
    return {{"moe_aux_loss", s.aux_loss + s.z_loss},
            {"moe_load_balance_loss", s.aux_loss},
            {"moe_z_loss", s.z_loss},
            {"moe_tokens_min", lo},
            {"moe_tokens_max", hi},
            {"moe_dropped_fraction", s.slots > 0 ? s.dropped / s.slots : 0.0}};
}

nlohmann::json packing_metrics(const data::RankRows& layout, const data::RankRows* unbalanced,
                               double flops_per_square, int per_document_ring) {
    auto work = [&](const data::RankRows& rows) {
        return per_document_ring > 1 ? data::rank_work_per_document(rows, per_document_ring)
                                     : data::rank_work(rows);
    };
    const data::RankWork w = work(layout);
    nlohmann::json line = {{"rank_tokens_ratio", w.tokens_ratio()},
                           {"rank_attention_flops_ratio", w.squares_ratio()},
                           {"rank_attention_flops_max", w.max_squares() * flops_per_square}};
    if (unbalanced) {
        const data::RankWork s = work(*unbalanced);
        line.update({{"rows_per_rank", layout.rows_per_rank},
                     {"padding_tokens", w.padding},
                     {"static_rank_attention_flops_ratio", s.squares_ratio()},
                     {"static_rank_attention_flops_max", s.max_squares() * flops_per_square}});
    }
    return line;
}

int64_t drop_redone_metrics(const std::filesystem::path& file, int64_t start_step) {
    std::ifstream in(file, std::ios::binary);
    if (!in) return 0;
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    WEFT_CHECK(!in.bad(), "cannot read metrics file {}", file.string());
    std::string kept;
    int64_t dropped = 0;
    bool later = false;  // a line of a step after start_step has been seen
    for (size_t at = 0; at < text.size();) {
        const size_t end = text.find('\n', at);
        if (end == std::string::npos) {  // torn: the next line would be glued to it
            ++dropped;
            break;
        }
        const std::string_view line(text.data() + at, end + 1 - at);
        at = end + 1;
        const auto j = nlohmann::json::parse(line.begin(), line.end(), nullptr, false);
        const bool stepped = j.is_object() && j.contains("step") && j["step"].is_number_integer();
        const int64_t step = stepped ? j["step"].get<int64_t>() : 0;
        later = later || (stepped && step > start_step);
        if (start_step > 0 && (stepped ? step <= start_step : !later)) {
            kept.append(line);
        } else {
            ++dropped;
        }
    }
    // Rewritten rather than cut at the first later line: an asynchronous checkpoint's commit
    // line (a step the run keeps) can come after the next step's line, so what is kept is not
    // always a prefix; and the atomic rename leaves the old file or the new one, never a half.
    if (dropped > 0) ckpt::write_file_atomic(file, kept);
    return dropped;
}

MetricsLog::MetricsLog(const std::filesystem::path& file, int64_t start_step) {
    drop_redone_metrics(file, start_step);
    f_ = std::fopen(file.c_str(), "a");
    WEFT_CHECK(f_ != nullptr, "cannot open metrics file {} for appending", file.string());
}

MetricsLog::~MetricsLog() {
    if (f_) std::fclose(f_);
}

void MetricsLog::write(const nlohmann::json& line) {
    if (!f_) return;
    std::string s = line.dump();
    s.push_back('\n');
    std::fwrite(s.data(), 1, s.size(), f_);
    std::fflush(f_);  // a crashed run keeps every line it reported
}

Progress::Progress(int64_t first_step, int64_t total_steps)
    : tty_(isatty(STDERR_FILENO)),
      first_(first_step),
      total_(total_steps),
      start_(std::chrono::steady_clock::now()) {}

static std::string format_duration(double s) {
    if (s < 0 || s > 1e7) return "?";
    int64_t t = int64_t(s + 0.5);
    if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, t / 60 % 60);
    if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
    return fmt::format("{}s", t);
}

void Progress::step(int64_t step, double loss, double tokens_per_s, double mfu, double lr) {
    const auto now = std::chrono::steady_clock::now();
    // The rate is timed from the end of the first step this run reports: what came before it
    // (the step-0 evaluation, the first step's allocations and page faults) made the main job's
    // first ETA five times too long (37 minutes for 7). The first step shows "?".
    if (!timing_) timing_ = true, first_ = step, start_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const int64_t done = step - first_, left = total_ - step;
    const double eta = left == 0 ? 0 : done > 0 ? elapsed / double(done) * double(left) : -1;
    std::string line = fmt::format(
        "step {:>{}}/{} | loss {:.4f} | lr {:.2e} | {:.0f} tok/s | mfu {:.1f}% | eta {}", step,
        std::to_string(total_).size(), total_, loss, lr, tokens_per_s, mfu * 100,
        format_duration(eta));
    if (tty_) {
        fmt::print(stderr, "\r\033[K{}", line);
        open_line_ = true;
    } else {
        fmt::print(stderr, "{}\n", line);
    }
    std::fflush(stderr);
}

void Progress::note(const std::string& line) {
    if (open_line_) fmt::print(stderr, "\n");
    open_line_ = false;
    fmt::print(stderr, "{}\n", line);
    std::fflush(stderr);
}

void Progress::finish() {
    if (open_line_) fmt::print(stderr, "\n");
    open_line_ = false;
}

}  // namespace weft::train
