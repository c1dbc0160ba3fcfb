/* grammar/json.c - the prefixes of a JSON object, byte by byte
 * (grammar/grammar.h). */
#include <string.h>

#include "grammar/schema.h"

/* What the next byte may be. */
enum mode {
    M_TOP,       /* before the object: '{' */
    M_OBJ_FIRST, /* after '{': a key or '}' */
    M_KEY,       /* after ',' in an object: a key */
    M_COLON,     /* after a key: ':' */
    M_VALUE,     /* after ':' or ',' in an array: a value */
    M_ARR_FIRST, /* after '[': a value or ']' */
    M_AFTER,     /* after a value in a container: ',' or its closing bracket */
    M_DONE,      /* the object is complete: nothing more */
    M_STR,       /* in a string (sub: UTF-8 continuation bytes to come, each in [lo, hi]) */
    M_ESC,       /* after a backslash in a string */
    M_HEX,       /* in \u (sub: digits to come; lit: the digits so far, for the refused ranges) */
    M_LIT,       /* in true, false or null (lit: which; sub: letters read) */
    M_NUM_MINUS, /* after '-': a digit */
    M_NUM_ZERO,  /* a leading 0: '.', 'e' or the number's end */
    M_NUM_INT,   /* integer digits */
    M_NUM_DOT,   /* after '.': a digit */
    M_NUM_FRAC,  /* fraction digits */
    M_NUM_E,     /* after 'e': a sign or a digit */
    M_NUM_ESIGN, /* after the exponent's sign: a digit */
    M_NUM_EXP,   /* exponent digits */
    M_DEAD       /* sd_json_kill: nothing more */
};

static const char *const LITERALS[3] = {"true", "false", "null"};

void sd_json_init(struct sd_json *j) { sd_json_init_schema(j, NULL); }

void sd_json_init_schema(struct sd_json *j, const struct sd_schema *s) {
    memset(j, 0, sizeof *j);
    j->mode = M_TOP;
    j->schema = s;
    if (s) j->vnode = s->root;
}

static bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

static bool in_object(const struct sd_json *j) { return j->depth > 0 && (j->objects >> (j->depth - 1) & 1); }

/* A value ended: its container waits for ',' or a bracket; the top-level
 * object is then complete. Under a schema the value must be whole (an
 * enum's) and counts as an array's item. */
static bool value_done(struct sd_json *j) {
    j->mode = j->depth == 0 ? M_DONE : M_AFTER;
    return !sd_schema_on(j) || sd_schema_value_end(j);
}

static bool open_container(struct sd_json *j, bool object) {
    if (j->depth >= SD_JSON_MAX_DEPTH) return false;
    const bool was_on = sd_schema_on(j);
    if (object)
        j->objects |= 1ull << j->depth;
    else
        j->objects &= ~(1ull << j->depth);
    j->depth++;
    j->mode = object ? M_OBJ_FIRST : M_ARR_FIRST;
    return sd_schema_open(j, object, was_on);
}

static bool close_container(struct sd_json *j, bool object) {
    if (j->depth == 0 || in_object(j) != object) return false;
    if (sd_schema_on(j) && !sd_schema_close(j)) return false;
    j->depth--;
    return value_done(j);
}

/* The first byte of a value. */
static bool value_start(struct sd_json *j, unsigned char c) {
    j->int_only = false;
    if (sd_schema_on(j) && !sd_schema_value_start(j, c)) return false;
    switch (c) {
    case '{':
        return open_container(j, true);
    case '[':
        return open_container(j, false);
    case '"':
        j->mode = M_STR, j->key = false, j->sub = 0;
        return true;
    case '-':
        j->mode = M_NUM_MINUS;
        return true;
    case '0':
        j->mode = M_NUM_ZERO;
        return true;
    case 't':
    case 'f':
    case 'n':
        j->mode = M_LIT;
        j->lit = c == 't' ? 0 : c == 'f' ? 1 : 2;
        j->sub = 1;
        return true;
    default:
        if (c >= '1' && c <= '9') {
            j->mode = M_NUM_INT, j->sub = 1;
            return true;
        }
        return false;
    }
}

/* A byte between tokens: after a value in a container, or a structural
 * position. */
static bool structural(struct sd_json *j, unsigned char c) {
    switch (j->mode) {
    case M_TOP:
        return c == '{' && open_container(j, true);
    case M_OBJ_FIRST:
        if (c == '}') return close_container(j, true);
        /* fall through */
    case M_KEY:
        if (c != '"') return false;
        j->mode = M_STR, j->key = true, j->sub = 0;
        return !sd_schema_on(j) || sd_schema_key_start(j);
    case M_COLON:
        if (c != ':') return false;
        j->mode = M_VALUE;
        return true;
    case M_ARR_FIRST:
        if (c == ']') return close_container(j, false);
        /* fall through */
    case M_VALUE:
        return value_start(j, c);
    case M_AFTER:
        if (c == ',') {
            j->mode = in_object(j) ? M_KEY : M_VALUE;
            return !sd_schema_on(j) || sd_schema_comma(j);
        }
        return (c == '}' || c == ']') && close_container(j, c == '}');
    default:
        return false; /* M_DONE: nothing more */
    }
}

/* A UTF-8 lead byte in a string: how many continuation bytes follow and
 * the first one's range (Unicode's table 3-7: no overlongs, no
 * surrogates, nothing past U+10FFFF). */
static bool utf8_lead(struct sd_json *j, unsigned char c) {
    j->lo = 0x80, j->hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        j->sub = 1;
    else if (c >= 0xE0 && c <= 0xEF)
        j->sub = 2, j->lo = c == 0xE0 ? 0xA0 : 0x80, j->hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
        j->sub = 3, j->lo = c == 0xF0 ? 0x90 : 0x80, j->hi = c == 0xF4 ? 0x8F : 0xBF;
    else
        return false;
    return true;
}

static bool string_byte(struct sd_json *j, unsigned char c) {
    if (j->sub > 0) {
        if (c < j->lo || c > j->hi) return false;
        j->sub--;
        j->lo = 0x80, j->hi = 0xBF;
        return true;
    }
    if (c == '"') {
        if (!j->key) return value_done(j);
        j->mode = M_COLON;
        return !j->lit_kind || sd_schema_key_end(j);
    }
    if (c == '\\') {
        j->mode = M_ESC;
        return true;
    }
    if (c < 0x20) return false;
    return c < 0x80 || utf8_lead(j, c);
}

static int hex_value(unsigned char c) {
    if (is_digit(c)) return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* \uXXXX: refused are D800-DFFF (a surrogate: the character is written as
 * UTF-8 instead) and 0000. lit holds the first digit, then after the
 * second only whether every digit so far was 0 (0) or not (0xFF). */
static bool hex_byte(struct sd_json *j, unsigned char c) {
    int v = hex_value(c);
    if (v < 0) return false;
    switch (4 - j->sub) { /* digits before this one */
    case 0:
        j->lit = (uint8_t)v;
        break;
    case 1:
        if (j->lit == 0xD && v >= 8) return false;
        /* fall through */
    case 2:
        j->lit = j->lit == 0 && v == 0 ? 0 : 0xFF;
        break;
    default:
        if (j->lit == 0 && v == 0) return false;
    }
    if (--j->sub == 0) j->mode = M_STR;
    return true;
}

/* A byte of a number; *ended when it ends the number (the byte is then
 * read again as the number's successor). sub counts the digits of the
 * integer part, then of the exponent, against their bounds. */
static bool number_byte(struct sd_json *j, unsigned char c, bool *ended) {
    *ended = false;
    switch (j->mode) {
    case M_NUM_MINUS:
        if (c == '0')
            j->mode = M_NUM_ZERO;
        else if (c >= '1' && c <= '9')
            j->mode = M_NUM_INT, j->sub = 1;
        else
            return false;
        return true;
    case M_NUM_INT:
        if (is_digit(c)) return ++j->sub <= SD_JSON_MAX_INT_DIGITS;
        /* fall through */
    case M_NUM_ZERO:
        if (c == '.')
            j->mode = M_NUM_DOT;
        else if (c == 'e' || c == 'E')
            j->mode = M_NUM_E;
        else
            *ended = true;
        return true;
    case M_NUM_DOT:
        if (!is_digit(c)) return false;
        j->mode = M_NUM_FRAC;
        return true;
    case M_NUM_FRAC:
        if (is_digit(c)) return true;
        if (c == 'e' || c == 'E')
            j->mode = M_NUM_E;
        else
            *ended = true;
        return true;
    case M_NUM_E:
        if (c == '+' || c == '-')
            j->mode = M_NUM_ESIGN;
        else if (is_digit(c))
            j->mode = M_NUM_EXP, j->sub = 1;
        else
            return false;
        return true;
    case M_NUM_ESIGN:
        if (!is_digit(c)) return false;
        j->mode = M_NUM_EXP, j->sub = 1;
        return true;
    default: /* M_NUM_EXP */
        if (is_digit(c)) return ++j->sub <= SD_JSON_MAX_EXP_DIGITS;
        *ended = true;
        return true;
    }
}

/* Whitespace between tokens inside the object: a run holds at most one
 * line break and SD_JSON_MAX_WS bytes (a pretty printer's indentation),
 * so that a model that would rather write prose cannot pad with blank
 * lines instead. None before the object or after it: the reply starts
 * with '{' and ends at '}'. */
static bool whitespace(struct sd_json *j, unsigned char c) {
    if (j->mode == M_TOP || j->mode == M_DONE) return false;
    /* "\r\n" is one line break: at most one of each. */
    const uint8_t bit = c == '\n' ? 1 : c == '\r' ? 2 : 0;
    if (j->breaks & bit) return false;
    j->breaks |= bit;
    return ++j->ws <= SD_JSON_MAX_WS;
}

/* Inside a string or a literal word every byte is the value's (or the
 * name's): under a schema it must continue one of the set's. */
static bool in_word(uint8_t mode) { return mode == M_STR || mode == M_ESC || mode == M_HEX || mode == M_LIT; }

static bool byte(struct sd_json *j, unsigned char c) {
    if (j->lit_kind && in_word(j->mode) && !sd_schema_lit_byte(j, c)) return false;
    switch (j->mode) {
    case M_STR:
        return string_byte(j, c);
    case M_ESC:
        if (c == 'u') {
            j->mode = M_HEX, j->sub = 4, j->lit = 0;
            return true;
        }
        j->mode = M_STR;
        return c != 0 && strchr("\"\\/bfnrt", c);
    case M_HEX:
        return hex_byte(j, c);
    case M_LIT: {
        const char *w = LITERALS[j->lit];
        if (c != (unsigned char)w[j->sub]) return false;
        return w[++j->sub] != 0 || value_done(j);
    }
    case M_DEAD:
        return false;
    default:
        break;
    }
    if (j->mode >= M_NUM_MINUS) {
        bool ended;
        if (j->int_only && (c == '.' || c == 'e' || c == 'E')) return false;
        if (!number_byte(j, c, &ended)) return false;
        if (!ended) return !j->lit_kind || sd_schema_lit_byte(j, c);
        if (!value_done(j)) return false; /* the byte after the number is its container's */
    }
    if (is_ws(c)) return whitespace(j, c);
    j->ws = 0, j->breaks = 0;
    return structural(j, c);
}

bool sd_json_feed(struct sd_json *j, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!byte(j, (unsigned char)s[i])) return false;
    return true;
}

bool sd_json_complete(const struct sd_json *j) { return j->mode == M_DONE; }

void sd_json_kill(struct sd_json *j) {
    sd_json_init(j);
    j->mode = M_DEAD;
}

bool sd_json_dead(const struct sd_json *j) { return j->mode == M_DEAD; }

bool sd_json_free_text(const struct sd_json *j) { return j->mode == M_STR && j->sub == 0 && !j->lit_kind; }

enum sd_json_text sd_json_text_class(const char *s, size_t n) {
    struct sd_json j;
    sd_json_init(&j);
    j.mode = M_STR; /* a value's string, no schema: nothing but the string's rules */
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (j.mode == M_STR && j.sub == 0 && c == '"') return SD_TEXT_LEAVES;
        if (!byte(&j, c)) return SD_TEXT_REFUSED;
    }
    return n ? SD_TEXT_STAYS : SD_TEXT_REFUSED;
}
