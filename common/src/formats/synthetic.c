/* synthetic.c: built-in model layouts and their deterministic contents (see
 * wt/synthetic.h).
 *
 * Contents: every aligned 8-byte word w of a tensor is splitmix64's output
 * for the key XXH3-64(name, seed) and counter w, so any byte range costs one
 * hash per word and no state. Floating-point words are then shaped lane by
 * lane into finite values of magnitude 2^-7..2 (random sign and mantissa, a
 * clamped exponent): a receiver that converts or prints the weights never
 * meets a NaN or an infinity, and the bytes stay a pure function of
 * (name, seed, offset). Every wt dtype's item size divides 8, so an element
 * never straddles two words.
 */

#include "wt/synthetic.h"

#include <endian.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define MIB (1024ull * 1024ull)

/* ------------------------------------------------------------------------ */
/* Layouts                                                                  */
/* ------------------------------------------------------------------------ */

/* A Llama-like decoder: embed, N x (attention, MLP, two norms), final norm,
 * lm_head. kv_dim < hidden gives grouped-query attention. */
typedef struct llama_spec {
  int64_t vocab, hidden, intermediate, kv_dim;
  int layers;
  wt_dtype weight, norm, lm_head;
} llama_spec;

/* A growable metadata array: the one thing every layout builder appends to. */
typedef struct meta_list {
  wt_tensor_meta *v;
  size_t n, cap;
} meta_list;

static wt_status *add(meta_list *l, wt_dtype dt, int ndim, int64_t d0,
                      int64_t d1, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

static wt_status *add(meta_list *l, wt_dtype dt, int ndim, int64_t d0,
                      int64_t d1, const char *fmt, ...) {
  char name[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof(name), fmt, ap);
  va_end(ap);
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 32;
    wt_tensor_meta *v = realloc(l->v, cap * sizeof(*v));
    if (v == NULL)
      return wt_status_new(WT_RESOURCE_EXHAUSTED,
                           "synthetic layout: out of memory at '%s'", name);
    l->v = v;
    l->cap = cap;
  }
  int64_t shape[2] = {d0, d1};
  wt_status *st = wt_tensor_meta_init(&l->v[l->n], name, dt, shape, ndim);
  if (st != NULL) return st;
  l->n++;
  return NULL;
}

static wt_status *build_llama(meta_list *l, const llama_spec *s) {
  wt_status *st = NULL;
  const int64_t h = s->hidden, kv = s->kv_dim, im = s->intermediate;
  WT_CHECK(add(l, s->weight, 2, s->vocab, h, "model.embed_tokens.weight"));
  for (int i = 0; i < s->layers; i++) {
    const char *p = "model.layers";
    WT_CHECK(add(l, s->norm, 1, h, 0, "%s.%d.input_layernorm.weight", p, i));
    WT_CHECK(add(l, s->weight, 2, h, h, "%s.%d.self_attn.q_proj.weight", p, i));
    WT_CHECK(
        add(l, s->weight, 2, kv, h, "%s.%d.self_attn.k_proj.weight", p, i));
    WT_CHECK(
        add(l, s->weight, 2, kv, h, "%s.%d.self_attn.v_proj.weight", p, i));
    WT_CHECK(add(l, s->weight, 2, h, h, "%s.%d.self_attn.o_proj.weight", p, i));
    WT_CHECK(add(l, s->norm, 1, h, 0, "%s.%d.post_attention_layernorm.weight",
                 p, i));
    WT_CHECK(add(l, s->weight, 2, im, h, "%s.%d.mlp.gate_proj.weight", p, i));
    WT_CHECK(add(l, s->weight, 2, im, h, "%s.%d.mlp.up_proj.weight", p, i));
    WT_CHECK(add(l, s->weight, 2, h, im, "%s.%d.mlp.down_proj.weight", p, i));
  }
  WT_CHECK(add(l, s->norm, 1, h, 0, "model.norm.weight"));
  WT_CHECK(add(l, s->lm_head, 2, s->vocab, h, "lm_head.weight"));
out:
  return st;
}

/* "tiny": seven tensors, 6080 bytes; non-square shapes so that a transposed
 * shape is a mismatch, float32 norms among bfloat16 weights. */
static wt_status *build_tiny(meta_list *l) {
  wt_status *st = NULL;
  const wt_dtype bf = WT_DTYPE_BFLOAT16, f32 = WT_DTYPE_FLOAT32;
  WT_CHECK(add(l, bf, 2, 64, 16, "model.embed_tokens.weight"));
  WT_CHECK(add(l, f32, 1, 16, 0, "model.layers.0.input_layernorm.weight"));
  WT_CHECK(add(l, bf, 2, 16, 16, "model.layers.0.self_attn.q_proj.weight"));
  WT_CHECK(add(l, bf, 2, 16, 40, "model.layers.0.mlp.down_proj.weight"));
  WT_CHECK(
      add(l, f32, 1, 16, 0, "model.layers.0.post_attention_layernorm.weight"));
  WT_CHECK(add(l, f32, 1, 16, 0, "model.norm.weight"));
  WT_CHECK(add(l, bf, 2, 64, 16, "lm_head.weight"));
out:
  return st;
}

/* "small": 21 tensors, about 3.3 MiB, bfloat16 weights with grouped-query
 * attention, float32 norms and a float16 lm_head. */
static wt_status *build_small(meta_list *l) {
  const llama_spec s = {.vocab = 1024,
                        .hidden = 256,
                        .intermediate = 512,
                        .kv_dim = 128,
                        .layers = 2,
                        .weight = WT_DTYPE_BFLOAT16,
                        .norm = WT_DTYPE_FLOAT32,
                        .lm_head = WT_DTYPE_FLOAT16};
  return build_llama(l, &s);
}

/* "llama-256m": 84 tensors, about 252.6 MiB (9 layers, hidden 1024). */
static wt_status *build_llama_256m(meta_list *l) {
  const llama_spec s = {.vocab = 8192,
                        .hidden = 1024,
                        .intermediate = 2816,
                        .kv_dim = 1024,
                        .layers = 9,
                        .weight = WT_DTYPE_BFLOAT16,
                        .norm = WT_DTYPE_FLOAT32,
                        .lm_head = WT_DTYPE_BFLOAT16};
  return build_llama(l, &s);
}

/* "bench-1g": 363 tensors, about 1.0 GiB (40 layers), bfloat16 weights with
 * float32 norms and a float32 lm_head. */
static wt_status *build_bench_1g(meta_list *l) {
  const llama_spec s = {.vocab = 8192,
                        .hidden = 1024,
                        .intermediate = 2816,
                        .kv_dim = 1024,
                        .layers = 40,
                        .weight = WT_DTYPE_BFLOAT16,
                        .norm = WT_DTYPE_FLOAT32,
                        .lm_head = WT_DTYPE_FLOAT32};
  return build_llama(l, &s);
}

/* "bench-8g": 750 tensors, about 8.0 GiB (83 layers, hidden 2048), as
 * bench-1g: bfloat16 weights, float32 norms and lm_head. */
static wt_status *build_bench_8g(meta_list *l) {
  const llama_spec s = {.vocab = 8192,
                        .hidden = 2048,
                        .intermediate = 5632,
                        .kv_dim = 2048,
                        .layers = 83,
                        .weight = WT_DTYPE_BFLOAT16,
                        .norm = WT_DTYPE_FLOAT32,
                        .lm_head = WT_DTYPE_FLOAT32};
  return build_llama(l, &s);
}

/* "small-10k": 10,000 float32 tensors of 16 elements (64 bytes each): the
 * per-tensor cost of a round. */
static wt_status *build_small_10k(meta_list *l) {
  wt_status *st = NULL;
  for (int i = 0; i < 10000; i++)
    WT_CHECK(add(l, WT_DTYPE_FLOAT32, 1, 16, 0, "t.%05d", i));
out:
  return st;
}

static const struct {
  const char *name;
  wt_status *(*build)(meta_list *l);
} layouts[] = {
    {"tiny", build_tiny},
    {"small", build_small},
    {"llama-256m", build_llama_256m},
    {"bench-1g", build_bench_1g},
    {"bench-8g", build_bench_8g},
    {"small-10k", build_small_10k},
};
#define NLAYOUTS (sizeof(layouts) / sizeof(layouts[0]))

static const char *const layout_names[NLAYOUTS + 1] = {
    "tiny", "small", "llama-256m", "bench-1g", "bench-8g", "small-10k", NULL};

const char *const *wt_synthetic_layout_names(void) {
  return layout_names;
}

wt_status *wt_synthetic_layout(const char *name, wt_tensor_meta **metas,
                               size_t *n) {
  wt_status *st = NULL;
  meta_list l = {0};
  if (metas == NULL || n == NULL)
    WT_FAIL(WT_INVALID_ARGUMENT, "synthetic layout: 'metas' or 'n' is NULL");
  *metas = NULL;
  *n = 0;
  for (size_t i = 0; name != NULL && i < NLAYOUTS; i++) {
    if (strcmp(name, layouts[i].name) != 0) continue;
    WT_CHECK(layouts[i].build(&l));
    *metas = l.v;
    *n = l.n;
    l.v = NULL;
    l.n = 0;
    goto out;
  }
  WT_FAIL(WT_NOT_FOUND,
          "synthetic layout '%s' does not exist; available: tiny, small, "
          "llama-256m, bench-1g, bench-8g, small-10k",
          name ? name : "(null)");
out:
  wt_tensor_meta_array_free(l.v, l.n);
  return st;
}

/* ------------------------------------------------------------------------ */
/* Contents                                                                 */
/* ------------------------------------------------------------------------ */

#define GOLDEN 0x9E3779B97F4A7C15ull

static inline uint64_t splitmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Lane-wise shaping of a random word into finite values. `lo` selects the
 * bits kept from the random word (sign and mantissa), `eshift` is where the
 * exponent field starts, `ebase` the smallest exponent field value, and
 * `emask` the random bits added to it, replicated in every lane. */
typedef struct shaping {
  uint64_t keep, emask, ebase;
  int eshift;
} shaping;

static const shaping shape_bf16 = {0x807F807F807F807Full, 0x0007000700070007ull,
                                   0x0078007800780078ull, 7};
static const shaping shape_f16 = {0x83FF83FF83FF83FFull, 0x0007000700070007ull,
                                  0x0008000800080008ull, 10};
static const shaping shape_f32 = {0x807FFFFF807FFFFFull, 0x0000000700000007ull,
                                  0x0000007800000078ull, 23};
static const shaping shape_f64 = {0x800FFFFFFFFFFFFFull, 0x7ull, 0x3F8ull, 52};
/* float8: the largest exponent fields (NaN in e4m3fn, inf/NaN in e5m2) are
 * never produced. */
static const shaping shape_e4m3 = {0x8787878787878787ull, 0x0303030303030303ull,
                                   0x0404040404040404ull, 3};
static const shaping shape_e5m2 = {0x8383838383838383ull, 0x0303030303030303ull,
                                   0x0C0C0C0C0C0C0C0Cull, 2};

static inline uint64_t shape_word(const shaping *s, uint64_t r) {
  return (r & s->keep) |
         ((((r >> s->eshift) & s->emask) + s->ebase) << s->eshift);
}

/* The shaping for `dt`, or NULL for integer types (raw bits). */
static const shaping *shaping_for(wt_dtype dt) {
  switch (dt) {
    case WT_DTYPE_BFLOAT16:
      return &shape_bf16;
    case WT_DTYPE_FLOAT16:
      return &shape_f16;
    case WT_DTYPE_FLOAT32:
      return &shape_f32;
    case WT_DTYPE_FLOAT64:
      return &shape_f64;
    case WT_DTYPE_FLOAT8_E4M3FN:
      return &shape_e4m3;
    case WT_DTYPE_FLOAT8_E5M2:
      return &shape_e5m2;
    default:
      return NULL;
  }
}

typedef struct word_gen {
  uint64_t key;
  const shaping *shape;
  int is_bool;
} word_gen;

/* Word `w` of the tensor, in memory order (little-endian lanes). */
static inline uint64_t gen_word(const word_gen *g, uint64_t w) {
  uint64_t r = splitmix64(g->key + (w + 1) * GOLDEN);
  if (g->shape != NULL)
    r = shape_word(g->shape, r);
  else if (g->is_bool)
    r &= 0x0101010101010101ull;
  return htole64(r);
}

void wt_synthetic_fill(const wt_tensor_meta *m, uint64_t seed, uint64_t offset,
                       void *buf, size_t len) {
  unsigned char *out = buf;
  if (m == NULL || buf == NULL || len == 0) return;
  /* Past the tensor's end there are no contents: zeros, never a read. */
  if (offset >= m->nbytes) {
    memset(out, 0, len);
    return;
  }
  if (len > m->nbytes - offset) {
    size_t have = (size_t)(m->nbytes - offset);
    memset(out + have, 0, len - have);
    len = have;
  }
  const char *name = m->name ? m->name : "";
  word_gen g = {.key = XXH3_64bits_withSeed(name, strlen(name), seed),
                .shape = shaping_for(m->dtype),
                .is_bool = m->dtype == WT_DTYPE_BOOL};
  uint64_t w = offset / 8;
  size_t skip = (size_t)(offset % 8);
  if (skip != 0) {
    uint64_t word = gen_word(&g, w++);
    size_t take = 8 - skip < len ? 8 - skip : len;
    memcpy(out, (const unsigned char *)&word + skip, take);
    out += take;
    len -= take;
  }
  for (; len >= 8; len -= 8, out += 8) {
    uint64_t word = gen_word(&g, w++);
    memcpy(out, &word, 8);
  }
  if (len > 0) {
    uint64_t word = gen_word(&g, w);
    memcpy(out, &word, len);
  }
}
