/* test_synthetic.c: built-in layouts and their deterministic contents. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "wt/checksum.h"
#include "wt/synthetic.h"
#include "wt_test.h"

#define MIB (1024.0 * 1024.0)

/* SHA-256 of tiny's model.embed_tokens.weight for seed 0 and of its
 * model.layers.0.mlp.down_proj.weight for seed 1. */
#define GOLDEN_EMBED_SEED0 \
  "409709fd861b8acaa5ec7bca708b34ef12b539eca507c612e9c4333d2811fe7d"
#define GOLDEN_DOWN_SEED1 \
  "8281cec78d42cbc58d8dbb5ed1aa57092518c6ff937c4fa7469a4cfc87358989"

typedef struct layout_stats {
  size_t n;
  uint64_t bytes;
  size_t nbf16, nf32, nother;
} layout_stats;

static layout_stats stats_of(const wt_tensor_meta *m, size_t n) {
  layout_stats s = {.n = n};
  for (size_t i = 0; i < n; i++) {
    s.bytes += m[i].nbytes;
    if (m[i].dtype == WT_DTYPE_BFLOAT16)
      s.nbf16++;
    else if (m[i].dtype == WT_DTYPE_FLOAT32)
      s.nf32++;
    else
      s.nother++;
  }
  return s;
}

static const wt_tensor_meta *find(const wt_tensor_meta *m, size_t n,
                                  const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(m[i].name, name) == 0) return &m[i];
  return NULL;
}

static void test_names(void) {
  const char *const *names = wt_synthetic_layout_names();
  const char *want[] = {"tiny",     "small",    "llama-256m",
                        "bench-1g", "bench-8g", "small-10k"};
  size_t k = 0;
  for (; names[k] != NULL; k++) {
    CU_ASSERT_FATAL(k < 6);
    CU_ASSERT_STRING_EQUAL(names[k], want[k]);
  }
  CU_ASSERT_EQUAL(k, 6);
  CU_ASSERT_STRING_EQUAL(WT_SYNTHETIC_DEFAULT, "llama-256m");
}

static void test_tiny(void) {
  wt_tensor_meta *m = NULL;
  size_t n = 0;
  WT_ASSERT_OK(wt_synthetic_layout("tiny", &m, &n));
  layout_stats s = stats_of(m, n);
  CU_ASSERT_EQUAL(n, 7);
  CU_ASSERT_EQUAL(s.bytes, 6080);
  CU_ASSERT(s.nbf16 > 0 && s.nf32 > 0);
  const wt_tensor_meta *norm = find(m, n, "model.norm.weight");
  CU_ASSERT_PTR_NOT_NULL_FATAL(norm);
  CU_ASSERT_EQUAL(norm->dtype, WT_DTYPE_FLOAT32);
  CU_ASSERT_EQUAL(norm->ndim, 1);
  CU_ASSERT_EQUAL(norm->shape[0], 16);
  const wt_tensor_meta *down =
      find(m, n, "model.layers.0.mlp.down_proj.weight");
  CU_ASSERT_PTR_NOT_NULL_FATAL(down);
  CU_ASSERT_EQUAL(down->shape[0], 16);
  CU_ASSERT_EQUAL(down->shape[1], 40);
  wt_tensor_meta_array_free(m, n);
}

static void test_small_and_llama(void) {
  wt_tensor_meta *m = NULL;
  size_t n = 0;
  WT_ASSERT_OK(wt_synthetic_layout("small", &m, &n));
  layout_stats s = stats_of(m, n);
  CU_ASSERT(s.bytes > 2 * MIB && s.bytes < 8 * MIB);
  CU_ASSERT(s.nbf16 > 0 && s.nf32 > 0 && s.nother > 0); /* float16 head */
  wt_tensor_meta_array_free(m, n);

  WT_ASSERT_OK(wt_synthetic_layout("llama-256m", &m, &n));
  s = stats_of(m, n);
  CU_ASSERT(s.bytes > 240 * MIB && s.bytes < 272 * MIB);
  CU_ASSERT_EQUAL(n, 84);
  const char *expect[] = {
      "model.embed_tokens.weight",
      "model.layers.0.self_attn.q_proj.weight",
      "model.layers.0.self_attn.k_proj.weight",
      "model.layers.0.self_attn.v_proj.weight",
      "model.layers.8.self_attn.o_proj.weight",
      "model.layers.3.mlp.gate_proj.weight",
      "model.layers.3.mlp.up_proj.weight",
      "model.layers.3.mlp.down_proj.weight",
      "model.layers.5.input_layernorm.weight",
      "model.layers.5.post_attention_layernorm.weight",
      "model.norm.weight",
      "lm_head.weight",
  };
  for (size_t i = 0; i < sizeof(expect) / sizeof(expect[0]); i++)
    CU_ASSERT_PTR_NOT_NULL(find(m, n, expect[i]));
  CU_ASSERT_EQUAL(find(m, n, "model.layers.5.input_layernorm.weight")->dtype,
                  WT_DTYPE_FLOAT32);
  CU_ASSERT_EQUAL(find(m, n, "model.layers.0.mlp.up_proj.weight")->dtype,
                  WT_DTYPE_BFLOAT16);
  CU_ASSERT_PTR_NULL(find(m, n, "model.layers.9.mlp.up_proj.weight"));
  /* Names are unique: the layout is a model. */
  for (size_t i = 0; i < n; i++)
    for (size_t j = i + 1; j < n; j++)
      CU_ASSERT(strcmp(m[i].name, m[j].name) != 0);
  wt_tensor_meta_array_free(m, n);
}

static void test_bench_1g(void) {
  wt_tensor_meta *m = NULL;
  size_t n = 0;
  WT_ASSERT_OK(wt_synthetic_layout("bench-1g", &m, &n));
  layout_stats s = stats_of(m, n);
  CU_ASSERT(s.bytes > 1000 * MIB && s.bytes < 1050 * MIB);
  CU_ASSERT(n >= 200 && n <= 500);
  CU_ASSERT(s.nbf16 > 0 && s.nf32 > 0);
  /* Mixed in bytes too, not only in the norms. */
  uint64_t f32_bytes = 0;
  for (size_t i = 0; i < n; i++)
    if (m[i].dtype == WT_DTYPE_FLOAT32) f32_bytes += m[i].nbytes;
  CU_ASSERT(f32_bytes > 16 * MIB);
  wt_tensor_meta_array_free(m, n);
}

/* The ipc benchmark's 8 GiB of a few hundred bf16 tensors, and 10,000
 * tensors of 64 bytes for the per-tensor cost. */
static void test_bench_8g_and_small_10k(void) {
  wt_tensor_meta *m = NULL;
  size_t n = 0;
  WT_ASSERT_OK(wt_synthetic_layout("bench-8g", &m, &n));
  layout_stats s = stats_of(m, n);
  CU_ASSERT(s.bytes > 7900 * MIB && s.bytes < 8400 * MIB);
  CU_ASSERT(n >= 500 && n <= 800);
  CU_ASSERT(s.nbf16 > 0 && s.nf32 > 0);
  wt_tensor_meta_array_free(m, n);
  WT_ASSERT_OK(wt_synthetic_layout("small-10k", &m, &n));
  CU_ASSERT_EQUAL(n, 10000);
  for (size_t i = 0; i < n; i++) CU_ASSERT_EQUAL(m[i].nbytes, 64);
  CU_ASSERT_STRING_EQUAL(m[9999].name, "t.09999");
  wt_tensor_meta_array_free(m, n);
}

static void test_unknown(void) {
  wt_tensor_meta *m = (wt_tensor_meta *)1;
  size_t n = 9;
  WT_ASSERT_ERR(wt_synthetic_layout("llama-7b", &m, &n), WT_NOT_FOUND,
                "synthetic layout 'llama-7b' does not exist; available: tiny, "
                "small, llama-256m, bench-1g, bench-8g, small-10k");
  CU_ASSERT_PTR_NULL(m);
  CU_ASSERT_EQUAL(n, 0);
}

static unsigned char *fill_all(const wt_tensor_meta *t, uint64_t seed) {
  unsigned char *buf = malloc(t->nbytes);
  wt_synthetic_fill(t, seed, 0, buf, t->nbytes);
  return buf;
}

static void test_deterministic(void) {
  wt_tensor_meta *m = NULL;
  size_t n = 0;
  WT_ASSERT_OK(wt_synthetic_layout("tiny", &m, &n));
  const wt_tensor_meta *a = &m[0], *b = &m[6]; /* embed, lm_head: same shape */
  CU_ASSERT_EQUAL(a->nbytes, b->nbytes);
  unsigned char *a0 = fill_all(a, 0), *a0b = fill_all(a, 0);
  unsigned char *a1 = fill_all(a, 1), *b0 = fill_all(b, 0);
  CU_ASSERT_EQUAL(memcmp(a0, a0b, a->nbytes), 0);
  CU_ASSERT_NOT_EQUAL(memcmp(a0, a1, a->nbytes), 0);
  CU_ASSERT_NOT_EQUAL(memcmp(a0, b0, a->nbytes), 0);
  free(a0);
  free(a0b);
  free(a1);
  free(b0);
  wt_tensor_meta_array_free(m, n);
}

static void test_golden(void) {
  /* The first bytes of tiny's embedding for seed 0 and 1, so that another
   * implementation (or a change of this one) is caught. */
  wt_tensor_meta *m = NULL;
  size_t n = 0;
  WT_ASSERT_OK(wt_synthetic_layout("tiny", &m, &n));
  unsigned char *b0 = fill_all(&m[0], 0);
  unsigned char *b1 = fill_all(&m[3], 1);
  char h0[WT_DIGEST_HEX_MAX], h1[WT_DIGEST_HEX_MAX];
  WT_ASSERT_OK(wt_digest_hex(WT_HASH_SHA256, b0, m[0].nbytes, h0));
  WT_ASSERT_OK(wt_digest_hex(WT_HASH_SHA256, b1, m[3].nbytes, h1));
  CU_ASSERT_STRING_EQUAL(h0, GOLDEN_EMBED_SEED0);
  CU_ASSERT_STRING_EQUAL(h1, GOLDEN_DOWN_SEED1);
  free(b0);
  free(b1);
  wt_tensor_meta_array_free(m, n);
}

/* Any sub-range, at any alignment, equals the same bytes of a full fill. */
static void test_subrange(void) {
  wt_tensor_meta *m = NULL;
  size_t n = 0;
  WT_ASSERT_OK(wt_synthetic_layout("small", &m, &n));
  srand(7);
  for (size_t i = 0; i < n; i++) {
    const wt_tensor_meta *t = &m[i];
    unsigned char *full = fill_all(t, 42);
    unsigned char *part = malloc(t->nbytes);
    for (int r = 0; r < 20; r++) {
      uint64_t off = (uint64_t)rand() % t->nbytes;
      size_t len = (size_t)((uint64_t)rand() % (t->nbytes - off) + 1);
      if (r == 0) off = 0, len = 1;
      if (r == 1) off = t->nbytes - 3, len = 3;
      if (r == 2) off = 5, len = 11;
      wt_synthetic_fill(t, 42, off, part, len);
      CU_ASSERT_EQUAL(memcmp(part, full + off, len), 0);
    }
    /* Assembled from odd-sized pieces, as a sender streams chunks. */
    for (uint64_t off = 0; off < t->nbytes; off += 1001) {
      size_t len = t->nbytes - off < 1001 ? (size_t)(t->nbytes - off) : 1001;
      wt_synthetic_fill(t, 42, off, part + off, len);
    }
    CU_ASSERT_EQUAL(memcmp(part, full, t->nbytes), 0);
    free(full);
    free(part);
  }
  wt_tensor_meta_array_free(m, n);
}

static float bf16_to_float(const unsigned char *p) {
  uint32_t bits = ((uint32_t)p[0] | (uint32_t)p[1] << 8) << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* Weights are finite, moderate numbers: a receiver that prints or converts
 * them never meets NaN or infinity. */
static void test_values_finite(void) {
  wt_tensor_meta *m = NULL;
  size_t n = 0;
  WT_ASSERT_OK(wt_synthetic_layout("small", &m, &n));
  for (size_t i = 0; i < n; i++) {
    const wt_tensor_meta *t = &m[i];
    unsigned char *b = fill_all(t, 3);
    size_t neg = 0, bad = 0;
    for (uint64_t e = 0; e < t->numel; e++) {
      float f = 0;
      if (t->dtype == WT_DTYPE_BFLOAT16) {
        f = bf16_to_float(b + 2 * e);
      } else if (t->dtype == WT_DTYPE_FLOAT32) {
        memcpy(&f, b + 4 * e, 4);
      } else if (t->dtype == WT_DTYPE_FLOAT16) {
        uint16_t h = (uint16_t)(b[2 * e] | b[2 * e + 1] << 8);
        int ex = (h >> 10) & 0x1f;
        if (ex == 0x1f) bad++;
        f = ldexpf(1.0f + (float)(h & 0x3ff) / 1024.0f, ex - 15) *
            ((h & 0x8000) ? -1.0f : 1.0f);
      } else {
        continue;
      }
      if (!isfinite(f) || fabsf(f) < 0.0078125f || fabsf(f) >= 2.0f) bad++;
      if (f < 0) neg++;
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* Both signs occur. */
    CU_ASSERT(neg > 0 && neg < t->numel);
    free(b);
  }
  wt_tensor_meta_array_free(m, n);
}

static void test_past_end(void) {
  wt_tensor_meta *m = NULL;
  size_t n = 0;
  WT_ASSERT_OK(wt_synthetic_layout("tiny", &m, &n));
  const wt_tensor_meta *t = &m[1]; /* 64 bytes */
  unsigned char buf[80];
  memset(buf, 0xAA, sizeof(buf));
  wt_synthetic_fill(t, 0, 60, buf, 20);
  unsigned char want[4];
  wt_synthetic_fill(t, 0, 60, want, 4);
  CU_ASSERT_EQUAL(memcmp(buf, want, 4), 0);
  for (int i = 4; i < 20; i++) CU_ASSERT_EQUAL(buf[i], 0);
  wt_tensor_meta_array_free(m, n);
}

void wt_test_suite_synthetic(void) {
  CU_pSuite s = CU_add_suite("synthetic", NULL, NULL);
  CU_add_test(s, "layout names", test_names);
  CU_add_test(s, "tiny layout", test_tiny);
  CU_add_test(s, "small and llama-256m layouts", test_small_and_llama);
  CU_add_test(s, "bench-1g layout", test_bench_1g);
  CU_add_test(s, "bench-8g and small-10k layouts", test_bench_8g_and_small_10k);
  CU_add_test(s, "unknown layout lists the names", test_unknown);
  CU_add_test(s, "fill is deterministic per name and seed", test_deterministic);
  CU_add_test(s, "fill matches pinned digests", test_golden);
  CU_add_test(s, "any sub-range fills independently", test_subrange);
  CU_add_test(s, "float contents are finite", test_values_finite);
  CU_add_test(s, "bytes past the end are zero", test_past_end);
}
