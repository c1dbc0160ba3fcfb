/* engine/stream.c - a request's output as the caller sees it (engine/stream.h). */
#include <string.h>

#include "engine/stream.h"

/* The caller's stop strings, then the format's own; NULL entries are skipped. */
static size_t stream_n_stops(const struct sd_stream *st) { return st->p->n_stop + (st->turn_stop != NULL); }

static const char *stream_stop(const struct sd_stream *st, size_t i) {
    return i < st->p->n_stop ? st->p->stop[i] : st->turn_stop;
}

static int stream_push(struct sd_stream *st, const char *piece, size_t len) {
    struct sdnpu_session *s = st->s;
    if (st->n + len + 1 > s->text_cap) {
        size_t cap = (st->n + len + 1) * 2;
        char *t = sd_realloc(s->text, cap);
        if (!t) return sd_err_set(&s->err, SDNPU_ERR_OOM, "out of memory for streamed text");
        s->text = t;
        s->text_cap = cap;
    }
    memcpy(s->text + st->n, piece, len);
    st->n += len;
    st->total += len;
    return SDNPU_OK;
}

/* Emit what can be emitted. Returns 1 if a stop string was hit, 2 if the
 * callback asked to stop, 0 otherwise. final: flush everything. */
int sd_stream_flush(struct sd_stream *st, bool final) {
    struct sdnpu_session *s = st->s;
    const struct sdnpu_generate_params *p = st->p;
    size_t emit = st->n;
    int result = 0;
    for (size_t i = 0; i < stream_n_stops(st); i++) {
        const char *stop = stream_stop(st, i);
        size_t sl = stop ? strlen(stop) : 0;
        if (!sl) continue;
        for (size_t at = 0; at + sl <= st->n; at++)
            if (!memcmp(s->text + at, stop, sl)) {
                if (at < emit || result == 0) emit = SD_MIN(emit, at);
                result = 1;
                break;
            }
    }
    if (!result && !final) {
        /* Hold back a tail that could still become a stop string. */
        for (size_t i = 0; i < stream_n_stops(st); i++) {
            const char *stop = stream_stop(st, i);
            size_t sl = stop ? strlen(stop) : 0;
            for (size_t k = SD_MIN(sl - (sl > 0), st->n); k > 0; k--)
                if (!memcmp(s->text + st->n - k, stop, k)) {
                    emit = SD_MIN(emit, st->n - k);
                    break;
                }
        }
        /* With the guard, only whole sentences that repeat nothing. */
        if (st->guard) emit = SD_MIN(emit, st->guard->kept_bytes - (st->total - st->n));
        emit = sd_utf8_complete(s->text, emit);
    }
    if (emit > 0 && p->on_text && !p->on_text(s->text, emit, p->user)) result = result ? result : 2;
    memmove(s->text, s->text + emit, st->n - emit);
    st->n -= emit;
    if (result == 1) st->n = 0; /* the stop string and anything after it are dropped */
    return result;
}

/* The repeat the guard found is dropped: the output ends at the last
 * sentence boundary, in the stream, the counts and the response tokens. */
static void drop_repeat(struct sd_stream *ss, struct sdnpu_stats *st, size_t *n_outs) {
    const struct sd_guard *g = ss->guard;
    size_t emitted = ss->total - ss->n;
    ss->n = g->kept_bytes > emitted ? g->kept_bytes - emitted : 0;
    st->n_generated = (int32_t)g->kept_tok;
    *n_outs = SD_MIN(*n_outs, g->kept_tok);
    st->stop_reason = SDNPU_STOP_REPETITION;
}

/* Hand a step's tokens to the output in order, stopping at the end of
 * generation, a stop string, the callback, the limit or (with the guard) a
 * repetition. Returns 1 when generation stops, 0 when it goes on, or a
 * negative status. */
int sd_stream_emit(struct sdnpu_session *s, struct sd_stream *ss, const int32_t *emit, int32_t n_emit,
                   int32_t limit, int32_t *outs, size_t *n_outs, struct sdnpu_stats *st) {
    int rc;
    for (int32_t i = 0; i < n_emit; i++) {
        int32_t t = emit[i];
        if (sd_vocab_is_eog(s->model->vocab, t)) {
            s->eog_token = t;
            st->stop_reason = SDNPU_STOP_EOG;
            return 1;
        }
        st->n_generated++;
        if (outs) outs[(*n_outs)++] = t;
        char piece[256];
        int32_t pl = sd_token_to_piece(s->model->vocab, t, false, piece, sizeof piece);
        if (pl < 0) pl = 0; /* no token's text is longer than 256 bytes in practice */
        if ((rc = stream_push(ss, piece, (size_t)pl))) return rc;
        bool repeats = false;
        if (ss->guard && (rc = sd_guard_push(&s->guard, t, piece, (size_t)pl, &repeats, &s->err))) return rc;
        if (repeats) {
            drop_repeat(ss, st, n_outs);
            return 1;
        }
        int f = sd_stream_flush(ss, false);
        if (f) {
            st->stop_reason = f == 1 ? SDNPU_STOP_STRING : SDNPU_STOP_CALLBACK;
            return 1;
        }
        if (st->n_generated >= limit) return 1;
    }
    return 0;
}
