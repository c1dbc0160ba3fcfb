/*
 * grammar/grammar.h - constrained output: which tokens may come next so
 * that the reply stays a JSON object (OpenAI's response_format
 * "json_object", `sdnpu run --json`).
 *
 * Two parts. struct sd_json recognises the prefixes of a JSON object
 * (RFC 8259, strings strictly UTF-8, as a strict parser reads them) byte
 * by byte; it is a small value, copied to try a token without committing
 * it. struct sd_grammar holds a vocabulary's token bytes and answers, for
 * a recogniser's state, whether a token may come next: every byte of its
 * text must keep the output a viable prefix, and an end-of-generation
 * token may come only once the object is complete (and then nothing
 * else may). A token with no text (a control token) never may.
 *
 * Decoding stays lossless under a constraint because the constraint is a
 * function of the output's prefix: the sampler masks each row's logits by
 * the state after that row's own path (sample/sampler.h), so a
 * verification row chooses exactly what plain decoding chooses after the
 * same tokens.
 *
 * The reply is the object alone: it starts with '{' and ends at its '}'.
 * Whitespace inside it comes in runs of at most one line break and
 * SD_JSON_MAX_WS bytes (indentation), as llama.cpp's JSON grammar allows,
 * so a model that would rather write prose cannot pad with blank lines;
 * at most SD_JSON_MAX_DEPTH containers are open. A number's integer part
 * has at most SD_JSON_MAX_INT_DIGITS digits and its exponent
 * SD_JSON_MAX_EXP_DIGITS (as llama.cpp's grammar bounds them), so that
 * every number fits an int64 or a double: strict parsers (jansson) refuse
 * what does not. Escapes \u of
 * a surrogate (D800-DFFF) are refused (a pair is valid JSON, but the
 * model can write the character itself as UTF-8), and so is \u0000, which
 * strict parsers refuse.
 *
 * A JSON Schema (struct sd_schema, OpenAI's response_format
 * "json_schema") narrows the object further; its subset is documented at
 * sd_schema_compile. The schema is checked as the bytes come, so the same
 * promise holds: every prefix the recogniser accepts can still be
 * completed to an object the schema accepts.
 */
#ifndef SD_GRAMMAR_H
#define SD_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#define SD_JSON_MAX_DEPTH 64
#define SD_JSON_MAX_WS 48
#define SD_JSON_MAX_INT_DIGITS 15
#define SD_JSON_MAX_EXP_DIGITS 2
#define SD_SCHEMA_MAX_DEPTH 16

/* A compiled JSON Schema (schema.c). Immutable: any number of states and
 * threads may share it. */
struct sd_schema;

/* A container the schema constrains: its node, and for an object the
 * index of the next property that may come (properties come in the
 * schema's order), for an array the items so far (saturating). */
struct sd_json_level {
    uint16_t node;
    uint16_t n;
};

/* A recogniser's state: what the bytes so far allow next. Plain data;
 * copy it to try bytes without committing them. */
struct sd_json {
    uint64_t objects; /* bit d: the container at depth d + 1 is an object (else an array) */
    uint8_t depth;    /* containers open */
    uint8_t mode;     /* what the next byte may be (json.c's enum mode) */
    uint8_t sub;      /* progress inside a token: literal letters, \u digits or UTF-8 bytes to come,
                         a number's integer or exponent digits */
    uint8_t lit;      /* the literal being read (0 true, 1 false, 2 null); in \u, the digits so far */
    uint8_t lo, hi;   /* the range of the next UTF-8 continuation byte */
    uint8_t ws;       /* whitespace bytes in a row */
    uint8_t breaks;   /* ... and of them, bit 0: a '\n', bit 1: a '\r' */
    bool key;         /* the string being read is an object's key */
    /* Under a schema (NULL: any object). The schema constrains the
     * outermost sdepth containers; deeper ones are values it leaves free. */
    const struct sd_schema *schema;
    uint8_t sdepth;
    bool int_only;    /* the number being read must be an integer */
    uint8_t lit_kind; /* a literal set is being matched: 0 none, 1 an enum value, 2 a property name */
    uint16_t vnode;   /* the schema node the next value must satisfy */
    uint16_t lit_lo, lit_hi, lit_pos; /* the set's entries [lo, hi) begin with the value's lit_pos bytes */
    struct sd_json_level level[SD_SCHEMA_MAX_DEPTH];
};

/* The state before any output: the object's '{' comes first. */
void sd_json_init(struct sd_json *j);
/* The same, the object to satisfy schema s (NULL: any object); s must
 * outlive the state's use. */
void sd_json_init_schema(struct sd_json *j, const struct sd_schema *s);

/* Compile a JSON Schema from its text (UTF-8 JSON, n bytes). The subset,
 * which covers what apps send for structured replies (OpenAI's strict
 * mode):
 *   type        a name or a list of names: object, array, string, number,
 *               integer, boolean, null
 *   properties  an object's properties; they come in the schema's order,
 *               each at most once, and no others
 *   required    the properties that may not be left out
 *   additionalProperties  false or true (no others are written either
 *               way); a schema here only beside properties
 *   items, minItems, maxItems  an array's items (at most 65,535)
 *   enum, const scalar values: strings, integers, booleans, null; a
 *               string or integer is written as jansson writes it
 *   anyOf       alternatives a value's first byte tells apart (as
 *               Pydantic's Optional fields and unions): at most one
 *               allowing an array; an enum joins only enums, consts, null
 *               and booleans; several objects are told apart by their
 *               first property, a tag (required in each, a const or enum,
 *               no value in two: a discriminated union such as
 *               {"action": "click", ...} | {"action": "type", ...})
 *   oneOf       the same, where no value may match two alternatives: two
 *               allowing the same kind of scalar are refused unless both
 *               are enums with no value in common
 *   allOf       of one schema (as Pydantic 1 writes a described $ref)
 *   $ref        a reference within the schema ("#/$defs/Item"), expanded
 *               where it is used; not recursive
 *   annotations (description, title, default, examples, $schema, $id,
 *               $comment, $defs, definitions, deprecated, readOnly,
 *               writeOnly, discriminator) are read past.
 * Beside anyOf, oneOf, allOf and $ref only annotations may stand. The root
 * is an object (or a union of objects). Anything else (pattern, format,
 * minimum, allOf of several, ...) is
 * SDNPU_ERR_INVALID_ARG with a message naming the
 * keyword and where it stands (a JSON pointer), rather than a schema
 * silently not enforced; so is a schema nothing satisfies (an empty
 * enum, false, minItems over maxItems), nesting deeper than
 * SD_SCHEMA_MAX_DEPTH constrained containers, or past its size bounds. */
int sd_schema_compile(const char *text, size_t n, struct sd_schema **out, struct sd_err *err);
void sd_schema_free(struct sd_schema *s);
/* Feed n bytes. Returns false, with *j unspecified, when they cannot
 * continue a JSON object; true with *j advanced otherwise. */
bool sd_json_feed(struct sd_json *j, const char *s, size_t n);
/* Whether the bytes so far are a whole JSON object. */
bool sd_json_complete(const struct sd_json *j);

/* A state that refuses every byte (a token was forced past the grammar:
 * only the end may come), and whether j is one. */
void sd_json_kill(struct sd_json *j);
bool sd_json_dead(const struct sd_json *j);

/* Whether j is inside a string at a character's boundary with no schema
 * literal (an enum value, a property name) to match: then every byte up
 * to the string's closing quote is judged by the string's rules alone,
 * whatever else the state holds, so a text that does not close the
 * string is allowed or refused the same in every such state. */
bool sd_json_free_text(const struct sd_json *j);
/* What a text does from such a state: stays inside the string (allowed),
 * is refused before leaving it, or reaches its closing quote (then the
 * rest of the state decides: feed it). */
enum sd_json_text { SD_TEXT_REFUSED, SD_TEXT_STAYS, SD_TEXT_LEAVES };
enum sd_json_text sd_json_text_class(const char *s, size_t n);

/* A vocabulary's token texts, for masking. Immutable once made: any
 * number of samplers may share it across threads. */
struct sd_grammar;

/* The text token id has in decoded output (control tokens: none):
 * writes up to cap bytes and returns the length, or the negative of the
 * size needed (tok/'s sd_token_to_piece has this shape). */
typedef int32_t (*sd_piece_fn)(const void *ud, int32_t id, char *buf, size_t cap);
/* Whether id ends generation. */
typedef bool (*sd_eog_fn)(const void *ud, int32_t id);

/* Read every token's text and end-of-generation mark once (about 1 MB
 * for a 150k-token vocabulary). SDNPU_ERR_OOM with a message, nothing
 * left allocated. */
int sd_grammar_create(int32_t n_vocab, sd_piece_fn piece, sd_eog_fn eog, const void *ud,
                      struct sd_grammar **out, struct sd_err *err);
void sd_grammar_free(struct sd_grammar *g);

/* Whether tok may come next after the state j. */
bool sd_grammar_allows(const struct sd_grammar *g, const struct sd_json *j, int32_t tok);
/* Set the logits of every token that may not come next to -INFINITY. If
 * none may (a state no token text can continue), the end-of-generation
 * tokens are left, so the reply ends rather than breaks its grammar. */
void sd_grammar_mask(const struct sd_grammar *g, const struct sd_json *j, float *logits);
/* The largest logit among the tokens that may come next (ties to the
 * lower id): sd_argmax of the masked logits, found by trying the best
 * tokens first. Logits of tokens it refused may be set to -INFINITY. */
int32_t sd_grammar_argmax(const struct sd_grammar *g, const struct sd_json *j, float *logits);
/* Advance j past tok. Returns false (j then refuses everything but the
 * end) when tok may not come next. */
bool sd_grammar_advance(const struct sd_grammar *g, struct sd_json *j, int32_t tok);

#endif /* SD_GRAMMAR_H */
