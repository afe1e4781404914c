#include "weft/ckpt/checkpoint_dir.hpp"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <iterator>
#include <vector>

#include "weft/ckpt/atomic.hpp"
#include "weft/core/error.hpp"

namespace weft::ckpt {
namespace fs = std::filesystem;

namespace {

fs::path checkpoints_dir(const fs::path& run_dir) {
    return run_dir / "checkpoints";
}

std::string_view trim(std::string_view s) {
    const char* ws = " \t\r\n";
    size_t b = s.find_first_not_of(ws);
    if (b == std::string_view::npos) return {};
    return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

}  // namespace

std::vector<std::pair<int64_t, fs::path>> list_checkpoints(const fs::path& run_dir) {
    std::vector<std::pair<int64_t, fs::path>> steps;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(checkpoints_dir(run_dir), ec)) {
        auto step = parse_step_name(entry.path().filename().string());
        if (step && entry.is_directory()) steps.emplace_back(*step, entry.path());
    }
    WEFT_CHECK(!ec || ec == std::errc::no_such_file_or_directory, "cannot list {}: {}",
               checkpoints_dir(run_dir).string(), ec.message());
    std::sort(steps.begin(), steps.end(), [](auto& a, auto& b) { return a.first > b.first; });
    return steps;
}

namespace {

void remove_temporaries_in(const fs::path& dir) {
    std::error_code ec;
    std::vector<fs::path> stale;
    for (const auto& entry : fs::directory_iterator(dir, ec))
        if (entry.path().filename().string().starts_with(kTempPrefix)) stale.push_back(entry);
    if (ec == std::errc::no_such_file_or_directory) return;
    WEFT_CHECK(!ec, "cannot list {} to remove stale temporaries: {}", dir.string(), ec.message());
    for (const fs::path& p : stale) {
        fs::remove_all(p, ec);
        WEFT_CHECK(!ec, "cannot remove stale temporary {}: {}", p.string(), ec.message());
    }
}

}  // namespace

fs::path checkpoint_path(const fs::path& run_dir, int64_t step) {
    WEFT_CHECK(step >= 0, "checkpoint step {} for run {} must be >= 0", step, run_dir.string());
    return checkpoints_dir(run_dir) / fmt::format("step_{:06}", step);
}

std::optional<int64_t> parse_step_name(std::string_view name) {
    constexpr std::string_view prefix = "step_";
    if (!name.starts_with(prefix)) return std::nullopt;
    std::string_view digits = name.substr(prefix.size());
    if (digits.empty() ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return std::nullopt;
    int64_t step = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
    if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
    return step;
}

void commit_latest(const fs::path& run_dir, int64_t step) {
    const fs::path dir = checkpoint_path(run_dir, step);
    WEFT_CHECK(fs::is_directory(dir), "cannot commit step {} as latest: {} does not exist", step,
               dir.string());
    write_file_atomic(checkpoints_dir(run_dir) / "latest", dir.filename().string() + "\n");
}

std::optional<fs::path> find_latest(const fs::path& run_dir) {
    const fs::path latest = checkpoints_dir(run_dir) / "latest";
    std::error_code ec;
    if (!fs::exists(latest, ec)) return std::nullopt;
    std::ifstream in(latest, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    WEFT_CHECK(in.good() || in.eof(), "cannot read {}", latest.string());
    const std::string_view name = trim(text);
    WEFT_CHECK(parse_step_name(name), "{} holds '{}', expected a checkpoint name like step_000123",
               latest.string(), name.substr(0, 100));
    const fs::path dir = checkpoints_dir(run_dir) / name;
    WEFT_CHECK(fs::is_directory(dir),
               "{} names {}, which does not exist; refusing to resume from partial state (expected "
               "the checkpoint directory that latest names)",
               latest.string(), dir.string());
    return dir;
}

void remove_stale_temporaries(const fs::path& run_dir) {
    remove_temporaries_in(run_dir);
    remove_temporaries_in(checkpoints_dir(run_dir));
}

fs::path resolve_checkpoint(const fs::path& dir_or_run) {
    WEFT_CHECK(fs::is_directory(dir_or_run),
               "{} is not a directory (expected a checkpoint directory or a run directory)",
               dir_or_run.string());
    if (fs::is_directory(checkpoints_dir(dir_or_run))) {
        auto latest = find_latest(dir_or_run);
        WEFT_CHECK(latest, "run directory {} has no committed checkpoint (no {})",
                   dir_or_run.string(), (checkpoints_dir(dir_or_run) / "latest").string());
        return *latest;
    }
    const fs::path name =
        dir_or_run.has_filename() ? dir_or_run.filename() : dir_or_run.parent_path().filename();
    if (parse_step_name(name.string())) return dir_or_run;
    for (const auto& entry : fs::directory_iterator(dir_or_run))
        if (entry.is_regular_file() && (entry.path().extension() == ".safetensors" ||
                                        entry.path().filename() == "manifest.json"))
            return dir_or_run;
    fail(
        "{} is neither a checkpoint directory (named step_<N>, or holding a manifest.json or a "
        ".safetensors file) nor "
        "a run directory (holding checkpoints/)",
        dir_or_run.string());
}

void keep_last(const fs::path& run_dir, int n) {
    WEFT_CHECK(n >= 1, "keep_last for {}: n = {}, expected >= 1", run_dir.string(), n);
    const std::optional<fs::path> latest = find_latest(run_dir);
    const auto steps = list_checkpoints(run_dir);
    for (size_t i = size_t(std::max(n, 2)); i < steps.size(); ++i) {
        const fs::path& dir = steps[i].second;
        if (latest && dir.filename() == latest->filename()) continue;
        std::error_code ec;
        fs::remove_all(dir, ec);
        WEFT_CHECK(!ec, "cannot remove old checkpoint {}: {}", dir.string(), ec.message());
    }
}

}  // namespace weft::ckpt
