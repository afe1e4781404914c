#pragma once
// How `weft plan` shows its answer: a table for people, JSON for scripts.
#include <nlohmann/json.hpp>
#include <string>

#include "weft/plan/search.hpp"

namespace weft::plan {

nlohmann::json memory_json(const MemoryBreakdown& m);
nlohmann::json estimate_json(const Estimate& e);
nlohmann::json result_json(const Workload& w, const Cluster& c, const SearchResult& r);
std::string result_text(const Workload& w, const Cluster& c, const SearchResult& r);

}  // namespace weft::plan
