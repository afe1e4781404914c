#pragma once
// OpenAI's JSON mode (`"response_format": {"type": "json_object"}`) and structured outputs
// (`{"type": "json_schema", ...}`): what a request has generated, read byte by byte as the
// beginning of one JSON object (RFC 8259, as nlohmann::json::accept reads it) that, given a
// schema (json_schema.hpp), is one of its instances, so that the engine offers only tokens after
// which the text can still end as one. The prefix is viable exactly when some continuation
// completes it: a \u escape that can only become a lone low surrogate, a UTF-8 lead byte no
// continuation byte can follow, a key the schema does not have next, are refused at the byte
// that dooms them, never later, so that a request always has a token to take.
//
// Two bounds keep a model from running on without end where the grammar would let it (a small
// one will write tabs for ever if it may): objects and arrays nest at most kMaxDepth deep, and
// whitespace between tokens is one space, or a newline and at most kMaxIndent spaces or tabs
// (llama.cpp's JSON grammar allows as much). Nothing may come before the object's '{' or after
// its '}': once it closes, only the end of text is offered. Every text it lets through is JSON;
// some JSON (a run of spaces, a '\r') it does not let a model write.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weft/serve/json_schema.hpp"

namespace weft::serve {

class JsonPrefix {
  public:
    static constexpr int kMaxDepth = 64;
    static constexpr int kMaxIndent = 20;

    // `schema` (outliving this) constrains the object; none: any JSON object.
    explicit JsonPrefix(const JsonSchema* schema = nullptr) : schema_(schema) {}

    // Reads `bytes` after the text so far: false when the text with them can no longer become a
    // JSON object (this prefix is then left part-way: read candidates on a copy).
    bool feed(std::string_view bytes);
    // The object has closed: the text is one JSON object.
    bool complete() const { return mode_ == Mode::kDone; }
    // Inside a string, where any printable ASCII byte but '"' and '\\' keeps the prefix viable
    // (JsonVocab's shortcut for most tokens).
    bool in_plain_string() const { return mode_ == Mode::kString && utf8_need_ == 0 && !low_next_; }

  private:
    enum class Mode : uint8_t {
        kStart,        // before the object: whitespace or '{'
        kObjectFirst,  // after '{': a key or '}'
        kKey,          // after ',' in an object: a key
        kColon,        // after a key
        kValue,        // after ':' or ',' in an array
        kArrayFirst,   // after '[': a value or ']'
        kAfter,        // after a value inside an object or array: ',' or its closing bracket
        kString,
        kEscape,   // after '\\' in a string
        kHex,      // in the four hex digits of \u
        kNumber,   // num_ says where
        kLiteral,  // one of lit_node_'s literals (or a schema's key): lit_mask_, lit_at_
        kDone,
    };
    // Where a number is: what may come next.
    enum Num : uint8_t { kMinus, kZero, kInt, kDot, kFrac, kExp, kExpSign, kExpDigits };

    bool step(uint8_t c);
    bool space(uint8_t c);
    // A value's first byte, the value of schema node `node` (-1: any).
    bool begin_value(uint8_t c, int32_t node);
    bool begin_key(uint8_t c);
    bool open(bool object, int32_t node);
    bool close(bool object);
    void value_done();
    bool string_byte(uint8_t c);
    bool hex_digit(uint8_t c);
    bool number_byte(uint8_t c);
    bool begin_literal(const SchemaNode& n, uint64_t candidates, uint8_t c, bool key);
    bool literal_byte(uint8_t c);
    void literal_done();
    bool top_is_object() const { return (objects_ >> (depth_ - 1)) & 1; }
    // The schema node of the innermost open object or array (-1: none constrains it; below
    // JsonSchema::kMaxDepth levels only an unconstrained value nests).
    int32_t top_node() const {
        return depth_ >= 1 && depth_ <= JsonSchema::kMaxDepth ? frame_node_[depth_ - 1] : -1;
    }
    // The node a value in the innermost container must match next (-1: any value).
    int32_t next_value_node() const;

    const JsonSchema* schema_ = nullptr;
    Mode mode_ = Mode::kStart;
    Num num_ = kMinus;
    bool key_ = false;       // the string being read is a key
    bool low_next_ = false;  // a high surrogate was read: "\u" and a low one must come next
    bool int_only_ = false;  // the number being read is a schema's integer
    bool lit_key_ = false;   // the literal being read is a key (then a colon)
    uint16_t lit_at_ = 0;    // its bytes read
    uint64_t lit_mask_ = 0;  // the literals of lit_node_ it can still be
    const SchemaNode* lit_node_ = nullptr;
    uint8_t hex_ = 0;                                          // hex digits of the \u escape read
    uint16_t code_ = 0;                                        // their value
    uint8_t utf8_need_ = 0, utf8_lo_ = 0x80, utf8_hi_ = 0xBF;  // continuation bytes to come
    uint8_t depth_ = 0;
    uint8_t gap_ = 0;       // whitespace since the last token: 0 none, 1 a space, 2 a newline
    uint8_t indent_ = 0;    // spaces and tabs after that newline
    uint64_t objects_ = 0;  // bit d: nesting level d is an object, else an array
    // Each open container's schema node, and an object's properties begun so far.
    int16_t frame_node_[JsonSchema::kMaxDepth] = {};
    uint8_t frame_props_[JsonSchema::kMaxDepth] = {};
    // An object of SchemaNode::variants: the literal its first property's value was.
    uint8_t frame_variant_[JsonSchema::kMaxDepth] = {};
};

// A vocabulary's tokens as bytes, to mask the logits of a request in JSON mode.
class JsonVocab {
  public:
    // pieces[id]: token id's bytes; an empty one is never offered.
    explicit JsonVocab(std::vector<std::string> pieces);
    // Sets to minus infinity the logit of every id that would leave `at` unviable: every id but
    // `stop` once the object is complete, `stop` before. Ids past the table are masked too.
    void mask(const JsonPrefix& at, int32_t stop, std::span<float> logits) const;
    const std::string& piece(int32_t id) const { return pieces_[size_t(id)]; }
    // Some token is each of the 256 bytes alone: whatever bytes the mask lets a text continue
    // with, a token can write the first of them, so a request is never left with no token.
    bool spells_every_byte() const { return every_byte_; }
    int32_t size() const { return int32_t(pieces_.size()); }

  private:
    // The tokens' bytes as a trie: a mask walks it from the text's state, each prefix read once
    // for all the tokens that share it, and stops where a prefix is no longer viable (outside
    // strings, after a few bytes for nearly every token).
    struct Node {
        std::vector<std::pair<uint8_t, int32_t>> children;  // by byte
        std::vector<int32_t> ids;                           // the tokens that end here
    };
    static void insert(std::vector<Node>& trie, const std::string& bytes, int32_t id);
    // Sets offered[id] for each token of `trie` that leaves `at` viable.
    static void walk(const std::vector<Node>& trie, const JsonPrefix& at,
                     std::vector<char>& offered);

    std::vector<std::string> pieces_;
    std::vector<char> plain_;  // all printable ASCII, no '"' or '\\': viable in any plain string
    std::vector<Node> all_;    // every token but the empty ones
    std::vector<Node> other_;  // the tokens not plain_, for a text inside a plain string
    bool every_byte_ = false;
};

}  // namespace weft::serve
