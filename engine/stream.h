/*
 * engine/stream.h - a request's output as the caller sees it: the tokens a
 * decoding step produced, turned into text and handed to the streaming
 * callback. Text that could still become a stop string (the caller's, or
 * the plain chat format's end of turn) is held back until it is known not
 * to, only whole UTF-8 characters leave, and with the degeneration guard
 * only whole sentences that repeat nothing. Private to engine/.
 */
#ifndef SD_STREAM_H
#define SD_STREAM_H

#include "engine/api.h"

/* One request's stream; the held-back text is in the session's buffer
 * (s->text), which grows as needed. */
struct sd_stream {
    struct sdnpu_session *s;
    const struct sdnpu_generate_params *p;
    const char *turn_stop;        /* the chat format's end of turn as text (plain format), or NULL */
    size_t n;                     /* bytes held in s->text */
    size_t total;                 /* bytes pushed in all */
    const struct sd_guard *guard; /* the degeneration guard, or NULL: hold back the sentence in progress */
};

/* Emit what can be emitted. Returns 1 if a stop string was hit, 2 if the
 * callback asked to stop, 0 otherwise. final: flush everything. */
int sd_stream_flush(struct sd_stream *st, bool final);

/* Hand a step's tokens emit[0..n_emit) to the output in order, counting
 * them in the stats st and appending them to outs[*n_outs ..] (NULL: not
 * kept), stopping at the end of generation, a stop string, the callback,
 * the limit or (with the guard) a repetition; st->stop_reason says which.
 * Returns 1 when generation stops, 0 when it goes on, or a negative
 * status. */
int sd_stream_emit(struct sdnpu_session *s, struct sd_stream *ss, const int32_t *emit, int32_t n_emit,
                   int32_t limit, int32_t *outs, size_t *n_outs, struct sdnpu_stats *st);

#endif
