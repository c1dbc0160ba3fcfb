/* grammar/schema_match.c - the schema's checks as the recogniser reads
 * bytes (grammar/schema.h). */
#include "grammar/schema.h"

static const struct sd_schema_node *node_at(const struct sd_json *j, uint16_t i) {
    return &j->schema->nodes[i];
}

static struct sd_json_level *top(struct sd_json *j) { return &j->level[j->sdepth - 1]; }

/* The innermost open container is an object (else an array). */
static bool in_object(const struct sd_json *j) { return j->objects >> (j->depth - 1) & 1; }

static void lit_begin(struct sd_json *j, uint16_t set, uint8_t kind) {
    const struct sd_schema_set *s = &j->schema->sets[set];
    j->lit_kind = kind;
    j->lit_lo = s->first;
    j->lit_hi = (uint16_t)(s->first + s->n);
    j->lit_pos = 0;
}

/* The byte at the range's position, or -1 where the literal ends there:
 * the order the entries are sorted in. */
static int key_at(const struct sd_schema *s, uint32_t i, uint16_t pos) {
    const struct sd_schema_lit *l = &s->lits[i];
    return l->len == pos ? -1 : (unsigned char)s->pool[l->off + pos];
}

/* The first entry in [lo, hi) whose key is above k (k = c - 1: the first
 * at c or above). */
static uint32_t bound(const struct sd_schema *s, uint32_t lo, uint32_t hi, uint16_t pos, int k) {
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (key_at(s, mid, pos) <= k)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* For a property name: the index range that may come next. */
static void key_window(const struct sd_json *j, uint16_t *first, uint16_t *last) {
    const struct sd_json_level *l = &j->level[j->sdepth - 1];
    const struct sd_schema_node *o = node_at(j, l->node);
    *first = l->n;
    uint16_t req = l->n < o->n_props ? j->schema->props[o->props + l->n].next_req : o->n_props;
    *last = req < o->n_props ? req : (uint16_t)(o->n_props - 1);
}

/* Some name in the range may still come. */
static bool key_viable(const struct sd_json *j) {
    uint16_t first, last;
    key_window(j, &first, &last);
    for (uint32_t i = j->lit_lo; i < j->lit_hi; i++) {
        uint16_t o = j->schema->lits[i].order;
        if (o >= first && o <= last) return true;
    }
    return false;
}

bool sd_schema_lit_byte(struct sd_json *j, unsigned char c) {
    const struct sd_schema *s = j->schema;
    if (j->lit_pos == UINT16_MAX) return false;
    uint32_t lo = bound(s, j->lit_lo, j->lit_hi, j->lit_pos, (int)c - 1);
    uint32_t hi = bound(s, lo, j->lit_hi, j->lit_pos, c);
    if (lo == hi) return false;
    j->lit_lo = (uint16_t)lo, j->lit_hi = (uint16_t)hi, j->lit_pos++;
    return j->lit_kind != 2 || key_viable(j);
}

/* The entry equal to the bytes read (sorted first: a prefix sorts before
 * what extends it), or -1. */
static int32_t lit_exact(const struct sd_json *j) {
    if (j->lit_lo < j->lit_hi && j->schema->lits[j->lit_lo].len == j->lit_pos) return j->lit_lo;
    return -1;
}

bool sd_schema_value_start(struct sd_json *j, unsigned char c) {
    const struct sd_schema_node *n = node_at(j, j->vnode);
    uint8_t k = sd_schema_kinds_of(c);
    if (!(n->types & k)) return false;
    if (j->sdepth > 0 && !in_object(j) && top(j)->n >= node_at(j, top(j)->node)->max_items) return false;
    j->int_only = k & SD_T_NUMBER && !(n->types & SD_T_NUMBER);
    if (n->enum_set == SD_SCHEMA_NO_SET) return true;
    lit_begin(j, n->enum_set, 1);
    return sd_schema_lit_byte(j, c);
}

bool sd_schema_open(struct sd_json *j, bool object, bool was_on) {
    if (!was_on) return true;
    const struct sd_schema_node *n = node_at(j, j->vnode);
    if (object ? n->free_object : n->free_array)
        return true;                                    /* its contents are free: the schema stays outside */
    if (j->sdepth >= SD_SCHEMA_MAX_DEPTH) return false; /* compile refuses such schemas */
    j->level[j->sdepth++] = (struct sd_json_level){.node = j->vnode, .n = 0};
    if (!object) j->vnode = n->items;
    return true;
}

bool sd_schema_close(struct sd_json *j) {
    const struct sd_json_level *l = top(j);
    const struct sd_schema_node *n = node_at(j, l->node);
    bool ok;
    if (in_object(j))
        ok = l->n >= n->n_props || j->schema->props[n->props + l->n].next_req == n->n_props;
    else
        ok = l->n >= n->min_items;
    if (ok) j->sdepth--;
    return ok;
}

bool sd_schema_comma(struct sd_json *j) {
    struct sd_json_level *l = top(j);
    const struct sd_schema_node *n = node_at(j, l->node);
    if (in_object(j)) return l->n < n->n_props;
    j->vnode = n->items;
    return l->n < n->max_items;
}

bool sd_schema_key_start(struct sd_json *j) {
    const struct sd_schema_node *n = node_at(j, top(j)->node);
    if (top(j)->n >= n->n_props) return false;
    lit_begin(j, n->key_set, 2);
    return sd_schema_lit_byte(j, '"');
}

bool sd_schema_key_end(struct sd_json *j) {
    int32_t e = lit_exact(j);
    j->lit_kind = 0;
    if (e < 0) return false;
    uint16_t first, last, o = j->schema->lits[e].order;
    key_window(j, &first, &last);
    if (o < first || o > last) return false;
    struct sd_json_level *l = top(j);
    l->n = (uint16_t)(o + 1);
    j->vnode = j->schema->props[node_at(j, l->node)->props + o].node;
    return true;
}

bool sd_schema_value_end(struct sd_json *j) {
    int32_t e = -1;
    if (j->lit_kind) {
        e = lit_exact(j);
        j->lit_kind = 0;
        if (e < 0) return false;
    }
    if (j->sdepth == 0) return true;
    struct sd_json_level *l = top(j);
    if (!in_object(j)) {
        if (l->n < UINT16_MAX) l->n++;
    } else if (node_at(j, l->node)->tagged) {
        if (e < 0) return false;            /* compile makes every tag a literal set */
        l->node = j->schema->lits[e].order; /* the tag picks the alternative */
    }
    return true;
}
