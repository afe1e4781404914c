#pragma once
// Published training runs the planner is checked against (data/published_runs.json): each run's
// model, cluster, layout and what its authors measured, converted to a step time, and the
// planner's prediction for the same layout. Runs are either the calibration set (the numbers the
// cluster files' efficiencies were tuned to) or the check set (never tuned on). docs/planner.md
// lists every run with its source.
#include <filesystem>
#include <string>
#include <vector>

#include "weft/plan/cost.hpp"

namespace weft::plan {

struct PublishedRun {
    std::string name, set, source, url, cluster;
    Workload work;
    Candidate cand;
    int devices = 0;
    double published_step_s = 0;  // the authors' figure as seconds per optimizer step
    std::string published;        // the figure as they give it ("430 TFLOP/s per GPU")
    // Why the planner's memory cannot be checked against this run (empty: it can; the recipe
    // then must be predicted to fit).
    std::string memory_unchecked;
};

// Reads the runs; models are presets or files under `root`/configs/models, clusters presets
// under `root`/configs/clusters. Errors name the file, the run and the key.
std::vector<PublishedRun> load_published_runs(const std::filesystem::path& file,
                                              const std::filesystem::path& root);

struct RunCheck {
    PublishedRun run;
    Estimate estimate;
    double error = 0;  // predicted / published step time - 1 (negative: optimistic)
};
RunCheck check_run(const PublishedRun& run, const std::filesystem::path& root);

// Text table of the checks and, per set, the mean and worst |error|.
std::string published_report(const std::vector<RunCheck>& checks);

}  // namespace weft::plan
