/*
 * graphs/quant_ref.h - what the files of the scalar reference share
 * (quant_dequant.c, quant_quantize.c, quant_dot.c): two small readers, and
 * each file's table of its kernels by element type, through which
 * graphs/quant.c dispatches. Private to graphs/quant*.c.
 *
 * A file that includes this header and does float arithmetic starts with
 * the fp-contract pragma of those files (see quant_dot.c), before any
 * include, so that the inline functions below are compiled under it too.
 */
#ifndef SD_QUANT_REF_H
#define SD_QUANT_REF_H

#include <stdint.h>
#include <string.h>

#include "graphs/quant.h"

static inline float h2f(uint16_t h) { return sd_fp16_to_fp32(h); }

static inline uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The scalar kernels of each element type, indexed by enum sd_type; NULL
 * where a type has none (Q8_1 and Q8_K are activation types only: no dot
 * product takes them as weights). */
extern const sd_dequant_fn sd_ref_dequant[SD_TYPE_COUNT];
extern const sd_quant_fn sd_ref_quant[SD_TYPE_COUNT];
extern const sd_dot_fn sd_ref_dot[SD_TYPE_COUNT];

#endif /* SD_QUANT_REF_H */
