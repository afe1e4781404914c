#pragma once
// The load generator of `weft bench serve`: streaming /v1/completions calls at Poisson arrival
// times against any OpenAI-compatible server (weft's, llama.cpp's, vLLM's), timed per request
// as vLLM's benchmark_serving times them. No model code: it only speaks HTTP.
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace weft::serve {

struct BenchServeOptions {
    std::string url;  // http://HOST:PORT, or with the /v1 that `weft serve` prints
    int requests = 0;
    double rate = std::numeric_limits<double>::infinity();  // requests/s; inf: all at once
    int max_concurrency = 0;                                // 0: up to 256
    int prompt_len = 0, output_len = 0;
    double temperature = 0;    // every request's; 0: greedy
    bool text_prompt = false;  // words instead of token ids: the server's usage counts tokens
    uint64_t seed = 1337;
    std::string api_key, model;               // model "": the server's first /v1/models
    double ttft_slo_ms = 0, tpot_slo_ms = 0;  // 0: not given
    double timeout_s = 600;                   // per request
};

struct RequestTiming {
    bool ok = false;
    std::string error;
    double start = 0;          // seconds from the benchmark's start to sending
    double ttft = 0, e2e = 0;  // seconds from sending
    std::vector<double> itl;   // gaps between the chunks that carried text
    int64_t prompt_tokens = 0, output_tokens = 0;
};

struct BenchServeReport {
    std::string url, model;
    BenchServeOptions options;
    std::vector<RequestTiming> requests;
    double duration_s = 0;
};

// Checks the options, reaches the server (its /v1/models: the model name and whether it is
// there at all), then sends the requests; throws weft::Error on bad options or an unreachable
// server.
BenchServeReport bench_serve(const BenchServeOptions& o);

// vLLM's figures: counts, throughputs, mean / median / p99 of TTFT, TPOT and ITL in ms, goodput.
nlohmann::json report_json(const BenchServeReport& r);
std::string report_table(const nlohmann::json& j);

}  // namespace weft::serve
