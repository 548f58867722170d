/* test_packing.c: the bucket plan, pinned to vLLM's packed-broadcast rule. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wt/packing.h"
#include "wt_test.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* What a bucket should hold: tensors [first, first + count), nbytes. */
typedef struct want_bucket {
  size_t first, count;
  uint64_t nbytes;
} want_bucket;

/* Checks every field of `plan` against the expected buckets: boundaries,
 * per-tensor bucket and offset, max and total. */
static void check_plan(const wt_pack_plan *plan, const uint64_t *sizes,
                       size_t n, const want_bucket *want, size_t nwant) {
  CU_ASSERT_PTR_NOT_NULL_FATAL(plan);
  CU_ASSERT_EQUAL(plan->ntensors, n);
  CU_ASSERT_EQUAL_FATAL(plan->nbuckets, nwant);
  uint64_t max = 0, total = 0;
  for (size_t b = 0; b < nwant; b++) {
    CU_ASSERT_EQUAL(plan->buckets[b].first, want[b].first);
    CU_ASSERT_EQUAL(plan->buckets[b].count, want[b].count);
    CU_ASSERT_EQUAL(plan->buckets[b].nbytes, want[b].nbytes);
    /* Not split: every tensor whole, done in its bucket. */
    CU_ASSERT_EQUAL(plan->buckets[b].start, total);
    CU_ASSERT_EQUAL(plan->buckets[b].done_first, want[b].first);
    CU_ASSERT_EQUAL(plan->buckets[b].done_count, want[b].count);
    uint64_t off = 0;
    for (size_t i = want[b].first; i < want[b].first + want[b].count; i++) {
      CU_ASSERT_EQUAL(plan->tensor_bucket[i], b);
      CU_ASSERT_EQUAL(plan->tensor_offset[i], off);
      CU_ASSERT_EQUAL(plan->tensor_start[i], total + off);
      uint64_t po = 1, pl = 0;
      wt_pack_part(plan, b, i, sizes[i], &po, &pl);
      CU_ASSERT(po == 0 && pl == sizes[i]);
      off += sizes[i];
    }
    CU_ASSERT_EQUAL(off, want[b].nbytes);
    if (want[b].nbytes > max) max = want[b].nbytes;
    total += want[b].nbytes;
  }
  CU_ASSERT_EQUAL(plan->max_bucket_bytes, max);
  CU_ASSERT_EQUAL(plan->total_bytes, total);
  CU_ASSERT_FALSE(plan->split);
}

/* Builds the plan and checks it against the expected buckets. */
static void expect_plan(const uint64_t *sizes, size_t n, uint64_t buffer,
                        const want_bucket *want, size_t nwant) {
  wt_pack_plan *plan = NULL;
  WT_ASSERT_OK(wt_pack_plan_build(sizes, n, buffer, &plan));
  CU_ASSERT_EQUAL(plan->buffer_bytes, buffer);
  check_plan(plan, sizes, n, want, nwant);
  wt_pack_plan_free(plan);
}

/* The loop of vLLM's packed_broadcast_producer, written out plainly: append,
 * and close once the running size is strictly over the buffer. Returns the
 * bucket count; `out` has room for n buckets. */
static size_t reference_plan(const uint64_t *sizes, size_t n, uint64_t buffer,
                             want_bucket *out) {
  size_t nb = 0, first = 0, count = 0;
  uint64_t size = 0;
  for (size_t i = 0; i < n; i++) {
    if (count == 0) first = i;
    count++;
    size += sizes[i];
    if (size > buffer) {
      out[nb++] = (want_bucket){first, count, size};
      count = 0;
      size = 0;
    }
  }
  if (count > 0) out[nb++] = (want_bucket){first, count, size};
  return nb;
}

static void test_empty(void) {
  wt_pack_plan *plan = NULL;
  WT_ASSERT_OK(wt_pack_plan_build(NULL, 0, 1024, &plan));
  CU_ASSERT_PTR_NOT_NULL_FATAL(plan);
  CU_ASSERT_EQUAL(plan->ntensors, 0);
  CU_ASSERT_EQUAL(plan->nbuckets, 0);
  CU_ASSERT_EQUAL(plan->max_bucket_bytes, 0);
  CU_ASSERT_EQUAL(plan->total_bytes, 0);
  CU_ASSERT_EQUAL(plan->buffer_bytes, 1024);
  wt_pack_plan_free(plan);
  wt_pack_plan_free(NULL);
}

static void test_single_bucket(void) {
  uint64_t sizes[] = {3, 4, 2};
  want_bucket want[] = {{0, 3, 9}};
  expect_plan(sizes, NELEM(sizes), 100, want, NELEM(want));
}

static void test_zero_size(void) {
  /* Only empty tensors: one bucket of 0 bytes holding them all. */
  uint64_t zeros[] = {0, 0, 0};
  want_bucket want_zeros[] = {{0, 3, 0}};
  expect_plan(zeros, NELEM(zeros), 10, want_zeros, NELEM(want_zeros));

  /* Empty tensors after a bucket closed still make a bucket of their own,
   * as vLLM broadcasts a list holding one empty tensor. */
  uint64_t tail[] = {5, 0, 0};
  want_bucket want_tail[] = {{0, 1, 5}, {1, 2, 0}};
  expect_plan(tail, NELEM(tail), 4, want_tail, NELEM(want_tail));

  /* An empty tensor joins the bucket that is open. */
  uint64_t mid[] = {0, 5, 0, 3};
  want_bucket want_mid[] = {{0, 2, 5}, {2, 2, 3}};
  expect_plan(mid, NELEM(mid), 4, want_mid, NELEM(want_mid));

  /* An empty tensor never closes a bucket: an exactly full one stays open. */
  uint64_t full[] = {4, 0, 1, 0};
  want_bucket want_full[] = {{0, 3, 5}, {3, 1, 0}};
  expect_plan(full, NELEM(full), 4, want_full, NELEM(want_full));
}

static void test_larger_than_buffer(void) {
  uint64_t one[] = {100};
  want_bucket want_one[] = {{0, 1, 100}};
  expect_plan(one, NELEM(one), 10, want_one, NELEM(want_one));

  /* The big tensor closes the bucket it lands in, small ones included. */
  uint64_t mixed[] = {3, 100, 3, 200};
  want_bucket want_mixed[] = {{0, 2, 103}, {2, 2, 203}};
  expect_plan(mixed, NELEM(mixed), 10, want_mixed, NELEM(want_mixed));

  uint64_t bigs[] = {11, 11, 11};
  want_bucket want_bigs[] = {{0, 1, 11}, {1, 1, 11}, {2, 1, 11}};
  expect_plan(bigs, NELEM(bigs), 10, want_bigs, NELEM(want_bigs));
}

static void test_exact_fit(void) {
  /* Reaching the buffer size exactly is not exceeding it. */
  uint64_t exact[] = {10};
  want_bucket want_exact[] = {{0, 1, 10}};
  expect_plan(exact, NELEM(exact), 10, want_exact, NELEM(want_exact));

  uint64_t next[] = {4, 6, 1, 2};
  want_bucket want_next[] = {{0, 3, 11}, {3, 1, 2}};
  expect_plan(next, NELEM(next), 10, want_next, NELEM(want_next));

  /* One byte over closes. */
  uint64_t over[] = {4, 7, 1, 2};
  want_bucket want_over[] = {{0, 2, 11}, {2, 2, 3}};
  expect_plan(over, NELEM(over), 10, want_over, NELEM(want_over));

  /* Buffer of 1 byte: each 1-byte tensor fills it exactly, the second one
   * overflows it. */
  uint64_t ones[] = {1, 1, 1, 1, 1};
  want_bucket want_ones[] = {{0, 2, 2}, {2, 2, 2}, {4, 1, 1}};
  expect_plan(ones, NELEM(ones), 1, want_ones, NELEM(want_ones));
}

static void test_offsets_and_max(void) {
  uint64_t sizes[] = {6, 2, 5, 40, 1, 1, 1, 9, 3};
  wt_pack_plan *plan = NULL;
  WT_ASSERT_OK(wt_pack_plan_build(sizes, NELEM(sizes), 12, &plan));
  /* 6, 8, 13 > 12 | 40 > 12 | 1, 2, 3, 12, 15 > 12 | (none left) */
  want_bucket want[] = {{0, 3, 13}, {3, 1, 40}, {4, 5, 15}};
  check_plan(plan, sizes, NELEM(sizes), want, NELEM(want));
  CU_ASSERT_EQUAL(plan->tensor_offset[2], 8);
  CU_ASSERT_EQUAL(plan->tensor_offset[3], 0);
  CU_ASSERT_EQUAL(plan->tensor_offset[7], 3);
  CU_ASSERT_EQUAL(plan->tensor_offset[8], 12);
  CU_ASSERT_EQUAL(plan->tensor_bucket[8], 2);
  CU_ASSERT_EQUAL(plan->max_bucket_bytes, 40);
  CU_ASSERT_EQUAL(plan->total_bytes, 68);
  wt_pack_plan_free(plan);
}

static void test_many_tiny(void) {
  enum { N = 10000 };
  uint64_t *sizes = malloc(N * sizeof(*sizes));
  want_bucket *want = malloc(N * sizeof(*want));
  CU_ASSERT_FATAL(sizes != NULL && want != NULL);
  for (size_t i = 0; i < N; i++) sizes[i] = 3;
  size_t nwant = reference_plan(sizes, N, 1000, want);
  /* 333 tensors make 999 bytes (not over); the 334th makes 1002 and closes.
   * 29 buckets of 334 hold 9686 tensors; the last 314 (942 bytes) close at
   * the end. */
  CU_ASSERT_EQUAL(nwant, 30);
  CU_ASSERT_EQUAL(want[0].count, 334);
  CU_ASSERT_EQUAL(want[0].nbytes, 1002);
  CU_ASSERT_EQUAL(want[29].first, 9686);
  CU_ASSERT_EQUAL(want[29].count, 314);
  CU_ASSERT_EQUAL(want[29].nbytes, 942);
  wt_pack_plan *plan = NULL;
  WT_ASSERT_OK(wt_pack_plan_build(sizes, N, 1000, &plan));
  check_plan(plan, sizes, N, want, nwant);
  CU_ASSERT_EQUAL(plan->max_bucket_bytes, 1002);
  CU_ASSERT_EQUAL(plan->total_bytes, 30000);
  wt_pack_plan_free(plan);
  free(sizes);
  free(want);
}

/* Varied sizes and buffers, against the plain loop. */
static void test_matches_reference(void) {
  enum { N = 2000 };
  uint64_t *sizes = malloc(N * sizeof(*sizes));
  want_bucket *want = malloc(N * sizeof(*want));
  CU_ASSERT_FATAL(sizes != NULL && want != NULL);
  uint64_t x = 0x9e3779b97f4a7c15ull; /* xorshift64: deterministic */
  static const uint64_t buffers[] = {1, 7, 64, 1000, 4096, 1 << 20};
  for (int round = 0; round < 12; round++) {
    for (size_t i = 0; i < N; i++) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      /* a mix of empty, small and large tensors */
      sizes[i] = (x % 5 == 0) ? 0 : (x >> 8) % (round % 2 ? 5000 : 200);
    }
    uint64_t buffer = buffers[round % NELEM(buffers)];
    size_t nwant = reference_plan(sizes, N, buffer, want);
    wt_pack_plan *plan = NULL;
    WT_ASSERT_OK(wt_pack_plan_build(sizes, N, buffer, &plan));
    check_plan(plan, sizes, N, want, nwant);
    wt_pack_plan_free(plan);
  }
  free(sizes);
  free(want);
}

static void test_from_metas(void) {
  static const struct {
    const char *name;
    wt_dtype dt;
    int ndim;
    int64_t shape[2];
  } specs[] = {
      {"embed", WT_DTYPE_BFLOAT16, 2, {16, 8}},   /* 256 bytes */
      {"norm", WT_DTYPE_FLOAT32, 1, {8}},         /* 32 */
      {"empty", WT_DTYPE_FLOAT32, 1, {0}},        /* 0 */
      {"scale", WT_DTYPE_FLOAT64, 0, {0}},        /* 8 (scalar) */
      {"q", WT_DTYPE_FLOAT8_E4M3FN, 2, {10, 10}}, /* 100 */
  };
  wt_tensor_meta metas[NELEM(specs)];
  uint64_t sizes[NELEM(specs)];
  for (size_t i = 0; i < NELEM(specs); i++) {
    WT_ASSERT_OK(wt_tensor_meta_init(&metas[i], specs[i].name, specs[i].dt,
                                     specs[i].shape, specs[i].ndim));
    sizes[i] = metas[i].nbytes;
  }
  CU_ASSERT_EQUAL(sizes[0], 256);
  CU_ASSERT_EQUAL(sizes[3], 8);
  wt_pack_plan *plan = NULL;
  WT_ASSERT_OK(wt_pack_plan_from_metas(metas, NELEM(metas), 200, &plan));
  want_bucket want[] = {{0, 1, 256}, {1, 4, 140}};
  check_plan(plan, sizes, NELEM(sizes), want, NELEM(want));
  wt_pack_plan_free(plan);
  for (size_t i = 0; i < NELEM(metas); i++) wt_tensor_meta_clear(&metas[i]);
}

/* A split plan read back byte by byte: every byte of the round is in
 * exactly one bucket's part of exactly one tensor, in order; every bucket
 * but the last is buffer bytes; every tensor is done exactly once, in the
 * bucket of its last byte (zero-size: of its place). */
static void check_split(const wt_pack_plan *plan, const uint64_t *sizes,
                        size_t n, uint64_t buffer) {
  CU_ASSERT_PTR_NOT_NULL_FATAL(plan);
  CU_ASSERT_TRUE(plan->split);
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) total += sizes[i];
  CU_ASSERT_EQUAL(plan->total_bytes, total);
  size_t *done = calloc(n ? n : 1, sizeof(*done));
  CU_ASSERT_FATAL(done != NULL);
  uint64_t pos = 0; /* the next byte of the round the parts must cover */
  for (size_t b = 0; b < plan->nbuckets; b++) {
    const wt_bucket *bk = &plan->buckets[b];
    CU_ASSERT_EQUAL(bk->start, pos);
    CU_ASSERT(bk->nbytes <= buffer);
    if (b + 1 < plan->nbuckets) CU_ASSERT_EQUAL(bk->nbytes, buffer);
    uint64_t got = 0;
    for (size_t k = bk->first; k < bk->first + bk->count; k++) {
      uint64_t off = 0, len = 0;
      wt_pack_part(plan, b, k, sizes[k], &off, &len);
      if (len > 0) CU_ASSERT_EQUAL(plan->tensor_start[k] + off, pos + got);
      got += len;
    }
    CU_ASSERT_EQUAL(got, bk->nbytes);
    for (size_t k = bk->done_first; k < bk->done_first + bk->done_count; k++) {
      done[k]++;
      uint64_t end = plan->tensor_start[k] + sizes[k];
      CU_ASSERT(end <= bk->start + bk->nbytes);
      if (sizes[k] > 0) CU_ASSERT(end > bk->start);
    }
    pos += got;
  }
  CU_ASSERT_EQUAL(pos, total);
  for (size_t i = 0; i < n; i++) CU_ASSERT_EQUAL(done[i], 1);
  if (plan->nbuckets > 0) CU_ASSERT(plan->max_bucket_bytes <= buffer);
  free(done);
}

static void test_split(void) {
  wt_pack_plan *plan = NULL;
  /* A 100-byte tensor between small ones, buffer 16: buckets of 16 bytes
   * each, the big one cut across seven of them. */
  uint64_t mixed[] = {3, 100, 0, 5, 0};
  WT_ASSERT_OK(wt_pack_plan_build_split(mixed, NELEM(mixed), 16, &plan));
  CU_ASSERT_EQUAL_FATAL(plan->nbuckets, 7); /* 108 bytes */
  check_split(plan, mixed, NELEM(mixed), 16);
  CU_ASSERT_EQUAL(plan->buckets[0].first, 0);
  CU_ASSERT_EQUAL(plan->buckets[0].count, 2);
  CU_ASSERT_EQUAL(plan->buckets[0].done_count, 1); /* only the 3 bytes */
  CU_ASSERT_EQUAL(plan->buckets[3].first, 1);      /* inside the big one */
  CU_ASSERT_EQUAL(plan->buckets[3].count, 1);
  CU_ASSERT_EQUAL(plan->buckets[3].done_count, 0);
  uint64_t off = 0, len = 0;
  wt_pack_part(plan, 3, 1, 100, &off, &len);
  CU_ASSERT(off == 45 && len == 16);
  /* The big one ends at byte 103, in bucket 6, with the rest. */
  CU_ASSERT_EQUAL(plan->buckets[6].first, 1);
  CU_ASSERT_EQUAL(plan->buckets[6].count, 4);
  CU_ASSERT_EQUAL(plan->buckets[6].done_first, 1);
  CU_ASSERT_EQUAL(plan->buckets[6].done_count, 4);
  CU_ASSERT_EQUAL(plan->buckets[6].nbytes, 108 - 96);
  CU_ASSERT_EQUAL(plan->max_bucket_bytes, 16);
  wt_pack_plan_free(plan);

  /* Exact multiples: a tensor ending on a boundary is done there; a
   * zero-size one on the boundary goes with the next bucket. */
  uint64_t exact[] = {8, 8, 0, 8};
  WT_ASSERT_OK(wt_pack_plan_build_split(exact, NELEM(exact), 8, &plan));
  CU_ASSERT_EQUAL_FATAL(plan->nbuckets, 3);
  check_split(plan, exact, NELEM(exact), 8);
  CU_ASSERT_EQUAL(plan->buckets[1].done_count, 1);
  CU_ASSERT_EQUAL(plan->buckets[2].first, 2);
  CU_ASSERT_EQUAL(plan->buckets[2].done_count, 2);
  wt_pack_plan_free(plan);

  /* Only zero-size tensors: one empty bucket; none at all: none. */
  uint64_t zeros[] = {0, 0};
  WT_ASSERT_OK(wt_pack_plan_build_split(zeros, 2, 8, &plan));
  CU_ASSERT_EQUAL_FATAL(plan->nbuckets, 1);
  check_split(plan, zeros, 2, 8);
  wt_pack_plan_free(plan);
  WT_ASSERT_OK(wt_pack_plan_build_split(NULL, 0, 8, &plan));
  CU_ASSERT_EQUAL(plan->nbuckets, 0);
  wt_pack_plan_free(plan);

  /* Random layouts, some tensors far larger than the buffer. */
  srand(7);
  uint64_t sizes[200];
  for (int trial = 0; trial < 50; trial++) {
    size_t n = 1 + (size_t)(rand() % 200);
    for (size_t i = 0; i < n; i++)
      sizes[i] =
          rand() % 4 == 0 ? 0 : (uint64_t)(rand() % (rand() % 2 ? 40 : 4000));
    uint64_t buffer = 1 + (uint64_t)(rand() % 300);
    WT_ASSERT_OK(wt_pack_plan_build_split(sizes, n, buffer, &plan));
    check_split(plan, sizes, n, buffer);
    wt_pack_plan_free(plan);
  }

  /* The count a trainer asks for, and the limit on it, exactly. */
  CU_ASSERT_EQUAL(wt_pack_split_buckets(0, 8), 1);
  CU_ASSERT_EQUAL(wt_pack_split_buckets(16, 8), 2);
  CU_ASSERT_EQUAL(wt_pack_split_buckets(17, 8), 3);
  uint64_t at_limit[] = {(uint64_t)WT_PACK_SPLIT_MAX_BUCKETS * 4};
  WT_ASSERT_OK(wt_pack_plan_build_split(at_limit, 1, 4, &plan));
  CU_ASSERT_EQUAL(plan->nbuckets, WT_PACK_SPLIT_MAX_BUCKETS);
  wt_pack_plan_free(plan);
  at_limit[0]++;
  WT_ASSERT_ERR(wt_pack_plan_build_split(at_limit, 1, 4, &plan),
                WT_INVALID_ARGUMENT, "into 65537 buckets, more than 65536");
  CU_ASSERT_PTR_NULL(plan);

  /* A stranger's tiny buffer: refused by the bucket count, naming it. */
  uint64_t big[] = {(uint64_t)1 << 30};
  WT_ASSERT_ERR(wt_pack_plan_build_split(big, 1, 1, &plan), WT_INVALID_ARGUMENT,
                "buffer_bytes: 1-byte buckets would cut the round's "
                "1073741824 bytes into 1073741824 buckets, more than 65536");
  CU_ASSERT_PTR_NULL(plan);
  WT_ASSERT_ERR(wt_pack_plan_build_split(big, 1, 0, &plan), WT_INVALID_ARGUMENT,
                "buffer_bytes");
}

static void test_errors(void) {
  wt_pack_plan *plan = (wt_pack_plan *)&plan; /* must be reset to NULL */
  uint64_t sizes[] = {1, 2};
  WT_ASSERT_ERR(wt_pack_plan_build(sizes, 2, 0, &plan), WT_INVALID_ARGUMENT,
                "buffer_bytes");
  CU_ASSERT_PTR_NULL(plan);
  WT_ASSERT_ERR(wt_pack_plan_build(NULL, 0, 0, &plan), WT_INVALID_ARGUMENT,
                "buffer_bytes");
  WT_ASSERT_ERR(wt_pack_plan_build(NULL, 3, 10, &plan), WT_INVALID_ARGUMENT,
                "NULL");
  WT_ASSERT_ERR(wt_pack_plan_from_metas(NULL, 0, 0, &plan), WT_INVALID_ARGUMENT,
                "buffer_bytes");

  uint64_t huge[] = {5, UINT64_MAX - 10, 6, 1};
  WT_ASSERT_ERR(wt_pack_plan_build(huge, NELEM(huge), 1024, &plan),
                WT_INVALID_ARGUMENT,
                "tensor 2 (6 bytes): total size of the tensors overflows 64 "
                "bits");
  CU_ASSERT_PTR_NULL(plan);

  /* From metadata the message names the tensor: two int64 tensors of 2^60
   * elements are 2^63 bytes each, 2^64 together. */
  int64_t shape[] = {(int64_t)1 << 60};
  wt_tensor_meta metas[2];
  WT_ASSERT_OK(wt_tensor_meta_init(&metas[0], "a", WT_DTYPE_INT64, shape, 1));
  WT_ASSERT_OK(wt_tensor_meta_init(&metas[1], "b", WT_DTYPE_INT64, shape, 1));
  WT_ASSERT_ERR(wt_pack_plan_from_metas(metas, 2, 1 << 30, &plan),
                WT_INVALID_ARGUMENT,
                "tensor 'b' (index 1, 9223372036854775808 bytes): total size");
  CU_ASSERT_PTR_NULL(plan);
  /* One of them alone is fine, and far larger than any buffer. */
  WT_ASSERT_OK(wt_pack_plan_from_metas(metas, 1, 1 << 30, &plan));
  CU_ASSERT_EQUAL(plan->nbuckets, 1);
  CU_ASSERT_EQUAL(plan->max_bucket_bytes, (uint64_t)1 << 63);
  wt_pack_plan_free(plan);
  wt_tensor_meta_clear(&metas[0]);
  wt_tensor_meta_clear(&metas[1]);
}

void wt_test_suite_packing(void) {
  CU_pSuite s = CU_add_suite("packing", NULL, NULL);
  CU_add_test(s, "empty list has no bucket", test_empty);
  CU_add_test(s, "everything fits in one bucket", test_single_bucket);
  CU_add_test(s, "zero-size tensors", test_zero_size);
  CU_add_test(s, "a tensor larger than the buffer", test_larger_than_buffer);
  CU_add_test(s, "exact fit keeps the bucket open", test_exact_fit);
  CU_add_test(s, "offsets within buckets and the max", test_offsets_and_max);
  CU_add_test(s, "10000 tensors of 3 bytes, buffer 1000", test_many_tiny);
  CU_add_test(s, "random sizes match the plain loop", test_matches_reference);
  CU_add_test(s, "plan from metadata", test_from_metas);
  CU_add_test(s, "bad buffer size and total overflow", test_errors);
  CU_add_test(s, "split plan: buffer-sized buckets cutting large tensors",
              test_split);
}
