#pragma once
// The run directory's checkpoint bookkeeping:
//   RUN_DIR/checkpoints/step_000123/   written whole by write_dir_atomic
//   RUN_DIR/checkpoints/latest         "step_000123\n", replaced atomically after the dir is
//   complete
// `latest` is the commit point: a step directory it does not name is ignored on resume (with
// several ranks writing, only the committer knows that every rank has finished), and a `latest`
// that names a missing directory is an error rather than a silent restart from scratch.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace weft::ckpt {

// RUN_DIR/checkpoints/step_<step, zero-padded to 6 digits>.
std::filesystem::path checkpoint_path(const std::filesystem::path& run_dir, int64_t step);

// The step of a directory name "step_<digits>", or nullopt if the name is not of that form.
std::optional<int64_t> parse_step_name(std::string_view name);

// Points RUN_DIR/checkpoints/latest at checkpoint_path(run_dir, step), which must exist.
void commit_latest(const std::filesystem::path& run_dir, int64_t step);

// The checkpoint directory `latest` names, or nullopt if there is no `latest`. Throws if `latest`
// is malformed or names a directory that does not exist.
std::optional<std::filesystem::path> find_latest(const std::filesystem::path& run_dir);

// Removes `.tmp-*` entries that crashed writes left in RUN_DIR and RUN_DIR/checkpoints. Call it at
// start, before any writer of this run is active: it would also remove a write in progress.
void remove_stale_temporaries(const std::filesystem::path& run_dir);

// Accepts a checkpoint directory itself (named step_<N>, or holding a manifest.json or a
// .safetensors file) or a run
// directory (one with checkpoints/, then its latest). Throws naming the path otherwise.
std::filesystem::path resolve_checkpoint(const std::filesystem::path& dir_or_run);

// Deletes step directories beyond the newest max(n, 2) (n >= 1), never the one `latest` names.
// At least two are kept so that a damaged newest checkpoint still leaves one to resume from.
void keep_last(const std::filesystem::path& run_dir, int n);

// The step directories of RUN_DIR/checkpoints (committed or not), newest first.
std::vector<std::pair<int64_t, std::filesystem::path>> list_checkpoints(
    const std::filesystem::path& run_dir);

}  // namespace weft::ckpt
