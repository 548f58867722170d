/* test_sources.c: the trainer's weight sources (client/src/sources.c): the
 * source contract (metadata first, tensors in metadata order, a fresh
 * iteration each round), memory, checkpoint (zero copy from the mapping)
 * and synthetic sources. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wt/safetensors.h"
#include "wt/source.h"
#include "wt/synthetic.h"
#include "support/fixture.h"
#include "support/sources.h"
#include "wt_test.h"

static void test_memory_source_order(void) {
  const wt_source_tensor in[3] = {wtt_t_a, wtt_t_b, wtt_t_c};
  wt_source *src = NULL;
  WT_ASSERT_OK(wt_source_memory(in, 3, &src));
  CU_ASSERT_EQUAL(wt_source_count(src), 3);
  CU_ASSERT_EQUAL(wt_source_total_bytes(src), 33);
  CU_ASSERT_STRING_EQUAL(wt_source_kind(src), "memory");
  size_t n = 0;
  const wt_tensor_meta *m = wt_source_metas(src, &n);
  CU_ASSERT_EQUAL(n, 3);
  CU_ASSERT_STRING_EQUAL(m[1].name, "b");
  CU_ASSERT_EQUAL(m[1].nbytes, 8);
  /* Two rounds: each yields the same tensors, in order, by pointer. */
  for (int round = 0; round < 2; round++) {
    wt_source_tensor t;
    bool done = false;
    WT_ASSERT_OK(wt_source_rewind(src));
    for (size_t i = 0; i < 3; i++) {
      WT_ASSERT_OK(wt_source_next(src, &t, &done));
      CU_ASSERT_FALSE(done);
      CU_ASSERT_STRING_EQUAL(t.name, in[i].name);
      CU_ASSERT_PTR_EQUAL(t.data, in[i].data);
      CU_ASSERT_EQUAL(t.nbytes, in[i].nbytes);
    }
    WT_ASSERT_OK(wt_source_next(src, &t, &done));
    CU_ASSERT_TRUE(done);
  }
  /* Reading a slice copies those bytes; past the end is OUT_OF_RANGE. */
  wt_source_tensor t;
  bool done;
  float two[2];
  WT_ASSERT_OK(wt_source_rewind(src));
  WT_ASSERT_OK(wt_source_next(src, &t, &done));
  WT_ASSERT_OK(wt_source_read(src, &t, 8, two, sizeof(two)));
  CU_ASSERT_EQUAL(two[0], 3.0f);
  CU_ASSERT_EQUAL(two[1], 4.0f);
  WT_ASSERT_ERR(wt_source_read(src, &t, 20, two, 8), WT_OUT_OF_RANGE, "'a'");
  /* Locally computed digests are those of the bytes. */
  char(*hex)[WT_DIGEST_HEX_MAX] = NULL;
  char want[WT_DIGEST_HEX_MAX];
  WT_ASSERT_OK(wt_source_checksums(src, WT_HASH_SHA256, &hex));
  WT_ASSERT_OK(wt_digest_hex(WT_HASH_SHA256, wtt_t_b.data, 8, want));
  CU_ASSERT_STRING_EQUAL(hex[1], want);
  free(hex);
  WT_ASSERT_ERR(wt_source_synthetic_set_seed(src, 3), WT_FAILED_PRECONDITION,
                "memory");
  wt_source_destroy(src);
}

static void test_memory_source_rejects(void) {
  wt_source *src = NULL;
  wt_source_tensor bad[2] = {wtt_t_a, wtt_t_b};
  bad[1].nbytes = 6;
  WT_ASSERT_ERR(wt_source_memory(bad, 2, &src), WT_INVALID_ARGUMENT,
                "tensor 'b': 6 bytes given, but bfloat16 x [4] is 8 bytes");
  CU_ASSERT_PTR_NULL(src);
  bad[1] = wtt_t_b;
  bad[1].data = NULL;
  WT_ASSERT_ERR(wt_source_memory(bad, 2, &src), WT_INVALID_ARGUMENT,
                "tensor 'b': data is NULL");
  bad[1] = wtt_t_a;
  WT_ASSERT_ERR(wt_source_memory(bad, 2, &src), WT_INVALID_ARGUMENT,
                "tensor 'a' appears twice");
  CU_ASSERT_PTR_NULL(src);
}

static void test_source_mismatch_detected(void) {
  const wt_source_tensor ok[3] = {wtt_t_a, wtt_t_b, wtt_t_c};
  WT_ASSERT_OK(wtt_validate_scripted(ok, 3));

  const wt_source_tensor swapped[3] = {wtt_t_b, wtt_t_a, wtt_t_c};
  WT_ASSERT_ERR(wtt_validate_scripted(swapped, 3), WT_INVALID_ARGUMENT,
                "tensor 0 is 'b' but the metadata has 'a' there");

  wt_source_tensor y[4] = {wtt_t_a, wtt_t_b, wtt_t_c, wtt_t_c};
  y[1].dtype = WT_DTYPE_FLOAT16;
  WT_ASSERT_ERR(wtt_validate_scripted(y, 3), WT_INVALID_ARGUMENT,
                "tensor 'b': dtype float16 does not match the metadata's "
                "bfloat16");
  y[1] = wtt_t_b;
  y[0].shape = wtt_shape_bad;
  WT_ASSERT_ERR(wtt_validate_scripted(y, 3), WT_INVALID_ARGUMENT,
                "tensor 'a': shape [3, 2] does not match the metadata's "
                "[2, 3]");
  y[0] = wtt_t_a;
  y[0].nbytes = 20;
  WT_ASSERT_ERR(wtt_validate_scripted(y, 3), WT_INVALID_ARGUMENT,
                "tensor 'a': 20 bytes yielded, but dtype x shape is 24 bytes");
  y[0] = wtt_t_a;
  WT_ASSERT_ERR(wtt_validate_scripted(y, 2), WT_INVALID_ARGUMENT,
                "ended after 2 of 3 tensors: tensor 'c' was never yielded");
  WT_ASSERT_ERR(wtt_validate_scripted(y, 4), WT_INVALID_ARGUMENT,
                "yielded tensor 'c' after the 3 tensors");
  y[2].data = NULL; /* no data and no read function */
  WT_ASSERT_ERR(wtt_validate_scripted(y, 3), WT_INVALID_ARGUMENT,
                "tensor 'c': yielded without data");
}

static void test_checkpoint_source_zero_copy(void) {
  char *dir = wt_test_tmpdir();
  for (int sharded = 0; sharded < 2; sharded++) {
    char *path = wtt_write_layout(dir, "tiny", 5, sharded);
    wt_checkpoint *ck = NULL;
    wt_source *src = NULL;
    wtt_held want;
    wtt_held_load("tiny", 5, &want);
    WT_ASSERT_OK(wt_checkpoint_open(path, &ck));
    WT_ASSERT_OK(wt_source_checkpoint(ck, &src));
    CU_ASSERT_STRING_EQUAL(wt_source_kind(src), "checkpoint");
    CU_ASSERT_EQUAL(wt_source_count(src), want.n);
    WT_ASSERT_OK(wt_source_validate(src));
    wt_source_tensor t;
    bool done = false;
    for (size_t i = 0;; i++) {
      WT_ASSERT_OK(wt_source_next(src, &t, &done));
      if (done) break;
      /* The pointer is the mapping's own: nothing was copied. */
      const wt_st_tensor *ct = wt_checkpoint_at(ck, i);
      CU_ASSERT_PTR_EQUAL(t.data, ct->data);
      const void *direct = NULL;
      WT_ASSERT_OK(wt_source_tensor_data(src, &t, &direct));
      CU_ASSERT_PTR_EQUAL(direct, ct->data);
      size_t j = 0;
      while (j < want.n && strcmp(want.metas[j].name, t.name) != 0) j++;
      CU_ASSERT_FATAL(j < want.n);
      CU_ASSERT_EQUAL(memcmp(t.data, want.data[j], t.nbytes), 0);
    }
    wt_source_destroy(src);
    wt_checkpoint_close(ck);
    /* The owning form opens the same file. */
    WT_ASSERT_OK(wt_source_checkpoint_open(path, &src));
    CU_ASSERT_EQUAL(wt_source_total_bytes(src), 6080);
    wt_source_destroy(src);
    wtt_held_free(&want);
    free(path);
  }
  wt_source *src = NULL;
  WT_ASSERT_ERR(wt_source_checkpoint_open("/nonexistent/x.safetensors", &src),
                WT_NOT_FOUND, "/nonexistent/x.safetensors");
  wt_test_rmtree(dir);
  free(dir);
}

static void test_synthetic_source(void) {
  wt_source *a = NULL, *b = NULL, *c = NULL;
  WT_ASSERT_OK(wt_source_synthetic("small", 11, &a));
  WT_ASSERT_OK(wt_source_synthetic("small", 11, &b));
  WT_ASSERT_OK(wt_source_synthetic("small", 12, &c));
  CU_ASSERT_STRING_EQUAL(wt_source_kind(a), "synthetic");
  WT_ASSERT_OK(wt_source_validate(a));
  char(*ha)[WT_DIGEST_HEX_MAX] = NULL, (*hb)[WT_DIGEST_HEX_MAX] = NULL,
  (*hc)[WT_DIGEST_HEX_MAX] = NULL;
  WT_ASSERT_OK(wt_source_checksums(a, WT_HASH_XXH3_64, &ha));
  WT_ASSERT_OK(wt_source_checksums(b, WT_HASH_XXH3_64, &hb));
  WT_ASSERT_OK(wt_source_checksums(c, WT_HASH_XXH3_64, &hc));
  size_t n = wt_source_count(a);
  for (size_t i = 0; i < n; i++) {
    CU_ASSERT_STRING_EQUAL(ha[i], hb[i]);     /* same seed, same bytes */
    CU_ASSERT_STRING_NOT_EQUAL(ha[i], hc[i]); /* another seed, others */
  }
  /* set_seed makes c the same as a. */
  WT_ASSERT_OK(wt_source_synthetic_set_seed(c, 11));
  free(hc);
  WT_ASSERT_OK(wt_source_checksums(c, WT_HASH_XXH3_64, &hc));
  CU_ASSERT_STRING_EQUAL(ha[n - 1], hc[n - 1]);

  /* Chunks read piecewise, and the materialised tensor, equal a fill. */
  wt_source_tensor t;
  bool done;
  WT_ASSERT_OK(wt_source_rewind(a));
  WT_ASSERT_OK(wt_source_next(a, &t, &done));
  CU_ASSERT_PTR_NULL(t.data);
  unsigned char *want = malloc(t.nbytes), *got = malloc(t.nbytes);
  const wt_tensor_meta *m = wt_source_metas(a, NULL);
  wt_synthetic_fill(&m[0], 11, 0, want, t.nbytes);
  for (uint64_t off = 0; off < t.nbytes; off += 1000) {
    size_t len = t.nbytes - off < 1000 ? t.nbytes - off : 1000;
    WT_ASSERT_OK(wt_source_read(a, &t, off, got + off, len));
  }
  CU_ASSERT_EQUAL(memcmp(want, got, t.nbytes), 0);
  const void *whole = NULL;
  WT_ASSERT_OK(wt_source_tensor_data(a, &t, &whole));
  CU_ASSERT_EQUAL(memcmp(want, whole, t.nbytes), 0);
  free(want);
  free(got);
  free(ha);
  free(hb);
  free(hc);
  wt_source_destroy(a);
  wt_source_destroy(b);
  wt_source_destroy(c);
  WT_ASSERT_ERR(wt_source_synthetic("no-such-layout", 0, &a), WT_NOT_FOUND,
                "no-such-layout");
}

void wt_test_suite_sources(void);
void wt_test_suite_sources(void) {
  CU_pSuite s = CU_add_suite("sources", NULL, NULL);
  CU_add_test(s, "memory source order", test_memory_source_order);
  CU_add_test(s, "memory source rejects", test_memory_source_rejects);
  CU_add_test(s, "source mismatch detected", test_source_mismatch_detected);
  CU_add_test(s, "checkpoint source zero copy",
              test_checkpoint_source_zero_copy);
  CU_add_test(s, "synthetic source", test_synthetic_source);
}
