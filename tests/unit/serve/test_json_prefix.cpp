// JSON mode's reader of a generated text (serve/json_prefix.hpp) against nlohmann::json's
// parser: a text it reads whole and calls complete is exactly one that nlohmann accepts as an
// object; every prefix of a valid object is viable; a walk through viable bytes never reaches a
// dead end; and a vocabulary's mask offers exactly the tokens whose bytes keep the text viable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/data/tokenizer.hpp"
#include "weft/serve/json_prefix.hpp"

using weft::serve::JsonPrefix;
using weft::serve::JsonVocab;

namespace {

// Read whole: viable and complete.
bool reads_whole(std::string_view s) {
    JsonPrefix p;
    return p.feed(s) && p.complete();
}

// `text` with each run of digits outside strings cut to two: nlohmann refuses a number past a
// double's range (1e309), which JSON's grammar allows (and JavaScript's JSON.parse reads as
// Infinity); the cut changes no text's validity. `gaps_ok`: whitespace between tokens is one
// space or a newline and at most 20 spaces or tabs, as JSON mode writes it.
std::string shortened(const std::string& text, bool& gaps_ok) {
    std::string s, gap;
    bool in_string = false, escaped = false;
    size_t run = 0;
    gaps_ok = true;
    auto gap_ok = [&] {
        if (gap.empty() || gap == " ") return true;
        if (gap[0] != '\n' || gap.size() > 21) return false;
        return gap.find_first_not_of(" \t", 1) == std::string::npos;
    };
    for (char c : text) {
        const bool digit = c >= '0' && c <= '9';
        const bool space = c == ' ' || c == '\t' || c == '\n' || c == '\r';
        run = !in_string && digit ? run + 1 : 0;
        if (!in_string && space) {
            gap += c;
        } else if (!in_string) {
            gaps_ok = gaps_ok && gap_ok();
            gap.clear();
        }
        if (run > 2) continue;
        s += c;
        if (in_string && escaped)
            escaped = false;
        else if (in_string && c == '\\')
            escaped = true;
        else if (c == '"')
            in_string = !in_string;
    }
    return s;
}

// nlohmann's verdict, with JSON mode's additions: the text is an object, nothing comes before
// or after it, and its whitespace is JSON mode's.
bool nlohmann_object(const std::string& text) {
    bool gaps_ok = false;
    const std::string s = shortened(text, gaps_ok);
    if (!gaps_ok || !nlohmann::json::accept(s) || s.empty() || s.front() != '{' || s.back() != '}')
        return false;
    return nlohmann::json::parse(s).is_object();
}

const char* const kValid[] = {
    "{}",
    "{\n  \"a\": [\n\t\t1 ,\n\t2\n  ]\n}",
    R"({"a":1})",
    R"({ "a" : [1, -2.5e+3, 0, 0.0, 1E9, -0, true, false, null, "x"] , "b" : {"c":{}} })",
    R"({"":[[],[[]],{}]})",
    R"({"esc":"\" \\ \/ \b \f \n \r \t \u0000 \u00e9 \uD83D\uDE00 \uFFFF"})",
    "{\"utf8\":\"\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf \xed\x9f\xbf\"}",
    R"({"n":[123456789012345678901234567890, 1.5e-300, 0e0, -0.0E-0]})",
};

const char* const kInvalid[] = {
    "[]",                            // not an object
    "1",                             // not an object
    R"({"a":01})",                   // leading zero
    R"({"a":1,})",                   // trailing comma
    R"({"a" 1})",                    // no colon
    R"({a:1})",                      // unquoted key
    R"({"a":tru})",                  // unfinished literal
    R"({"a":-})",                    // no digit
    R"({"a":1.})",                   // no fraction digit
    R"({"a":1e})",                   // no exponent digit
    R"({"a":"\x"})",                 // unknown escape
    R"({"a":"\uDE00"})",             // lone low surrogate
    R"({"a":"\uD83D"})",             // high surrogate alone
    R"({"a":"\uD83Dx"})",            // high surrogate, then no escape
    R"({"a":"\uD83D\u0041"})",       // high surrogate, then not a low one
    "{\"a\":\"\x01\"}",              // control character
    "{\"a\":\"\xc0\x80\"}",          // overlong UTF-8
    "{\"a\":\"\xed\xa0\x80\"}",      // UTF-8 of a surrogate
    "{\"a\":\"\xf4\x90\x80\x80\"}",  // past U+10FFFF
    "{\"a\":\"\x80\"}",              // continuation byte alone
    R"({"a":[1}})",                  // mismatched bracket
    R"({"a":1}})",                   // after the end
    R"({} )",                        // whitespace after the object (JSON mode's rule)
    R"({}{})",                       // two objects
};

}  // namespace

TEST(JsonPrefix, ReadsValidObjectsAndEveryPrefix) {
    for (const char* doc : kValid) {
        const std::string s = doc;
        ASSERT_TRUE(nlohmann_object(s)) << s;
        EXPECT_TRUE(reads_whole(s)) << s;
        for (size_t n = 0; n < s.size(); ++n) {
            JsonPrefix p;
            EXPECT_TRUE(p.feed(std::string_view(s).substr(0, n))) << s << " at " << n;
            EXPECT_FALSE(p.complete()) << s << " at " << n;
        }
    }
}

TEST(JsonPrefix, RefusesWhatIsNotOneObject) {
    for (const char* doc : kInvalid) {
        EXPECT_FALSE(nlohmann_object(doc)) << doc;
        EXPECT_FALSE(reads_whole(doc)) << doc;
    }
    // The doomed escape is refused at its first doomed digit, not at its fourth.
    JsonPrefix p;
    EXPECT_TRUE(p.feed(R"({"a":"\uD)"));
    EXPECT_FALSE(JsonPrefix(p).feed("C"));  // \uDC.. can only be a lone low surrogate
    EXPECT_TRUE(p.feed("83D\\uD"));
    EXPECT_FALSE(JsonPrefix(p).feed("8"));  // \uD8.. is no low surrogate
    EXPECT_TRUE(p.feed("E00\"}"));
    EXPECT_TRUE(p.complete());
}

TEST(JsonPrefix, BoundsDepthAndWhitespace) {
    JsonPrefix deep;
    EXPECT_TRUE(deep.feed(R"({"a":)"));
    for (int d = 1; d < JsonPrefix::kMaxDepth; ++d) EXPECT_TRUE(deep.feed("[")) << d;
    EXPECT_FALSE(JsonPrefix(deep).feed("["));
    EXPECT_TRUE(deep.feed("1"));
    EXPECT_TRUE(deep.feed(std::string(JsonPrefix::kMaxDepth - 1, ']') + "}"));
    EXPECT_TRUE(deep.complete());
    JsonPrefix spaces;
    EXPECT_FALSE(JsonPrefix(spaces).feed(" "));
    EXPECT_TRUE(spaces.feed("{ \"" + std::string(100, ' ') + "\"\n" +
                            std::string(JsonPrefix::kMaxIndent, '\t')));
    EXPECT_FALSE(JsonPrefix(spaces).feed(" "));
    EXPECT_FALSE(JsonPrefix(spaces).feed("\n"));
    EXPECT_TRUE(spaces.feed(": 1\n}"));
    EXPECT_TRUE(spaces.complete());
}

// Texts of JSON's pieces, valid and not, read by both.
TEST(JsonPrefix, AgreesWithNlohmannOnRandomTexts) {
    const std::vector<std::string> pieces = {
        "{",      "}",       "[",    "]",  ":",    ",",    "\"",       "\"a\"",
        "\"k\":", " ",       "\n",   "1",  "0",    "-",    ".",        "e",
        "+",      "true",    "fals", "e",  "null", "\\",   "\\n",      "\\u",
        "D83D",   "DE00",    "00e9", "x",  "\xc3", "\xa9", "\xf0\x9f", "\x98\x80",
        "\x01",   "{\"a\":", "[1,",  "2]", "}}",
    };
    std::mt19937 rng(7);
    int objects = 0;
    for (int trial = 0; trial < 100000; ++trial) {
        std::string s = "{";
        const int n = int(rng() % 12);
        for (int k = 0; k < n; ++k) s += pieces[rng() % pieces.size()];
        if (rng() % 2) s += "}";
        const bool want = nlohmann_object(s);
        objects += want;
        ASSERT_EQ(reads_whole(s), want) << s;
    }
    EXPECT_GT(objects, 500) << "too few valid objects to compare";
}

// A random walk from `p` through viable bytes, up to `steps` of them: `closers` are taken more
// often than a uniform pick would (1 in `odds` when viable), so that walks end. Fails the test at
// a dead end. Returns the text; `p` is left after it.
std::string random_walk(JsonPrefix& p, std::mt19937& rng, int steps, std::string_view closers,
                        unsigned odds) {
    std::string text;
    for (int len = 0; len < steps && !p.complete(); ++len) {
        std::vector<uint8_t> viable;
        for (int c = 0; c < 256; ++c)
            if (JsonPrefix(p).feed(std::string(1, char(c)))) viable.push_back(uint8_t(c));
        if (viable.empty()) {
            ADD_FAILURE() << "dead end after: " << text;
            return text;
        }
        uint8_t c = viable[rng() % viable.size()];
        for (char want : closers)
            for (uint8_t v : viable)
                if (v == uint8_t(want) && rng() % odds == 0) c = v;
        EXPECT_TRUE(p.feed(std::string(1, char(c))));
        text += char(c);
    }
    return text;
}

// Random walks through viable bytes: there is always one, and a completed text is an object.
TEST(JsonPrefix, ViableBytesNeverDeadEnd) {
    std::mt19937 rng(11);
    int completed = 0;
    for (int walk = 0; walk < 400; ++walk) {
        JsonPrefix p;
        const std::string text = random_walk(p, rng, 400, "}]\"", 3);
        if (p.complete()) {
            ++completed;
            EXPECT_TRUE(nlohmann_object(text)) << text;
        }
    }
    EXPECT_GT(completed, 100);
}

TEST(JsonVocab, MasksExactlyTheUnviableTokens) {
    const JsonVocab vocab({"{", "}", "\"a\"", ":", " 1", "", "tru", "abc", "\"", "<eot>"});
    const int32_t stop = 9;
    auto offered = [&](const JsonPrefix& at) {
        std::vector<float> l(11, 0.0f);  // one id past the table
        vocab.mask(at, stop, l);
        std::string ids;
        for (size_t i = 0; i < l.size(); ++i)
            if (!std::isinf(l[i])) ids += char('0' + i);
        return ids;
    };
    JsonPrefix p;
    EXPECT_EQ(offered(p), "0");  // only '{'
    ASSERT_TRUE(p.feed("{"));
    EXPECT_EQ(offered(p), "128");  // '}', a key, or a key's opening quote
    ASSERT_TRUE(p.feed("\""));
    EXPECT_EQ(offered(p), "0134678");  // in a key: all but "a" after its end, and ""
    ASSERT_TRUE(p.feed("\":"));
    EXPECT_EQ(offered(p), "02468");  // a value: "{", "\"a\"", " 1", "tru", a quote
    ASSERT_TRUE(p.feed("1"));
    EXPECT_EQ(offered(p), "1");  // the end
    ASSERT_TRUE(p.feed("}"));
    EXPECT_EQ(offered(p), "9");  // complete: only the end of text
}

namespace {

using ordered = nlohmann::ordered_json;
using weft::serve::JsonSchema;

// An instance of `s` as the subset JsonSchema enforces reads it: every property, in order.
bool fits(const ordered& v, const ordered& s) {
    if (s.contains("enum")) {
        for (const ordered& e : s["enum"])
            if (e == v && e.type() == v.type()) return true;
        return false;
    }
    if (s.contains("const")) return v == s["const"];
    if (!s.contains("type")) return true;
    const std::string t = s["type"];
    if (t == "object") {
        const ordered props = s.value("properties", ordered::object());
        if (!v.is_object() || v.size() != props.size()) return false;
        auto p = props.begin();
        for (auto it = v.begin(); it != v.end(); ++it, ++p)
            if (it.key() != p.key() || !fits(it.value(), p.value())) return false;
        return true;
    }
    if (t == "array") {
        if (!v.is_array()) return false;
        for (const ordered& e : v)
            if (!fits(e, s["items"])) return false;
        return true;
    }
    return (t == "string" && v.is_string()) || (t == "integer" && v.is_number_integer()) ||
           (t == "number" && v.is_number()) || (t == "boolean" && v.is_boolean()) ||
           (t == "null" && v.is_null());
}

const ordered kSchema = ordered::parse(R"({
  "type": "object", "title": "a person",
  "properties": {
    "name": {"type": "string", "description": "any text"},
    "age": {"type": "integer"},
    "score": {"type": "number"},
    "ok": {"type": "boolean"},
    "none": {"type": "null"},
    "color": {"enum": ["red", "green", 1, 12, true, null]},
    "tags": {"type": "array", "items": {"type": "string"}},
    "inner": {"type": "object", "properties": {"x": {"const": "y"}}, "required": ["x"]},
    "free": {"description": "any value"}
  },
  "required": ["name", "age"], "additionalProperties": false
})");

bool reads_as_schema(const JsonSchema& schema, std::string_view s) {
    JsonPrefix p(&schema);
    return p.feed(s) && p.complete();
}

}  // namespace

TEST(JsonSchema, RefusesWhatItDoesNotEnforceByName) {
    auto refused = [](const char* schema, const char* needle) {
        try {
            JsonSchema s(ordered::parse(schema));
        } catch (const weft::Error& e) {
            return std::string(e.what()).find(needle) != std::string::npos;
        }
        return false;
    };
    EXPECT_TRUE(refused(R"({"type": "array", "items": {}})", "root must be an object"));
    EXPECT_TRUE(refused(R"({"type": "object", "properties": {"a": {"type": "string",
                            "pattern": "^x"}}})",
                        "'pattern'"));
    EXPECT_TRUE(refused(R"({"type": "object", "properties": {"a": {"anyOf": []}}})", "'anyOf'"));
    EXPECT_TRUE(refused(R"({"type": "object", "properties": {"a": {"type": ["string", "null"]}}})",
                        "one type"));
    EXPECT_TRUE(
        refused(R"({"type": "object", "properties": {"a": {"enum": [{}]}}})", "object or array"));
    EXPECT_TRUE(refused(R"({"type": "object", "properties": {}, "required": ["b"]})",
                        "not among its properties"));
    EXPECT_TRUE(refused(R"({"type": "object", "properties": {"a": {"type": "string",
                            "const": 3}}})",
                        "not of its 'type'"));
    EXPECT_TRUE(
        refused(R"({"type": "object", "properties": {"a": {"type": "array"}}})", "needs 'items'"));
    EXPECT_FALSE(refused(kSchema.dump().c_str(), ""));
}

TEST(JsonSchema, ReadsItsInstancesAndRefusesOthers) {
    const JsonSchema schema(kSchema);
    const std::string valid[] = {
        R"({"name":"a\u00e9","age":-12,"score":1.5e3,"ok":true,"none":null,"color":12,)"
        R"("tags":["x",""],"inner":{"x":"y"},"free":{"any":[1,{"b":null}]}})",
        "{\n  \"name\": \"\",\n  \"age\": 0, \"score\": -0.5, \"ok\": false, \"none\": null, "
        "\"color\": 1, \"tags\": [], \"inner\": {\"x\": \"y\"}, \"free\": 3}",
        R"({"name":"b","age":7,"score":2,"ok":true,"none":null,"color":"green","tags":["a"],)"
        R"("inner":{"x":"y"},"free":"z"})",
    };
    for (const std::string& s : valid) {
        ASSERT_TRUE(fits(ordered::parse(s), kSchema)) << s;
        EXPECT_TRUE(reads_as_schema(schema, s)) << s;
        for (size_t n = 0; n < s.size(); ++n) {
            JsonPrefix p(&schema);
            EXPECT_TRUE(p.feed(std::string_view(s).substr(0, n))) << s << " at " << n;
        }
    }
    // Each one edit away from the first valid instance, and not an instance.
    const std::string base = valid[0];
    auto with = [&](const std::string& from, const std::string& to) {
        std::string s = base;
        const size_t at = s.find(from);
        EXPECT_NE(at, std::string::npos) << from;
        return s.replace(at, from.size(), to);
    };
    const std::string invalid[] = {
        with(R"("name":"a\u00e9","age":-12)", R"("age":-12,"name":"a\u00e9")"),  // order
        with(R"("none":null,)", ""),                                             // missing
        with(R"("free":{"any":[1,{"b":null}]})", R"("free":1,"more":2)"),        // extra
        with(R"("age":-12)", R"("age":-12.5)"),                                  // integer
        with(R"("age":-12)", R"("age":"12")"),
        with(R"("ok":true)", R"("ok":"true")"),
        with(R"("color":12)", R"("color":"blue")"),  // not in the enum
        with(R"("color":12)", R"("color":123)"),
        with(R"("color":12)", R"("color":12.0)"),
        with(R"("tags":["x",""])", R"("tags":[1])"),
        with(R"({"x":"y"})", R"({"x":"z"})"),
        with(R"({"x":"y"})", R"({})"),
        with(R"("none":null)", R"("none":nul)"),
    };
    for (const std::string& s : invalid) {
        EXPECT_FALSE(fits(ordered::parse(s, nullptr, false), kSchema)) << s;
        EXPECT_FALSE(reads_as_schema(schema, s)) << s;
    }
}

// Random walks through the bytes a schema leaves viable: never a dead end, and every completed
// text an instance.
TEST(JsonSchema, ViableBytesNeverDeadEnd) {
    const JsonSchema schema(kSchema);
    std::mt19937 rng(5);
    int completed = 0;
    for (int walk = 0; walk < 200; ++walk) {
        JsonPrefix p(&schema);
        const std::string text = random_walk(p, rng, 600, "}]\",", 2);
        if (p.complete()) {
            ++completed;
            bool gaps_ok = false;
            const ordered v = ordered::parse(shortened(text, gaps_ok), nullptr, false);
            EXPECT_TRUE(gaps_ok) << text;
            EXPECT_FALSE(v.is_discarded()) << text;
            EXPECT_TRUE(fits(v, kSchema)) << text;
        }
    }
    EXPECT_GT(completed, 50);
}

// A call of one of several functions (tool_choice "required"): the name written chooses the
// schema its arguments are read by. Random walks complete as {"name", "arguments"} with the
// arguments an instance of the function named; each function is reached; a call whose arguments
// are another function's is refused.
TEST(JsonSchema, OneCallOfSeveralFunctions) {
    const std::vector<std::string> names = {"get", "get_all", "put"};
    const std::vector<ordered> params = {
        ordered::parse(R"({"type": "object", "properties": {"id": {"type": "integer"}}})"),
        ordered::parse(R"({"type": "object", "properties": {}})"),
        kSchema,
    };
    const JsonSchema schema = JsonSchema::one_call_of(names, params);
    EXPECT_TRUE(reads_as_schema(schema, R"({"name":"get","arguments":{"id":7}})"));
    EXPECT_TRUE(reads_as_schema(schema, R"({"name": "get_all", "arguments": {}})"));
    EXPECT_FALSE(reads_as_schema(schema, R"({"name":"get","arguments":{}})"));
    EXPECT_FALSE(reads_as_schema(schema, R"({"name":"get_all","arguments":{"id":7}})"));
    EXPECT_FALSE(reads_as_schema(schema, R"({"name":"gets","arguments":{}})"));
    EXPECT_FALSE(reads_as_schema(schema, R"({"arguments":{},"name":"get_all"})"));
    std::mt19937 rng(11);
    std::vector<int> reached(names.size());
    for (int walk = 0; walk < 300; ++walk) {
        JsonPrefix p(&schema);
        const std::string text = random_walk(p, rng, 600, "}]\",", 2);
        if (!p.complete()) continue;
        bool gaps_ok = false;
        const ordered v = ordered::parse(shortened(text, gaps_ok), nullptr, false);
        ASSERT_FALSE(v.is_discarded()) << text;
        ASSERT_TRUE(v.is_object() && v.size() == 2 && v.begin().key() == "name") << text;
        const size_t f = size_t(std::find(names.begin(), names.end(), v["name"]) - names.begin());
        ASSERT_LT(f, names.size()) << text;
        EXPECT_TRUE(fits(v["arguments"], params[f])) << text;
        ++reached[f];
    }
    for (size_t f = 0; f < names.size(); ++f) EXPECT_GT(reached[f], 5) << names[f];
    EXPECT_THROW(JsonSchema::one_call_of({"f"}, {ordered::parse(R"({"type": "string"})")}),
                 weft::Error);
}

// The trie's mask over a real vocabulary (the test SmolLM tokenizer's 5259 byte-level tokens)
// offers exactly the tokens whose bytes, read one by one from the text, keep it viable.
TEST(JsonVocab, TrieMaskEqualsReadingEachToken) {
    const auto tok = weft::data::load_tokenizer(std::filesystem::path(WEFT_SOURCE_DIR) /
                                                "tests/data/tokenizers/smollm");
    std::vector<std::string> pieces;
    for (int32_t t = 0; t < tok->vocab_size(); ++t) pieces.push_back(tok->decode_token(t));
    const JsonVocab vocab(pieces);
    EXPECT_TRUE(vocab.spells_every_byte());
    const JsonSchema schema(kSchema);
    for (const JsonSchema* s : {static_cast<const JsonSchema*>(nullptr), &schema})
        for (const char* text : {"{", "{\"name\":", "{\"name\":\"a b", "{\"name\":\"\\u00",
                                 "{\"name\":\"\",\"age\":1", "{\"name\" :\"\",\n \"age\":-"}) {
            JsonPrefix at(s);
            ASSERT_TRUE(at.feed(text)) << text;
            std::vector<float> logits(pieces.size() + 1, 0.0f);
            vocab.mask(at, int32_t(pieces.size()), logits);
            int offered = 0;
            for (size_t id = 0; id < pieces.size(); ++id) {
                JsonPrefix next = at;
                const bool viable = !pieces[id].empty() && next.feed(pieces[id]);
                offered += viable;
                EXPECT_EQ(std::isinf(logits[id]), !viable) << text << " id " << id;
            }
            EXPECT_TRUE(std::isinf(logits.back())) << "the end of text before the end";
            EXPECT_GT(offered, 0) << text;
        }
}
