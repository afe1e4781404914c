#include "weft/serve/bench_client.hpp"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <random>
#include <regex>
#include <thread>

#include "weft/core/error.hpp"

namespace weft::serve {

namespace {
using Clock = std::chrono::steady_clock;
constexpr int kMaxWorkers = 256;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

httplib::Headers auth_headers(const std::string& key) {
    if (key.empty()) return {};
    return {{"Authorization", "Bearer " + key}};
}

// An OpenAI error object's message, else the body itself (cut short).
std::string error_message(int status, const std::string& body) {
    nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
    if (j.is_object() && j.contains("error") && j["error"].is_object() &&
        j["error"].contains("message") && j["error"]["message"].is_string())
        return fmt::format("HTTP {}: {}", status, j["error"]["message"].get<std::string>());
    return fmt::format("HTTP {}: {}", status, body.substr(0, 200));
}

// One streaming completion, timed from the moment it is sent: the first chunk with text is the
// first token, later ones give the inter-token gaps (a server that sends several tokens in one
// chunk shows one gap for them, as in vLLM's benchmark); the output count is the server's usage.
RequestTiming run_request(const BenchServeOptions& o, const std::string& model,
                          const nlohmann::json& prompt) {
    RequestTiming t;
    httplib::Client cli(o.url);
    cli.set_connection_timeout(5);
    const auto timeout = std::chrono::duration<double>(o.timeout_s);
    cli.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
    nlohmann::json body = {{"prompt", prompt},
                           {"max_tokens", o.output_len},
                           {"temperature", o.temperature},
                           {"stream", true},
                           {"stream_options", {{"include_usage", true}}},
                           // Honoured by weft, vLLM and llama.cpp.
                           {"ignore_eos", true}};
    if (!model.empty()) body["model"] = model;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.headers = auth_headers(o.api_key);
    req.set_header("Content-Type", "application/json");
    req.body = body.dump();
    std::string raw, pending;
    double last = 0;
    int64_t text_chunks = 0;
    bool done = false;
    const Clock::time_point t0 = Clock::now();
    httplib::Response res;
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
        const double now = seconds_since(t0);
        raw.append(data, n);
        pending.append(data, n);
        size_t eol;
        while ((eol = pending.find('\n')) != std::string::npos) {
            std::string line = pending.substr(0, eol);
            pending.erase(0, eol + 1);
            if (!line.empty() && line.back() == '\r') line.pop_back();
            if (line.rfind("data: ", 0) != 0) continue;
            line.erase(0, 6);
            if (line == "[DONE]") {
                done = true;
                continue;
            }
            nlohmann::json c = nlohmann::json::parse(line, nullptr, false);
            if (!c.is_object()) continue;
            if (c.contains("usage") && c["usage"].is_object()) {
                t.output_tokens = c["usage"].value("completion_tokens", int64_t(0));
                t.prompt_tokens = c["usage"].value("prompt_tokens", int64_t(0));
            }
            if (!c.contains("choices") || !c["choices"].is_array() || c["choices"].empty())
                continue;
            const nlohmann::json& ch = c["choices"][0];
            if (!ch.contains("text") || !ch["text"].is_string() ||
                ch["text"].get<std::string>().empty())
                continue;
            if (text_chunks++ == 0)
                t.ttft = now;
            else
                t.itl.push_back(now - last);
            last = now;
        }
        return true;
    };
    httplib::Error err = httplib::Error::Success;
    const bool sent = cli.send(req, res, err);
    t.e2e = seconds_since(t0);
    if (!sent) {
        t.error = fmt::format("no answer: {}", httplib::to_string(err));
    } else if (res.status != 200) {
        t.error = error_message(res.status, raw);
    } else if (!done) {
        t.error = "the stream ended without data: [DONE]";
    } else if (text_chunks == 0) {
        t.error = "the stream carried no text";
    } else {
        t.ok = true;
        // A server that does not report usage in a stream: one token per chunk.
        if (t.output_tokens == 0) t.output_tokens = text_chunks;
        if (t.prompt_tokens == 0) t.prompt_tokens = o.prompt_len;
    }
    return t;
}

// The server's first model, and proof that it answers at all.
std::string first_model(const BenchServeOptions& o) {
    httplib::Client cli(o.url);
    cli.set_connection_timeout(5);
    cli.set_read_timeout(30);
    httplib::Result r = cli.Get("/v1/models", auth_headers(o.api_key));
    WEFT_CHECK(r,
               "cannot reach --url {} ({} error): is an OpenAI-compatible server listening there?",
               o.url, httplib::to_string(r.error()));
    WEFT_CHECK(r->status != 401 && r->status != 403, "--url {} refused the API key: {}", o.url,
               error_message(r->status, r->body));
    if (r->status != 200) return "";
    nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
    if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
        j["data"][0].contains("id") && j["data"][0]["id"].is_string())
        return j["data"][0]["id"].get<std::string>();
    return "";
}

// The options checked, and the URL without the "/v1" that `weft serve` prints after it.
BenchServeOptions checked(BenchServeOptions o) {
    static const std::regex url_re(
        R"((http://(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.\-]+):([0-9]{1,5}))(/v1)?/?)");
    std::smatch m;
    WEFT_CHECK(std::regex_match(o.url, m, url_re) && std::stoi(m[2]) > 0 && std::stoi(m[2]) < 65536,
               "--url '{}' is not http://HOST:PORT (a scheme, a host and a port, e.g. "
               "http://127.0.0.1:8080)",
               o.url);
    WEFT_CHECK(o.requests >= 1, "--requests must be at least 1, got {}", o.requests);
    WEFT_CHECK(o.rate > 0, "--rate must be positive requests/s (or inf: all at once), got {}",
               o.rate);
    WEFT_CHECK(o.max_concurrency >= 0 && o.max_concurrency <= kMaxWorkers,
               "--max-concurrency must be 0 (no limit but {0}) to {0}, got {1}", kMaxWorkers,
               o.max_concurrency);
    WEFT_CHECK(o.prompt_len >= 1, "--prompt-len must be at least 1 token, got {}", o.prompt_len);
    WEFT_CHECK(o.output_len >= 1, "--output-len must be at least 1 token, got {}", o.output_len);
    WEFT_CHECK(o.ttft_slo_ms >= 0, "--ttft-slo-ms must be positive, got {}", o.ttft_slo_ms);
    WEFT_CHECK(o.tpot_slo_ms >= 0, "--tpot-slo-ms must be positive, got {}", o.tpot_slo_ms);
    WEFT_CHECK(o.timeout_s > 0, "--timeout must be positive seconds, got {}", o.timeout_s);
    o.url = m[1];
    return o;
}

// numpy's default percentile: linear between the two nearest ranks.
double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const double x = p / 100 * double(v.size() - 1);
    const size_t lo = size_t(std::floor(x)), hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (x - double(lo)) * (v[hi] - v[lo]);
}

nlohmann::json stats_ms(const std::vector<double>& s) {
    double sum = 0;
    for (double x : s) sum += x;
    return {{"mean", s.empty() ? 0 : 1000 * sum / double(s.size())},
            {"median", 1000 * percentile(s, 50)},
            {"p99", 1000 * percentile(s, 99)}};
}
}  // namespace

BenchServeReport bench_serve(const BenchServeOptions& given) {
    const BenchServeOptions o = checked(given);
    const std::string served = first_model(o);
    BenchServeReport r{o.url, o.model.empty() ? served : o.model, o, {}, 0};
    // Prompts of ids from a small range every vocabulary has (no special tokens up there), or of
    // common words that most BPE vocabularies hold whole (with their leading space); different
    // per request so that no server can reuse one prompt's cache for the next.
    static const char* const words[] = {
        "the",  "of",  "and", "to",   "in", "that", "is",    "was",  "for", "on",  "with",
        "as",   "his", "he",  "it",   "at", "by",   "be",    "this", "had", "not", "but",
        "from", "are", "or",  "have", "an", "they", "which", "one",  "you", "were"};
    std::mt19937_64 gen(o.seed);
    std::uniform_int_distribution<int> id(1000, 1999), word(0, int(std::size(words)) - 1);
    std::vector<nlohmann::json> prompts(size_t(o.requests));
    for (nlohmann::json& p : prompts) {
        std::vector<int> ids;
        std::string text;
        for (int k = 0; k < o.prompt_len; ++k) {
            if (o.text_prompt)
                text += std::string(" ") + words[word(gen)];
            else
                ids.push_back(id(gen));
        }
        p = o.text_prompt ? nlohmann::json(text) : nlohmann::json(ids);
    }
    std::exponential_distribution<double> gap(std::isinf(o.rate) ? 1.0 : o.rate);
    std::vector<double> arrivals(size_t(o.requests));
    for (size_t i = 1; i < arrivals.size(); ++i)
        arrivals[i] = arrivals[i - 1] + (std::isinf(o.rate) ? 0 : gap(gen));
    // A pool of workers, each taking the next request at its arrival time: at most the pool's
    // size in flight (a request that finds every worker busy is sent late, as a capped client
    // would), and never more threads than kMaxWorkers whatever --requests says.
    const int workers = std::min(
        {o.max_concurrency > 0 ? o.max_concurrency : kMaxWorkers, o.requests, kMaxWorkers});
    r.requests.resize(size_t(o.requests));
    std::atomic<size_t> next{0};
    const Clock::time_point t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int w = 0; w < workers; ++w)
        pool.emplace_back([&] {
            for (size_t i; (i = next.fetch_add(1)) < arrivals.size();) {
                std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(
                                                       std::chrono::duration<double>(arrivals[i])));
                const double start = seconds_since(t0);
                r.requests[i] = run_request(o, r.model, prompts[i]);
                r.requests[i].start = start;
            }
        });
    for (std::thread& t : pool) t.join();
    r.duration_s = seconds_since(t0);
    return r;
}

nlohmann::json report_json(const BenchServeReport& r) {
    const BenchServeOptions& o = r.options;
    std::vector<double> ttft, tpot, itl, e2e;
    int64_t ok = 0, input = 0, output = 0, good = 0;
    nlohmann::json errors = nlohmann::json::array();
    for (const RequestTiming& t : r.requests) {
        if (!t.ok) {
            if (errors.size() < 5) errors.push_back(t.error);
            continue;
        }
        ++ok;
        input += t.prompt_tokens;
        output += t.output_tokens;
        ttft.push_back(t.ttft);
        e2e.push_back(t.e2e);
        const double per_token =
            t.output_tokens > 1 ? (t.e2e - t.ttft) / double(t.output_tokens - 1) : 0;
        tpot.push_back(per_token);
        itl.insert(itl.end(), t.itl.begin(), t.itl.end());
        if ((o.ttft_slo_ms == 0 || 1000 * t.ttft <= o.ttft_slo_ms) &&
            (o.tpot_slo_ms == 0 || 1000 * per_token <= o.tpot_slo_ms))
            ++good;
    }
    const double d = r.duration_s;
    nlohmann::json j = {
        {"url", r.url},
        {"model", r.model},
        {"requests", o.requests},
        {"rate", std::isinf(o.rate) ? nlohmann::json("inf") : nlohmann::json(o.rate)},
        {"max_concurrency", o.max_concurrency},
        {"prompt_len", o.prompt_len},
        {"prompt_kind", o.text_prompt ? "text" : "token ids"},
        {"output_len", o.output_len},
        {"temperature", o.temperature},
        {"seed", o.seed},
        {"successful_requests", ok},
        {"failed_requests", int64_t(r.requests.size()) - ok},
        {"errors", errors},
        {"duration_s", d},
        {"total_input_tokens", input},
        {"total_output_tokens", output},
        {"request_throughput", double(ok) / d},
        {"output_throughput", double(output) / d},
        {"total_token_throughput", double(input + output) / d},
        {"ttft_ms", stats_ms(ttft)},
        {"tpot_ms", stats_ms(tpot)},
        {"itl_ms", stats_ms(itl)},
        {"e2e_ms", stats_ms(e2e)},
        {"per_request", nlohmann::json::array()}};
    for (const RequestTiming& t : r.requests)
        j["per_request"].push_back({{"ok", t.ok},
                                    {"start_ms", 1000 * t.start},
                                    {"ttft_ms", 1000 * t.ttft},
                                    {"e2e_ms", 1000 * t.e2e},
                                    {"prompt_tokens", t.prompt_tokens},
                                    {"output_tokens", t.output_tokens}});
    if (o.ttft_slo_ms > 0 || o.tpot_slo_ms > 0) {
        j["ttft_slo_ms"] = o.ttft_slo_ms;
        j["tpot_slo_ms"] = o.tpot_slo_ms;
        j["goodput"] = double(good) / d;
    }
    return j;
}

std::string report_table(const nlohmann::json& j) {
    std::string s;
    auto row = [&s](const std::string& k, const std::string& v) {
        s += fmt::format("{:<34}{:>14}\n", k, v);
    };
    auto num = [](double x, int prec) { return fmt::format("{:.{}f}", x, prec); };
    const std::string rate = j["rate"].is_string() ? "inf" : num(j["rate"].get<double>(), 2);
    s += fmt::format("{:=^48}\n", " Serving Benchmark Result ");
    row("Server:", j["url"].get<std::string>());
    row("Model:", j["model"].get<std::string>());
    row("Request rate (req/s):", rate);
    row("Successful requests:", std::to_string(j["successful_requests"].get<int64_t>()));
    row("Failed requests:", std::to_string(j["failed_requests"].get<int64_t>()));
    row("Benchmark duration (s):", num(j["duration_s"], 2));
    row("Total input tokens:", std::to_string(j["total_input_tokens"].get<int64_t>()));
    row("Total generated tokens:", std::to_string(j["total_output_tokens"].get<int64_t>()));
    row("Request throughput (req/s):", num(j["request_throughput"], 2));
    row("Output token throughput (tok/s):", num(j["output_throughput"], 2));
    row("Total token throughput (tok/s):", num(j["total_token_throughput"], 2));
    if (j.contains("goodput")) row("Request goodput (req/s):", num(j["goodput"], 2));
    const std::pair<const char*, const char*> sections[] = {{"ttft_ms", "Time to First Token"},
                                                            {"tpot_ms", "Time per Output Token"},
                                                            {"itl_ms", "Inter-token Latency"}};
    for (const auto& [key, title] : sections) {
        s += fmt::format("{:-^48}\n", fmt::format(" {} ", title));
        const std::string k = std::string(key).substr(0, std::string(key).find('_'));
        std::string up = k;
        for (char& c : up) c = char(std::toupper(c));
        row(fmt::format("Mean {} (ms):", up), num(j[key]["mean"], 2));
        row(fmt::format("Median {} (ms):", up), num(j[key]["median"], 2));
        row(fmt::format("P99 {} (ms):", up), num(j[key]["p99"], 2));
    }
    for (const auto& e : j["errors"]) s += fmt::format("error: {}\n", e.get<std::string>());
    s += fmt::format("{:=^48}\n", "");
    return s;
}

}  // namespace weft::serve
