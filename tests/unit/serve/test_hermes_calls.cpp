// Hermes tool calls read out of a model's text (serve/hermes_calls.hpp): whole answers with and
// without calls, the ones taken as text because a call is broken, and a stream's content held
// back exactly where a call's tag could begin.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "weft/serve/hermes_calls.hpp"

namespace weft::serve {
namespace {

const std::vector<std::string> kNames = {"get_weather", "stop_now"};

TEST(HermesCalls, ReadsCallsAfterTheContent) {
    const HermesText h = parse_hermes(
        "Let me look.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
        "\"Rome\", \"days\": 2}}\n</tool_call>\n<tool_call>{\"name\":\"stop_now\",\"arguments\":{}}"
        "</tool_call>\n",
        kNames);
    EXPECT_EQ(h.content, "Let me look.");
    EXPECT_EQ(h.content_end, 12u);
    ASSERT_EQ(h.calls.size(), 2u);
    EXPECT_EQ(h.calls[0].name, "get_weather");
    EXPECT_EQ(h.calls[0].arguments, R"({"city":"Rome","days":2})");  // in the model's order
    EXPECT_EQ(h.calls[1].name, "stop_now");
    EXPECT_EQ(h.calls[1].arguments, "{}");
    EXPECT_TRUE(
        only_whitespace(parse_hermes(" \n<tool_call>{\"name\": \"stop_now\", \"arguments\": "
                                     "{}}</tool_call>",
                                     kNames)
                            .content));
}

// A text with a broken call is all content: nothing the model wrote is dropped.
TEST(HermesCalls, BrokenCallsAreText) {
    const char* const texts[] = {
        "no call at all",
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}",             // not closed
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}</tool_call>",  // not JSON
        "<tool_call>{\"name\": \"fly\", \"arguments\": {}}</tool_call>",         // unknown function
        "<tool_call>{\"name\": \"stop_now\"}</tool_call>",                       // no arguments
        "<tool_call>{\"name\": \"stop_now\", \"arguments\": [1]}</tool_call>",   // not an object
        "<tool_call>[\"stop_now\"]</tool_call>",                                 // not an object
        "<tool_call>{\"name\": \"stop_now\", \"arguments\": {}}</tool_call> and then text",
        "<tool_call>{\"name\": \"stop_now\", \"arguments\": {}}</tool_call>x<tool_call>{\"name\": "
        "\"stop_now\", \"arguments\": {}}</tool_call>",
    };
    for (const char* t : texts) {
        const HermesText h = parse_hermes(t, kNames);
        EXPECT_TRUE(h.calls.empty()) << t;
        EXPECT_EQ(h.content, t);
        EXPECT_EQ(h.content_end, std::string(t).size());
    }
}

TEST(HermesCalls, StreamedContentStopsWhereATagCouldBegin) {
    EXPECT_EQ(hermes_content_bytes("abc"), 3u);
    EXPECT_EQ(hermes_content_bytes("abc<"), 3u);
    EXPECT_EQ(hermes_content_bytes("abc<tool_ca"), 3u);
    EXPECT_EQ(hermes_content_bytes("abc<b"), 5u);
    EXPECT_EQ(hermes_content_bytes("a<tool_call>{"), 1u);
    EXPECT_EQ(hermes_content_bytes("<tool_call>"), 0u);
    EXPECT_EQ(hermes_content_bytes("x < y and tool_call"), 19u);
    // Released piece by piece as a stream would, the content never runs past the whole answer's
    // and ends exactly there: every split of a text with calls, and of one without.
    std::mt19937 rng(3);
    const std::string with =
        "I will.<tool_call>\n{\"name\": \"stop_now\", \"arguments\": {}}\n</tool_call>";
    const std::string without = "a <b> tag, <tool_ and <tool_cal but never the whole tag";
    for (const std::string& text : {with, without}) {
        const HermesText whole = parse_hermes(text, kNames);
        for (int trial = 0; trial < 200; ++trial) {
            size_t released = 0;
            for (size_t at = 0; at < text.size();) {
                at = std::min(text.size(), at + 1 + rng() % 6);
                const size_t n = hermes_content_bytes(std::string_view(text).substr(0, at));
                ASSERT_GE(n, released);
                ASSERT_LE(n, whole.content_end);
                released = n;
            }
            // At the end the whole answer is read: what is left goes out then.
            EXPECT_LE(released, whole.content_end);
        }
        EXPECT_EQ(hermes_content_bytes(text), whole.calls.empty() ? text.size() : 7u);
    }
}

}  // namespace
}  // namespace weft::serve
