/* test_shard_plan.c: many trainer ranks' layouts become one plan (boxes,
 * coverage, the replicate rule, the digest), and boxes become runs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wt/pb.h"
#include "wt/shard_plan.h"
#include "wt_test.h"

static Wt__V1__ShardPlan *parse(const char *json) {
  ProtobufCMessage *m = NULL;
  WT_ASSERT_OK(
      wt_pb_from_json(&wt__v1__shard_plan__descriptor, json, "layouts", &m));
  return (Wt__V1__ShardPlan *)m;
}

static const char *box(char *buf, size_t n, const char *name, const char *dtype,
                       const char *shape, const char *offsets,
                       const char *sizes) {
  snprintf(buf, n,
           "{\"name\":\"%s\",\"dtype\":\"%s\",\"shape\":%s,\"offsets\":%s,"
           "\"sizes\":%s}",
           name, dtype, shape, offsets, sizes);
  return buf;
}

/* 4 ranks: "a" [6, 10] sharded on dim 0 unevenly (2/2/2/0), "b" [4, 10]
 * on dim 1 (3/3/3/1), "c" [5] replicated everywhere. */
static char *four_ranks(const char *nonce) {
  static const int a_off[4] = {0, 2, 4, 6}, a_len[4] = {2, 2, 2, 0};
  static const int b_off[4] = {0, 3, 6, 9}, b_len[4] = {3, 3, 3, 1};
  size_t cap = 8192, at = 0;
  char *s = malloc(cap), x[3][256], o[64], z[64];
  at += (size_t)snprintf(s + at, cap - at, "{\"nonce\":\"%s\",\"ranks\":[",
                         nonce);
  for (int r = 3; r >= 0; r--) { /* any order */
    snprintf(o, sizeof(o), "[%d,0]", a_off[r]);
    snprintf(z, sizeof(z), "[%d,10]", a_len[r]);
    box(x[0], sizeof(x[0]), "a", "float32", "[6,10]", o, z);
    snprintf(o, sizeof(o), "[0,%d]", b_off[r]);
    snprintf(z, sizeof(z), "[4,%d]", b_len[r]);
    box(x[1], sizeof(x[1]), "b", "bfloat16", "[4,10]", o, z);
    box(x[2], sizeof(x[2]), "c", "float32", "[5]", "[0]", "[5]");
    at += (size_t)snprintf(s + at, cap - at,
                           "%s{\"rank\":%d,\"boxes\":[%s,%s,%s]}",
                           r == 3 ? "" : ",", r, x[2], x[0], x[1]);
  }
  snprintf(s + at, cap - at, "]}");
  return s;
}

static const Wt__V1__TensorBox *find(const Wt__V1__RankBoxes *rb,
                                     const char *name) {
  for (size_t k = 0; k < rb->n_boxes; k++)
    if (strcmp(rb->boxes[k]->name, name) == 0) return rb->boxes[k];
  return NULL;
}

static void test_build(void) {
  char *json = four_ranks("AAEC");
  Wt__V1__ShardPlan *in = parse(json), *plan = NULL;
  WT_ASSERT_OK(wt_shard_plan_build(in, &plan));
  CU_ASSERT_EQUAL_FATAL(plan->n_ranks, 4);
  CU_ASSERT_EQUAL(plan->world_size, 4);
  CU_ASSERT_EQUAL(plan->nonce.len, 3);
  /* Rank 3's empty box of "a" is dropped; "c" (name index 2) is sent by
   * holder 2 % 4 = rank 2 only. */
  for (uint32_t r = 0; r < 4; r++) {
    const Wt__V1__RankBoxes *rb = plan->ranks[r];
    CU_ASSERT_EQUAL(rb->rank, r);
    CU_ASSERT_EQUAL(find(rb, "a") != NULL, r < 3);
    CU_ASSERT_PTR_NOT_NULL(find(rb, "b"));
    CU_ASSERT_EQUAL(find(rb, "c") != NULL, r == 2);
    for (size_t k = 1; k < rb->n_boxes; k++)
      CU_ASSERT(strcmp(rb->boxes[k - 1]->name, rb->boxes[k]->name) < 0);
  }
  CU_ASSERT_EQUAL(find(plan->ranks[3], "b")->sizes[1], 1);
  CU_ASSERT_EQUAL(strlen(plan->digest), 64);
  /* What a server receives: the plan checks, with any sender rank. */
  plan->rank = 3;
  WT_ASSERT_OK(wt_shard_plan_check(plan));
  /* The digest is of the plan: the same layouts give it again, another
   * nonce (another init) gives another. */
  Wt__V1__ShardPlan *again = NULL, *other = NULL;
  WT_ASSERT_OK(wt_shard_plan_build(in, &again));
  CU_ASSERT_STRING_EQUAL(again->digest, plan->digest);
  char *json2 = four_ranks("AAED");
  Wt__V1__ShardPlan *in2 = parse(json2);
  WT_ASSERT_OK(wt_shard_plan_build(in2, &other));
  CU_ASSERT(strcmp(other->digest, plan->digest) != 0);
  /* A plan changed after its digest is refused. */
  plan->ranks[0]->boxes[0]->sizes[0] = 1;
  WT_ASSERT_ERR(wt_shard_plan_check(plan), WT_INVALID_ARGUMENT,
                "elements are in no rank's box");
  plan->ranks[0]->boxes[0]->sizes[0] = 2;
  free(plan->digest);
  plan->digest = strdup(other->digest);
  WT_ASSERT_ERR(wt_shard_plan_check(plan), WT_INVALID_ARGUMENT,
                "is not the plan's");
  wt_shard_plan_free(plan);
  wt_shard_plan_free(again);
  wt_shard_plan_free(other);
  wt_pb_free(&in->base);
  wt_pb_free(&in2->base);
  free(json);
  free(json2);
}

static void expect_refused(const char *json, const char *needle) {
  Wt__V1__ShardPlan *in = parse(json), *plan = NULL;
  WT_ASSERT_ERR(wt_shard_plan_build(in, &plan), WT_INVALID_ARGUMENT, needle);
  CU_ASSERT_PTR_NULL(plan);
  wt_pb_free(&in->base);
}

#define BOX(n, sh, off, sz)                                 \
  "{\"name\":\"" n "\",\"dtype\":\"float32\",\"shape\":" sh \
  ",\"offsets\":" off ",\"sizes\":" sz "}"

static void test_refusals(void) {
  /* Two boxes overlap: named with both ranks. */
  expect_refused("{\"ranks\":[{\"rank\":0,\"boxes\":[" BOX(
                     "w", "[4,10]", "[0,0]", "[3,10]") "]},{\"rank\":1,"
                                                       "\"boxes\":[" BOX(
                                                           "w", "[4,10]",
                                                           "[2,0]",
                                                           "[2,10]") "]}]}",
                 "tensor 'w': rank 1's box [2:4, 0:10] overlaps rank 0's box "
                 "[0:3, 0:10]");
  /* A box missing: bytes nobody holds. */
  expect_refused("{\"ranks\":[{\"rank\":0,\"boxes\":[" BOX(
                     "w", "[4,10]", "[0,0]", "[1,10]") "]},{\"rank\":1,"
                                                       "\"boxes\":[" BOX(
                                                           "w", "[4,10]",
                                                           "[2,0]",
                                                           "[2,10]") "]}]}",
                 "tensor 'w': 10 of its 40 elements are in no rank's box");
  /* A rank whose layout has another shape, or another tensor. */
  expect_refused("{\"ranks\":[{\"rank\":0,\"boxes\":[" BOX(
                     "w", "[4,10]", "[0,0]", "[2,10]") "]},{\"rank\":1,"
                                                       "\"boxes\":[" BOX(
                                                           "w", "[4,12]",
                                                           "[2,0]",
                                                           "[2,12]") "]}]}",
                 "rank 1's layout differs from rank 0's: tensor 'w' is "
                 "float32 [4, 12] on rank 1 and float32 [4, 10] on rank 0");
  expect_refused("{\"ranks\":[{\"rank\":0,\"boxes\":[" BOX(
                     "w", "[4]", "[0]", "[4]") "]},{\"rank\":1,"
                                               "\"boxes\":[" BOX(
                                                   "v", "[4]", "[0]",
                                                   "[4]") "]}]}",
                 "rank 0's layout differs from rank 1's: it lists no tensor "
                 "'v'");
  /* Two ranks claim one rank number; a rank is missing; out of range. */
  expect_refused("{\"ranks\":[{\"rank\":1,\"boxes\":[" BOX(
                     "w", "[4]", "[0]", "[2]") "]},{\"rank\":1,"
                                               "\"boxes\":[" BOX(
                                                   "w", "[4]", "[2]",
                                                   "[2]") "]}]}",
                 "rank 1 is claimed by two layouts (0 and 1)");
  expect_refused("{\"world_size\":3,\"ranks\":[{\"rank\":0},{\"rank\":1}]}",
                 "world_size is 3 but 2 rank layouts came");
  expect_refused("{\"ranks\":[{\"rank\":0},{\"rank\":5}]}",
                 "layout 1 claims rank 5 of 2 ranks");
  /* A box outside its tensor; a tensor listed twice by one rank. */
  expect_refused("{\"ranks\":[{\"rank\":0,\"boxes\":[" BOX(
                     "w", "[4,10]", "[3,0]", "[2,10]") "]}]}",
                 "rank 0: tensor 'w': box [3:5, 0:10] lies outside its shape "
                 "[4, 10] (dimension 0)");
  expect_refused(
      "{\"ranks\":[{\"rank\":0,\"boxes\":[" BOX(
          "w", "[4]", "[0]", "[2]") "," BOX("w", "[4]", "[2]", "[2]") "]}]}",
      "rank 0 lists tensor 'w' twice");
  expect_refused(
      "{\"ranks\":[{\"rank\":0,\"boxes\":[{\"name\":\"w\","
      "\"dtype\":\"float32\",\"shape\":[4],\"offsets\":[0]}]}]}",
      "the box has 1 offsets and 0 sizes for 1 dimensions");
}

/* The replicate rule spreads replicated tensors over their holders. */
static void test_replicate_rule(void) {
  CU_ASSERT_EQUAL(wt_shard_replica_holder(0, 4), 0);
  CU_ASSERT_EQUAL(wt_shard_replica_holder(5, 4), 1);
  CU_ASSERT_EQUAL(wt_shard_replica_holder(7, 1), 0);
  /* Two ranks hold t0..t3 whole: t0, t2 from rank 0; t1, t3 from rank 1. */
  const char *json =
      "{\"ranks\":[{\"rank\":1,\"boxes\":[" BOX("t0", "[2]", "[0]", "[2]") "," BOX(
          "t1", "[2]", "[0]", "[2]") "," BOX("t2", "[2]", "[0]",
                                             "[2]") "," BOX("t3", "[2]", "[0]",
                                                            "[2]") "]},"
      "{\"rank\":0,\"boxes\":[" BOX("t3", "[2]", "[0]", "[2]") "," BOX(
          "t2", "[2]", "[0]", "[2]") "," BOX("t1", "[2]", "[0]",
                                             "[2]") "," BOX("t0", "[2]", "[0]",
                                                            "[2]") "]}]}";
  Wt__V1__ShardPlan *in = parse(json), *plan = NULL;
  WT_ASSERT_OK(wt_shard_plan_build(in, &plan));
  CU_ASSERT_EQUAL_FATAL(plan->ranks[0]->n_boxes, 2);
  CU_ASSERT_STRING_EQUAL(plan->ranks[0]->boxes[0]->name, "t0");
  CU_ASSERT_STRING_EQUAL(plan->ranks[0]->boxes[1]->name, "t2");
  CU_ASSERT_EQUAL_FATAL(plan->ranks[1]->n_boxes, 2);
  CU_ASSERT_STRING_EQUAL(plan->ranks[1]->boxes[0]->name, "t1");
  CU_ASSERT_STRING_EQUAL(plan->ranks[1]->boxes[1]->name, "t3");
  WT_ASSERT_OK(wt_shard_plan_check(plan));
  wt_shard_plan_free(plan);
  wt_pb_free(&in->base);
}

/* Runs: each payload byte lands where the box says, against a plain
 * element-by-element reference, for every cut of the payload. */
typedef struct scatter {
  unsigned char *dst;
  const unsigned char *src;
  size_t runs;
} scatter;

static wt_status *put(uint64_t dst, uint64_t src, uint64_t n, void *user) {
  scatter *s = user;
  memcpy(s->dst + dst, s->src + src, n);
  s->runs++;
  return NULL;
}

static void check_box(const int64_t *shape, const int64_t *off,
                      const int64_t *sz, uint32_t nd, size_t elem,
                      size_t want_runs) {
  wt_box b = {nd, shape, off, sz, elem};
  uint64_t total = elem, pay = wt_box_bytes(&b);
  for (uint32_t d = 0; d < nd; d++) total *= (uint64_t)shape[d];
  unsigned char *src = malloc(pay + 1), *got = calloc(1, total + 1),
                *want = calloc(1, total + 1);
  for (uint64_t i = 0; i < pay; i++) src[i] = (unsigned char)(i * 7 + 1);
  /* Reference: payload element e at box index (row-major over sz). */
  for (uint64_t e = 0; e < pay / elem; e++) {
    uint64_t rem = e, flat = 0, mul = 1;
    for (int d = (int)nd - 1; d >= 0; d--) {
      uint64_t i = rem % (uint64_t)sz[d];
      rem /= (uint64_t)sz[d];
      flat += ((uint64_t)off[d] + i) * mul;
      mul *= (uint64_t)shape[d];
    }
    memcpy(want + flat * elem, src + e * elem, elem);
  }
  scatter s = {got, src, 0};
  WT_ASSERT_OK(wt_box_runs(&b, 0, pay, put, &s));
  CU_ASSERT_EQUAL(s.runs, want_runs);
  CU_ASSERT_EQUAL(wt_box_nruns(&b), want_runs);
  CU_ASSERT(memcmp(got, want, total) == 0);
  /* In pieces of every size from 1 to 7 bytes. */
  for (uint64_t piece = 1; piece < 8; piece++) {
    memset(got, 0, total);
    for (uint64_t at = 0; at < pay; at += piece)
      WT_ASSERT_OK(
          wt_box_runs(&b, at, pay - at < piece ? pay - at : piece, put, &s));
    CU_ASSERT(memcmp(got, want, total) == 0);
  }
  WT_ASSERT_ERR(wt_box_runs(&b, pay, 1, put, &s), WT_OUT_OF_RANGE,
                "outside its");
  free(src);
  free(got);
  free(want);
}

static void test_runs(void) {
  int64_t s2[2] = {4, 10}, s3[3] = {3, 4, 5};
  int64_t o_row[2] = {2, 0}, z_row[2] = {2, 10}; /* Shard(0): one run */
  check_box(s2, o_row, z_row, 2, 4, 1);
  int64_t o_col[2] = {0, 6}, z_col[2] = {4, 3}; /* Shard(1): one per row */
  check_box(s2, o_col, z_col, 2, 2, 4);
  int64_t o3[3] = {1, 1, 0}, z3[3] = {2, 2, 5}; /* whole last dim */
  check_box(s3, o3, z3, 3, 4, 2);
  int64_t o4[3] = {0, 1, 2}, z4[3] = {3, 3, 2};
  check_box(s3, o4, z4, 3, 1, 9);
  int64_t none[1] = {0};
  check_box(NULL, none, none, 0, 8, 1); /* a scalar */
}

void wt_test_suite_shard_plan(void) {
  CU_pSuite s = CU_add_suite("shard_plan", NULL, NULL);
  CU_add_test(s, "layouts of 4 ranks become a plan with a digest", test_build);
  CU_add_test(s, "refusals name the rank and the tensor", test_refusals);
  CU_add_test(s, "the replicate rule", test_replicate_rule);
  CU_add_test(s, "boxes become runs", test_runs);
}
