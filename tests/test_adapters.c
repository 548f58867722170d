/* test_adapters.c: LoRA adapter sets as rounds (docs/lora.md): the spec's
 * rules (wt/adapter_spec.h) and, against in-process wt-servers, adapter
 * rounds beside the model: the bytes that arrive, versions of their own,
 * two sets in alternate rounds, and the refusals a caller sees. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/fixture.h"
#include "support/wt_proc.h"
#include "wt/adapter_spec.h"
#include "wt/client.h"
#include "wt/clock.h"
#include "wt/pb.h"
#include "wt/safetensors.h"
#include "wt/server.h"
#include "wt/source.h"
#include "wt/synthetic.h"
#include "wt/trainer.h"
#include "wt_test.h"

#define PREFIX "base_model.model.model.layers."
/* 2 layers x (q_proj, v_proj), of layers 1 and 2, which the "tiny" model
 * does not have (its layer 0 is checked in test_against_the_model). */
#define NMOD 4

/* An adapter's layout: per module a lora_A [r, in] and a lora_B [out, r]. */
static size_t adapter_metas(uint32_t r, int64_t in, int64_t out,
                            wt_tensor_meta *m) {
  size_t n = 0;
  for (int l = 1; l <= 2; l++)
    for (int k = 0; k < 2; k++) {
      char name[128];
      const char *mod = k == 0 ? "q_proj" : "v_proj";
      int64_t a[2] = {r, in}, b[2] = {out, r};
      snprintf(name, sizeof(name), PREFIX "%d.self_attn.%s.lora_A.weight", l,
               mod);
      WT_ASSERT_OK(wt_tensor_meta_init(&m[n++], name, WT_DTYPE_FLOAT32, a, 2));
      snprintf(name, sizeof(name), PREFIX "%d.self_attn.%s.lora_B.weight", l,
               mod);
      WT_ASSERT_OK(wt_tensor_meta_init(&m[n++], name, WT_DTYPE_FLOAT32, b, 2));
    }
  return n;
}

/* A spec over metas[0..n) as a trainer that leaves out rank and targets
 * sends it (the system allocator's: wt_pb_free). */
static Wt__V1__AdapterSpec *spec_of(const char *name, double alpha,
                                    const wt_tensor_meta *m, size_t n) {
  Wt__V1__AdapterSpec *s = calloc(1, sizeof(*s));
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  wt__v1__adapter_spec__init(s);
  s->name = strdup(name);
  s->alpha = alpha;
  WT_ASSERT_OK(wt_adapter_spec_complete(s, m, n));
  return s;
}

static void test_spec_rules(void) {
  wt_tensor_meta m[2 * NMOD];
  size_t n = adapter_metas(8, 64, 96, m);
  Wt__V1__AdapterSpec *s = spec_of("policy", 16, m, n);
  CU_ASSERT_EQUAL(s->rank, 8);
  CU_ASSERT_EQUAL(s->n_target_modules, 2);
  CU_ASSERT_STRING_EQUAL(s->target_modules[0], "q_proj");
  CU_ASSERT_STRING_EQUAL(s->target_modules[1], "v_proj");
  wt_tensor_meta *out = NULL;
  size_t nout = 0;
  WT_ASSERT_OK(wt_adapter_spec_check(s, &out, &nout));
  CU_ASSERT_EQUAL(nout, n);
  CU_ASSERT_EQUAL(out[1].shape[0], 96);
  wt_tensor_meta_array_free(out, nout);
  WT_ASSERT_OK(wt_adapter_spec_same(s, s));

  /* Each refusal names what is wrong. */
  char *keep = s->name;
  s->name = (char *)"a b";
  WT_ASSERT_ERR(wt_adapter_spec_check(s, NULL, NULL), WT_INVALID_ARGUMENT,
                "adapter name 'a b' has byte 0x20");
  s->name = keep;
  s->alpha = -1;
  WT_ASSERT_ERR(wt_adapter_spec_check(s, NULL, NULL), WT_INVALID_ARGUMENT,
                "alpha -1");
  s->alpha = 16;
  s->rank = 4;
  WT_ASSERT_ERR(wt_adapter_spec_check(s, NULL, NULL), WT_INVALID_ARGUMENT,
                "tensor '" PREFIX
                "1.self_attn.q_proj.lora_A.weight' of shape [8, 64] has "
                "rank 8; the adapter's rank is 4");
  s->rank = 8;
  /* More targets than any model has modules: refused before any lookup. */
  char **many = calloc(WT_ADAPTER_MAX_TARGETS + 1, sizeof(*many));
  CU_ASSERT_PTR_NOT_NULL_FATAL(many);
  for (size_t i = 0; i <= WT_ADAPTER_MAX_TARGETS; i++) many[i] = (char *)"x";
  char **keep_t = s->target_modules;
  size_t keep_nt = s->n_target_modules;
  s->target_modules = many;
  s->n_target_modules = WT_ADAPTER_MAX_TARGETS + 1;
  WT_ASSERT_ERR(wt_adapter_spec_check(s, NULL, NULL), WT_INVALID_ARGUMENT,
                "1025 target modules; at most 1024");
  s->n_target_modules = 2;
  WT_ASSERT_ERR(wt_adapter_spec_check(s, NULL, NULL), WT_INVALID_ARGUMENT,
                "target module 'x' is listed twice");
  s->target_modules = keep_t;
  s->n_target_modules = keep_nt;
  free(many);
  char *t0 = s->target_modules[0];
  s->target_modules[0] = (char *)"k_proj";
  WT_ASSERT_ERR(wt_adapter_spec_check(s, NULL, NULL), WT_INVALID_ARGUMENT,
                "target module 'k_proj' has no tensor");
  s->target_modules[0] = t0;
  /* A lora_B missing, a tensor not in PEFT's naming, a vector, ints. */
  size_t nt = s->n_tensors;
  s->n_tensors = nt - 1;
  WT_ASSERT_ERR(wt_adapter_spec_check(s, NULL, NULL), WT_INVALID_ARGUMENT,
                "module '" PREFIX
                "2.self_attn.v_proj' has lora_A but no "
                "lora_B");
  s->n_tensors = nt;
  char *name0 = s->tensors[0]->name;
  s->tensors[0]->name = (char *)"model.embed_tokens.weight";
  WT_ASSERT_ERR(wt_adapter_spec_check(s, NULL, NULL), WT_INVALID_ARGUMENT,
                "tensor 'model.embed_tokens.weight' is not a LoRA weight");
  s->tensors[0]->name = s->tensors[2]->name;
  WT_ASSERT_ERR(wt_adapter_spec_check(s, NULL, NULL), WT_INVALID_ARGUMENT,
                "is listed twice");
  s->tensors[0]->name = name0;
  char *dt = s->tensors[3]->dtype;
  s->tensors[3]->dtype = (char *)"int32";
  WT_ASSERT_ERR(wt_adapter_spec_check(s, NULL, NULL), WT_INVALID_ARGUMENT,
                "has dtype int32");
  s->tensors[3]->dtype = dt;
  s->tensors[3]->n_shape = 1;
  WT_ASSERT_ERR(wt_adapter_spec_check(s, NULL, NULL), WT_INVALID_ARGUMENT,
                "a LoRA weight is a matrix");
  s->tensors[3]->n_shape = 2;
  WT_ASSERT_OK(wt_adapter_spec_check(s, NULL, NULL));

  /* A later spec of the set: the tensor that differs is named. */
  wt_tensor_meta m2[2 * NMOD];
  adapter_metas(8, 64, 128, m2);
  Wt__V1__AdapterSpec *wider = spec_of("policy", 16, m2, n);
  WT_ASSERT_ERR(wt_adapter_spec_same(s, wider), WT_FAILED_PRECONDITION,
                "tensor '" PREFIX
                "1.self_attn.q_proj.lora_B.weight' is float32 [128, 8], but "
                "its first round made it float32 [96, 8]");
  Wt__V1__AdapterSpec *fewer = spec_of("policy", 16, m, n - 2);
  WT_ASSERT_ERR(wt_adapter_spec_same(s, fewer), WT_FAILED_PRECONDITION,
                "tensor '" PREFIX
                "2.self_attn.v_proj.lora_A.weight' of its first round is "
                "missing");
  Wt__V1__AdapterSpec *louder = spec_of("policy", 32, m, n);
  WT_ASSERT_ERR(wt_adapter_spec_same(s, louder), WT_FAILED_PRECONDITION,
                "alpha 32, but its first round set alpha 16");
  wt_pb_free(&s->base);
  wt_pb_free(&wider->base);
  wt_pb_free(&fewer->base);
  wt_pb_free(&louder->base);
  for (size_t i = 0; i < n; i++) {
    wt_tensor_meta_clear(&m[i]);
    wt_tensor_meta_clear(&m2[i]);
  }
}

/* A trainer's adapter in memory: its tensors, refilled per step. */
typedef struct adapter_src {
  wt_tensor_meta m[2 * NMOD];
  size_t n;
  unsigned char *buf;
  wt_source_tensor ts[2 * NMOD];
  wt_source *src;
} adapter_src;

static void adapter_src_new(adapter_src *a, uint32_t r) {
  memset(a, 0, sizeof(*a));
  a->n = adapter_metas(r, 64, 96, a->m);
  uint64_t total = 0;
  for (size_t i = 0; i < a->n; i++) total += a->m[i].nbytes;
  a->buf = malloc(total);
  CU_ASSERT_PTR_NOT_NULL_FATAL(a->buf);
  uint64_t off = 0;
  for (size_t i = 0; i < a->n; i++) {
    a->ts[i] = (wt_source_tensor){.name = a->m[i].name,
                                  .dtype = a->m[i].dtype,
                                  .ndim = a->m[i].ndim,
                                  .shape = a->m[i].shape,
                                  .data = a->buf + off,
                                  .nbytes = a->m[i].nbytes};
    off += a->m[i].nbytes;
  }
  WT_ASSERT_OK(wt_source_memory(a->ts, a->n, &a->src));
}

static void adapter_src_step(adapter_src *a, uint64_t seed) {
  for (size_t i = 0; i < a->n; i++)
    wt_synthetic_fill(&a->m[i], seed, 0, (void *)a->ts[i].data, a->m[i].nbytes);
}

static void adapter_src_free(adapter_src *a) {
  wt_source_destroy(a->src);
  for (size_t i = 0; i < a->n; i++) wt_tensor_meta_clear(&a->m[i]);
  free(a->buf);
}

/* grpc's init info with the spec of set `name` (alpha; the rest from the
 * source): the caller frees it with wt_pb_free. */
static Wt__V1__WeightTransferInitInfo *adapter_info(const char *name,
                                                    double alpha) {
  Wt__V1__WeightTransferInitInfo *info = NULL;
  WT_ASSERT_OK(wt_trainer_init_info("grpc", NULL, 0, &info));
  info->adapter = calloc(1, sizeof(*info->adapter));
  CU_ASSERT_PTR_NOT_NULL_FATAL(info->adapter);
  wt__v1__adapter_spec__init(info->adapter);
  info->adapter->name = strdup(name);
  info->adapter->alpha = alpha;
  return info;
}

/* A client of `s` for adapter `name` with a grpc trainer over `a`. */
static wt_sync_client *adapter_client(const wtt_servers *s, const char *name,
                                      double alpha, adapter_src *a,
                                      wt_trainer **t) {
  wt_client_options co = {
      .timeout_ms = 10000, .data_timeout_ms = 20000, .adapter = name};
  wt_sync_client *c = NULL;
  WT_ASSERT_OK(wt_sync_client_new(s->targets, s->n, &co, &c));
  Wt__V1__WeightTransferInitInfo *info = adapter_info(name, alpha);
  WT_ASSERT_OK(wt_sync_client_init_transfer(c, info, a->src, t));
  wt_pb_free(&info->base);
  return c;
}

static void round_of(wt_sync_client *c, wt_trainer *t, adapter_src *a,
                     uint64_t seed, const char *version) {
  adapter_src_step(a, seed);
  WT_ASSERT_OK(wt_sync_client_start(c));
  WT_ASSERT_OK(wt_sync_client_update(c, t, a->src, NULL, NULL));
  WT_ASSERT_OK(wt_sync_client_finish(c, version));
}

static uint64_t sequence_of(wt_sync_client *c, size_t k) {
  wt_weight_version v = {0};
  WT_ASSERT_OK(wt_sync_client_get_version(c, k, &v));
  uint64_t seq = v.sequence;
  wt_weight_version_clear(&v);
  return seq;
}

/* Two servers (one of 2 workers); adapters "policy" and "critic" in
 * alternate rounds; every worker holds each set's trainer bytes; the
 * model's version does not move; GetServerInfo lists both sets. */
static void test_rounds_beside_the_model(void) {
  static wtt_servers S;
  const char *models[] = {"synthetic:tiny", "synthetic:tiny"};
  const uint32_t workers[] = {1, 2};
  wtt_servers_start(&S, 2, models, workers, WT_STAGING_SHADOW, NULL);
  wt_sync_client *model = wtt_client_of(&S);
  adapter_src pa, ca;
  adapter_src_new(&pa, 8);
  adapter_src_new(&ca, 4);
  wt_trainer *pt = NULL, *ct = NULL;
  wt_sync_client *pc = adapter_client(&S, "policy", 16, &pa, &pt);
  wt_sync_client *cc = adapter_client(&S, "critic", 8, &ca, &ct);
  CU_ASSERT_STRING_EQUAL(wt_sync_client_adapter(pc), "policy");
  for (uint64_t i = 1; i <= 3; i++) {
    char v[32];
    snprintf(v, sizeof(v), "policy-%llu", (unsigned long long)i);
    round_of(pc, pt, &pa, 100 + i, v);
    wtt_assert_servers_hold(pc, pa.src, WT_HASH_SHA256);
    snprintf(v, sizeof(v), "critic-%llu", (unsigned long long)i);
    round_of(cc, ct, &ca, 200 + i, v);
    wtt_assert_servers_hold(cc, ca.src, WT_HASH_SHA256);
    /* The policy's bytes are still its own after the critic's round. */
    wtt_assert_servers_hold(pc, pa.src, WT_HASH_SHA256);
    for (size_t k = 0; k < S.n; k++) {
      CU_ASSERT_EQUAL(sequence_of(pc, k), i);
      CU_ASSERT_EQUAL(sequence_of(cc, k), i);
      CU_ASSERT_EQUAL(sequence_of(model, k), 0);
    }
  }
  Wt__V1__ServerInfo *info = NULL;
  WT_ASSERT_OK(wt_sync_client_server_info(model, 1, &info));
  CU_ASSERT_EQUAL_FATAL(info->n_adapters, 2);
  const Wt__V1__AdapterInfo *a = info->adapters[0];
  CU_ASSERT_STRING_EQUAL(a->name, "policy");
  CU_ASSERT_EQUAL(a->rank, 8);
  CU_ASSERT_EQUAL(a->alpha, 16);
  CU_ASSERT_EQUAL(a->n_target_modules, 2);
  CU_ASSERT_EQUAL(a->num_tensors, 2 * NMOD);
  CU_ASSERT_STRING_EQUAL(a->weight_version, "policy-3");
  CU_ASSERT_EQUAL(a->sequence, 3);
  CU_ASSERT_STRING_EQUAL(info->adapters[1]->name, "critic");
  CU_ASSERT_EQUAL(info->adapters[1]->rank, 4);
  CU_ASSERT_STRING_EQUAL(info->weight_version, "");
  wt_pb_free(&info->base);

  /* A round dropped half-way commits nothing: the last version stays. */
  adapter_src_step(&pa, 999);
  WT_ASSERT_OK(wt_sync_client_start(pc));
  WT_ASSERT_OK(wt_sync_client_abort(pc, "test: the trainer gave up"));
  adapter_src_step(&pa, 103);
  wtt_assert_servers_hold(pc, pa.src, WT_HASH_SHA256);
  CU_ASSERT_EQUAL(sequence_of(pc, 0), 3);

  /* A later init of the set with another layout: refused, naming the
   * tensor; the set serves on. */
  adapter_src wide;
  adapter_src_new(&wide, 16);
  wt_trainer *wtr = NULL;
  wt_client_options co = {.timeout_ms = 10000, .adapter = "policy"};
  wt_sync_client *wc = NULL;
  WT_ASSERT_OK(wt_sync_client_new(S.targets, S.n, &co, &wc));
  Wt__V1__WeightTransferInitInfo *ii = adapter_info("policy", 16);
  WT_ASSERT_ERR(wt_sync_client_init_transfer(wc, ii, wide.src, &wtr),
                WT_FAILED_PRECONDITION,
                "adapter 'policy': tensor '" PREFIX
                "1.self_attn.q_proj.lora_A.weight' is float32 [16, 64], but "
                "its first round made it float32 [8, 64]");
  /* Without alpha the spec is refused before any server is called. */
  ii->adapter->alpha = 0;
  WT_ASSERT_ERR(wt_sync_client_init_transfer(wc, ii, wide.src, &wtr),
                WT_INVALID_ARGUMENT, "alpha 0");
  wt_pb_free(&ii->base);
  wt_sync_client_destroy(wc);
  adapter_src_free(&wide);
  round_of(pc, pt, &pa, 104, "policy-4");
  wtt_assert_servers_hold(pc, pa.src, WT_HASH_SHA256);

  /* A set no init made, and a name no set can have. */
  wt_client_options no = {.timeout_ms = 10000, .adapter = "nobody"};
  WT_ASSERT_OK(wt_sync_client_new(S.targets, S.n, &no, &wc));
  wt_weight_version v = {0};
  WT_ASSERT_ERR(wt_sync_client_get_version(wc, 0, &v), WT_NOT_FOUND,
                "adapter 'nobody': this server holds no such adapter set");
  WT_ASSERT_ERR(wt_sync_client_start(wc), WT_NOT_FOUND, "adapter 'nobody'");
  wt_sync_client_destroy(wc);
  wt_client_options bad = {.adapter = "../etc"};
  WT_ASSERT_ERR(wt_sync_client_new(S.targets, S.n, &bad, &wc),
                WT_INVALID_ARGUMENT, "options.adapter: adapter name '../etc'");

  wt_trainer_destroy(pt);
  wt_trainer_destroy(ct);
  wt_sync_client_destroy(pc);
  wt_sync_client_destroy(cc);
  wt_sync_client_destroy(model);
  adapter_src_free(&pa);
  adapter_src_free(&ca);
  wtt_servers_stop(&S);
}

/* --max-adapters and --max-adapter-mib: a set past either is refused at
 * its first init, naming the option; the sets held serve on. */
static void test_limits(void) {
  static wtt_server S;
  /* Shadow staging (the default) holds two copies of a set. */
  wt_server_options o = {.max_adapters = 1, .max_adapter_bytes = 100000};
  wtt_server_start(&S, "tiny", &o);
  wtt_servers one = {.n = 1};
  one.targets[0] = S.target;
  adapter_src a, b, big;
  adapter_src_new(&a, 8); /* 4 x 8 x (64 + 96) x 4 bytes: 20480 */
  adapter_src_new(&b, 4);
  adapter_src_new(&big, 16); /* 40960: twice that is above what is left */
  wt_trainer *t = NULL;
  wt_sync_client *c = adapter_client(&one, "first", 8, &a, &t);
  round_of(c, t, &a, 1, "v1");
  wt_client_options co = {.timeout_ms = 10000, .adapter = "second"};
  wt_sync_client *c2 = NULL;
  WT_ASSERT_OK(wt_sync_client_new(one.targets, 1, &co, &c2));
  Wt__V1__WeightTransferInitInfo *ii = adapter_info("second", 8);
  wt_trainer *t2 = NULL;
  WT_ASSERT_ERR(wt_sync_client_init_transfer(c2, ii, b.src, &t2),
                WT_RESOURCE_EXHAUSTED, "(wt-server --max-adapters)");
  wt_pb_free(&ii->base);
  wt_sync_client_destroy(c2);
  wtt_server_stop(&S);

  o.max_adapters = 0;
  wtt_server_start(&S, "tiny", &o);
  one.targets[0] = S.target;
  wt_sync_client_destroy(c);
  wt_trainer_destroy(t);
  c = adapter_client(&one, "first", 8, &a, &t);
  co.adapter = "big";
  WT_ASSERT_OK(wt_sync_client_new(one.targets, 1, &co, &c2));
  ii = adapter_info("big", 8);
  WT_ASSERT_ERR(wt_sync_client_init_transfer(c2, ii, big.src, &t2),
                WT_RESOURCE_EXHAUSTED,
                "adapter 'big': 81920 bytes per worker (two copies: shadow "
                "staging), with the 40960 its 1 other set(s) hold, is above "
                "wt-server --max-adapter-mib (100000 bytes)");
  wt_pb_free(&ii->base);
  wt_sync_client_destroy(c2);
  round_of(c, t, &a, 2, "v2");
  CU_ASSERT_EQUAL(sequence_of(c, 0), 1);
  wt_trainer_destroy(t);
  wt_sync_client_destroy(c);
  adapter_src_free(&a);
  adapter_src_free(&b);
  adapter_src_free(&big);
  wtt_server_stop(&S);
}

/* An init of a set whose module is in the server's model: PEFT's name
 * less its prefix, plus ".weight" ("tiny" has layer 0's q_proj, [16, 16]).
 * Shapes that read and write the module's sizes make the set; others are
 * refused at its first init, naming the tensor and the model's weight. */
static wt_status *init_q_proj(const wtt_servers *s, const char *name,
                              int64_t in, int64_t out) {
  wt_tensor_meta m[2];
  int64_t a[2] = {4, in}, b[2] = {out, 4};
  WT_ASSERT_OK(wt_tensor_meta_init(
      &m[0], "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
      WT_DTYPE_FLOAT32, a, 2));
  WT_ASSERT_OK(wt_tensor_meta_init(
      &m[1], "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight",
      WT_DTYPE_FLOAT32, b, 2));
  static float zeros[4 * 64];
  wt_source_tensor ts[2];
  for (int i = 0; i < 2; i++)
    ts[i] = (wt_source_tensor){.name = m[i].name,
                               .dtype = m[i].dtype,
                               .ndim = 2,
                               .shape = m[i].shape,
                               .data = zeros,
                               .nbytes = m[i].nbytes};
  wt_source *src = NULL;
  WT_ASSERT_OK(wt_source_memory(ts, 2, &src));
  wt_client_options co = {.timeout_ms = 10000, .adapter = name};
  wt_sync_client *c = NULL;
  WT_ASSERT_OK(wt_sync_client_new(s->targets, s->n, &co, &c));
  Wt__V1__WeightTransferInitInfo *ii = adapter_info(name, 8);
  wt_status *st = wt_sync_client_init_transfer(c, ii, src, NULL);
  wt_pb_free(&ii->base);
  wt_sync_client_destroy(c);
  wt_source_destroy(src);
  wt_tensor_meta_clear(&m[0]);
  wt_tensor_meta_clear(&m[1]);
  return st;
}

static void test_against_the_model(void) {
  static wtt_server S;
  wtt_server_start(&S, "tiny", NULL);
  wtt_servers one = {.n = 1};
  one.targets[0] = S.target;
  WT_ASSERT_OK(init_q_proj(&one, "fits", 16, 16));
  WT_ASSERT_ERR(init_q_proj(&one, "wide", 64, 16), WT_INVALID_ARGUMENT,
                "adapter 'wide': tensor "
                "'base_model.model.model.layers.0.self_attn.q_proj.lora_A."
                "weight' is [4, 64], but the model's "
                "'model.layers.0.self_attn.q_proj.weight' is [16, 16]: a "
                "lora_A reads its 16 inputs");
  WT_ASSERT_ERR(init_q_proj(&one, "tall", 16, 40), WT_INVALID_ARGUMENT,
                "is [40, 4], but the model's "
                "'model.layers.0.self_attn.q_proj.weight' is [16, 16]: a "
                "lora_B writes its 16 outputs");
  /* Neither refused set was made. */
  Wt__V1__ServerInfo *info = NULL;
  Wt__V1__GetServerInfoRequest req = WT__V1__GET_SERVER_INFO_REQUEST__INIT;
  WT_ASSERT_OK(wtt_call(S.ch, "GetServerInfo", &req.base,
                        &wt__v1__server_info__descriptor,
                        (ProtobufCMessage **)&info));
  CU_ASSERT_EQUAL_FATAL(info->n_adapters, 1);
  CU_ASSERT_STRING_EQUAL(info->adapters[0]->name, "fits");
  wt_pb_free(&info->base);
  wtt_server_stop(&S);
}

/* A PEFT adapter file of 4 modules x (A [64, 65536], B [65536, 64]),
 * float32 (128 MiB), every element `v`: large enough that a wt-push of it
 * in 64 KiB chunks is still streaming at its first progress line. */
#define BIG_IN 65536
static void write_big_adapter(const char *path, float v) {
  size_t numel = (size_t)64 * BIG_IN;
  float *data = malloc(numel * sizeof(float));
  CU_ASSERT_PTR_NOT_NULL_FATAL(data);
  for (size_t i = 0; i < numel; i++) data[i] = v;
  static char names[8][96];
  static const int64_t a[2] = {64, BIG_IN}, b[2] = {BIG_IN, 64};
  wt_st_write_tensor t[8];
  for (int k = 0; k < 8; k++) {
    snprintf(names[k], sizeof(names[k]), PREFIX "%d.mlp.up_proj.lora_%c.weight",
             1 + k / 2, k % 2 ? 'B' : 'A');
    t[k] = (wt_st_write_tensor){.name = names[k],
                                .dtype = WT_DTYPE_FLOAT32,
                                .ndim = 2,
                                .shape = k % 2 ? b : a,
                                .data = data};
  }
  wt_status *st = wt_safetensors_write(path, t, 8, NULL);
  free(data);
  WT_ASSERT_OK(st);
}

static int push_adapter(const char *addr, const char *file, const char *version,
                        const char *log) {
  const char *const argv[] = {
      WT_PUSH_BIN, "--server",     addr, "--adapter", "big",   "--lora-alpha",
      "16",        "--checkpoint", file, "--version", version, "--quiet",
      NULL};
  return wt_proc_run(argv, log, 120000, NULL);
}

/* wt-push --adapter SIGKILLed mid-stream: the set keeps its version and
 * bytes, the abandoned round ends by the round timeout (1 s), and the
 * next push of the set commits. The model is not touched. */
static void test_push_killed_midstream(void) {
  char *dir = wt_test_tmpdir();
  CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
  char v1[512], v2[512], log[512];
  snprintf(v1, sizeof(v1), "%s/v1.safetensors", dir);
  snprintf(v2, sizeof(v2), "%s/v2.safetensors", dir);
  write_big_adapter(v1, 1.0f);
  write_big_adapter(v2, 2.0f);
  static const char *const sargs[] = {"--model", "synthetic:tiny",
                                      "--round-timeout", "1", NULL};
  wt_proc_server s;
  CU_ASSERT_FATAL(wt_proc_server_start(&s, dir, "adapter-kill", sargs));
  snprintf(log, sizeof(log), "%s/push-v1.log", dir);
  CU_ASSERT_EQUAL_FATAL(push_adapter(s.addr, v1, "big-v1", log), 0);

  snprintf(log, sizeof(log), "%s/push-v2.log", dir);
  const char *const slow[] = {
      WT_PUSH_BIN,    "--server",     s.addr,         "--adapter", "big",
      "--lora-alpha", "16",           "--checkpoint", v2,          "--version",
      "big-v2",       "--chunk-size", "65536",        NULL};
  pid_t pid = wt_proc_spawn(slow, log, NULL);
  CU_ASSERT_FATAL(pid > 0);
  bool streaming = wt_proc_wait_for_text(log, "progress:", pid, 60000);
  if (!streaming) wt_proc_dump("push-v2", log);
  CU_ASSERT_FATAL(streaming);
  kill(pid, SIGKILL);
  int status = 0;
  CU_ASSERT(wt_proc_wait(pid, 10000, &status));

  const char *targets[1] = {s.addr};
  wt_client_options co = {.timeout_ms = 10000, .adapter = "big"};
  wt_sync_client *c = NULL;
  WT_ASSERT_OK(wt_sync_client_new(targets, 1, &co, &c));
  uint32_t world = 0;
  WT_ASSERT_OK(wt_sync_client_world_size(c, &world));
  CU_ASSERT_EQUAL(sequence_of(c, 0), 1);
  wt_source *src = NULL;
  WT_ASSERT_OK(wt_source_checkpoint_open(v1, &src));
  wtt_assert_servers_hold(c, src, WT_HASH_XXH3_64);
  wt_source_destroy(src);

  /* The killed push's round is open until the round timeout. */
  int64_t t0 = wt_mono_ms();
  wt_status *st = NULL;
  while ((st = wt_sync_client_start(c)) != NULL && wt_mono_ms() - t0 < 10000) {
    wt_status_free(st);
    wtt_sleep_ms(50);
  }
  WT_ASSERT_OK(st);
  CU_ASSERT(wt_mono_ms() - t0 < 8000);
  WT_ASSERT_OK(wt_sync_client_abort(c, "test: clear the way"));
  CU_ASSERT_EQUAL(sequence_of(c, 0), 1);

  snprintf(log, sizeof(log), "%s/push-v3.log", dir);
  CU_ASSERT_EQUAL(push_adapter(s.addr, v2, "big-v3", log), 0);
  CU_ASSERT_EQUAL(sequence_of(c, 0), 2);
  WT_ASSERT_OK(wt_source_checkpoint_open(v2, &src));
  wtt_assert_servers_hold(c, src, WT_HASH_XXH3_64);
  wt_source_destroy(src);
  wt_sync_client_destroy(c);
  CU_ASSERT_EQUAL(wt_proc_server_stop(&s, 30000, NULL), 0);
  wt_test_rmtree(dir);
  free(dir);
}

void wt_test_suite_adapters(void) {
  CU_pSuite s = CU_add_suite("adapters", NULL, NULL);
  CU_add_test(s, "the spec's rules, refusals by name", test_spec_rules);
  CU_add_test(s, "adapter rounds beside the model",
              test_rounds_beside_the_model);
  CU_add_test(s, "max adapters and bytes", test_limits);
  CU_add_test(s, "shapes against the model's modules", test_against_the_model);
  CU_add_test(s, "wt-push --adapter SIGKILLed mid-stream",
              test_push_killed_midstream);
}
