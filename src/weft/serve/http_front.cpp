#include "weft/serve/http_front.hpp"

#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "weft/core/error.hpp"

namespace weft::serve {

using nlohmann::json;

namespace {

void send_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    res.set_content(dump(e.body()), "application/json");
}

int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// Prometheus text exposition of the engine's counters and gauges.
std::string metrics_text(const EngineStats& s) {
    std::string out;
    auto metric = [&](const char* name, const char* type, const char* help, int64_t v) {
        out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, v);
    };
    metric("weft_requests_running", "gauge", "Requests in the running batch.", s.running);
    metric("weft_requests_waiting", "gauge", "Requests queued for a slot or KV blocks.", s.waiting);
    metric("weft_requests_finished_total", "counter", "Requests that left the batch.",
           s.requests_done);
    metric("weft_prompt_tokens_total", "counter", "Prompt tokens computed.", s.prompt_tokens);
    metric("weft_generation_tokens_total", "counter", "Tokens generated.", s.generated_tokens);
    metric("weft_engine_steps_total", "counter", "Engine steps that ran a forward.", s.steps);
    metric("weft_kv_blocks_used", "gauge", "KV cache pool blocks in use.", s.kv_blocks_used);
    metric("weft_kv_blocks_free", "gauge", "KV cache pool blocks free.",
           s.kv_blocks_total - s.kv_blocks_used);
    metric("weft_preemptions_total", "counter",
           "Running requests whose KV blocks were freed, to be recomputed.", s.preemptions);
    metric("weft_spec_guessed_tokens_total", "counter",
           "Guessed tokens verified (--spec; docs/decoding.md).", s.spec_guessed);
    metric("weft_spec_accepted_tokens_total", "counter",
           "Guessed tokens the model agreed with: tokens generated without a step of their own.",
           s.spec_accepted);
    metric("weft_spec_verifies_total", "counter",
           "Decode steps of a request that verified guesses: tokens per step (tau) is "
           "1 + accepted / verifies.",
           s.spec_verifies);
    metric("weft_prefix_cache_hit_tokens_total", "counter",
           "Prompt positions whose keys and values came from another request's blocks.",
           s.prefix_cache_hit_tokens);
    auto histogram = [&](const char* name, const char* help, const Histogram& h) {
        out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
        int64_t below = 0;
        for (size_t i = 0; i < h.bounds.size(); ++i)
            out +=
                fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, h.bounds[i], below += h.counts[i]);
        out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, h.count,
                           name, h.sum, name, h.count);
    };
    histogram("weft_time_to_first_token_seconds",
              "Seconds from a request's arrival to its first generated token (or to its answer, "
              "when it generates none).",
              s.time_to_first_token);
    histogram("weft_time_per_output_token_seconds",
              "Seconds between a request's successive generated tokens.", s.time_per_output_token);
    return out;
}

// Counts a completion from its start until its last byte is written (a stream's provider may
// outlive the handler).
struct InFlight {
    explicit InFlight(std::atomic<int>& n_) : n(n_) { ++n; }
    ~InFlight() { --n; }
    std::atomic<int>& n;
};

}  // namespace

struct HttpFront::Impl {
    Impl(const ApiContext& c, Engine& e, FrontOptions o) : ctx(c), engine(e), opt(std::move(o)) {}
    const ApiContext& ctx;
    Engine& engine;
    FrontOptions opt;
    httplib::Server svr;
    std::atomic<int64_t> next_id{0};
    std::atomic<int> in_flight{0};
    std::atomic<bool> draining{false};
    std::atomic<bool> listened{false};  // listen() has returned (or never started)

    void complete(const httplib::Request& req, httplib::Response& res, bool chat);
};

void HttpFront::Impl::complete(const httplib::Request& req, httplib::Response& res, bool chat) {
    auto counted = std::make_shared<InFlight>(in_flight);
    ApiRequest r;
    std::shared_ptr<Stream> out;
    try {
        r = parse_request(req.body, chat, ctx);
        out = engine.submit(r.choices);
    } catch (const ApiError& e) {
        return send_error(res, e);
    } catch (const Error& e) {  // what the engine refuses that the parser did not foresee
        return send_error(res, {400, e.what(), "invalid_request_error", "", "invalid_value"});
    }
    const std::string id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", next_id++);
    const int64_t created = unix_now();
    using std::chrono::milliseconds;
    const size_t k = r.choices.size();
    if (!r.stream) {
        // httplib 0.11 cannot tell that a waiting client hung up: the request runs to its end
        // (max_tokens bounds it); a stream's client that leaves is dropped at once.
        std::vector<Update> all(k), news;
        auto done = [&] {
            return std::all_of(all.begin(), all.end(), [](const Update& u) { return u.done(); });
        };
        while (!done())
            for (size_t c : out->take(news, milliseconds(100))) all[c].merge(news[c]);
        return res.set_content(dump(completion_json(r, all, id, created, ctx)), "application/json");
    }
    auto sent = std::make_shared<std::vector<ChoiceSent>>(k);
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, r, out, id, created, sent, counted](size_t, httplib::DataSink& sink) {
            std::vector<Update> news;
            std::vector<size_t> fresh;
            while ((fresh = out->take(news, milliseconds(100))).empty())
                if (!sink.is_writable()) return false;
            std::string events;
            for (size_t c : fresh)
                events +=
                    "data: " + dump(chunk_json(r, c, news[c], *sent, id, created, ctx)) + "\n\n";
            const bool done = all_sent(*sent);
            if (done) events += "data: [DONE]\n\n";
            if (!sink.write(events.data(), events.size())) return false;
            if (done) sink.done();
            return true;
        },
        [out](bool success) {
            if (!success) out->cancel();
        });
}

HttpFront::HttpFront(const ApiContext& ctx, Engine& engine, FrontOptions o)
    : impl_(std::make_unique<Impl>(ctx, engine, std::move(o))) {
    Impl& m = *impl_;
    httplib::Server& s = m.svr;
    // A handler thread per client waiting on the engine: more than the default pool of 8, so
    // that many concurrent streams are all in the batch.
    s.new_task_queue = [] { return new httplib::ThreadPool(64); };
    s.set_payload_max_length(m.opt.max_body_bytes);
    // A streamed token is a small write, and Nagle's algorithm holds it until the client
    // acknowledges the one before, which a client's delayed ACK can put off by tens of ms over a
    // network (llama.cpp's server turns it off too; on loopback no difference was measured).
    s.set_tcp_nodelay(true);
    s.set_pre_routing_handler([&m](const httplib::Request& req, httplib::Response& res) {
        if (m.draining && req.method == "POST") {
            send_error(res, {503, "the server is shutting down (draining the requests in flight)",
                             "server_error", "", "shutting_down"});
            return httplib::Server::HandlerResponse::Handled;
        }
        if (m.opt.api_key.empty() || req.path.rfind("/v1/", 0) != 0)
            return httplib::Server::HandlerResponse::Unhandled;
        if (req.get_header_value("Authorization") == "Bearer " + m.opt.api_key)
            return httplib::Server::HandlerResponse::Unhandled;
        send_error(res, {401,
                         "invalid API key (expected the header 'Authorization: Bearer <the "
                         "--api-key of the server>')",
                         "invalid_request_error", "", "invalid_api_key"});
        return httplib::Server::HandlerResponse::Handled;
    });
    // Whatever httplib refuses itself (a body over the limit, an unknown route) still answers
    // with an error object.
    s.set_error_handler(httplib::Server::HandlerWithResponse(
        [&m](const httplib::Request& req, httplib::Response& res) {
            if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
            if (res.status == 413)
                send_error(res, {413,
                                 fmt::format("the body is larger than the limit of {} bytes",
                                             m.opt.max_body_bytes),
                                 "invalid_request_error", "", "request_too_large"});
            else
                send_error(res, {res.status, fmt::format("no route {} {}", req.method, req.path),
                                 "invalid_request_error", "", "not_found"});
            return httplib::Server::HandlerResponse::Handled;
        }));
    s.Post("/v1/completions", [&m](const httplib::Request& req, httplib::Response& res) {
        m.complete(req, res, false);
    });
    s.Post("/v1/chat/completions", [&m](const httplib::Request& req, httplib::Response& res) {
        m.complete(req, res, true);
    });
    s.Get("/v1/models", [&m](const httplib::Request&, httplib::Response& res) {
        json model = {{"id", m.ctx.model_id},
                      {"object", "model"},
                      {"created", 0},
                      {"owned_by", "weft"},
                      {"max_model_len", m.engine.config().n_positions}};
        res.set_content(dump({{"object", "list"}, {"data", json::array({model})}}),
                        "application/json");
    });
    s.Get("/health", [](const httplib::Request&, httplib::Response& res) {
        res.set_content(R"({"status":"ok"})", "application/json");
    });
    s.Get("/metrics", [&m](const httplib::Request&, httplib::Response& res) {
        res.set_content(metrics_text(m.engine.stats()), "text/plain; version=0.0.4");
    });
}

HttpFront::~HttpFront() = default;

namespace {

// httplib listens with a backlog of 5 pending connections, fixed in Debian's shared library
// (its CPPHTTPLIB_LISTEN_BACKLOG is read only where the library is built). A burst of clients
// connecting while the accept thread waits for a core (the engine's threads keep both busy on a
// small machine) overflows it; Linux drops the handshake and the client retries after 1 s. 16
// clients at once against --slots 16 on 2 cores: TcpExtListenOverflows rose by 2-10 in half the
// runs, whose TTFT p99 was 1.1 s against 0.2. llama.cpp's server listens with 512. httplib does
// not give its socket away, so the listening socket on `port` is found among this process's
// descriptors and listen() is called again, which on Linux only resizes its queue.
void deepen_backlog(int port) {
    constexpr int kBacklog = 512;
    for (int fd = 0; fd < 4096; ++fd) {
        int listening = 0;
        socklen_t len = sizeof listening;
        if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening)
            continue;
        sockaddr_storage addr{};
        len = sizeof addr;
        if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) continue;
        const int bound = addr.ss_family == AF_INET
                              ? ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port)
                          : addr.ss_family == AF_INET6
                              ? ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port)
                              : -1;
        if (bound == port) ::listen(fd, kBacklog);
    }
}

}  // namespace

int HttpFront::bind() {
    Impl& m = *impl_;
    const int port = m.opt.port == 0
                         ? m.svr.bind_to_any_port(m.opt.host)
                         : (m.svr.bind_to_port(m.opt.host, m.opt.port) ? m.opt.port : -1);
    WEFT_CHECK(port > 0, "cannot listen on {}:{} (expected a free port and a local address)",
               m.opt.host, m.opt.port);
    deepen_backlog(port);
    return port;
}

void HttpFront::listen() {
    // Stopped before it started (a SIGTERM while the model loaded): nothing to serve.
    if (!impl_->draining) impl_->svr.listen_after_bind();
    impl_->listened = true;
}

void HttpFront::stop() {
    // httplib's stop ends the streams it is writing: first answer every completion in flight,
    // turning new ones away.
    impl_->draining = true;
    while (impl_->in_flight > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    // httplib's stop ends a server that runs, and is lost on one about to: wait until listen()
    // runs or has returned (it may have seen `draining` and not started).
    while (!impl_->svr.is_running() && !impl_->listened)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    impl_->svr.stop();
}

}  // namespace weft::serve
