/*
 * engine/tools.h - what the in-tree tools (sdnpu bench graphs, sdnpu
 * profile) may see behind the public handles: a session's graph runtime
 * and a model's weights. Applications use include/sdnpu.h alone; nothing
 * here is installed or promised to stay.
 */
#ifndef SD_TOOLS_H
#define SD_TOOLS_H

#include <stdint.h>

#include "draft/draft.h"
#include "sched/runtime.h"
#include "sdnpu.h"

/* The session's runtime (its graphs and KV cache); owned by the session. */
struct sd_rt *sd_tool_session_rt(struct sdnpu_session *s);
/* The next-token logits after the last evaluated token [n_vocab]. */
const float *sd_tool_session_logits(const struct sdnpu_session *s);
/* Forget everything after the first n_past tokens (0 <= n_past <= the
 * tokens held); the logits are gone until the next evaluation. */
void sd_tool_session_rewind(struct sdnpu_session *s, int32_t n_past);
/* The tokens the session holds, in order ([*n]): after a generation on a
 * new context, its prompt and then the output as far as it was evaluated. */
const int32_t *sd_tool_session_tokens(const struct sdnpu_session *s, int32_t *n);
/* The end-of-generation token that ended the last request (it is not among
 * the tokens held), or -1. */
int32_t sd_tool_session_eog(const struct sdnpu_session *s);
/* The calibrated store ("+calib" drafts) the last calibrating request
 * built, or NULL before any did. Valid until the next request. */
const struct sd_sam *sd_tool_session_calib(const struct sdnpu_session *s);
/* The weights and config the graphs run; NULL for a vocab_only model. */
const struct sd_model *sd_tool_model_weights(const struct sdnpu_model *model);
/* "certified" where the model's shared weights carry the output
 * projection's certificate (graphs/cert.h), else "exact". */
const char *sd_tool_model_head(const struct sdnpu_model *model);
/* The text a generation with chat on prefills for user under system
 * (sdnpu_generate_params' chat and system: NULL the template's own system
 * turn, "" none), without the BOS token the tokenizer adds: the byte
 * count, or the negative of the size needed (including the NUL). */
int64_t sd_tool_model_chat_turn(const struct sdnpu_model *model, const char *system, const char *user,
                                char *buf, size_t cap);
/* Worker threads a session of this model gets by default. */
int32_t sd_tool_model_threads(const struct sdnpu_model *model);
/* What a profile must be measured on and saved under for the sessions of
 * model made with sp to read it (`sdnpu profile`): the key such a session
 * looks it up by (sched/profile.h) and the weights its graphs run on (the
 * model's shared prepared copy, its weight cache in use; NULL where each
 * graph prepares its own). Makes such a session and frees it; a failure's
 * message is sdnpu_model_last_error's. */
int sd_tool_profile_target(struct sdnpu_model *model, struct sdnpu_session_params sp, char *key, size_t cap,
                           struct sd_wstore **weights);

/* The rows of the verification graph (L2) a session takes from profile
 * prof when its caller leaves n_verify at 0: 4; 3 where a step of 4 rows
 * costs more than 1.06 times one of 3, and 2 where that step of 3 costs
 * more than 1.12 times one of 2; else doubled to 8 where a step of 8 rows
 * costs at most 1.09 times one of 4, and on while a step of twice the rows
 * costs at most 1.05 times one of half (engine/session.c). _why also
 * writes the ratios that decided it into why (cap bytes, NUL-terminated;
 * empty where the profile prices none of them). */
struct sd_profile;
int32_t sd_session_verify_rows(const struct sd_profile *prof);
int32_t sd_session_verify_rows_why(const struct sd_profile *prof, char *why, size_t cap);

#endif /* SD_TOOLS_H */
