/* test_pb.c: protobuf-c messages to and from gRPC byte buffers. */
#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <stdlib.h>
#include <string.h>

#include "wt/pb.h"
#include "wt/v1/wt.pb-c.h"
#include "wt_test.h"

static int suite_init(void) {
  grpc_init();
  return 0;
}

static int suite_cleanup(void) {
  grpc_shutdown();
  return 0;
}

static grpc_byte_buffer *buffer_of(const void *data, size_t len) {
  grpc_slice slice = grpc_slice_from_copied_buffer(data, len);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
  grpc_slice_unref(slice);
  return bb;
}

static void test_round_trip(void) {
  Wt__V1__ModelSummary model = WT__V1__MODEL_SUMMARY__INIT;
  model.name = "synthetic:llama-tiny";
  model.num_parameters = 291;
  model.total_bytes = 268435456;
  Wt__V1__WorkerInfo w0 = WT__V1__WORKER_INFO__INIT,
                     w1 = WT__V1__WORKER_INFO__INIT;
  w0.rank = 0;
  w0.device = "cpu";
  w1.rank = 1;
  w1.device = "cuda:1";
  Wt__V1__WorkerInfo *workers[] = {&w0, &w1};
  char *backends[] = {"grpc", "ucx"};
  Wt__V1__ServerInfo info = WT__V1__SERVER_INFO__INIT;
  info.server_version = "0.1.0";
  info.n_backends = 2;
  info.backends = backends;
  info.n_workers = 2;
  info.workers = workers;
  info.model = &model;
  info.store_complete = 1;
  info.world_size = 2;

  grpc_byte_buffer *bb = NULL;
  WT_ASSERT_OK(wt_pb_pack(&info.base, &bb));
  CU_ASSERT_EQUAL(bb->data.raw.slice_buffer.count, 1);
  CU_ASSERT_EQUAL(grpc_byte_buffer_length(bb),
                  protobuf_c_message_get_packed_size(&info.base));
  ProtobufCMessage *m = NULL;
  WT_ASSERT_OK(wt_pb_unpack(bb, &wt__v1__server_info__descriptor, &m));
  Wt__V1__ServerInfo *got = (Wt__V1__ServerInfo *)m;
  CU_ASSERT_STRING_EQUAL(got->server_version, "0.1.0");
  CU_ASSERT_EQUAL_FATAL(got->n_backends, 2);
  CU_ASSERT_STRING_EQUAL(got->backends[1], "ucx");
  CU_ASSERT_EQUAL_FATAL(got->n_workers, 2);
  CU_ASSERT_STRING_EQUAL(got->workers[1]->device, "cuda:1");
  CU_ASSERT_EQUAL(got->workers[1]->rank, 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(got->model);
  CU_ASSERT_EQUAL(got->model->total_bytes, 268435456);
  CU_ASSERT_TRUE(got->store_complete);
  CU_ASSERT_EQUAL(got->world_size, 2);
  wt_pb_free(m);
  grpc_byte_buffer_destroy(bb);
}

/* A 1 MiB chunk, as PushWeights sends them; received over several slices it
 * must parse the same as from one. */
static void test_large_chunk_any_slicing(void) {
  size_t n = 1 << 20;
  uint8_t *data = malloc(n);
  CU_ASSERT_PTR_NOT_NULL_FATAL(data);
  for (size_t i = 0; i < n; i++) data[i] = (uint8_t)(i * 131 + 7);
  Wt__V1__BucketChunk chunk = WT__V1__BUCKET_CHUNK__INIT;
  chunk.bucket = 3;
  chunk.offset = 5u << 20;
  chunk.data.data = data;
  chunk.data.len = n;
  Wt__V1__PushWeightsChunk msg = WT__V1__PUSH_WEIGHTS_CHUNK__INIT;
  msg.payload_case = WT__V1__PUSH_WEIGHTS_CHUNK__PAYLOAD_CHUNK;
  msg.chunk = &chunk;

  grpc_byte_buffer *bb = NULL;
  WT_ASSERT_OK(wt_pb_pack(&msg.base, &bb));
  CU_ASSERT_EQUAL(bb->data.raw.slice_buffer.count, 1);

  /* The same bytes cut into three uneven slices. */
  grpc_slice whole = bb->data.raw.slice_buffer.slices[0];
  size_t len = GRPC_SLICE_LENGTH(whole);
  size_t cut1 = 3, cut2 = len / 2 + 1;
  grpc_slice parts[3] = {grpc_slice_sub(whole, 0, cut1),
                         grpc_slice_sub(whole, cut1, cut2),
                         grpc_slice_sub(whole, cut2, len)};
  grpc_byte_buffer *split = grpc_raw_byte_buffer_create(parts, 3);
  for (int i = 0; i < 3; i++) grpc_slice_unref(parts[i]);

  grpc_byte_buffer *inputs[] = {bb, split};
  for (int k = 0; k < 2; k++) {
    ProtobufCMessage *m = NULL;
    WT_ASSERT_OK(
        wt_pb_unpack(inputs[k], &wt__v1__push_weights_chunk__descriptor, &m));
    Wt__V1__PushWeightsChunk *got = (Wt__V1__PushWeightsChunk *)m;
    CU_ASSERT_EQUAL_FATAL(got->payload_case,
                          WT__V1__PUSH_WEIGHTS_CHUNK__PAYLOAD_CHUNK);
    CU_ASSERT_EQUAL(got->chunk->bucket, 3);
    CU_ASSERT_EQUAL(got->chunk->offset, 5u << 20);
    CU_ASSERT_EQUAL_FATAL(got->chunk->data.len, n);
    CU_ASSERT_EQUAL(memcmp(got->chunk->data.data, data, n), 0);
    wt_pb_free(m);
  }
  grpc_byte_buffer_destroy(split);
  grpc_byte_buffer_destroy(bb);
  free(data);
}

/* One slice is handed out without a copy; several are joined. */
static void test_flatten(void) {
  char big[256]; /* above gRPC's inline-slice size, so really refcounted */
  memset(big, 'x', sizeof(big));
  grpc_byte_buffer *bb = buffer_of(big, sizeof(big));
  grpc_slice flat;
  WT_ASSERT_OK(wt_pb_flatten(bb, &flat));
  CU_ASSERT_PTR_EQUAL(
      GRPC_SLICE_START_PTR(flat),
      GRPC_SLICE_START_PTR(bb->data.raw.slice_buffer.slices[0]));
  grpc_slice_unref(flat);
  grpc_byte_buffer_destroy(bb);

  grpc_slice parts[2] = {grpc_slice_from_copied_string("abc"),
                         grpc_slice_from_copied_string("def")};
  bb = grpc_raw_byte_buffer_create(parts, 2);
  grpc_slice_unref(parts[0]);
  grpc_slice_unref(parts[1]);
  WT_ASSERT_OK(wt_pb_flatten(bb, &flat));
  CU_ASSERT_EQUAL_FATAL(GRPC_SLICE_LENGTH(flat), 6);
  CU_ASSERT_EQUAL(memcmp(GRPC_SLICE_START_PTR(flat), "abcdef", 6), 0);
  grpc_slice_unref(flat);
  grpc_byte_buffer_destroy(bb);

  WT_ASSERT_OK(wt_pb_flatten(NULL, &flat));
  CU_ASSERT_EQUAL(GRPC_SLICE_LENGTH(flat), 0);
  grpc_slice_unref(flat);
}

static void test_garbage_is_invalid_argument(void) {
  static const struct {
    const char *bytes;
    size_t len;
  } cases[] = {
      {"\x0a\xff", 2}, /* length cut short */
      {"\x0a\x05"
       "ab",
       4}, /* fewer bytes than said */
      {"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11}, /* endless varint */
      {"\x07", 1},                                          /* wire type 7 */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    grpc_byte_buffer *bb = buffer_of(cases[i].bytes, cases[i].len);
    ProtobufCMessage *m = (ProtobufCMessage *)1;
    WT_ASSERT_ERR(wt_pb_unpack(bb, &wt__v1__server_info__descriptor, &m),
                  WT_INVALID_ARGUMENT, "wt.v1.ServerInfo");
    CU_ASSERT_PTR_NULL(m);
    grpc_byte_buffer_destroy(bb);
  }
}

static void test_empty_is_default_message(void) {
  grpc_byte_buffer *empty = grpc_raw_byte_buffer_create(NULL, 0);
  grpc_byte_buffer *inputs[] = {empty, NULL};
  for (int k = 0; k < 2; k++) {
    ProtobufCMessage *m = NULL;
    WT_ASSERT_OK(
        wt_pb_unpack(inputs[k], &wt__v1__weight_version__descriptor, &m));
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_PTR_EQUAL(m->descriptor, &wt__v1__weight_version__descriptor);
    Wt__V1__WeightVersion *v = (Wt__V1__WeightVersion *)m;
    CU_ASSERT_STRING_EQUAL(v->version, "");
    CU_ASSERT_EQUAL(v->sequence, 0);
    wt_pb_free(m);
  }
  grpc_byte_buffer_destroy(empty);

  /* And an empty message packs to an empty buffer. */
  Wt__V1__GetWeightVersionRequest req =
      WT__V1__GET_WEIGHT_VERSION_REQUEST__INIT;
  grpc_byte_buffer *bb = NULL;
  WT_ASSERT_OK(wt_pb_pack(&req.base, &bb));
  CU_ASSERT_EQUAL(grpc_byte_buffer_length(bb), 0);
  grpc_byte_buffer_destroy(bb);
}

/* Bytes of one message type read as another whose field has a different wire
 * type: refused with the expected type's name. */
static void test_wrong_type(void) {
  Wt__V1__WeightVersion v = WT__V1__WEIGHT_VERSION__INIT;
  v.version = "step-42";
  v.sequence = 42;
  grpc_byte_buffer *bb = NULL;
  WT_ASSERT_OK(wt_pb_pack(&v.base, &bb));
  ProtobufCMessage *m = NULL;
  WT_ASSERT_ERR(wt_pb_unpack(bb, &wt__v1__bucket_chunk__descriptor, &m),
                WT_INVALID_ARGUMENT, "wt.v1.BucketChunk");
  CU_ASSERT_PTR_NULL(m);
  grpc_byte_buffer_destroy(bb);
}

static void test_pack_invalid_message(void) {
  char *backends[] = {"grpc", NULL};
  Wt__V1__ServerInfo info = WT__V1__SERVER_INFO__INIT;
  info.n_backends = 2;
  info.backends = backends;
  grpc_byte_buffer *bb = (grpc_byte_buffer *)1;
  WT_ASSERT_ERR(wt_pb_pack(&info.base, &bb), WT_INTERNAL, "wt.v1.ServerInfo");
  CU_ASSERT_PTR_NULL(bb);
  WT_ASSERT_ERR(wt_pb_pack(NULL, &bb), WT_INTERNAL, "not a protobuf-c message");
}

/* An allocator that fails after `budget` allocations. */
typedef struct failing_allocator {
  int budget;
  int live;
} failing_allocator;

static void *failing_alloc(void *data, size_t size) {
  failing_allocator *f = data;
  if (f->budget-- <= 0) return NULL;
  f->live++;
  return malloc(size);
}

static void failing_free(void *data, void *p) {
  failing_allocator *f = data;
  if (p) f->live--;
  free(p);
}

/* Each allocation of an unpack fails in turn: always RESOURCE_EXHAUSTED,
 * never a crash or a leak (ASan checks the latter). */
static void test_unpack_allocation_failures(void) {
  char *backends[] = {"grpc", "ucx", "nccl"};
  Wt__V1__ModelSummary model = WT__V1__MODEL_SUMMARY__INIT;
  model.name = "m";
  Wt__V1__ServerInfo info = WT__V1__SERVER_INFO__INIT;
  info.server_version = "0.1.0";
  info.n_backends = 3;
  info.backends = backends;
  info.model = &model;
  grpc_byte_buffer *bb = NULL;
  WT_ASSERT_OK(wt_pb_pack(&info.base, &bb));
  int failures = 0;
  for (int budget = 0; budget < 100; budget++) {
    failing_allocator f = {budget, 0};
    ProtobufCAllocator alloc = {failing_alloc, failing_free, &f};
    ProtobufCMessage *m = NULL;
    wt_status *st =
        wt_pb_unpack_with(bb, &wt__v1__server_info__descriptor, &alloc, &m);
    if (st == NULL) {
      CU_ASSERT_STRING_EQUAL(((Wt__V1__ServerInfo *)m)->backends[2], "nccl");
      protobuf_c_message_free_unpacked(m, &alloc);
      CU_ASSERT_EQUAL(f.live, 0);
      break;
    }
    failures++;
    CU_ASSERT_EQUAL(wt_status_code(st), WT_RESOURCE_EXHAUSTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(wt_status_message(st), "wt.v1.ServerInfo"));
    CU_ASSERT_PTR_NULL(m);
    CU_ASSERT_EQUAL(f.live, 0);
    wt_status_free(st);
  }
  CU_ASSERT(failures >= 3);
  grpc_byte_buffer_destroy(bb);
}

/* JSON both ways: a ucx init info (a oneof, bytes, a map, unsigned and
 * signed numbers) and an update info (repeated strings and messages) come
 * back from their JSON field for field; the wire bytes are equal. */
static void test_json_round_trip(void) {
  Wt__V1__UcxInitInfo ucx = WT__V1__UCX_INIT_INFO__INIT;
  ucx.trainer_address = "127.0.0.1";
  ucx.trainer_port = 4242;
  uint8_t addr[5] = {0, 1, 2, 0xfe, 0xff};
  ucx.trainer_worker_address.data = addr;
  ucx.trainer_worker_address.len = sizeof(addr);
  Wt__V1__WeightTransferInitInfo__OptionsEntry e =
      WT__V1__WEIGHT_TRANSFER_INIT_INFO__OPTIONS_ENTRY__INIT;
  e.key = "chain";
  e.value = "1";
  Wt__V1__WeightTransferInitInfo__OptionsEntry *ep = &e;
  Wt__V1__WeightTransferInitInfo in = WT__V1__WEIGHT_TRANSFER_INIT_INFO__INIT;
  in.backend = "ucx";
  in.backend_init_case = WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_UCX;
  in.ucx = &ucx;
  in.n_options = 1;
  in.options = &ep;
  in.rank_offset = 1;
  in.world_size = 3;
  char *json = NULL;
  WT_ASSERT_OK(wt_pb_to_json(&in.base, &json));
  CU_ASSERT_FATAL(json != NULL);
  CU_ASSERT_PTR_NOT_NULL(
      strstr(json, "\"trainer_worker_address\":\"AAEC/v8=\""));
  CU_ASSERT_PTR_NOT_NULL(strstr(json, "\"options\":{\"chain\":\"1\"}"));
  CU_ASSERT_PTR_NULL(strstr(json, "timeout_ms")); /* defaults are left out */
  ProtobufCMessage *back = NULL;
  WT_ASSERT_OK(wt_pb_from_json(&wt__v1__weight_transfer_init_info__descriptor,
                               json, "init_info", &back));
  CU_ASSERT_FATAL(back != NULL);
  size_t a = protobuf_c_message_get_packed_size(&in.base);
  size_t b = protobuf_c_message_get_packed_size(back);
  CU_ASSERT_EQUAL_FATAL(a, b);
  uint8_t *pa = malloc(a), *pb = malloc(b);
  protobuf_c_message_pack(&in.base, pa);
  protobuf_c_message_pack(back, pb);
  CU_ASSERT_EQUAL(memcmp(pa, pb, a), 0);
  free(pa);
  free(pb);
  wt_pb_free(back);
  free(json);

  const char *upd =
      "{\"names\":[\"a\",\"b\"],\"dtype_names\":[\"bfloat16\",\"float32\"],"
      "\"shapes\":[{\"dims\":[2,3]},{\"dims\":[\"7\"]}],"
      "\"packed_tensor_sizes\":[\"18446744073709551615\", 5]}";
  WT_ASSERT_OK(wt_pb_from_json(&wt__v1__weight_transfer_update_info__descriptor,
                               upd, "update_info", &back));
  Wt__V1__WeightTransferUpdateInfo *u =
      (Wt__V1__WeightTransferUpdateInfo *)back;
  CU_ASSERT_EQUAL(u->n_names, 2);
  CU_ASSERT_STRING_EQUAL(u->dtype_names[1], "float32");
  CU_ASSERT_EQUAL(u->shapes[1]->dims[0], 7);
  CU_ASSERT_EQUAL(u->packed_tensor_sizes[0], UINT64_MAX);
  WT_ASSERT_OK(wt_pb_to_json(back, &json));
  CU_ASSERT_PTR_NOT_NULL(strstr(json, "\"18446744073709551615\""));
  free(json);
  wt_pb_free(back);
}

/* What does not fit is refused, naming the field's path; nothing leaks
 * from a half-built message. */
static void test_json_refusals(void) {
  static const struct {
    const char *json, *needle;
  } cases[] = {
      {"[1]", "init_info: expected an object, got an array"},
      {"{\"bogus\":1}",
       "init_info.bogus: wt.v1.WeightTransferInitInfo has no such field"},
      {"{\"ucx\":{\"trainer_port\":\"x\"}}",
       "init_info.ucx.trainer_port: expected an unsigned integer, got a "
       "string"},
      {"{\"ucx\":{\"trainer_port\":-1}}",
       "init_info.ucx.trainer_port: -1 is negative"},
      {"{\"ucx\":{\"trainer_port\":4294967296}}", "does not fit 32 bits"},
      {"{\"ucx\":{},\"nccl\":{}}", "another member of its oneof is set"},
      {"{\"nccl\":{\"nccl_unique_id\":\"!!!!\"}}",
       "init_info.nccl.nccl_unique_id"},
      {"{\"options\":{\"a\":1}}", "init_info.options.a: expected a string"},
      {"{\"world_size\":true}",
       "init_info.world_size: expected an unsigned integer, got true"},
      {"{\"backend\":\"\\u00ff\\u0000x\"}", "init_info: not JSON"},
      {"{\"backend\":1", "init_info: not JSON"},
      {"{\"ucx\":{\"trainer_address\":\"a\"},\"ucx\":{}}", "not JSON"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    ProtobufCMessage *m = NULL;
    wt_status *st =
        wt_pb_from_json(&wt__v1__weight_transfer_init_info__descriptor,
                        cases[i].json, "init_info", &m);
    CU_ASSERT_EQUAL(wt_status_code(st), WT_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NULL(m);
    if (st == NULL || strstr(wt_status_message(st), cases[i].needle) == NULL) {
      printf("\n  case %zu: %s", i, st ? wt_status_message(st) : "(ok)");
      CU_FAIL("message");
    }
    wt_status_free(st);
  }
  /* Nesting past 32 is refused, not recursed into. */
  char deep[4096] = "";
  size_t n = 0;
  for (int i = 0; i < 40; i++)
    n += (size_t)snprintf(deep + n, sizeof(deep) - n, "{\"dims\":[],\"x\":");
  (void)n;
  ProtobufCMessage *m = NULL;
  WT_ASSERT_ERR(wt_pb_from_json(&wt__v1__shape__descriptor, deep, "shape", &m),
                WT_INVALID_ARGUMENT, "shape");
}

/* Value of key k in an init info's options map (NULL: absent). */
static const char *option_of(const Wt__V1__WeightTransferInitInfo *m,
                             const char *k) {
  for (size_t i = 0; i < m->n_options; i++)
    if (strcmp(m->options[i]->key, k) == 0) return m->options[i]->value;
  return NULL;
}

/* wt_pb_merge_json: what the JSON names wins, the rest stays (the Python
 * path's init: the backend's init info with the caller's fields over it). */
static void test_json_merge(void) {
  ProtobufCMessage *m = NULL;
  WT_ASSERT_OK(wt_pb_from_json(
      &wt__v1__weight_transfer_init_info__descriptor,
      "{\"backend\":\"nccl\",\"timeout_ms\":5,\"world_size\":3,"
      "\"options\":{\"a\":\"1\",\"b\":\"2\"},\"nccl\":{\"packed\":true,"
      "\"packed_num_buffers\":{\"value\":4}}}",
      "base", &m));
  Wt__V1__WeightTransferInitInfo *i = (Wt__V1__WeightTransferInitInfo *)m;
  WT_ASSERT_OK(wt_pb_merge_json(
      m,
      "{\"timeout_ms\":0,\"world_size\":null,\"options\":{\"b\":\"3\",\"c\":"
      "\"4\"},"
      "\"nccl\":{\"packed\":false,\"packed_buffer_size_bytes\":{\"value\":7}}}",
      "init_info"));
  CU_ASSERT_EQUAL(i->timeout_ms, 0); /* an explicit default wins */
  CU_ASSERT_EQUAL(i->world_size, 0); /* null clears */
  CU_ASSERT_STRING_EQUAL(i->backend, "nccl");
  CU_ASSERT_EQUAL(i->n_options, 3);
  CU_ASSERT_STRING_EQUAL(option_of(i, "a"), "1");
  CU_ASSERT_STRING_EQUAL(option_of(i, "b"), "3");
  CU_ASSERT_STRING_EQUAL(option_of(i, "c"), "4");
  CU_ASSERT_FATAL(i->backend_init_case ==
                  WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_NCCL);
  CU_ASSERT_FALSE(i->nccl->packed);
  CU_ASSERT_FATAL(i->nccl->packed_num_buffers &&
                  i->nccl->packed_buffer_size_bytes);
  CU_ASSERT_EQUAL(i->nccl->packed_num_buffers->value, 4); /* merged, kept */
  CU_ASSERT_EQUAL(i->nccl->packed_buffer_size_bytes->value, 7);
  /* Another member of the oneof ends the one set before (ASan sees it
   * freed once). */
  WT_ASSERT_OK(wt_pb_merge_json(m, "{\"ucx\":{\"transports\":\"tcp\"}}", NULL));
  CU_ASSERT_EQUAL(i->backend_init_case,
                  WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_UCX);
  CU_ASSERT_STRING_EQUAL(i->ucx->transports, "tcp");
  /* Refusals name the field; what was merged before stays freeable. */
  WT_ASSERT_ERR(
      wt_pb_merge_json(m, "{\"rank_offset\":2,\"nope\":1}", "init_info"),
      WT_INVALID_ARGUMENT, "init_info.nope");
  WT_ASSERT_ERR(wt_pb_merge_json(m, "{\"options\":{\"d\":5}}", "init_info"),
                WT_INVALID_ARGUMENT, "init_info.options.d");
  WT_ASSERT_ERR(wt_pb_merge_json(m, "[1]", "init_info"), WT_INVALID_ARGUMENT,
                "init_info");
  wt_pb_free(m);
  /* Repeated fields are replaced whole. */
  WT_ASSERT_OK(wt_pb_from_json(&wt__v1__weight_transfer_update_info__descriptor,
                               "{\"names\":[\"a\",\"b\"]}", NULL, &m));
  WT_ASSERT_OK(wt_pb_merge_json(m, "{\"names\":[\"c\"]}", NULL));
  Wt__V1__WeightTransferUpdateInfo *u = (Wt__V1__WeightTransferUpdateInfo *)m;
  CU_ASSERT_FATAL(u->n_names == 1);
  CU_ASSERT_STRING_EQUAL(u->names[0], "c");
  wt_pb_free(m);
}

void wt_test_suite_pb(void) {
  CU_pSuite s = CU_add_suite("pb", suite_init, suite_cleanup);
  CU_add_test(s, "round trip", test_round_trip);
  CU_add_test(s, "1 MiB chunk, one slice or several",
              test_large_chunk_any_slicing);
  CU_add_test(s, "flatten", test_flatten);
  CU_add_test(s, "garbage bytes", test_garbage_is_invalid_argument);
  CU_add_test(s, "empty buffer", test_empty_is_default_message);
  CU_add_test(s, "wrong type", test_wrong_type);
  CU_add_test(s, "pack an invalid message", test_pack_invalid_message);
  CU_add_test(s, "unpack allocation failures", test_unpack_allocation_failures);
  CU_add_test(s, "JSON both ways", test_json_round_trip);
  CU_add_test(s, "JSON refusals name the field", test_json_refusals);
  CU_add_test(s, "JSON merged into a message", test_json_merge);
}
