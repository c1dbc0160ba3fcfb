/*
 * engine/tools.h - what the in-tree tools (sdnpu bench graphs, sdnpu
 * profile) may see behind the public handles: a session's graph runtime
 * and a model's weights. Applications use include/sdnpu.h alone; nothing
 * here is installed or promised to stay.
 */
#ifndef SD_TOOLS_H
#define SD_TOOLS_H

#include <stdint.h>

#include "sched/runtime.h"
#include "sdnpu.h"

/* The session's runtime (its graphs and KV cache); owned by the session. */
struct sd_rt *sd_tool_session_rt(struct sdnpu_session *s);
/* The next-token logits after the last evaluated token [n_vocab]. */
const float *sd_tool_session_logits(const struct sdnpu_session *s);
/* Forget everything after the first n_past tokens (0 <= n_past <= the
 * tokens held); the logits are gone until the next evaluation. */
void sd_tool_session_rewind(struct sdnpu_session *s, int32_t n_past);
/* The weights and config the graphs run; NULL for a vocab_only model. */
const struct sd_model *sd_tool_model_weights(const struct sdnpu_model *model);
/* Worker threads a session of this model gets by default. */
int32_t sd_tool_model_threads(const struct sdnpu_model *model);

#endif /* SD_TOOLS_H */
