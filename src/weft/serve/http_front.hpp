#pragma once
// The HTTP front of `weft serve` (cpp-httplib): a thin layer that checks each request, queues it
// for the engine loop and writes the engine's tokens back, whole or as server-sent events. The
// routes and their shapes are OpenAI's (openai.hpp); bad input is a 4xx with an OpenAI error
// object, answered while the engine goes on serving the others.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "weft/serve/openai.hpp"

namespace weft::serve {

struct FrontOptions {
    std::string host = "127.0.0.1";
    int port = 8080;      // 0: any free port
    std::string api_key;  // empty: none asked
    size_t max_body_bytes = size_t(1) << 20;
};

class HttpFront {
  public:
    HttpFront(const ApiContext& ctx, Engine& engine, FrontOptions o);
    ~HttpFront();
    // Binds the address; returns the port bound (an error naming the address when it cannot).
    int bind();
    // Serves until stop().
    void listen();
    // Answers the completions in flight (new ones get a 503), then ends listen(). From any
    // thread but listen()'s.
    void stop();

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace weft::serve
