/* cli/json.c - the JSON string writer; see json.h. */
#include "json.h"

#include <string.h>

void cli_json_write_string(FILE *f, const char *s, size_t len) {
    fputc('"', f);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (c < 0x20 || c == 0x7f) fprintf(f, "\\u%04x", c);
            else fputc(c, f);
        }
    }
    fputc('"', f);
}

void cli_json_write_cstr(FILE *f, const char *s) { cli_json_write_string(f, s ? s : "", s ? strlen(s) : 0); }
