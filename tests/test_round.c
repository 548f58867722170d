/* test_round.c: the round state machine across a server's workers, over
 * loopback with hand-built messages: calls out of order, init errors,
 * validation before any byte, PushWeights rounds, many workers, cut
 * streams, inplace staging, round timeouts, and a backend that receives
 * through UpdateWeights (the fake engines of support/fake_engine.h). */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/fake_engine.h"
#include "support/fixture.h"
#include "wt/checksum.h"
#include "wt/pb.h"
#include "wt/synthetic.h"

static wtt_server S;
static wt_registry *engines; /* the fakes' registry, while a test uses it */

static wt_status *init_info_call(Wt__V1__WeightTransferInitInfo *info) {
  return wtt_init(S.ch, info, NULL);
}

/* A server whose registry has the fake engines. */
static void start_fake_server(uint32_t workers, uint32_t round_timeout_ms) {
  engines = fake_engine_registry();
  fake_engine_reset();
  wt_server_options o = {.workers = workers,
                         .round_timeout_ms = round_timeout_ms,
                         .engine_registry = engines};
  wtt_server_start(&S, "tiny", &o);
}

static void stop_fake_server(void) {
  wtt_server_stop(&S);
  wt_registry_destroy(engines);
  engines = NULL;
}

/* Whether the first `len` bytes of tensor i on every worker became the
 * fill for `seed` within `ms` (inplace staging writes live bytes). */
static bool wait_bytes_landed(size_t i, size_t len, uint64_t seed, int64_t ms) {
  unsigned char *want = malloc(len), *got = malloc(len);
  wt_synthetic_fill(&S.metas[i], seed, 0, want, len);
  int64_t end = wt_mono_ms() + ms;
  bool ok = false;
  while (!ok && wt_mono_ms() < end) {
    ok = true;
    for (uint32_t w = 0; w < S.workers && ok; w++) {
      wt_status *st =
          wt_param_store_read(wt_server_store(S.srv, w), i, 0, got, len);
      ok = st == NULL && memcmp(want, got, len) == 0;
      wt_status_free(st);
    }
    if (!ok) wtt_sleep_ms(5);
  }
  free(want);
  free(got);
  return ok;
}

static size_t put_varint(unsigned char *p, uint64_t v) {
  size_t n = 0;
  do {
    p[n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v != 0);
  return n;
}

/* A chunk encoded with data first and an unknown field, as no protobuf
 * library writes it but any may: the server must still parse it. */
static wt_status *push_odd_chunk(wtt_pusher *p, uint32_t bucket,
                                 uint64_t offset, const void *data,
                                 size_t len) {
  unsigned char *inner = malloc(len + 64), *msg = malloc(len + 80);
  size_t n = 0;
  inner[n++] = 0x1a;
  n += put_varint(inner + n, len);
  memcpy(inner + n, data, len);
  n += len;
  inner[n++] = 0x20; /* field 4, varint: unknown to this schema */
  inner[n++] = 0x07;
  inner[n++] = 0x10;
  n += put_varint(inner + n, offset);
  inner[n++] = 0x08;
  n += put_varint(inner + n, bucket);
  size_t m = 0;
  msg[m++] = 0x12;
  m += put_varint(msg + m, n);
  memcpy(msg + m, inner, n);
  m += n;
  grpc_slice slice = grpc_slice_from_copied_buffer((const char *)msg, m);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
  grpc_slice_unref(slice);
  free(inner);
  free(msg);
  return wt_rpc_client_stream_write_raw(p->s, bb);
}

static void test_out_of_order(void) {
  wtt_server_start_simple(&S, "tiny", 1, WT_STAGING_SHADOW, 0);
  wtt_upd u;
  wtt_upd_init(&u, S.metas, NULL, S.n);
  /* Every round call before init names the state. */
  WT_ASSERT_ERR(wtt_start(S.ch, NULL), WT_FAILED_PRECONDITION,
                "StartWeightUpdate: no weight-transfer engine is initialized "
                "(state: uninitialized)");
  WT_ASSERT_ERR(wtt_finish(S.ch, "v1", 0), WT_FAILED_PRECONDITION,
                "(state: uninitialized)");
  WT_ASSERT_ERR(wtt_abort(S.ch, 0, NULL), WT_FAILED_PRECONDITION,
                "(state: uninitialized)");
  WT_ASSERT_ERR(wtt_push_all(S.ch, &u, 0, 0, 1000, 1, NULL),
                WT_FAILED_PRECONDITION,
                "PushWeights: no weight-transfer engine is initialized "
                "(state: uninitialized)");
  Wt__V1__UpdateWeightsRequest ur = WT__V1__UPDATE_WEIGHTS_REQUEST__INIT;
  ur.update_info = &u.info;
  WT_ASSERT_ERR(wtt_call(S.ch, "UpdateWeights", &ur.base,
                         &wt__v1__update_weights_response__descriptor, NULL),
                WT_FAILED_PRECONDITION, "(state: uninitialized)");

  WT_ASSERT_OK(wtt_init_grpc(S.ch, 0, S.workers));
  /* Round id 0 names no round: every round call must carry the id that
   * StartWeightUpdate returned. */
  WT_ASSERT_ERR(wtt_push_all(S.ch, &u, 0, 0, 1000, 1, NULL),
                WT_INVALID_ARGUMENT,
                "PushWeights: round_id is 0; pass the round_id that "
                "StartWeightUpdate returned");
  WT_ASSERT_ERR(wtt_call(S.ch, "UpdateWeights", &ur.base,
                         &wt__v1__update_weights_response__descriptor, NULL),
                WT_INVALID_ARGUMENT, "UpdateWeights: round_id is 0");
  WT_ASSERT_ERR(wtt_finish(S.ch, "v1", 0), WT_INVALID_ARGUMENT,
                "FinishWeightUpdate: round_id is 0");
  WT_ASSERT_ERR(wtt_abort(S.ch, 0, NULL), WT_INVALID_ARGUMENT,
                "AbortWeightUpdate: round_id is 0");
  /* Update and finish before start. */
  ur.round_id = 5;
  WT_ASSERT_ERR(wtt_push_all(S.ch, &u, 5, 0, 1000, 1, NULL),
                WT_FAILED_PRECONDITION,
                "PushWeights: no round is in progress (state: ready)");
  WT_ASSERT_ERR(wtt_call(S.ch, "UpdateWeights", &ur.base,
                         &wt__v1__update_weights_response__descriptor, NULL),
                WT_FAILED_PRECONDITION,
                "UpdateWeights: no round is in progress (state: ready)");
  WT_ASSERT_ERR(wtt_finish(S.ch, "v1", 5), WT_FAILED_PRECONDITION,
                "FinishWeightUpdate: no round is in progress (state: ready)");
  bool aborted = true;
  WT_ASSERT_ERR(wtt_abort(S.ch, 5, &aborted), WT_FAILED_PRECONDITION,
                "AbortWeightUpdate: no round is in progress");

  /* Round ids are random: neither 0, nor the previous one, nor guessable
   * from it. */
  uint64_t id = 0, first = 0;
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  CU_ASSERT(id != 0);
  first = id;
  char msgbuf[160];
  const char *msg = msgbuf; /* a pointer, for WT_ASSERT_ERR */
  WT_ASSERT_ERR(wtt_start(S.ch, NULL), WT_FAILED_PRECONDITION,
                "StartWeightUpdate: a round is in progress (state: updating)");
  /* A stale or guessed round id. */
  snprintf(msgbuf, sizeof(msgbuf),
           "round_id %" PRIu64 " is not the current round (state: updating)",
           id + 1);
  WT_ASSERT_ERR(wtt_finish(S.ch, "v1", id + 1), WT_FAILED_PRECONDITION, msg);
  WT_ASSERT_ERR(wtt_push_all(S.ch, &u, id - 1, 0, 1000, 1, NULL),
                WT_FAILED_PRECONDITION, "is not the current round");
  WT_ASSERT_ERR(wtt_abort(S.ch, 1, &aborted), WT_FAILED_PRECONDITION,
                "is not the current round");
  /* No refusal tells a caller without it the current round's id (a
   * stranger who may call, or a second trainer, would drive the round with
   * it): not Start's, not a wrong id's, not the server's info. */
  {
    char idtext[32];
    snprintf(idtext, sizeof(idtext), "%" PRIu64, id);
    wt_status *refusals[] = {wtt_start(S.ch, NULL),
                             wtt_finish(S.ch, "v1", id + 1),
                             wtt_abort(S.ch, id ^ 1, NULL),
                             wtt_push_all(S.ch, &u, id + 2, 0, 1000, 1, NULL)};
    for (size_t r = 0; r < sizeof(refusals) / sizeof(refusals[0]); r++) {
      CU_ASSERT_PTR_NOT_NULL(refusals[r]);
      const char *m = refusals[r] ? wt_status_message(refusals[r]) : "";
      CU_ASSERT_PTR_NULL(strstr(m, idtext));
      if (strstr(m, idtext)) fprintf(stderr, "  leaks the round id: %s\n", m);
      wt_status_free(refusals[r]);
    }
    Wt__V1__ServerInfo *si = wtt_info(S.ch);
    size_t plen = wt__v1__server_info__get_packed_size(si);
    uint8_t *pk = malloc(plen + 1);
    CU_ASSERT_FATAL(pk != NULL);
    wt__v1__server_info__pack(si, pk);
    pk[plen] = 0;
    /* The id as text anywhere in what GetServerInfo says. */
    bool found = false;
    for (size_t o = 0; o + strlen(idtext) <= plen; o++)
      if (memcmp(pk + o, idtext, strlen(idtext)) == 0) found = true;
    CU_ASSERT_FALSE(found);
    free(pk);
    wt_pb_free(&si->base);
  }
  /* The grpc backend's data moves through PushWeights only. */
  ur.round_id = id;
  WT_ASSERT_ERR(wtt_call(S.ch, "UpdateWeights", &ur.base,
                         &wt__v1__update_weights_response__descriptor, NULL),
                WT_FAILED_PRECONDITION,
                "backend 'grpc' receives weights through PushWeights");
  /* That call named the round and failed: the round failed with it, and
   * says why; aborting it again is no error. */
  WT_ASSERT_ERR(wtt_finish(S.ch, "v1", id), WT_FAILED_PRECONDITION,
                "was aborted (UpdateWeights from ipv4:127.0.0.1:");
  WT_ASSERT_ERR(wtt_finish(S.ch, "v1", id), WT_FAILED_PRECONDITION,
                "failed: UpdateWeights: backend 'grpc' receives weights "
                "through PushWeights); no round is in progress");
  aborted = true;
  WT_ASSERT_OK(wtt_abort(S.ch, id, &aborted));
  CU_ASSERT_FALSE(aborted);
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  WT_ASSERT_OK(wtt_abort(S.ch, id, &aborted));
  CU_ASSERT_TRUE(aborted);
  snprintf(msgbuf, sizeof(msgbuf),
           "round %" PRIu64 " was aborted (AbortWeightUpdate: test)", id);
  WT_ASSERT_ERR(wtt_finish(S.ch, "v1", id), WT_FAILED_PRECONDITION, msg);
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  CU_ASSERT(id != 0 && id != first && id != first + 1);
  uint64_t second = id;

  /* A new init replaces the engine and drops the open round. */
  WT_ASSERT_OK(wtt_init_grpc(S.ch, 4096, S.workers));
  snprintf(msgbuf, sizeof(msgbuf),
           "round %" PRIu64
           " was aborted (replaced by a new InitWeightTransferEngine)",
           second);
  WT_ASSERT_ERR(wtt_finish(S.ch, "v1", second), WT_FAILED_PRECONDITION, msg);
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  CU_ASSERT(id != 0 && id != second);
  wtt_assert_version(S.ch, "", 0);
  wtt_assert_model_seed(&S, 0);
  wtt_server_stop(&S);
}

static void test_init_errors(void) {
  wtt_server_start_simple(&S, "tiny", 1, WT_STAGING_SHADOW, 0);
  Wt__V1__WeightTransferInitInfo info = WT__V1__WEIGHT_TRANSFER_INIT_INFO__INIT;
  info.backend = "no-such";
  WT_ASSERT_ERR(init_info_call(&info), WT_NOT_FOUND,
                "unknown worker engine backend 'no-such'; registered: grpc");
  info.backend = "";
  WT_ASSERT_ERR(init_info_call(&info), WT_INVALID_ARGUMENT,
                "init_info.backend is empty; registered backends: grpc");
  WT_ASSERT_ERR(init_info_call(NULL), WT_INVALID_ARGUMENT,
                "init_info is missing");
  Wt__V1__NcclInitInfo nccl = WT__V1__NCCL_INIT_INFO__INIT;
  info.backend = "grpc";
  info.backend_init_case = WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_NCCL;
  info.nccl = &nccl;
  WT_ASSERT_ERR(init_info_call(&info), WT_INVALID_ARGUMENT,
                "init_info.backend is 'grpc' but init_info carries nccl "
                "settings");
  /* The grpc engine's own fields. */
  Wt__V1__GrpcInitInfo g = WT__V1__GRPC_INIT_INFO__INIT;
  Wt__V1__UInt64Value v = WT__V1__UINT64_VALUE__INIT;
  info.backend_init_case = WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_GRPC;
  info.grpc = &g;
  g.chunk_size_bytes = &v;
  v.value = 0;
  WT_ASSERT_ERR(init_info_call(&info), WT_INVALID_ARGUMENT,
                "init_info.grpc.chunk_size_bytes is 0");
  v.value = 64u << 20;
  WT_ASSERT_ERR(init_info_call(&info), WT_INVALID_ARGUMENT,
                "init_info.grpc.chunk_size_bytes 67108864 exceeds");
  Wt__V1__ServerInfo *si = wtt_info(S.ch);
  CU_ASSERT_STRING_EQUAL(si->workers[0]->state, "uninitialized");
  wt_pb_free(&si->base);
  /* A grpc init with no settings at all takes the defaults. */
  info.backend_init_case =
      WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT__NOT_SET;
  WT_ASSERT_OK(init_info_call(&info));
  WT_ASSERT_OK(wtt_start(S.ch, NULL));
  wtt_server_stop(&S);
}

/* A push that named round *id and failed: the round failed with it, every
 * later call of it names `cause`, nothing of it is visible, and a new
 * round (in *id) starts at once. */
static void assert_push_failed_round(uint64_t *id, const char *cause) {
  char msgbuf[512];
  const char *msg = msgbuf;
  snprintf(
      msgbuf, sizeof(msgbuf),
      "round %" PRIu64 " was aborted (PushWeights from ipv4:127.0.0.1:", *id);
  WT_ASSERT_ERR(wtt_finish(S.ch, "v-bad", *id), WT_FAILED_PRECONDITION, msg);
  WT_ASSERT_ERR(wtt_finish(S.ch, "v-bad", *id), WT_FAILED_PRECONDITION, cause);
  wtt_assert_version(S.ch, "", 0);
  wtt_assert_model_seed(&S, 0);
  WT_ASSERT_OK(wtt_start(S.ch, id));
}

/* Every bad push is refused with what is wrong, and fails its round. */
static void test_validation(void) {
  uint64_t id = wtt_serve_round(&S, "tiny", 1, WT_STAGING_SHADOW, 1000);
  wtt_upd u;

  wtt_upd_init(&u, S.metas, NULL, S.n);
  u.names[2] = "model.layers.7.mlp.up_proj.weight";
  WT_ASSERT_ERR(wtt_push_all(S.ch, &u, id, 0, 1000, 1, NULL),
                WT_INVALID_ARGUMENT,
                "parameter 'model.layers.7.mlp.up_proj.weight' "
                "(update_info.names[2]) is not in the model");
  assert_push_failed_round(&id,
                           "failed: parameter "
                           "'model.layers.7.mlp.up_proj.weight'");

  wtt_upd_init(&u, S.metas, NULL, S.n);
  u.dtypes[5] = "bfloat16";
  WT_ASSERT_ERR(wtt_push_all(S.ch, &u, id, 0, 1000, 1, NULL),
                WT_INVALID_ARGUMENT,
                "parameter 'model.norm.weight': dtype bfloat16 does not match "
                "the model's float32");
  assert_push_failed_round(&id, "dtype bfloat16 does not match");
  wtt_upd_init(&u, S.metas, NULL, S.n);
  u.dtypes[5] = "float13";
  WT_ASSERT_ERR(wtt_push_all(S.ch, &u, id, 0, 1000, 1, NULL),
                WT_INVALID_ARGUMENT, "parameter 'model.norm.weight'");
  assert_push_failed_round(&id, "float13");

  wtt_upd_init(&u, S.metas, NULL, S.n);
  int64_t four[1] = {4};
  u.shapes[5].dims = four;
  WT_ASSERT_ERR(wtt_push_all(S.ch, &u, id, 0, 1000, 1, NULL),
                WT_INVALID_ARGUMENT,
                "parameter 'model.norm.weight': shape [4] does not match the "
                "model's [16]");
  assert_push_failed_round(&id, "shape [4] does not match");
  wtt_upd_init(&u, S.metas, NULL, S.n);
  int64_t transposed[2] = {40, 16};
  u.shapes[3].dims = transposed;
  WT_ASSERT_ERR(wtt_push_all(S.ch, &u, id, 0, 1000, 1, NULL),
                WT_INVALID_ARGUMENT,
                "parameter 'model.layers.0.mlp.down_proj.weight': shape [40, "
                "16] does not match the model's [16, 40]");
  assert_push_failed_round(&id, "shape [40, 16]");

  wtt_upd_init(&u, S.metas, NULL, S.n);
  u.info.n_dtype_names = 6;
  WT_ASSERT_ERR(wtt_push_all(S.ch, &u, id, 0, 1000, 1, NULL),
                WT_INVALID_ARGUMENT,
                "update_info has 7 names, 6 dtype_names and 7 shapes; the "
                "three lists must have equal lengths");
  assert_push_failed_round(&id, "6 dtype_names");

  size_t dup[3] = {0, 5, 0};
  wtt_upd_init(&u, S.metas, dup, 3);
  WT_ASSERT_ERR(wtt_push_all(S.ch, &u, id, 0, 1000, 1, NULL),
                WT_INVALID_ARGUMENT,
                "parameter 'model.embed_tokens.weight' appears twice in "
                "update_info.names (at 0 and 2)");
  assert_push_failed_round(&id, "appears twice");

  wtt_upd_init(&u, S.metas, NULL, S.n);
  uint64_t sizes[7] = {2048, 64, 512, 1280, 64, 64, 2000};
  u.info.n_packed_tensor_sizes = 7;
  u.info.packed_tensor_sizes = sizes;
  WT_ASSERT_ERR(wtt_push_all(S.ch, &u, id, 0, 1000, 1, NULL),
                WT_INVALID_ARGUMENT,
                "parameter 'lm_head.weight': "
                "update_info.packed_tensor_sizes[6] is 2000 bytes; the "
                "model's tensor has 2048");
  assert_push_failed_round(&id, "packed_tensor_sizes[6]");

  wtt_upd_init(&u, S.metas, NULL, S.n);
  u.info.packed = false;
  WT_ASSERT_ERR(wtt_push_all(S.ch, &u, id, 0, 1000, 1, NULL),
                WT_INVALID_ARGUMENT, "update_info.packed is false");
  assert_push_failed_round(&id, "update_info.packed is false");

  /* A header without update info. */
  wtt_pusher p;
  memset(&u, 0, sizeof(u));
  WT_ASSERT_OK(wt_rpc_client_stream_open(S.ch, WTT_SVC "PushWeights",
                                         WTT_DEADLINE_MS, &p.s));
  Wt__V1__PushWeightsHeader h = WT__V1__PUSH_WEIGHTS_HEADER__INIT;
  h.round_id = id;
  Wt__V1__PushWeightsChunk msg = WT__V1__PUSH_WEIGHTS_CHUNK__INIT;
  msg.payload_case = WT__V1__PUSH_WEIGHTS_CHUNK__PAYLOAD_HEADER;
  msg.header = &h;
  wt_status_free(wt_rpc_client_stream_write(p.s, &msg.base));
  p.plan = NULL;
  p.bucket = NULL;
  WT_ASSERT_ERR(wtt_push_close(&p, NULL), WT_INVALID_ARGUMENT,
                "update_info is missing");
  assert_push_failed_round(&id, "update_info is missing");

  /* A valid header and no data: the bytes are missing. */
  wtt_upd_init(&u, S.metas, NULL, S.n);
  wtt_pusher q;
  WT_ASSERT_OK(wtt_push_open(&q, S.ch, &u, id, 2048, 1000, 1));
  WT_ASSERT_ERR(wtt_push_close(&q, NULL), WT_DATA_LOSS,
                "stream ended after 0 of 6080 bytes");
  assert_push_failed_round(
      &id, "failed after 0 bytes of 5.9 KiB: stream ended after 0 of 6080");

  /* Chunks out of order, out of bounds, too big. */
  unsigned char junk[3000] = {0};
  WT_ASSERT_OK(wtt_push_open(&q, S.ch, &u, id, 2048, 1000, 1));
  wt_status_free(wtt_push_raw_chunk(&q, 0, 10, junk, 100));
  WT_ASSERT_ERR(wtt_push_close(&q, NULL), WT_INVALID_ARGUMENT,
                "bucket 0 offset 10: out of order; expected bucket 0 offset "
                "0");
  assert_push_failed_round(&id, "out of order");
  WT_ASSERT_OK(wtt_push_open(&q, S.ch, &u, id, 2048, 1000, 1));
  wt_status_free(wtt_push_raw_chunk(&q, 9, 0, junk, 100));
  WT_ASSERT_ERR(wtt_push_close(&q, NULL), WT_INVALID_ARGUMENT,
                "bucket 9 offset 0: the plan has 2 buckets (0..1)");
  assert_push_failed_round(&id, "the plan has 2 buckets");
  WT_ASSERT_OK(wtt_push_open(&q, S.ch, &u, id, 2048, 1000, 1));
  wt_status_free(wtt_push_raw_chunk(&q, 0, 0, junk, 1001));
  WT_ASSERT_ERR(wtt_push_close(&q, NULL), WT_INVALID_ARGUMENT,
                "bucket 0 offset 0: chunk of 1001 bytes exceeds the chunk "
                "size of 1000 bytes");
  assert_push_failed_round(&id, "exceeds the chunk size");
  /* Junk that landed (two chunks) before the bad one is not committed. */
  WT_ASSERT_OK(wtt_push_open(&q, S.ch, &u, id, 2048, 1000, 1));
  wt_status_free(wtt_push_raw_chunk(&q, 0, 0, junk, 1000));
  wt_status_free(wtt_push_raw_chunk(&q, 0, 1000, junk, 1000));
  wt_status_free(wtt_push_raw_chunk(&q, 0, 2000, junk, 1000));
  WT_ASSERT_ERR(wtt_push_close(&q, NULL), WT_INVALID_ARGUMENT,
                "bucket 0 offset 2000: 1000 bytes run past the bucket's end "
                "(2112 bytes)");
  assert_push_failed_round(
      &id, "failed after 2.9 KiB of 5.9 KiB: bucket 0 offset 2000");

  /* A stream that names no round (a chunk before any header) cannot fail
   * one: the round stays open. */
  WT_ASSERT_OK(wt_rpc_client_stream_open(S.ch, WTT_SVC "PushWeights",
                                         WTT_DEADLINE_MS, &q.s));
  q.plan = NULL;
  wt_status_free(wtt_push_raw_chunk(&q, 0, 0, junk, 10));
  WT_ASSERT_ERR(wtt_push_close(&q, NULL), WT_INVALID_ARGUMENT,
                "PushWeights message 1 is a chunk (bucket 0 offset 0); the "
                "first message must be a header");

  /* Finish needs a version; a bad one is no failure of the round. */
  WT_ASSERT_ERR(wtt_finish(S.ch, "", id), WT_INVALID_ARGUMENT,
                "weight_version is empty");
  /* A version reaches readers' terminals (wt-ctl version, info, top):
   * terminal escapes and newlines are refused where they enter. */
  WT_ASSERT_ERR(wtt_finish(S.ch, "v\x1b]52;c;aGk=\x07", id),
                WT_INVALID_ARGUMENT,
                "weight_version has control byte 0x1b at offset 1");
  WT_ASSERT_ERR(wtt_finish(S.ch, "v1\nv2", id), WT_INVALID_ARGUMENT,
                "control byte 0x0a at offset 2");
  wtt_assert_version(S.ch, "", 0);
  wtt_assert_model_seed(&S, 0);
  /* An abort's reason is kept, with its control bytes replaced: later
   * calls of the round quote it. */
  Wt__V1__AbortWeightUpdateRequest ab =
      WT__V1__ABORT_WEIGHT_UPDATE_REQUEST__INIT;
  ab.round_id = id;
  ab.reason = "bye\n2026-01-01 INFO forged\x1b[2J";
  ProtobufCMessage *abr = NULL;
  WT_ASSERT_OK(wtt_call(S.ch, "AbortWeightUpdate", &ab.base,
                        &wt__v1__abort_weight_update_response__descriptor,
                        &abr));
  CU_ASSERT(((Wt__V1__AbortWeightUpdateResponse *)abr)->aborted);
  wt_pb_free(abr);
  WT_ASSERT_ERR(wtt_finish(S.ch, "v-late", id), WT_FAILED_PRECONDITION,
                "bye?2026-01-01 INFO forged?[2J");
  wtt_assert_model_seed(&S, 0);
  wtt_assert_serving(S.ch, S.workers);
  wtt_server_stop(&S);
}

static void test_push_round(void) {
  uint64_t id = wtt_serve_round(&S, "tiny", 1, WT_STAGING_SHADOW, 1000);
  wtt_upd u;
  wtt_upd_init(&u, S.metas, NULL, S.n);
  u.dtypes[1] = "F32"; /* the safetensors spelling is accepted too */
  Wt__V1__PushWeightsResponse *resp = NULL;
  /* Buckets of 2048 bytes and chunks of 1000: tensors straddle both. */
  WT_ASSERT_OK(wtt_push_all(S.ch, &u, id, 2048, 1000, 1, &resp));
  CU_ASSERT_PTR_NOT_NULL_FATAL(resp);
  CU_ASSERT_EQUAL(resp->tensors_received, 7);
  CU_ASSERT_EQUAL(resp->bytes_received, 6080);
  wt_pb_free(&resp->base);
  /* Not visible before finish. */
  wtt_assert_version(S.ch, "", 0);
  wtt_assert_model_seed(&S, 0);
  WT_ASSERT_OK(wtt_finish(S.ch, "step-1", id));
  wtt_assert_version(S.ch, "step-1", 1);
  wtt_assert_model_seed(&S, 1);
  uint64_t seeds[7] = {1, 1, 1, 1, 1, 1, 1};
  wtt_assert_model(&S, seeds, WT_HASH_XXH3_64);
  Wt__V1__ServerInfo *info = wtt_info(S.ch);
  CU_ASSERT_STRING_EQUAL(info->weight_version, "step-1");
  CU_ASSERT_STRING_EQUAL(info->workers[0]->state, "ready");
  wt_pb_free(&info->base);

  /* Several pushes in one round (one per layer group); a bucket size of 0
   * means the engine's default. */
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  CU_ASSERT(id != 0);
  size_t first[3] = {0, 1, 2}, rest[4] = {3, 4, 5, 6};
  wtt_upd_init(&u, S.metas, first, 3);
  WT_ASSERT_OK(wtt_push_all(S.ch, &u, id, 0, 700, 2, NULL));
  wtt_upd_init(&u, S.metas, rest, 4);
  WT_ASSERT_OK(wtt_push_all(S.ch, &u, id, 100, 333, 2, NULL));
  WT_ASSERT_OK(wtt_finish(S.ch, "step-2", id));
  wtt_assert_version(S.ch, "step-2", 2);
  wtt_assert_model_seed(&S, 2);

  /* A round that pushes a subset keeps the rest. */
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  size_t one[1] = {5};
  wtt_upd_init(&u, S.metas, one, 1);
  WT_ASSERT_OK(wtt_push_all(S.ch, &u, id, 0, 1 << 20, 3, NULL));
  WT_ASSERT_OK(wtt_finish(S.ch, "step-3", id));
  uint64_t mixed[7] = {2, 2, 2, 2, 2, 3, 2};
  wtt_assert_model(&S, mixed, WT_HASH_SHA256);

  /* Chunks in an unusual (valid) encoding take the general parser. */
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  wtt_upd_init(&u, S.metas, NULL, S.n);
  wtt_pusher p;
  WT_ASSERT_OK(wtt_push_open(&p, S.ch, &u, id, 4096, 1000, 4));
  for (size_t b = 0; b < p.plan->nbuckets; b++)
    for (uint64_t off = 0; off < p.plan->buckets[b].nbytes; off += 1000) {
      uint64_t left = p.plan->buckets[b].nbytes - off;
      WT_ASSERT_OK(push_odd_chunk(&p, (uint32_t)b, off, p.bucket[b] + off,
                                  left < 1000 ? (size_t)left : 1000));
    }
  WT_ASSERT_OK(wtt_push_close(&p, NULL));
  WT_ASSERT_OK(wtt_finish(S.ch, "step-4", id));
  wtt_assert_model_seed(&S, 4);
  wtt_server_stop(&S);
}

static void test_many_workers(void) {
  wtt_server_start_simple(&S, "small", 3, WT_STAGING_SHADOW, 0);
  WT_ASSERT_OK(wtt_init_grpc(S.ch, 64 << 10, S.workers));
  Wt__V1__ServerInfo *info = wtt_info(S.ch);
  CU_ASSERT_EQUAL(info->world_size, 3);
  CU_ASSERT_EQUAL_FATAL(info->n_workers, 3);
  for (size_t w = 0; w < 3; w++) {
    CU_ASSERT_EQUAL(info->workers[w]->rank, w);
    CU_ASSERT_STRING_EQUAL(info->workers[w]->state, "ready");
  }
  wt_pb_free(&info->base);
  wtt_assert_serving(S.ch, S.workers);
  uint64_t id = 0;
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  wtt_upd u;
  wtt_upd_init(&u, S.metas, NULL, S.n);
  WT_ASSERT_OK(wtt_push_all(S.ch, &u, id, 1 << 20, 64 << 10, 1, NULL));
  wtt_assert_model_seed(&S, 0);
  WT_ASSERT_OK(wtt_finish(S.ch, "w3", id));
  wtt_assert_version(S.ch, "w3", 1);
  wtt_assert_model_seed(&S, 1); /* every worker, over the wire and in memory */
  wtt_server_stop(&S);
}

/* A server ("small", two workers, 64 KiB chunks, the default round timeout
 * of 60 s) that committed "v1" (seed 1) and has the next round open; *u is
 * the whole model's update. Returns that round's id. */
static uint64_t serve_after_v1(wtt_upd *u) {
  uint64_t id = wtt_serve_round(&S, "small", 2, WT_STAGING_SHADOW, 64 << 10);
  wtt_upd_init(u, S.metas, NULL, S.n);
  WT_ASSERT_OK(wtt_push_all(S.ch, u, id, 1 << 20, 64 << 10, 1, NULL));
  WT_ASSERT_OK(wtt_finish(S.ch, "v1", id));
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  return id;
}

/* A trainer killed midway: its round fails on every worker at once (not
 * when the round timeout passes), nothing partial commits, the previous
 * version's bytes stay, every later call of the round names the cause, and
 * the next round works. */
static void test_stream_cut(void) {
  char msgbuf[512];
  const char *msg = msgbuf;
  /* The round timeout (60 s) is far beyond the test's bound (10 s, which
   * no load reaches): only the failure itself can end the round in time. */
  wtt_upd u;
  uint64_t id = serve_after_v1(&u);
  wtt_pusher p;
  WT_ASSERT_OK(wtt_push_open(&p, S.ch, &u, id, 1 << 20, 64 << 10, 2));
  WT_ASSERT_OK(wtt_push_send(&p, 1200 << 10));
  wtt_push_cut(&p);
  int64_t ms = wtt_wait_left_updating(S.ch, 10000);
  CU_ASSERT(ms >= 0 && ms < 10000);
  wtt_assert_serving(S.ch, S.workers);
  wtt_assert_version(S.ch, "v1", 1);
  wtt_assert_model_seed(&S, 1);
  snprintf(msgbuf, sizeof(msgbuf),
           "FinishWeightUpdate: round %" PRIu64
           " was aborted (PushWeights from ipv4:127.0.0.1:",
           id);
  WT_ASSERT_ERR(wtt_finish(S.ch, "v2", id), WT_FAILED_PRECONDITION, msg);
  WT_ASSERT_ERR(wtt_push_all(S.ch, &u, id, 1 << 20, 64 << 10, 2, NULL),
                WT_FAILED_PRECONDITION,
                "of 3.3 MiB: /wt.v1.WeightTransfer/PushWeights: read: the "
                "client (ipv4:127.0.0.1:");
  wtt_assert_version(S.ch, "v1", 1);
  /* The trainer aborting what failed under it is no error. */
  bool aborted = true;
  WT_ASSERT_OK(wtt_abort(S.ch, id, &aborted));
  CU_ASSERT_FALSE(aborted);
  /* The next round takes a full push and commits it. */
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  WT_ASSERT_OK(wtt_push_all(S.ch, &u, id, 1 << 20, 64 << 10, 2, NULL));
  WT_ASSERT_OK(wtt_finish(S.ch, "v2", id));
  wtt_assert_model_seed(&S, 2);
  Wt__V1__ServerInfo *info = wtt_info(S.ch);
  CU_ASSERT(info->store_complete);
  wt_pb_free(&info->base);
  wtt_server_stop(&S);
}

/* A push that ends early (the client half-closes before every byte) or
 * breaks after whole buckets landed: the round fails, and the tensors that
 * did land are not committed beside the old ones. */
static void test_failed_push_fails_round(void) {
  wtt_upd u;
  uint64_t id = serve_after_v1(&u);
  /* Bucket 0 (1 MiB) lands whole, then the stream half-closes. */
  wtt_pusher p;
  WT_ASSERT_OK(wtt_push_open(&p, S.ch, &u, id, 1 << 20, 64 << 10, 2));
  WT_ASSERT_OK(wtt_push_send(&p, 1300 << 10));
  WT_ASSERT_ERR(wtt_push_close(&p, NULL), WT_DATA_LOSS, "stream ended after");
  WT_ASSERT_ERR(wtt_finish(S.ch, "v2", id), WT_FAILED_PRECONDITION,
                "failed after 1.3 MiB of 3.3 MiB: stream ended after");
  wtt_assert_version(S.ch, "v1", 1);
  wtt_assert_model_seed(&S, 1);
  /* A second push into a round whose first push failed is refused too. */
  WT_ASSERT_ERR(wtt_push_all(S.ch, &u, id, 1 << 20, 64 << 10, 2, NULL),
                WT_FAILED_PRECONDITION, "was aborted (PushWeights from");
  /* A chunk out of order after bucket 0 landed whole. */
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  WT_ASSERT_OK(wtt_push_open(&p, S.ch, &u, id, 1 << 20, 64 << 10, 3));
  WT_ASSERT_OK(wtt_push_send(&p, 1 << 20));
  unsigned char junk[100] = {0};
  wt_status_free(wtt_push_raw_chunk(&p, 1, 4096, junk, sizeof(junk)));
  WT_ASSERT_ERR(wtt_push_close(&p, NULL), WT_INVALID_ARGUMENT, "out of order");
  WT_ASSERT_ERR(wtt_finish(S.ch, "v3", id), WT_FAILED_PRECONDITION,
                "failed after 1.0 MiB of 3.3 MiB: ");
  wtt_assert_version(S.ch, "v1", 1);
  wtt_assert_model_seed(&S, 1);
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  WT_ASSERT_OK(wtt_push_all(S.ch, &u, id, 1 << 20, 64 << 10, 4, NULL));
  WT_ASSERT_OK(wtt_finish(S.ch, "v4", id));
  wtt_assert_model_seed(&S, 4);
  wtt_server_stop(&S);
}

/* Inplace staging: a failed round leaves the store incomplete, and
 * GetServerInfo says so until a round rewrote it. */
static void test_inplace_incomplete(void) {
  uint64_t id = wtt_serve_round(&S, "tiny", 2, WT_STAGING_INPLACE, 1000);
  wtt_upd u;
  wtt_upd_init(&u, S.metas, NULL, S.n);
  wtt_pusher p;
  WT_ASSERT_OK(wtt_push_open(&p, S.ch, &u, id, 2048, 1000, 1));
  WT_ASSERT_OK(wtt_push_send(&p, 1000));
  /* In place, the bytes show as they land: cut once they did. */
  CU_ASSERT(wait_bytes_landed(0, 1000, 1, 5000));
  wtt_push_cut(&p);
  CU_ASSERT(wtt_wait_left_updating(S.ch, 1000) >= 0);
  WT_ASSERT_OK(wtt_abort(S.ch, id, NULL));
  Wt__V1__ServerInfo *info = wtt_info(S.ch);
  CU_ASSERT_STRING_EQUAL(info->staging, "inplace");
  CU_ASSERT_FALSE(info->store_complete);
  CU_ASSERT_FALSE(info->workers[0]->store_complete);
  CU_ASSERT_FALSE(info->workers[1]->store_complete);
  wt_pb_free(&info->base);
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  WT_ASSERT_OK(wtt_push_all(S.ch, &u, id, 2048, 1000, 4, NULL));
  WT_ASSERT_OK(wtt_finish(S.ch, "repaired", id));
  info = wtt_info(S.ch);
  CU_ASSERT_TRUE(info->store_complete);
  wt_pb_free(&info->base);
  wtt_assert_model_seed(&S, 4);
  wtt_server_stop(&S);
}

static void test_round_timeout(void) {
  wtt_server_start_simple(&S, "tiny", 1, WT_STAGING_SHADOW, 300);
  WT_ASSERT_OK(wtt_init_grpc(S.ch, 1000, S.workers));
  uint64_t id = 0;
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  /* The watchdog aborts it (GetServerInfo does not count as activity);
   * 10 s is a deadline against hanging. */
  CU_ASSERT(wtt_wait_left_updating(S.ch, 10000) >= 0);
  WT_ASSERT_ERR(wtt_finish(S.ch, "v1", id), WT_FAILED_PRECONDITION,
                "was aborted (idle for");
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  CU_ASSERT(id != 0);
  /* A push that stalls between chunks is idle too. */
  wtt_upd u;
  wtt_upd_init(&u, S.metas, NULL, S.n);
  wtt_pusher p;
  WT_ASSERT_OK(wtt_push_open(&p, S.ch, &u, id, 2048, 1000, 1));
  WT_ASSERT_OK(wtt_push_send(&p, 1000));
  CU_ASSERT(wtt_wait_left_updating(S.ch, 10000) >= 0);
  wt_status_free(wtt_push_send(&p, 1000));
  WT_ASSERT_ERR(wtt_push_close(&p, NULL), WT_ABORTED, "was aborted: idle for");
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  CU_ASSERT(id != 0);
  /* A round that keeps moving is not idle: a chunk of 64 bytes every
   * 10 ms (gaps a thirtieth of the 300 ms round timeout, so that no load
   * stretches one past it) for three times the round timeout at least
   * (the model's 6080 bytes: 95 chunks and more, each after 10 ms). */
  WT_ASSERT_OK(wtt_push_open(&p, S.ch, &u, id, 2048, 64, 1));
  int64_t t0 = wt_mono_ms();
  int chunks = 0;
  for (uint64_t sent = p.sent;; sent = p.sent) {
    wtt_sleep_ms(10);
    WT_ASSERT_OK(wtt_push_send(&p, 64));
    if (p.sent == sent) break; /* the plan is done */
    chunks++;
  }
  int64_t moving_ms = wt_mono_ms() - t0;
  CU_ASSERT(chunks >= 95);
  CU_ASSERT(moving_ms >= 3 * 300);
  WT_ASSERT_OK(wtt_push_close(&p, NULL));
  WT_ASSERT_OK(wtt_finish(S.ch, "v3", id));
  wtt_assert_model_seed(&S, 1);
  wtt_server_stop(&S);
}

static void test_update_weights(void) {
  start_fake_server(3, 0);
  Wt__V1__ServerInfo *info = wtt_info(S.ch);
  bool has_fake = false; /* the names come sorted */
  for (size_t i = 0; i < info->n_backends; i++)
    has_fake = has_fake || strcmp(info->backends[i], "fake") == 0;
  CU_ASSERT(has_fake);
  CU_ASSERT_STRING_EQUAL(info->backends[0], "fake");
  wt_pb_free(&info->base);
  Wt__V1__InitWeightTransferEngineResponse *ir = NULL;
  WT_ASSERT_OK(fake_engine_init(S.ch, "fake", "5", 5000, &ir));
  CU_ASSERT_EQUAL_FATAL(ir->n_endpoints, 3);
  CU_ASSERT_EQUAL(ir->endpoints[2]->rank, 2);
  CU_ASSERT_STRING_EQUAL(ir->endpoints[2]->address, "test-worker-2");
  CU_ASSERT_EQUAL(ir->endpoints[2]->port, 1002);
  wt_pb_free(&ir->base);
  uint64_t id = 0;
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  wtt_upd u;
  wtt_upd_init(&u, S.metas, NULL, S.n);
  WT_ASSERT_ERR(wtt_push_all(S.ch, &u, id, 0, 1000, 1, NULL),
                WT_FAILED_PRECONDITION,
                "backend 'fake' does not take PushWeights");
  /* That failed the round. */
  WT_ASSERT_ERR(wtt_update(S.ch, &u.info, id), WT_FAILED_PRECONDITION,
                "was aborted (PushWeights from");
  /* Validation comes before any receive, and fails the round. */
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  u.names[0] = "model.nope";
  WT_ASSERT_ERR(wtt_update(S.ch, &u.info, id), WT_INVALID_ARGUMENT,
                "parameter 'model.nope'");
  CU_ASSERT_EQUAL(fake_engine_get_stats().receives, 0);
  WT_ASSERT_ERR(wtt_finish(S.ch, "u0", id), WT_FAILED_PRECONDITION,
                "failed: parameter 'model.nope'");
  wtt_upd_init(&u, S.metas, NULL, S.n);
  WT_ASSERT_OK(wtt_start(S.ch, &id));

  /* Every worker receives at once while the call is pending; the server
   * keeps answering. */
  wt_rpc_pending *p = NULL;
  WT_ASSERT_OK(fake_update_start(S.ch, &u, id, &p));
  CU_ASSERT_FATAL(fake_engine_wait_blocked(3, 5000));
  wtt_assert_version(S.ch, "", 0);
  info = wtt_info(S.ch);
  CU_ASSERT_STRING_EQUAL(info->workers[1]->state, "updating");
  wt_pb_free(&info->base);
  WT_ASSERT_ERR(wtt_finish(S.ch, "early", id), WT_FAILED_PRECONDITION,
                "UpdateWeights is still running in the current round");
  fake_engine_release(true);
  ProtobufCMessage *resp = NULL;
  WT_ASSERT_OK(wt_rpc_pending_wait(p, &resp));
  Wt__V1__UpdateWeightsResponse *ur = (Wt__V1__UpdateWeightsResponse *)resp;
  CU_ASSERT_EQUAL(ur->tensors_received, 7);
  CU_ASSERT_EQUAL(ur->bytes_received, 6080);
  wt_pb_free(resp);
  WT_ASSERT_OK(wtt_finish(S.ch, "u1", id));
  wtt_assert_model_seed(&S, 5);

  /* An abort cancels a blocked receive on every worker. */
  fake_engine_release(false);
  WT_ASSERT_OK(fake_engine_init(S.ch, "fake", "6", 5000, NULL));
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  WT_ASSERT_OK(fake_update_start(S.ch, &u, id, &p));
  CU_ASSERT_FATAL(fake_engine_wait_blocked(3, 5000));
  bool aborted = false;
  WT_ASSERT_OK(wtt_abort(S.ch, id, &aborted));
  CU_ASSERT(aborted);
  WT_ASSERT_ERR(wt_rpc_pending_wait(p, NULL), WT_ABORTED,
                "was aborted: AbortWeightUpdate: test");
  CU_ASSERT(fake_engine_wait_blocked(0, 1000));
  wtt_assert_version(S.ch, "u1", 1);
  wtt_assert_model_seed(&S, 5);

  /* The engine's deadline ends a receive, and the round with it: its
   * partial tensors are dropped on every worker. */
  WT_ASSERT_OK(fake_engine_init(S.ch, "fake", "7", 200, NULL));
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  WT_ASSERT_ERR(
      wtt_update(S.ch, &u.info, id), WT_DEADLINE_EXCEEDED,
      "worker 0 (cpu): fake engine (worker 0): no data within 200 ms");
  CU_ASSERT(wtt_wait_left_updating(S.ch, 1000) >= 0);
  WT_ASSERT_ERR(wtt_finish(S.ch, "u-partial", id), WT_FAILED_PRECONDITION,
                "failed: worker 0 (cpu): fake engine (worker 0): no data "
                "within 200 ms");
  wtt_assert_version(S.ch, "u1", 1);
  wtt_assert_model_seed(&S, 5);
  fake_engine_release(true);
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  WT_ASSERT_OK(wtt_update(S.ch, &u.info, id));
  WT_ASSERT_OK(wtt_finish(S.ch, "u3", id));
  wtt_assert_model_seed(&S, 7);
  stop_fake_server();
}

/* A receive that takes longer than the round timeout is not idle: the
 * engine's own deadline bounds it. */
static void test_long_receive_not_idle(void) {
  start_fake_server(1, 300);
  WT_ASSERT_OK(fake_engine_init(S.ch, "fake", "8", 5000, NULL));
  uint64_t id = 0;
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  wtt_upd u;
  wtt_upd_init(&u, S.metas, NULL, S.n);
  wt_rpc_pending *p = NULL;
  WT_ASSERT_OK(fake_update_start(S.ch, &u, id, &p));
  CU_ASSERT_FATAL(fake_engine_wait_blocked(1, 5000));
  wtt_sleep_ms(800);
  fake_engine_release(true);
  WT_ASSERT_OK(wt_rpc_pending_wait(p, NULL));
  WT_ASSERT_OK(wtt_finish(S.ch, "slow", id));
  wtt_assert_model_seed(&S, 8);
  stop_fake_server();
}

/* A push that went quiet is ended by the round's abort, not left waiting
 * for a client that may never send again (a vanished host keeps its TCP
 * connection open for hours): the first write after the abort already
 * gets the abort's status, without the server having read it. */
static void test_stalled_push_ends_with_its_round(void) {
  wtt_server_start_simple(&S, "tiny", 1, WT_STAGING_SHADOW, 300);
  WT_ASSERT_OK(wtt_init_grpc(S.ch, 1000, S.workers));
  uint64_t id = 0;
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  wtt_upd u;
  wtt_upd_init(&u, S.metas, NULL, S.n);
  wtt_pusher p;
  WT_ASSERT_OK(wtt_push_open(&p, S.ch, &u, id, 2048, 1000, 1));
  WT_ASSERT_OK(wtt_push_send(&p, 1000));
  /* Once the watchdog aborted the round (10 s: a deadline against
   * hanging), the next write gets the abort's status. */
  CU_ASSERT(wtt_wait_left_updating(S.ch, 10000) >= 0);
  WT_ASSERT_ERR(wtt_push_send(&p, 1000), WT_ABORTED, "was aborted: idle for");
  wt_status_free(wtt_push_close(&p, NULL));
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  WT_ASSERT_OK(wtt_push_all(S.ch, &u, id, 2048, 1000, 3, NULL));
  WT_ASSERT_OK(wtt_finish(S.ch, "after-stall", id));
  wtt_assert_model_seed(&S, 3);
  wtt_server_stop(&S);
}

/* How long a call takes, in ms; its status is asserted OK. */
static int64_t timed_ok(wt_status *(*fn)(void), const char *what) {
  int64_t t0 = wt_mono_ms();
  wt_status *st = fn();
  int64_t ms = wt_mono_ms() - t0;
  if (st != NULL) fprintf(stderr, "\n  %s: %s\n", what, wt_status_message(st));
  CU_ASSERT_PTR_NULL(st);
  wt_status_free(st);
  return ms;
}

static wt_status *info_call(void) {
  Wt__V1__GetServerInfoRequest req = WT__V1__GET_SERVER_INFO_REQUEST__INIT;
  return wtt_call(S.ch, "GetServerInfo", &req.base,
                  &wt__v1__server_info__descriptor, NULL);
}

static wt_status *version_call(void) {
  Wt__V1__GetWeightVersionRequest req =
      WT__V1__GET_WEIGHT_VERSION_REQUEST__INIT;
  return wtt_call(S.ch, "GetWeightVersion", &req.base,
                  &wt__v1__weight_version__descriptor, NULL);
}

static bool abort_answered;
static uint64_t abort_round; /* the round abort_call names (0: none) */
static wt_status *abort_call(void) {
  bool aborted = false;
  wt_status *st = wtt_abort(S.ch, abort_round, &aborted);
  /* During an init there is no round: FAILED_PRECONDITION saying so is an
   * answer too, as is the refusal of round id 0 (what is measured is that
   * the call answers at all). */
  if (st != NULL &&
      ((wt_status_code(st) == WT_FAILED_PRECONDITION &&
        strstr(wt_status_message(st),
               "InitWeightTransferEngine is still "
               "running") != NULL) ||
       (wt_status_code(st) == WT_INVALID_ARGUMENT &&
        strstr(wt_status_message(st), "round_id is 0") != NULL))) {
    wt_status_free(st);
    st = NULL;
  }
  abort_answered = st == NULL;
  return st;
}

/* GetServerInfo, GetWeightVersion and AbortWeightUpdate answer while an
 * engine call blocks (each blocks 3 s): no engine call's block ends
 * between the first call and the last answer, so none of them waited for
 * one, however slow the machine (the calls take milliseconds). */
static void control_plane_answers(const char *during) {
  CU_ASSERT_FATAL(fake_engine_wait_busy(1, 10000));
  int done = fake_engine_get_stats().busy_done;
  int64_t a = timed_ok(info_call, "GetServerInfo");
  int64_t b = timed_ok(version_call, "GetWeightVersion");
  int64_t c = timed_ok(abort_call, "AbortWeightUpdate");
  fake_engine_stats st = fake_engine_get_stats();
  printf(
      "\n  during a blocked %s: GetServerInfo %lld ms, GetWeightVersion "
      "%lld ms, AbortWeightUpdate %lld ms",
      during, (long long)a, (long long)b, (long long)c);
  printf("\n");
  CU_ASSERT(st.busy > 0);
  CU_ASSERT_EQUAL(st.busy_done, done);
  CU_ASSERT(abort_answered);
}

static const char *worker0_state(void) {
  static char state[32];
  Wt__V1__ServerInfo *info = wtt_info(S.ch);
  snprintf(state, sizeof(state), "%s", info->workers[0]->state);
  wt_pb_free(&info->base);
  return state;
}

/* An engine whose init, finish and abort each block 3 s (a stream sync, a
 * communicator abort): no engine call runs under the server's lock, so the
 * control plane keeps answering, an abort is answered at once and the
 * watchdog still fires; what waits for the engine is only the call that
 * needs it. */
static void test_blocking_engine_ops(void) {
  start_fake_server(2, 400);
  fake_engine_set_delays(3000, 0, 3000, 3000);
  fake_engine_release(true);
  /* A 3 s init. */
  Wt__V1__WeightTransferInitInfo info = WT__V1__WEIGHT_TRANSFER_INIT_INFO__INIT;
  info.backend = "fake";
  Wt__V1__InitWeightTransferEngineRequest ireq =
      WT__V1__INIT_WEIGHT_TRANSFER_ENGINE_REQUEST__INIT;
  ireq.init_info = &info;
  wtt_bg_call init = {
      .ch = S.ch,
      .method = "InitWeightTransferEngine",
      .req = &ireq.base,
      .type = &wt__v1__init_weight_transfer_engine_response__descriptor};
  int64_t t0 = wt_mono_ms();
  wtt_bg_start(&init);
  /* The init blocks in the engine (10 s: a deadline against hanging). */
  CU_ASSERT_FATAL(fake_engine_wait_busy(2, 10000));
  CU_ASSERT_STRING_EQUAL(worker0_state(), "initializing");
  control_plane_answers("init");
  WT_ASSERT_OK(wtt_bg_join(&init));
  CU_ASSERT(wt_mono_ms() - t0 >= 2900);

  /* A 3 s finish, aborted meanwhile: the abort is answered at once, the
   * finish reports it when its engine returns, nothing is committed. */
  uint64_t id = 0;
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  Wt__V1__FinishWeightUpdateRequest freq;
  wtt_bg_call fin;
  wtt_bg_finish(&fin, &freq, S.ch, "blocked", id);
  CU_ASSERT_FATAL(fake_engine_wait_busy(2, 10000)); /* the finish blocks */
  abort_round = id;
  control_plane_answers("finish");
  abort_round = 0;
  WT_ASSERT_ERR(wtt_bg_join(&fin), WT_ABORTED,
                "was aborted: AbortWeightUpdate");
  wtt_assert_version(S.ch, "", 0);

  /* The abort's own 3 s on the workers: answered meanwhile too; the next
   * start is the call that waits for it. */
  CU_ASSERT_STRING_EQUAL(worker0_state(), "aborting");
  control_plane_answers("abort");
  t0 = wt_mono_ms();
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  int64_t start_ms = wt_mono_ms() - t0;
  printf("  a start queued behind the abort took %lld ms\n",
         (long long)start_ms);
  CU_ASSERT(start_ms > 1000);

  /* The watchdog fires although the abort it queues blocks for 3 s: the
   * round (idle for 400 ms) is gone before that abort's block ends on any
   * worker, and the control plane answers throughout. (The deadline, 10 s,
   * is against hanging.) */
  t0 = wt_mono_ms();
  CU_ASSERT_EQUAL(fake_engine_get_stats().busy, 0); /* the start waited */
  int blocks_ended = fake_engine_get_stats().busy_done;
  bool gone = false;
  while (!gone && wt_mono_ms() - t0 < 10000) {
    wtt_sleep_ms(10);
    Wt__V1__ServerInfo *si = wtt_info(S.ch);
    gone = strcmp(si->state, "updating") != 0;
    wt_pb_free(&si->base);
  }
  int64_t fired = wt_mono_ms() - t0;
  CU_ASSERT_EQUAL(fake_engine_get_stats().busy_done, blocks_ended);
  WT_ASSERT_ERR(wtt_finish(S.ch, "late", id), WT_FAILED_PRECONDITION,
                "was aborted (idle for");
  printf("\n  the watchdog ended the idle round after %lld ms\n",
         (long long)fired);
  CU_ASSERT(gone);
  control_plane_answers("watchdog abort");
  fake_engine_set_delays(0, 0, 0, 0);
  stop_fake_server();
}

/* An engine that does not survive an abort (an aborted NCCL communicator):
 * the worker goes to needs_init and says why; the next start is refused
 * naming the worker and telling to init again; a new init brings it back. */
static void test_needs_init(void) {
  start_fake_server(2, 0);
  WT_ASSERT_OK(fake_engine_init(S.ch, "fake-fragile", "2", 5000, NULL));
  fake_engine_release(true);
  uint64_t id = 0;
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  wtt_upd u;
  wtt_upd_init(&u, S.metas, NULL, S.n);
  WT_ASSERT_OK(wtt_update(S.ch, &u.info, id));
  WT_ASSERT_OK(wtt_finish(S.ch, "v1", id)); /* a finish keeps the engine */
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  bool aborted = false;
  WT_ASSERT_OK(wtt_abort(S.ch, id, &aborted));
  CU_ASSERT(aborted);
  /* The ABORT runs on the workers' threads: wait for them. */
  int64_t end = wt_mono_ms() + 5000;
  while (strcmp(worker0_state(), "needs_init") != 0 && wt_mono_ms() < end)
    wtt_sleep_ms(10);
  Wt__V1__ServerInfo *info = wtt_info(S.ch);
  CU_ASSERT_STRING_EQUAL(info->state, "needs_init");
  /* Probes see it: NOT_SERVING for the server and the service (#24). */
  int health = 0;
  WT_ASSERT_OK(wtt_health_check(S.ch, "", &health));
  CU_ASSERT_EQUAL(health, 2);
  WT_ASSERT_OK(wtt_health_check(S.ch, "wt.v1.WeightTransfer", &health));
  CU_ASSERT_EQUAL(health, 2);
  for (size_t w = 0; w < 2; w++) {
    CU_ASSERT_STRING_EQUAL(info->workers[w]->state, "needs_init");
    CU_ASSERT_STRING_EQUAL(info->workers[w]->backend, "");
    CU_ASSERT_PTR_NOT_NULL(strstr(info->workers[w]->reason,
                                  "backend 'fake-fragile' cannot continue "
                                  "after an abort (its round was aborted"));
    CU_ASSERT_PTR_NOT_NULL(strstr(info->workers[w]->reason,
                                  "was aborted: AbortWeightUpdate: test)"));
  }
  wt_pb_free(&info->base);
  CU_ASSERT_EQUAL(fake_engine_get_stats().destroyed, 2);
  WT_ASSERT_ERR(wtt_start(S.ch, &id), WT_FAILED_PRECONDITION,
                "StartWeightUpdate: worker 0 (cpu) needs a new "
                "InitWeightTransferEngine: backend 'fake-fragile' cannot "
                "continue after an abort");
  WT_ASSERT_ERR(wtt_start(S.ch, &id), WT_FAILED_PRECONDITION,
                "call InitWeightTransferEngine again (state: needs_init)");
  wtt_assert_version(S.ch, "v1", 1);
  wtt_assert_model_seed(&S, 2);
  /* Init again: ready, and rounds work. */
  WT_ASSERT_OK(fake_engine_init(S.ch, "fake-fragile", "3", 5000, NULL));
  CU_ASSERT_STRING_EQUAL(worker0_state(), "ready");
  WT_ASSERT_OK(wtt_health_check(S.ch, "", &health));
  CU_ASSERT_EQUAL(health, 1); /* SERVING again */
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  WT_ASSERT_OK(wtt_update(S.ch, &u.info, id));
  WT_ASSERT_OK(wtt_finish(S.ch, "v2", id));
  wtt_assert_model_seed(&S, 3);
  /* An engine that survives aborts stays ready. */
  WT_ASSERT_OK(fake_engine_init(S.ch, "fake", "4", 5000, NULL));
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  WT_ASSERT_OK(wtt_abort(S.ch, id, NULL));
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  WT_ASSERT_OK(wtt_abort(S.ch, id, NULL));
  stop_fake_server();
}

void wt_test_suite_round(void);
void wt_test_suite_round(void) {
  CU_pSuite s = CU_add_suite("round", NULL, NULL);
  CU_add_test(s, "out-of-order calls name the state", test_out_of_order);
  CU_add_test(s, "init errors", test_init_errors);
  CU_add_test(s, "validation before any byte is written", test_validation);
  CU_add_test(s, "a PushWeights round", test_push_round);
  CU_add_test(s, "three workers", test_many_workers);
  CU_add_test(s, "a stream cut midway", test_stream_cut);
  CU_add_test(s, "a failed push fails its round", test_failed_push_fails_round);
  CU_add_test(s, "inplace staging marks the store incomplete",
              test_inplace_incomplete);
  CU_add_test(s, "round timeout", test_round_timeout);
  CU_add_test(s, "UpdateWeights through a receiving backend",
              test_update_weights);
  CU_add_test(s, "a long receive is not idle", test_long_receive_not_idle);
  CU_add_test(s, "a stalled push ends with its round",
              test_stalled_push_ends_with_its_round);
  CU_add_test(s, "engine calls that block stall no other call",
              test_blocking_engine_ops);
  CU_add_test(s, "a worker that needs a new init", test_needs_init);
}
