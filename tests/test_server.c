/* test_server.c: wt-server's service in-process, driven over loopback by the
 * RPC client with hand-built wt.v1 messages: rounds, validation, PushWeights,
 * many workers, cut streams, round timeouts, garbage, watch and checksums. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "wt/checksum.h"
#include "wt/engine.h"
#include "wt/packing.h"
#include "wt/pb.h"
#include "wt/rpc.h"
#include "wt/safetensors.h"
#include "wt/server.h"
#include "wt/synthetic.h"
#include "wt/v1/wt.pb-c.h"
#include "wt_test.h"

#define SVC "/wt.v1.WeightTransfer/"
#define DEADLINE_MS 10000

typedef struct fixture {
  wt_server *srv;
  wt_rpc_channel *ch;
  wt_tensor_meta *metas;
  size_t n;
  uint32_t workers;
  wt_registry *engines; /* a registry with the test backend, or NULL */
} fixture;

static fixture F;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
  usleep((useconds_t)ms * 1000);
}

static void start_server(const char *layout, uint32_t workers,
                         wt_staging staging, uint32_t round_timeout_ms) {
  char model[64];
  snprintf(model, sizeof(model), "synthetic:%s", layout);
  wt_server_options o = {.listen = "127.0.0.1:0",
                         .model = model,
                         .workers = workers,
                         .staging = staging,
                         .round_timeout_ms = round_timeout_ms,
                         .drain_ms = 300,
                         .engine_registry = F.engines};
  wt_registry *engines = F.engines;
  memset(&F, 0, sizeof(F));
  F.engines = engines;
  F.workers = workers;
  WT_ASSERT_OK(wt_server_start(&o, &F.srv));
  CU_ASSERT_FATAL(wt_server_port(F.srv) > 0);
  char target[64];
  snprintf(target, sizeof(target), "127.0.0.1:%d", wt_server_port(F.srv));
  WT_ASSERT_OK(wt_rpc_channel_new(target, NULL, &F.ch));
  WT_ASSERT_OK(wt_synthetic_layout(layout, &F.metas, &F.n));
}

static void stop_server(void) {
  wt_rpc_channel_destroy(F.ch);
  wt_server_stop(F.srv);
  wt_tensor_meta_array_free(F.metas, F.n);
  wt_registry_destroy(F.engines);
  memset(&F, 0, sizeof(F));
}

static size_t layout_index(const char *name) {
  for (size_t i = 0; i < F.n; i++)
    if (strcmp(F.metas[i].name, name) == 0) return i;
  return (size_t)-1;
}

/* --- calls ---------------------------------------------------------------- */

static wt_status *call(const char *method, const ProtobufCMessage *req,
                       const ProtobufCMessageDescriptor *type,
                       ProtobufCMessage **resp) {
  ProtobufCMessage *r = NULL;
  char path[128];
  snprintf(path, sizeof(path), SVC "%s", method);
  wt_status *st = wt_rpc_unary(F.ch, path, req, type, DEADLINE_MS, &r);
  if (resp != NULL)
    *resp = r;
  else
    wt_pb_free(r);
  return st;
}

static wt_status *init_grpc(uint64_t chunk_bytes) {
  Wt__V1__GrpcInitInfo g = WT__V1__GRPC_INIT_INFO__INIT;
  Wt__V1__UInt64Value chunk = WT__V1__UINT64_VALUE__INIT;
  chunk.value = chunk_bytes;
  if (chunk_bytes) g.chunk_size_bytes = &chunk;
  Wt__V1__WeightTransferInitInfo info = WT__V1__WEIGHT_TRANSFER_INIT_INFO__INIT;
  info.backend = "grpc";
  info.backend_init_case = WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_GRPC;
  info.grpc = &g;
  Wt__V1__InitWeightTransferEngineRequest req =
      WT__V1__INIT_WEIGHT_TRANSFER_ENGINE_REQUEST__INIT;
  req.init_info = &info;
  ProtobufCMessage *resp = NULL;
  wt_status *st =
      call("InitWeightTransferEngine", &req.base,
           &wt__v1__init_weight_transfer_engine_response__descriptor, &resp);
  if (st == NULL) {
    Wt__V1__InitWeightTransferEngineResponse *r =
        (Wt__V1__InitWeightTransferEngineResponse *)resp;
    CU_ASSERT(r->ready);
    CU_ASSERT_EQUAL(r->n_endpoints, F.workers);
    CU_ASSERT_PTR_NOT_NULL(strstr(r->message, "grpc"));
  }
  wt_pb_free(resp);
  return st;
}

static wt_status *start_round(uint64_t *id) {
  Wt__V1__StartWeightUpdateRequest req =
      WT__V1__START_WEIGHT_UPDATE_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  wt_status *st =
      call("StartWeightUpdate", &req.base,
           &wt__v1__start_weight_update_response__descriptor, &resp);
  if (st == NULL && id != NULL)
    *id = ((Wt__V1__StartWeightUpdateResponse *)resp)->round_id;
  wt_pb_free(resp);
  return st;
}

static wt_status *finish_round(const char *version, uint64_t round_id) {
  Wt__V1__FinishWeightUpdateRequest req =
      WT__V1__FINISH_WEIGHT_UPDATE_REQUEST__INIT;
  req.weight_version = (char *)version;
  req.round_id = round_id;
  ProtobufCMessage *resp = NULL;
  wt_status *st =
      call("FinishWeightUpdate", &req.base,
           &wt__v1__finish_weight_update_response__descriptor, &resp);
  if (st == NULL)
    CU_ASSERT_STRING_EQUAL(
        ((Wt__V1__FinishWeightUpdateResponse *)resp)->weight_version, version);
  wt_pb_free(resp);
  return st;
}

static wt_status *abort_round(uint64_t round_id, bool *aborted) {
  Wt__V1__AbortWeightUpdateRequest req =
      WT__V1__ABORT_WEIGHT_UPDATE_REQUEST__INIT;
  req.round_id = round_id;
  req.reason = "test";
  ProtobufCMessage *resp = NULL;
  wt_status *st =
      call("AbortWeightUpdate", &req.base,
           &wt__v1__abort_weight_update_response__descriptor, &resp);
  if (st == NULL && aborted != NULL)
    *aborted = ((Wt__V1__AbortWeightUpdateResponse *)resp)->aborted;
  wt_pb_free(resp);
  return st;
}

/* The visible version ("" before the first commit) and its sequence. */
static char *get_version(uint64_t *sequence) {
  Wt__V1__GetWeightVersionRequest req =
      WT__V1__GET_WEIGHT_VERSION_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  WT_ASSERT_OK(call("GetWeightVersion", &req.base,
                    &wt__v1__weight_version__descriptor, &resp));
  Wt__V1__WeightVersion *v = (Wt__V1__WeightVersion *)resp;
  char *out = strdup(v->version);
  if (sequence) *sequence = v->sequence;
  wt_pb_free(resp);
  return out;
}

static void assert_version(const char *want, uint64_t want_seq) {
  uint64_t seq = 99;
  char *v = get_version(&seq);
  CU_ASSERT_STRING_EQUAL(v, want);
  CU_ASSERT_EQUAL(seq, want_seq);
  free(v);
}

static Wt__V1__ServerInfo *server_info(void) {
  Wt__V1__GetServerInfoRequest req = WT__V1__GET_SERVER_INFO_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  WT_ASSERT_OK(call("GetServerInfo", &req.base,
                    &wt__v1__server_info__descriptor, &resp));
  return (Wt__V1__ServerInfo *)resp;
}

static void assert_serving(void) {
  Wt__V1__GetWorldSizeRequest req = WT__V1__GET_WORLD_SIZE_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  WT_ASSERT_OK(call("GetWorldSize", &req.base,
                    &wt__v1__get_world_size_response__descriptor, &resp));
  CU_ASSERT_EQUAL(((Wt__V1__GetWorldSizeResponse *)resp)->world_size,
                  F.workers);
  wt_pb_free(resp);
}

/* --- expected contents ---------------------------------------------------- */

static void expected_digest(size_t i, uint64_t seed, wt_hash_alg alg,
                            char hex[WT_DIGEST_HEX_MAX]) {
  const wt_tensor_meta *m = &F.metas[i];
  unsigned char *b = malloc(m->nbytes ? m->nbytes : 1);
  wt_synthetic_fill(m, seed, 0, b, m->nbytes);
  wt_status *st = wt_digest_hex(alg, b, m->nbytes, hex);
  CU_ASSERT_PTR_NULL(st);
  wt_status_free(st);
  free(b);
}

/* Seeds the model should hold now: seeds[i] for tensor i. Checks every
 * tensor's checksum on every worker over the wire, and the bytes of every
 * worker's store in-process. */
static void assert_model(const uint64_t *seeds, wt_hash_alg alg) {
  Wt__V1__ChecksumWeightsRequest req = WT__V1__CHECKSUM_WEIGHTS_REQUEST__INIT;
  req.algorithm = (Wt__V1__ChecksumAlgorithm)alg;
  req.all_workers = true;
  ProtobufCMessage *resp = NULL;
  WT_ASSERT_OK(call("ChecksumWeights", &req.base,
                    &wt__v1__checksum_weights_response__descriptor, &resp));
  Wt__V1__ChecksumWeightsResponse *r = (Wt__V1__ChecksumWeightsResponse *)resp;
  CU_ASSERT_EQUAL(r->algorithm, (Wt__V1__ChecksumAlgorithm)alg);
  CU_ASSERT_EQUAL_FATAL(r->n_checksums, F.n * F.workers);
  for (size_t k = 0; k < r->n_checksums; k++) {
    const Wt__V1__ParameterChecksum *c = r->checksums[k];
    size_t i = layout_index(c->name);
    CU_ASSERT_FATAL(i < F.n);
    char want[WT_DIGEST_HEX_MAX];
    expected_digest(i, seeds[i], alg, want);
    if (strcmp(c->digest, want) != 0)
      fprintf(stderr, "\n  worker %u '%s': digest %s, want seed %lu's %s\n",
              c->worker, c->name, c->digest, (unsigned long)seeds[i], want);
    CU_ASSERT_STRING_EQUAL(c->digest, want);
    CU_ASSERT_EQUAL(c->worker, k / F.n);
  }
  wt_pb_free(resp);
  for (uint32_t w = 0; w < F.workers; w++) {
    wt_param_store *s = wt_server_store(F.srv, w);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    for (size_t i = 0; i < F.n; i++) {
      const wt_tensor_meta *m = &F.metas[i];
      unsigned char *want = malloc(m->nbytes), *got = malloc(m->nbytes);
      wt_synthetic_fill(m, seeds[i], 0, want, m->nbytes);
      WT_ASSERT_OK(wt_param_store_read(s, i, 0, got, m->nbytes));
      CU_ASSERT_EQUAL(memcmp(want, got, m->nbytes), 0);
      free(want);
      free(got);
    }
  }
}

static void assert_model_seed(uint64_t seed) {
  uint64_t *seeds = calloc(F.n, sizeof(*seeds));
  for (size_t i = 0; i < F.n; i++) seeds[i] = seed;
  assert_model(seeds, WT_HASH_SHA256);
  free(seeds);
}

/* --- update info ---------------------------------------------------------- */

/* An update info naming layout tensors idx[0..n), which a test may then
 * spoil field by field. */
typedef struct upd {
  Wt__V1__WeightTransferUpdateInfo info;
  char *names[64];
  char *dtypes[64];
  Wt__V1__Shape shapes[64];
  Wt__V1__Shape *sp[64];
  size_t idx[64];
} upd;

static void upd_init(upd *u, const size_t *idx, size_t n) {
  memset(u, 0, sizeof(*u));
  wt__v1__weight_transfer_update_info__init(&u->info);
  CU_ASSERT_FATAL(n <= 64);
  for (size_t k = 0; k < n; k++) {
    size_t i = idx ? idx[k] : k;
    const wt_tensor_meta *m = &F.metas[i];
    u->idx[k] = i;
    u->names[k] = m->name;
    u->dtypes[k] = (char *)wt_dtype_torch_name(m->dtype);
    wt__v1__shape__init(&u->shapes[k]);
    u->shapes[k].n_dims = (size_t)m->ndim;
    u->shapes[k].dims = (int64_t *)m->shape;
    u->sp[k] = &u->shapes[k];
  }
  u->info.n_names = u->info.n_dtype_names = u->info.n_shapes = n;
  u->info.names = u->names;
  u->info.dtype_names = u->dtypes;
  u->info.shapes = u->sp;
  u->info.packed = true;
}

static void upd_all(upd *u) {
  upd_init(u, NULL, F.n);
}

/* --- PushWeights ---------------------------------------------------------- */

/* A trainer's side of one PushWeights call: the packed buckets of `u`'s
 * tensors filled for `seed`, sent in chunks. */
typedef struct pusher {
  wt_rpc_client_stream *s;
  wt_pack_plan *plan;
  unsigned char **bucket; /* each bucket's bytes */
  size_t chunk;
  size_t b;     /* next bucket */
  uint64_t off; /* next offset in it */
  uint64_t sent;
} pusher;

static wt_status *push_open(pusher *p, const upd *u, uint64_t round_id,
                            uint64_t packed_buffer, size_t chunk,
                            uint64_t seed) {
  memset(p, 0, sizeof(*p));
  p->chunk = chunk;
  size_t n = u->info.n_names;
  uint64_t sizes[64];
  for (size_t k = 0; k < n; k++) sizes[k] = F.metas[u->idx[k]].nbytes;
  WT_ASSERT_OK(wt_pack_plan_build(
      sizes, n, packed_buffer ? packed_buffer : 64u << 20, &p->plan));
  p->bucket = calloc(p->plan->nbuckets + 1, sizeof(*p->bucket));
  for (size_t b = 0; b < p->plan->nbuckets; b++)
    p->bucket[b] = malloc(p->plan->buckets[b].nbytes + 1);
  for (size_t k = 0; k < n; k++) {
    const wt_tensor_meta *m = &F.metas[u->idx[k]];
    wt_synthetic_fill(
        m, seed, 0,
        p->bucket[p->plan->tensor_bucket[k]] + p->plan->tensor_offset[k],
        m->nbytes);
  }
  WT_ASSERT_OK(
      wt_rpc_client_stream_open(F.ch, SVC "PushWeights", DEADLINE_MS, &p->s));
  Wt__V1__PushWeightsHeader h = WT__V1__PUSH_WEIGHTS_HEADER__INIT;
  h.update_info = (Wt__V1__WeightTransferUpdateInfo *)&u->info;
  h.round_id = round_id;
  h.packed_buffer_size_bytes = packed_buffer;
  Wt__V1__PushWeightsChunk msg = WT__V1__PUSH_WEIGHTS_CHUNK__INIT;
  msg.payload_case = WT__V1__PUSH_WEIGHTS_CHUNK__PAYLOAD_HEADER;
  msg.header = &h;
  return wt_rpc_client_stream_write(p->s, &msg.base);
}

static wt_status *push_raw_chunk(pusher *p, uint32_t bucket, uint64_t offset,
                                 const void *data, size_t len) {
  Wt__V1__BucketChunk c = WT__V1__BUCKET_CHUNK__INIT;
  c.bucket = bucket;
  c.offset = offset;
  c.data.data = (uint8_t *)data;
  c.data.len = len;
  Wt__V1__PushWeightsChunk msg = WT__V1__PUSH_WEIGHTS_CHUNK__INIT;
  msg.payload_case = WT__V1__PUSH_WEIGHTS_CHUNK__PAYLOAD_CHUNK;
  msg.chunk = &c;
  return wt_rpc_client_stream_write(p->s, &msg.base);
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
static wt_status *push_odd_chunk(pusher *p, uint32_t bucket, uint64_t offset,
                                 const void *data, size_t len) {
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

/* Sends chunks until at least `bytes` more went out, or the plan ends. */
static wt_status *push_send(pusher *p, uint64_t bytes) {
  uint64_t target = bytes > UINT64_MAX - p->sent ? UINT64_MAX : p->sent + bytes;
  while (p->b < p->plan->nbuckets && p->sent < target) {
    uint64_t size = p->plan->buckets[p->b].nbytes;
    if (p->off == size) {
      p->b++;
      p->off = 0;
      continue;
    }
    size_t len = size - p->off < p->chunk ? (size_t)(size - p->off) : p->chunk;
    wt_status *st = push_raw_chunk(p, (uint32_t)p->b, p->off,
                                   p->bucket[p->b] + p->off, len);
    if (st != NULL) return st;
    p->off += len;
    p->sent += len;
  }
  return NULL;
}

/* Half-closes and returns the server's answer; frees the pusher. */
static wt_status *push_close(pusher *p, Wt__V1__PushWeightsResponse **resp) {
  ProtobufCMessage *r = NULL;
  wt_status *st = wt_rpc_client_stream_finish(
      p->s, &wt__v1__push_weights_response__descriptor, &r);
  if (resp != NULL)
    *resp = (Wt__V1__PushWeightsResponse *)r;
  else
    wt_pb_free(r);
  wt_rpc_client_stream_destroy(p->s);
  for (size_t b = 0; p->plan && b < p->plan->nbuckets; b++) free(p->bucket[b]);
  free(p->bucket);
  wt_pack_plan_free(p->plan);
  memset(p, 0, sizeof(*p));
  return st;
}

/* Cancels the stream midway (a trainer killed); frees the pusher. */
static void push_cut(pusher *p) {
  wt_rpc_client_stream_cancel(p->s);
  wt_status_free(push_close(p, NULL));
}

/* A whole PushWeights of `u` for `seed`. */
static wt_status *push_all(const upd *u, uint64_t round_id,
                           uint64_t packed_buffer, size_t chunk, uint64_t seed,
                           Wt__V1__PushWeightsResponse **resp) {
  pusher p;
  wt_status *st = push_open(&p, u, round_id, packed_buffer, chunk, seed);
  if (st == NULL) st = push_send(&p, UINT64_MAX);
  /* A write error means the server answered early: its status says why. */
  wt_status *fin = push_close(&p, resp);
  if (st != NULL && fin != NULL) {
    wt_status_free(st);
    return fin;
  }
  return st ? st : fin;
}

/* Waits until the server ended the push that a cut stream left behind:
 * then a new header in the same round is accepted. */
static bool wait_push_ended(const upd *u, int64_t ms) {
  int64_t end = now_ms() + ms;
  for (;;) {
    pusher p;
    wt_status *st = push_open(&p, u, 0, 0, 1 << 20, 1);
    wt_status *fin = push_close(&p, NULL);
    bool busy = false;
    const char *msg = wt_status_message(fin);
    if (fin != NULL && strstr(msg, "is still running") != NULL) busy = true;
    wt_status_free(st);
    wt_status_free(fin);
    if (!busy) return true;
    if (now_ms() > end) return false;
    sleep_ms(10);
  }
}

/* ===================================================================== */

/* Built-in worker engines: grpc, and ucx when built with UCX. */
#ifdef WT_WITH_UCX
#define BUILTIN_BACKENDS 2
#else
#define BUILTIN_BACKENDS 1
#endif

static void test_info_and_parameters(void) {
  start_server("tiny", 2, WT_STAGING_SHADOW, 0);
  Wt__V1__ServerInfo *info = server_info();
  CU_ASSERT_STRING_EQUAL(info->server_version, WT_SERVER_VERSION);
  CU_ASSERT_EQUAL_FATAL(info->n_backends, BUILTIN_BACKENDS);
  CU_ASSERT_STRING_EQUAL(info->backends[0], "grpc");
  CU_ASSERT_EQUAL_FATAL(info->n_workers, 2);
  CU_ASSERT_EQUAL(info->workers[1]->rank, 1);
  CU_ASSERT_STRING_EQUAL(info->workers[1]->device, "cpu");
  CU_ASSERT_STRING_EQUAL(info->workers[1]->state, "uninitialized");
  CU_ASSERT_STRING_EQUAL(info->workers[1]->backend, "");
  CU_ASSERT_PTR_NOT_NULL_FATAL(info->model);
  CU_ASSERT_STRING_EQUAL(info->model->name, "synthetic:tiny");
  CU_ASSERT_EQUAL(info->model->num_parameters, 7);
  CU_ASSERT_EQUAL(info->model->total_bytes, 6080);
  CU_ASSERT_STRING_EQUAL(info->staging, "shadow");
  CU_ASSERT(info->store_complete);
  CU_ASSERT_STRING_EQUAL(info->weight_version, "");
  CU_ASSERT_EQUAL(info->world_size, 2);
  CU_ASSERT(info->n_capabilities > 0);
  wt_pb_free(&info->base);
  assert_serving();
  assert_version("", 0);

  WT_ASSERT_OK(init_grpc(0));
  info = server_info();
  CU_ASSERT_STRING_EQUAL(info->workers[0]->state, "ready");
  CU_ASSERT_STRING_EQUAL(info->workers[0]->backend, "grpc");
  wt_pb_free(&info->base);

  /* Pages of 3 over 7 tensors, in model order. */
  Wt__V1__ListParametersRequest lr = WT__V1__LIST_PARAMETERS_REQUEST__INIT;
  lr.page_size = 3;
  size_t seen = 0, pages = 0;
  char token[32] = "";
  do {
    lr.page_token = token;
    ProtobufCMessage *resp = NULL;
    WT_ASSERT_OK(call("ListParameters", &lr.base,
                      &wt__v1__list_parameters_response__descriptor, &resp));
    Wt__V1__ListParametersResponse *r = (Wt__V1__ListParametersResponse *)resp;
    CU_ASSERT_EQUAL(r->total_count, 7);
    CU_ASSERT(r->n_parameters <= 3);
    for (size_t k = 0; k < r->n_parameters; k++, seen++) {
      const Wt__V1__ParameterInfo *p = r->parameters[k];
      CU_ASSERT_STRING_EQUAL(p->name, F.metas[seen].name);
      CU_ASSERT_STRING_EQUAL(p->dtype,
                             wt_dtype_torch_name(F.metas[seen].dtype));
      CU_ASSERT_EQUAL(p->n_shape, (size_t)F.metas[seen].ndim);
      CU_ASSERT_EQUAL(p->shape[0], F.metas[seen].shape[0]);
      CU_ASSERT_EQUAL(p->nbytes, F.metas[seen].nbytes);
    }
    snprintf(token, sizeof(token), "%s", r->next_page_token);
    wt_pb_free(resp);
    pages++;
  } while (token[0] != '\0' && pages < 10);
  CU_ASSERT_EQUAL(seen, 7);
  CU_ASSERT_EQUAL(pages, 3);

  /* A prefix, in one default page. */
  lr.page_size = 0;
  lr.page_token = "";
  lr.name_prefix = "model.layers.0.";
  ProtobufCMessage *resp = NULL;
  WT_ASSERT_OK(call("ListParameters", &lr.base,
                    &wt__v1__list_parameters_response__descriptor, &resp));
  Wt__V1__ListParametersResponse *r = (Wt__V1__ListParametersResponse *)resp;
  CU_ASSERT_EQUAL(r->n_parameters, 4);
  CU_ASSERT_EQUAL(r->total_count, 4);
  CU_ASSERT_STRING_EQUAL(r->next_page_token, "");
  CU_ASSERT_STRING_EQUAL(r->parameters[3]->name,
                         "model.layers.0.post_attention_layernorm.weight");
  wt_pb_free(resp);
  lr.page_token = "banana";
  WT_ASSERT_ERR(call("ListParameters", &lr.base,
                     &wt__v1__list_parameters_response__descriptor, NULL),
                WT_INVALID_ARGUMENT, "page_token 'banana' is not a token");
  stop_server();
}

static void test_out_of_order(void) {
  start_server("tiny", 1, WT_STAGING_SHADOW, 0);
  upd u;
  upd_all(&u);
  /* Every round call before init names the state. */
  WT_ASSERT_ERR(start_round(NULL), WT_FAILED_PRECONDITION,
                "StartWeightUpdate: no weight-transfer engine is initialized "
                "(state: uninitialized)");
  WT_ASSERT_ERR(finish_round("v1", 0), WT_FAILED_PRECONDITION,
                "(state: uninitialized)");
  WT_ASSERT_ERR(abort_round(0, NULL), WT_FAILED_PRECONDITION,
                "(state: uninitialized)");
  WT_ASSERT_ERR(push_all(&u, 0, 0, 1000, 1, NULL), WT_FAILED_PRECONDITION,
                "PushWeights: no weight-transfer engine is initialized "
                "(state: uninitialized)");
  Wt__V1__UpdateWeightsRequest ur = WT__V1__UPDATE_WEIGHTS_REQUEST__INIT;
  ur.update_info = &u.info;
  WT_ASSERT_ERR(call("UpdateWeights", &ur.base,
                     &wt__v1__update_weights_response__descriptor, NULL),
                WT_FAILED_PRECONDITION, "(state: uninitialized)");

  WT_ASSERT_OK(init_grpc(0));
  /* Update and finish before start. */
  WT_ASSERT_ERR(push_all(&u, 0, 0, 1000, 1, NULL), WT_FAILED_PRECONDITION,
                "PushWeights: no round is in progress (state: ready)");
  WT_ASSERT_ERR(call("UpdateWeights", &ur.base,
                     &wt__v1__update_weights_response__descriptor, NULL),
                WT_FAILED_PRECONDITION,
                "UpdateWeights: no round is in progress (state: ready)");
  WT_ASSERT_ERR(finish_round("v1", 0), WT_FAILED_PRECONDITION,
                "FinishWeightUpdate: no round is in progress (state: ready)");
  bool aborted = true;
  WT_ASSERT_OK(abort_round(0, &aborted));
  CU_ASSERT_FALSE(aborted);

  uint64_t id = 0;
  WT_ASSERT_OK(start_round(&id));
  CU_ASSERT_EQUAL(id, 1);
  WT_ASSERT_ERR(start_round(NULL), WT_FAILED_PRECONDITION,
                "StartWeightUpdate: round 1 is in progress (state: updating)");
  /* A stale round id. */
  WT_ASSERT_ERR(finish_round("v1", 7), WT_FAILED_PRECONDITION,
                "round_id 7 is not the current round 1 (state: updating)");
  WT_ASSERT_ERR(push_all(&u, 3, 0, 1000, 1, NULL), WT_FAILED_PRECONDITION,
                "round_id 3 is not the current round 1");
  /* The grpc backend's data moves through PushWeights only. */
  WT_ASSERT_ERR(call("UpdateWeights", &ur.base,
                     &wt__v1__update_weights_response__descriptor, NULL),
                WT_FAILED_PRECONDITION,
                "backend 'grpc' receives weights through PushWeights");
  WT_ASSERT_OK(abort_round(1, &aborted));
  CU_ASSERT_TRUE(aborted);
  WT_ASSERT_ERR(finish_round("v1", 1), WT_FAILED_PRECONDITION,
                "round 1 was aborted (AbortWeightUpdate: test)");
  WT_ASSERT_OK(abort_round(0, &aborted));
  CU_ASSERT_FALSE(aborted);
  WT_ASSERT_OK(start_round(&id));
  CU_ASSERT_EQUAL(id, 2);

  /* A new init replaces the engine and drops the open round. */
  WT_ASSERT_OK(init_grpc(4096));
  WT_ASSERT_ERR(finish_round("v1", 2), WT_FAILED_PRECONDITION,
                "round 2 was aborted (replaced by a new "
                "InitWeightTransferEngine)");
  WT_ASSERT_OK(start_round(&id));
  CU_ASSERT_EQUAL(id, 3);
  assert_version("", 0);
  assert_model_seed(0);
  stop_server();
}

static wt_status *init_info_call(Wt__V1__WeightTransferInitInfo *info) {
  Wt__V1__InitWeightTransferEngineRequest req =
      WT__V1__INIT_WEIGHT_TRANSFER_ENGINE_REQUEST__INIT;
  req.init_info = info;
  return call("InitWeightTransferEngine", &req.base,
              &wt__v1__init_weight_transfer_engine_response__descriptor, NULL);
}

static void test_init_errors(void) {
  start_server("tiny", 1, WT_STAGING_SHADOW, 0);
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
  Wt__V1__ServerInfo *si = server_info();
  CU_ASSERT_STRING_EQUAL(si->workers[0]->state, "uninitialized");
  wt_pb_free(&si->base);
  /* A grpc init with no settings at all takes the defaults. */
  info.backend_init_case =
      WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT__NOT_SET;
  WT_ASSERT_OK(init_info_call(&info));
  WT_ASSERT_OK(start_round(NULL));
  stop_server();
}

static void test_validation(void) {
  start_server("tiny", 1, WT_STAGING_SHADOW, 0);
  WT_ASSERT_OK(init_grpc(1000));
  uint64_t id = 0;
  WT_ASSERT_OK(start_round(&id));
  upd u;

  upd_all(&u);
  u.names[2] = "model.layers.7.mlp.up_proj.weight";
  WT_ASSERT_ERR(push_all(&u, id, 0, 1000, 1, NULL), WT_INVALID_ARGUMENT,
                "parameter 'model.layers.7.mlp.up_proj.weight' "
                "(update_info.names[2]) is not in the model");

  upd_all(&u);
  u.dtypes[5] = "bfloat16";
  WT_ASSERT_ERR(push_all(&u, id, 0, 1000, 1, NULL), WT_INVALID_ARGUMENT,
                "parameter 'model.norm.weight': dtype bfloat16 does not match "
                "the model's float32");
  upd_all(&u);
  u.dtypes[5] = "float13";
  WT_ASSERT_ERR(push_all(&u, id, 0, 1000, 1, NULL), WT_INVALID_ARGUMENT,
                "parameter 'model.norm.weight'");

  upd_all(&u);
  int64_t four[1] = {4};
  u.shapes[5].dims = four;
  WT_ASSERT_ERR(push_all(&u, id, 0, 1000, 1, NULL), WT_INVALID_ARGUMENT,
                "parameter 'model.norm.weight': shape [4] does not match the "
                "model's [16]");
  upd_all(&u);
  int64_t transposed[2] = {40, 16};
  u.shapes[3].dims = transposed;
  WT_ASSERT_ERR(push_all(&u, id, 0, 1000, 1, NULL), WT_INVALID_ARGUMENT,
                "parameter 'model.layers.0.mlp.down_proj.weight': shape [40, "
                "16] does not match the model's [16, 40]");

  upd_all(&u);
  u.info.n_dtype_names = 6;
  WT_ASSERT_ERR(push_all(&u, id, 0, 1000, 1, NULL), WT_INVALID_ARGUMENT,
                "update_info has 7 names, 6 dtype_names and 7 shapes; the "
                "three lists must have equal lengths");

  size_t dup[3] = {0, 5, 0};
  upd_init(&u, dup, 3);
  WT_ASSERT_ERR(push_all(&u, id, 0, 1000, 1, NULL), WT_INVALID_ARGUMENT,
                "parameter 'model.embed_tokens.weight' appears twice in "
                "update_info.names (at 0 and 2)");

  upd_all(&u);
  uint64_t sizes[7] = {2048, 64, 512, 1280, 64, 64, 2000};
  u.info.n_packed_tensor_sizes = 7;
  u.info.packed_tensor_sizes = sizes;
  WT_ASSERT_ERR(push_all(&u, id, 0, 1000, 1, NULL), WT_INVALID_ARGUMENT,
                "parameter 'lm_head.weight': "
                "update_info.packed_tensor_sizes[6] is 2000 bytes; the "
                "model's tensor has 2048");

  upd_all(&u);
  u.info.packed = false;
  WT_ASSERT_ERR(push_all(&u, id, 0, 1000, 1, NULL), WT_INVALID_ARGUMENT,
                "update_info.packed is false");

  /* A header without update info. */
  pusher p;
  memset(&u, 0, sizeof(u));
  WT_ASSERT_OK(
      wt_rpc_client_stream_open(F.ch, SVC "PushWeights", DEADLINE_MS, &p.s));
  Wt__V1__PushWeightsHeader h = WT__V1__PUSH_WEIGHTS_HEADER__INIT;
  Wt__V1__PushWeightsChunk msg = WT__V1__PUSH_WEIGHTS_CHUNK__INIT;
  msg.payload_case = WT__V1__PUSH_WEIGHTS_CHUNK__PAYLOAD_HEADER;
  msg.header = &h;
  wt_status_free(wt_rpc_client_stream_write(p.s, &msg.base));
  p.plan = NULL;
  p.bucket = NULL;
  WT_ASSERT_ERR(push_close(&p, NULL), WT_INVALID_ARGUMENT,
                "update_info is missing");

  /* A valid header and no data: the bytes are missing. */
  upd_all(&u);
  pusher q;
  WT_ASSERT_OK(push_open(&q, &u, id, 2048, 1000, 1));
  WT_ASSERT_ERR(push_close(&q, NULL), WT_DATA_LOSS,
                "stream ended after 0 of 6080 bytes");

  /* Chunks out of order, out of bounds, too big, before the header. */
  unsigned char junk[3000] = {0};
  WT_ASSERT_OK(push_open(&q, &u, id, 2048, 1000, 1));
  wt_status_free(push_raw_chunk(&q, 0, 10, junk, 100));
  WT_ASSERT_ERR(push_close(&q, NULL), WT_INVALID_ARGUMENT,
                "bucket 0 offset 10: out of order; expected bucket 0 offset "
                "0");
  WT_ASSERT_OK(push_open(&q, &u, id, 2048, 1000, 1));
  wt_status_free(push_raw_chunk(&q, 9, 0, junk, 100));
  WT_ASSERT_ERR(push_close(&q, NULL), WT_INVALID_ARGUMENT,
                "bucket 9 offset 0: the plan has 2 buckets (0..1)");
  WT_ASSERT_OK(push_open(&q, &u, id, 2048, 1000, 1));
  wt_status_free(push_raw_chunk(&q, 0, 0, junk, 1001));
  WT_ASSERT_ERR(push_close(&q, NULL), WT_INVALID_ARGUMENT,
                "bucket 0 offset 0: chunk of 1001 bytes exceeds the chunk "
                "size of 1000 bytes");
  WT_ASSERT_OK(push_open(&q, &u, id, 2048, 1000, 1));
  wt_status_free(push_raw_chunk(&q, 0, 0, junk, 1000));
  wt_status_free(push_raw_chunk(&q, 0, 1000, junk, 1000));
  wt_status_free(push_raw_chunk(&q, 0, 2000, junk, 1000));
  WT_ASSERT_ERR(push_close(&q, NULL), WT_INVALID_ARGUMENT,
                "bucket 0 offset 2000: 1000 bytes run past the bucket's end "
                "(2112 bytes)");
  WT_ASSERT_OK(
      wt_rpc_client_stream_open(F.ch, SVC "PushWeights", DEADLINE_MS, &q.s));
  q.plan = NULL;
  wt_status_free(push_raw_chunk(&q, 0, 0, junk, 10));
  WT_ASSERT_ERR(push_close(&q, NULL), WT_INVALID_ARGUMENT,
                "PushWeights message 1 is a chunk (bucket 0 offset 0); the "
                "first message must be a header");

  /* Finish needs a version; the round stays open for a good one. */
  WT_ASSERT_ERR(finish_round("", id), WT_INVALID_ARGUMENT,
                "weight_version is empty");
  /* Partly written tensors (the junk above) cannot commit ... */
  WT_ASSERT_ERR(finish_round("v-bad", id), WT_FAILED_PRECONDITION,
                "parameter 'model.embed_tokens.weight' was only partly "
                "received");
  /* ... and none of the junk became visible. */
  assert_version("", 0);
  assert_model_seed(0);
  bool aborted = false;
  WT_ASSERT_OK(abort_round(id, &aborted));
  CU_ASSERT(aborted);
  assert_model_seed(0);
  assert_serving();
  stop_server();
}

static void test_push_round(void) {
  start_server("tiny", 1, WT_STAGING_SHADOW, 0);
  WT_ASSERT_OK(init_grpc(1000));
  uint64_t id = 0;
  WT_ASSERT_OK(start_round(&id));
  upd u;
  upd_all(&u);
  u.dtypes[1] = "F32"; /* the safetensors spelling is accepted too */
  Wt__V1__PushWeightsResponse *resp = NULL;
  /* Buckets of 2048 bytes and chunks of 1000: tensors straddle both. */
  WT_ASSERT_OK(push_all(&u, id, 2048, 1000, 1, &resp));
  CU_ASSERT_PTR_NOT_NULL_FATAL(resp);
  CU_ASSERT_EQUAL(resp->tensors_received, 7);
  CU_ASSERT_EQUAL(resp->bytes_received, 6080);
  wt_pb_free(&resp->base);
  /* Not visible before finish. */
  assert_version("", 0);
  assert_model_seed(0);
  WT_ASSERT_OK(finish_round("step-1", id));
  assert_version("step-1", 1);
  assert_model_seed(1);
  uint64_t seeds[7] = {1, 1, 1, 1, 1, 1, 1};
  assert_model(seeds, WT_HASH_XXH3_64);
  Wt__V1__ServerInfo *info = server_info();
  CU_ASSERT_STRING_EQUAL(info->weight_version, "step-1");
  CU_ASSERT_STRING_EQUAL(info->workers[0]->state, "ready");
  wt_pb_free(&info->base);

  /* Several pushes in one round (one per layer group); a bucket size of 0
   * means the engine's default. */
  WT_ASSERT_OK(start_round(&id));
  CU_ASSERT_EQUAL(id, 2);
  size_t first[3] = {0, 1, 2}, rest[4] = {3, 4, 5, 6};
  upd_init(&u, first, 3);
  WT_ASSERT_OK(push_all(&u, 0, 0, 700, 2, NULL));
  upd_init(&u, rest, 4);
  WT_ASSERT_OK(push_all(&u, id, 100, 333, 2, NULL));
  WT_ASSERT_OK(finish_round("step-2", 0));
  assert_version("step-2", 2);
  assert_model_seed(2);

  /* A round that pushes a subset keeps the rest. */
  WT_ASSERT_OK(start_round(&id));
  size_t one[1] = {5};
  upd_init(&u, one, 1);
  WT_ASSERT_OK(push_all(&u, id, 0, 1 << 20, 3, NULL));
  WT_ASSERT_OK(finish_round("step-3", id));
  uint64_t mixed[7] = {2, 2, 2, 2, 2, 3, 2};
  assert_model(mixed, WT_HASH_SHA256);

  /* Chunks in an unusual (valid) encoding take the general parser. */
  WT_ASSERT_OK(start_round(&id));
  upd_all(&u);
  pusher p;
  WT_ASSERT_OK(push_open(&p, &u, id, 4096, 1000, 4));
  for (size_t b = 0; b < p.plan->nbuckets; b++)
    for (uint64_t off = 0; off < p.plan->buckets[b].nbytes; off += 1000) {
      uint64_t left = p.plan->buckets[b].nbytes - off;
      WT_ASSERT_OK(push_odd_chunk(&p, (uint32_t)b, off, p.bucket[b] + off,
                                  left < 1000 ? (size_t)left : 1000));
    }
  WT_ASSERT_OK(push_close(&p, NULL));
  WT_ASSERT_OK(finish_round("step-4", id));
  assert_model_seed(4);
  stop_server();
}

static void test_many_workers(void) {
  start_server("small", 3, WT_STAGING_SHADOW, 0);
  WT_ASSERT_OK(init_grpc(64 << 10));
  Wt__V1__ServerInfo *info = server_info();
  CU_ASSERT_EQUAL(info->world_size, 3);
  CU_ASSERT_EQUAL_FATAL(info->n_workers, 3);
  for (size_t w = 0; w < 3; w++) {
    CU_ASSERT_EQUAL(info->workers[w]->rank, w);
    CU_ASSERT_STRING_EQUAL(info->workers[w]->state, "ready");
  }
  wt_pb_free(&info->base);
  assert_serving();
  uint64_t id = 0;
  WT_ASSERT_OK(start_round(&id));
  upd u;
  upd_all(&u);
  WT_ASSERT_OK(push_all(&u, id, 1 << 20, 64 << 10, 1, NULL));
  assert_model_seed(0);
  WT_ASSERT_OK(finish_round("w3", id));
  assert_version("w3", 1);
  assert_model_seed(1); /* every worker, over the wire and in memory */
  stop_server();
}

/* A trainer killed midway: the round stays open, nothing partial commits,
 * the previous version's bytes stay, and the server keeps serving. */
static void test_stream_cut(void) {
  start_server("small", 2, WT_STAGING_SHADOW, 0);
  WT_ASSERT_OK(init_grpc(64 << 10));
  uint64_t id = 0;
  WT_ASSERT_OK(start_round(&id));
  upd u;
  upd_all(&u);
  WT_ASSERT_OK(push_all(&u, id, 1 << 20, 64 << 10, 1, NULL));
  WT_ASSERT_OK(finish_round("v1", id));

  WT_ASSERT_OK(start_round(&id));
  pusher p;
  WT_ASSERT_OK(push_open(&p, &u, id, 1 << 20, 64 << 10, 2));
  WT_ASSERT_OK(push_send(&p, 1200 << 10));
  push_cut(&p);
  CU_ASSERT(wait_push_ended(&u, 5000));
  assert_serving();
  assert_version("v1", 1);
  assert_model_seed(1);
  /* The same round takes a full push again and commits it. */
  WT_ASSERT_OK(push_all(&u, id, 1 << 20, 64 << 10, 2, NULL));
  WT_ASSERT_OK(finish_round("v2", id));
  assert_model_seed(2);

  /* Cut again; this time the trainer gives up: abort. */
  WT_ASSERT_OK(start_round(&id));
  WT_ASSERT_OK(push_open(&p, &u, id, 1 << 20, 64 << 10, 3));
  WT_ASSERT_OK(push_send(&p, 2000 << 10));
  push_cut(&p);
  CU_ASSERT(wait_push_ended(&u, 5000));
  bool aborted = false;
  WT_ASSERT_OK(abort_round(id, &aborted));
  CU_ASSERT(aborted);
  assert_version("v2", 2);
  assert_model_seed(2);
  Wt__V1__ServerInfo *info = server_info();
  CU_ASSERT(info->store_complete);
  wt_pb_free(&info->base);
  stop_server();
}

/* Whether the first `len` bytes of tensor i on every worker became the
 * fill for `seed` within `ms` (inplace staging writes live bytes). */
static bool wait_bytes_landed(size_t i, size_t len, uint64_t seed, int64_t ms) {
  unsigned char *want = malloc(len), *got = malloc(len);
  wt_synthetic_fill(&F.metas[i], seed, 0, want, len);
  int64_t end = now_ms() + ms;
  bool ok = false;
  while (!ok && now_ms() < end) {
    ok = true;
    for (uint32_t w = 0; w < F.workers && ok; w++) {
      wt_status *st =
          wt_param_store_read(wt_server_store(F.srv, w), i, 0, got, len);
      ok = st == NULL && memcmp(want, got, len) == 0;
      wt_status_free(st);
    }
    if (!ok) sleep_ms(5);
  }
  free(want);
  free(got);
  return ok;
}

/* Inplace staging: a failed round leaves the store incomplete, and
 * GetServerInfo says so until a round rewrote it. */
static void test_inplace_incomplete(void) {
  start_server("tiny", 2, WT_STAGING_INPLACE, 0);
  WT_ASSERT_OK(init_grpc(1000));
  uint64_t id = 0;
  WT_ASSERT_OK(start_round(&id));
  upd u;
  upd_all(&u);
  pusher p;
  WT_ASSERT_OK(push_open(&p, &u, id, 2048, 1000, 1));
  WT_ASSERT_OK(push_send(&p, 1000));
  /* In place, the bytes show as they land: cut once they did. */
  CU_ASSERT(wait_bytes_landed(0, 1000, 1, 5000));
  push_cut(&p);
  CU_ASSERT(wait_push_ended(&u, 5000));
  WT_ASSERT_OK(abort_round(id, NULL));
  Wt__V1__ServerInfo *info = server_info();
  CU_ASSERT_STRING_EQUAL(info->staging, "inplace");
  CU_ASSERT_FALSE(info->store_complete);
  CU_ASSERT_FALSE(info->workers[0]->store_complete);
  CU_ASSERT_FALSE(info->workers[1]->store_complete);
  wt_pb_free(&info->base);
  WT_ASSERT_OK(start_round(&id));
  WT_ASSERT_OK(push_all(&u, id, 2048, 1000, 4, NULL));
  WT_ASSERT_OK(finish_round("repaired", id));
  info = server_info();
  CU_ASSERT_TRUE(info->store_complete);
  wt_pb_free(&info->base);
  assert_model_seed(4);
  stop_server();
}

/* While a PushWeights stream is open midway, the server still answers
 * GetWeightVersion, GetServerInfo and ChecksumWeights (of the committed
 * version). */
static void test_calls_during_push(void) {
  start_server("small", 1, WT_STAGING_SHADOW, 0);
  WT_ASSERT_OK(init_grpc(64 << 10));
  uint64_t id = 0;
  WT_ASSERT_OK(start_round(&id));
  upd u;
  upd_all(&u);
  pusher p;
  WT_ASSERT_OK(push_open(&p, &u, id, 1 << 20, 64 << 10, 1));
  WT_ASSERT_OK(push_send(&p, 1 << 20));
  int64_t t0 = now_ms();
  assert_version("", 0);
  Wt__V1__ServerInfo *info = server_info();
  CU_ASSERT_STRING_EQUAL(info->workers[0]->state, "updating");
  wt_pb_free(&info->base);
  assert_model_seed(0);
  CU_ASSERT(now_ms() - t0 < 5000);
  /* Finishing now would cut the push short: refused. */
  WT_ASSERT_ERR(finish_round("early", id), WT_FAILED_PRECONDITION,
                "PushWeights is still running in round 1");
  WT_ASSERT_OK(push_send(&p, UINT64_MAX));
  WT_ASSERT_OK(push_close(&p, NULL));
  WT_ASSERT_OK(finish_round("late", id));
  assert_model_seed(1);
  stop_server();
}

static void test_round_timeout(void) {
  start_server("tiny", 1, WT_STAGING_SHADOW, 300);
  WT_ASSERT_OK(init_grpc(1000));
  uint64_t id = 0;
  WT_ASSERT_OK(start_round(&id));
  sleep_ms(800);
  WT_ASSERT_ERR(finish_round("v1", id), WT_FAILED_PRECONDITION,
                "round 1 was aborted (idle for");
  WT_ASSERT_OK(start_round(&id));
  CU_ASSERT_EQUAL(id, 2);
  /* A push that stalls between chunks is idle too. */
  upd u;
  upd_all(&u);
  pusher p;
  WT_ASSERT_OK(push_open(&p, &u, id, 2048, 1000, 1));
  WT_ASSERT_OK(push_send(&p, 1000));
  sleep_ms(800);
  wt_status_free(push_send(&p, 1000));
  WT_ASSERT_ERR(push_close(&p, NULL), WT_ABORTED,
                "round 2 was aborted: idle for");
  WT_ASSERT_OK(start_round(&id));
  CU_ASSERT_EQUAL(id, 3);
  /* A round that keeps moving is not idle. */
  WT_ASSERT_OK(push_open(&p, &u, id, 2048, 1000, 1));
  for (int i = 0; i < 7; i++) {
    sleep_ms(100);
    WT_ASSERT_OK(push_send(&p, 1000));
  }
  WT_ASSERT_OK(push_close(&p, NULL));
  WT_ASSERT_OK(finish_round("v3", id));
  assert_model_seed(1);
  stop_server();
}

static grpc_byte_buffer *raw(const void *data, size_t len) {
  grpc_slice slice = grpc_slice_from_copied_buffer(data, len);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
  grpc_slice_unref(slice);
  return bb;
}

static void test_garbage(void) {
  start_server("tiny", 1, WT_STAGING_SHADOW, 0);
  static const char *const methods[] = {
      "GetServerInfo",      "GetWorldSize",
      "ListParameters",     "InitWeightTransferEngine",
      "StartWeightUpdate",  "UpdateWeights",
      "PushWeights",        "FinishWeightUpdate",
      "AbortWeightUpdate",  "GetWeightVersion",
      "WatchWeightVersion", "ChecksumWeights",
  };
  /* Field 1, length 5, but only 2 bytes follow. */
  static const char garbage[] =
      "\x0a\x05"
      "ab";
  for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
    char path[128];
    snprintf(path, sizeof(path), SVC "%s", methods[i]);
    wt_rpc_client_stream *s = NULL;
    WT_ASSERT_OK(wt_rpc_client_stream_open(F.ch, path, DEADLINE_MS, &s));
    wt_status *st = wt_rpc_client_stream_write_raw(s, raw(garbage, 4));
    if (st != NULL) CU_ASSERT_EQUAL(wt_status_code(st), WT_INVALID_ARGUMENT);
    wt_status_free(st);
    st = wt_rpc_client_stream_finish(s, NULL, NULL);
    if (wt_status_code(st) != WT_INVALID_ARGUMENT ||
        strstr(wt_status_message(st), "malformed") == NULL)
      fprintf(stderr, "\n  %s: %s: %s\n", methods[i],
              wt_code_name(wt_status_code(st)), wt_status_message(st));
    CU_ASSERT_EQUAL(wt_status_code(st), WT_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(wt_status_message(st), "malformed"));
    wt_status_free(st);
    wt_rpc_client_stream_destroy(s);
    assert_serving();
  }
  /* And after the garbage, a real round still works. */
  WT_ASSERT_OK(init_grpc(1000));
  uint64_t id = 0;
  WT_ASSERT_OK(start_round(&id));
  upd u;
  upd_all(&u);
  WT_ASSERT_OK(push_all(&u, id, 0, 1000, 1, NULL));
  WT_ASSERT_OK(finish_round("after-garbage", id));
  assert_model_seed(1);
  stop_server();
}

static wt_rpc_server_stream *watch_open(void) {
  Wt__V1__WatchWeightVersionRequest req =
      WT__V1__WATCH_WEIGHT_VERSION_REQUEST__INIT;
  wt_rpc_server_stream *s = NULL;
  WT_ASSERT_OK(wt_rpc_server_stream_open(F.ch, SVC "WatchWeightVersion",
                                         &req.base, DEADLINE_MS, &s));
  return s;
}

static void watch_expect(wt_rpc_server_stream *s, const char *version,
                         uint64_t seq) {
  ProtobufCMessage *m = NULL;
  bool done = true;
  WT_ASSERT_OK(wt_rpc_server_stream_read(s, &wt__v1__weight_version__descriptor,
                                         &m, &done));
  CU_ASSERT_FALSE_FATAL(done);
  Wt__V1__WeightVersion *v = (Wt__V1__WeightVersion *)m;
  CU_ASSERT_STRING_EQUAL(v->version, version);
  CU_ASSERT_EQUAL(v->sequence, seq);
  CU_ASSERT(v->committed_unix_ms > 1600000000000LL);
  wt_pb_free(m);
}

static void commit_round(const char *version, uint64_t seed) {
  uint64_t id = 0;
  WT_ASSERT_OK(start_round(&id));
  upd u;
  upd_all(&u);
  WT_ASSERT_OK(push_all(&u, id, 0, 1 << 20, seed, NULL));
  WT_ASSERT_OK(finish_round(version, id));
}

static void test_watch(void) {
  start_server("tiny", 1, WT_STAGING_SHADOW, 0);
  WT_ASSERT_OK(init_grpc(0));
  wt_rpc_server_stream *early = watch_open();
  commit_round("w1", 1);
  watch_expect(early, "w1", 1);
  /* An aborted round commits nothing, so it sends nothing. */
  uint64_t id = 0;
  WT_ASSERT_OK(start_round(&id));
  WT_ASSERT_OK(abort_round(id, NULL));
  commit_round("w2", 2);
  watch_expect(early, "w2", 2);
  /* A watcher that comes later gets the current version first. */
  wt_rpc_server_stream *late = watch_open();
  watch_expect(late, "w2", 2);
  commit_round("w3", 3);
  watch_expect(early, "w3", 3);
  watch_expect(late, "w3", 3);
  wt_rpc_server_stream_destroy(late);
  /* Stopping the server ends the stream cleanly. */
  wt_server_stop(F.srv);
  F.srv = NULL;
  ProtobufCMessage *m = NULL;
  bool done = false;
  WT_ASSERT_OK(wt_rpc_server_stream_read(
      early, &wt__v1__weight_version__descriptor, &m, &done));
  CU_ASSERT_TRUE(done);
  CU_ASSERT_PTR_NULL(m);
  wt_rpc_server_stream_destroy(early);
  stop_server();
}

static void test_checksums(void) {
  start_server("tiny", 2, WT_STAGING_SHADOW, 0);
  Wt__V1__ChecksumWeightsRequest req = WT__V1__CHECKSUM_WEIGHTS_REQUEST__INIT;
  char *names[2] = {"lm_head.weight", "model.norm.weight"};
  req.n_names = 2;
  req.names = names;
  ProtobufCMessage *resp = NULL;
  WT_ASSERT_OK(call("ChecksumWeights", &req.base,
                    &wt__v1__checksum_weights_response__descriptor, &resp));
  Wt__V1__ChecksumWeightsResponse *r = (Wt__V1__ChecksumWeightsResponse *)resp;
  CU_ASSERT_EQUAL(r->algorithm,
                  WT__V1__CHECKSUM_ALGORITHM__CHECKSUM_ALGORITHM_SHA256);
  CU_ASSERT_EQUAL_FATAL(r->n_checksums, 2); /* worker 0 only */
  char want[WT_DIGEST_HEX_MAX];
  expected_digest(6, 0, WT_HASH_SHA256, want);
  CU_ASSERT_STRING_EQUAL(r->checksums[0]->name, "lm_head.weight");
  CU_ASSERT_STRING_EQUAL(r->checksums[0]->digest, want);
  CU_ASSERT_EQUAL(strlen(r->checksums[0]->digest), 64);
  CU_ASSERT_STRING_EQUAL(r->checksums[1]->name, "model.norm.weight");
  CU_ASSERT_EQUAL(r->checksums[1]->worker, 0);
  wt_pb_free(resp);

  req.algorithm = WT__V1__CHECKSUM_ALGORITHM__CHECKSUM_ALGORITHM_XXH3_64;
  req.all_workers = true;
  WT_ASSERT_OK(call("ChecksumWeights", &req.base,
                    &wt__v1__checksum_weights_response__descriptor, &resp));
  r = (Wt__V1__ChecksumWeightsResponse *)resp;
  CU_ASSERT_EQUAL_FATAL(r->n_checksums, 4);
  expected_digest(5, 0, WT_HASH_XXH3_64, want);
  CU_ASSERT_STRING_EQUAL(r->checksums[3]->name, "model.norm.weight");
  CU_ASSERT_EQUAL(r->checksums[3]->worker, 1);
  CU_ASSERT_STRING_EQUAL(r->checksums[3]->digest, want);
  CU_ASSERT_EQUAL(strlen(want), 16);
  wt_pb_free(resp);

  char *bad[2] = {"lm_head.weight", "model.layers.0.mlp.up_proj.weight"};
  req.names = bad;
  WT_ASSERT_ERR(call("ChecksumWeights", &req.base,
                     &wt__v1__checksum_weights_response__descriptor, NULL),
                WT_NOT_FOUND,
                "parameter 'model.layers.0.mlp.up_proj.weight' is not in the "
                "model");
  req.names = names;
  req.algorithm = (Wt__V1__ChecksumAlgorithm)7;
  WT_ASSERT_ERR(call("ChecksumWeights", &req.base,
                     &wt__v1__checksum_weights_response__descriptor, NULL),
                WT_INVALID_ARGUMENT, "algorithm 7");
  stop_server();
}

/* Stopping a server in the middle of a round (a push stream open) aborts
 * the round, ends the stream and frees everything. */
static void test_stop_during_push(void) {
  start_server("small", 2, WT_STAGING_SHADOW, 0);
  WT_ASSERT_OK(init_grpc(64 << 10));
  uint64_t id = 0;
  WT_ASSERT_OK(start_round(&id));
  upd u;
  upd_all(&u);
  pusher p;
  WT_ASSERT_OK(push_open(&p, &u, id, 1 << 20, 64 << 10, 1));
  WT_ASSERT_OK(push_send(&p, 512 << 10));
  wt_rpc_server_stream *w = watch_open();
  int64_t t0 = now_ms();
  wt_server_stop(F.srv);
  F.srv = NULL;
  CU_ASSERT(now_ms() - t0 < 3000);
  wt_status *st = push_send(&p, UINT64_MAX);
  wt_status_free(st);
  st = push_close(&p, NULL);
  CU_ASSERT_PTR_NOT_NULL(st);
  wt_status_free(st);
  wt_rpc_server_stream_destroy(w);
  stop_server();
}

/* A server on a safetensors checkpoint serves its tensors and bytes. */
static void test_checkpoint_model(void) {
  char *dir = wt_test_tmpdir();
  CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
  char path[512];
  snprintf(path, sizeof(path), "%s/ckpt.safetensors", dir);
  float w[6] = {1, 2, 3, 4, 5, 6};
  uint16_t b[3] = {0x3f80, 0x4000, 0x4040};
  int64_t s23[2] = {2, 3}, s3[1] = {3};
  wt_st_write_tensor t[2] = {
      {"a.weight", WT_DTYPE_FLOAT32, 2, s23, w},
      {"b.bias", WT_DTYPE_BFLOAT16, 1, s3, b},
  };
  WT_ASSERT_OK(wt_safetensors_write(path, t, 2, NULL));
  wt_server_options o = {.listen = "127.0.0.1:0", .model = path};
  wt_server *srv = NULL;
  WT_ASSERT_OK(wt_server_start(&o, &srv));
  memset(&F, 0, sizeof(F));
  F.srv = srv;
  F.workers = 1;
  char target[64];
  snprintf(target, sizeof(target), "127.0.0.1:%d", wt_server_port(srv));
  WT_ASSERT_OK(wt_rpc_channel_new(target, NULL, &F.ch));
  Wt__V1__ServerInfo *info = server_info();
  CU_ASSERT_STRING_EQUAL(info->model->name, path);
  CU_ASSERT_EQUAL(info->model->num_parameters, 2);
  CU_ASSERT_EQUAL(info->model->total_bytes, 30);
  wt_pb_free(&info->base);
  char want[WT_DIGEST_HEX_MAX];
  WT_ASSERT_OK(wt_digest_hex(WT_HASH_SHA256, b, sizeof(b), want));
  Wt__V1__ChecksumWeightsRequest req = WT__V1__CHECKSUM_WEIGHTS_REQUEST__INIT;
  char *names[1] = {"b.bias"};
  req.n_names = 1;
  req.names = names;
  ProtobufCMessage *resp = NULL;
  WT_ASSERT_OK(call("ChecksumWeights", &req.base,
                    &wt__v1__checksum_weights_response__descriptor, &resp));
  Wt__V1__ChecksumWeightsResponse *r = (Wt__V1__ChecksumWeightsResponse *)resp;
  CU_ASSERT_EQUAL_FATAL(r->n_checksums, 1);
  CU_ASSERT_STRING_EQUAL(r->checksums[0]->digest, want);
  wt_pb_free(resp);
  stop_server();
  /* A missing file is an error naming it. */
  snprintf(path, sizeof(path), "%s/missing.safetensors", dir);
  srv = NULL;
  WT_ASSERT_ERR(wt_server_start(&o, &srv), WT_NOT_FOUND, "missing.safetensors");
  CU_ASSERT_PTR_NULL(srv);
  wt_test_rmtree(dir);
  free(dir);
}

static void test_start_errors(void) {
  wt_server *srv = NULL;
  wt_server_options o = {.listen = "nonsense", .model = "synthetic:tiny"};
  WT_ASSERT_ERR(wt_server_start(&o, &srv), WT_INVALID_ARGUMENT,
                "listen address 'nonsense' is not HOST:PORT");
  o.listen = "127.0.0.1:0";
  o.workers = 5000;
  WT_ASSERT_ERR(wt_server_start(&o, &srv), WT_INVALID_ARGUMENT,
                "workers is 5000; at most 1024");
  o.workers = 0;
  o.model = "synthetic:huge";
  WT_ASSERT_ERR(wt_server_start(&o, &srv), WT_NOT_FOUND,
                "model 'synthetic:huge': synthetic layout 'huge' does not "
                "exist");
  /* A port in use. */
  o.model = "synthetic:tiny";
  wt_server *first = NULL;
  WT_ASSERT_OK(wt_server_start(&o, &first));
  char listen[64];
  snprintf(listen, sizeof(listen), "127.0.0.1:%d", wt_server_port(first));
  o.listen = listen;
  const char *busy = listen;
  WT_ASSERT_ERR(wt_server_start(&o, &srv), WT_UNAVAILABLE, busy);
  CU_ASSERT_PTR_NULL(srv);
  wt_server_stop(first);
}

/* --- a backend whose data moves outside the control channel -------------- */

/* The "test" worker engine: receive marks its tensors as being written,
 * blocks until the test releases it (as a trainer's transfer would run),
 * cancel or its deadline, then fills them for the init option "seed". It
 * shows that UpdateWeights drives receive on every worker at once, that
 * abort cancels a blocked receive, and that deadlines end it. */
static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool release;
  int blocked;  /* receives waiting now */
  int receives; /* receives entered */
} T = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0, 0};

struct wt_engine {
  wt_worker_ctx ctx;
  uint64_t seed;
  bool cancelled; /* under T.mu */
};

static wt_status *te_create(const Wt__V1__WeightTransferInitInfo *init,
                            const wt_worker_ctx *ctx, wt_engine **out) {
  wt_engine *e = calloc(1, sizeof(*e));
  e->ctx = *ctx;
  e->seed = 1;
  for (size_t i = 0; i < init->n_options; i++)
    if (strcmp(init->options[i]->key, "seed") == 0)
      e->seed = strtoull(init->options[i]->value, NULL, 10);
  *out = e;
  return NULL;
}

static wt_status *te_init_transfer(wt_engine *e,
                                   const Wt__V1__WeightTransferInitInfo *init,
                                   wt_engine_endpoint *ep) {
  snprintf(ep->address, sizeof(ep->address), "test-worker-%u", e->ctx.rank);
  ep->port = 1000 + e->ctx.rank;
  return NULL;
}

static wt_status *te_start(wt_engine *e, uint64_t round_id) {
  pthread_mutex_lock(&T.mu);
  e->cancelled = false;
  pthread_mutex_unlock(&T.mu);
  return NULL;
}

static wt_status *te_receive(wt_engine *e, const wt_update *u,
                             wt_receive_stats *stats) {
  unsigned char **dst = calloc(u->n + 1, sizeof(*dst));
  for (size_t k = 0; k < u->n; k++)
    dst[k] = wt_param_store_stage(e->ctx.store, u->index[k]);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += e->ctx.timeout_ms / 1000;
  ts.tv_nsec += (long)(e->ctx.timeout_ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&T.mu);
  T.blocked++;
  T.receives++;
  pthread_cond_broadcast(&T.cv);
  int rc = 0;
  while (!T.release && !e->cancelled && rc != ETIMEDOUT)
    rc = pthread_cond_timedwait(&T.cv, &T.mu, &ts);
  T.blocked--;
  bool released = T.release, cancelled = e->cancelled;
  pthread_cond_broadcast(&T.cv);
  pthread_mutex_unlock(&T.mu);
  wt_status *st = NULL;
  if (cancelled)
    st = wt_status_new(WT_CANCELLED, "test engine (worker %u): cancelled",
                       e->ctx.rank);
  else if (!released)
    st = wt_status_new(WT_DEADLINE_EXCEEDED,
                       "test engine (worker %u): no data within %u ms",
                       e->ctx.rank, e->ctx.timeout_ms);
  for (size_t k = 0; st == NULL && k < u->n; k++) {
    const wt_tensor_meta *m = wt_param_store_meta(e->ctx.store, u->index[k]);
    wt_synthetic_fill(m, e->seed, 0, dst[k], m->nbytes);
    wt_param_store_staged(e->ctx.store, u->index[k]);
    stats->tensors++;
    stats->bytes += m->nbytes;
  }
  free(dst);
  return st;
}

static wt_status *te_finish(wt_engine *e) {
  return NULL;
}
static void te_abort(wt_engine *e) {}

static void te_cancel(wt_engine *e) {
  pthread_mutex_lock(&T.mu);
  e->cancelled = true;
  pthread_cond_broadcast(&T.cv);
  pthread_mutex_unlock(&T.mu);
}

static void te_destroy(wt_engine *e) {
  free(e);
}

static const wt_engine_ops test_engine_ops = {
    .header = {WT_ENGINE_ABI_VERSION, "test"},
    .create = te_create,
    .init_transfer = te_init_transfer,
    .start_update = te_start,
    .receive = te_receive,
    .finish_update = te_finish,
    .abort_update = te_abort,
    .cancel = te_cancel,
    .destroy = te_destroy,
};

static void start_test_backend_server(uint32_t workers,
                                      uint32_t round_timeout_ms) {
  wt_registry *reg = NULL;
  WT_ASSERT_OK(wt_registry_new("worker engine", WT_ENGINE_ABI_VERSION, &reg));
  WT_ASSERT_OK(wt_engine_register_builtins(reg));
  WT_ASSERT_OK(wt_registry_register(reg, "test", &test_engine_ops));
  memset(&F, 0, sizeof(F));
  F.engines = reg;
  start_server("tiny", workers, WT_STAGING_SHADOW, round_timeout_ms);
  pthread_mutex_lock(&T.mu);
  T.release = false;
  T.blocked = T.receives = 0;
  pthread_mutex_unlock(&T.mu);
}

static wt_status *init_test_backend(
    const char *seed, uint32_t timeout_ms,
    Wt__V1__InitWeightTransferEngineResponse **resp) {
  Wt__V1__WeightTransferInitInfo__OptionsEntry opt =
      WT__V1__WEIGHT_TRANSFER_INIT_INFO__OPTIONS_ENTRY__INIT;
  opt.key = "seed";
  opt.value = (char *)seed;
  Wt__V1__WeightTransferInitInfo__OptionsEntry *opts[1] = {&opt};
  Wt__V1__WeightTransferInitInfo info = WT__V1__WEIGHT_TRANSFER_INIT_INFO__INIT;
  info.backend = "test";
  info.timeout_ms = timeout_ms;
  info.n_options = 1;
  info.options = opts;
  Wt__V1__InitWeightTransferEngineRequest req =
      WT__V1__INIT_WEIGHT_TRANSFER_ENGINE_REQUEST__INIT;
  req.init_info = &info;
  return call("InitWeightTransferEngine", &req.base,
              &wt__v1__init_weight_transfer_engine_response__descriptor,
              (ProtobufCMessage **)resp);
}

static bool wait_blocked(int n, int64_t ms) {
  int64_t end = now_ms() + ms;
  pthread_mutex_lock(&T.mu);
  while (T.blocked != n && now_ms() < end) {
    pthread_mutex_unlock(&T.mu);
    sleep_ms(2);
    pthread_mutex_lock(&T.mu);
  }
  bool ok = T.blocked == n;
  pthread_mutex_unlock(&T.mu);
  return ok;
}

static void set_release(bool release) {
  pthread_mutex_lock(&T.mu);
  T.release = release;
  pthread_cond_broadcast(&T.cv);
  pthread_mutex_unlock(&T.mu);
}

static wt_status *update_start(const upd *u, uint64_t round_id,
                               wt_rpc_pending **p) {
  Wt__V1__UpdateWeightsRequest req = WT__V1__UPDATE_WEIGHTS_REQUEST__INIT;
  req.update_info = (Wt__V1__WeightTransferUpdateInfo *)&u->info;
  req.round_id = round_id;
  return wt_rpc_unary_start(F.ch, SVC "UpdateWeights", &req.base,
                            &wt__v1__update_weights_response__descriptor,
                            DEADLINE_MS, p);
}

static void test_update_weights(void) {
  start_test_backend_server(3, 0);
  Wt__V1__ServerInfo *info = server_info();
  CU_ASSERT_EQUAL_FATAL(info->n_backends, BUILTIN_BACKENDS + 1);
  CU_ASSERT_STRING_EQUAL(info->backends[0], "grpc");
  bool has_test = false; /* the names come sorted */
  for (size_t i = 0; i < info->n_backends; i++)
    has_test = has_test || strcmp(info->backends[i], "test") == 0;
  CU_ASSERT(has_test);
  wt_pb_free(&info->base);
  Wt__V1__InitWeightTransferEngineResponse *ir = NULL;
  WT_ASSERT_OK(init_test_backend("5", 5000, &ir));
  CU_ASSERT_EQUAL_FATAL(ir->n_endpoints, 3);
  CU_ASSERT_EQUAL(ir->endpoints[2]->rank, 2);
  CU_ASSERT_STRING_EQUAL(ir->endpoints[2]->address, "test-worker-2");
  CU_ASSERT_EQUAL(ir->endpoints[2]->port, 1002);
  wt_pb_free(&ir->base);
  uint64_t id = 0;
  WT_ASSERT_OK(start_round(&id));
  upd u;
  upd_all(&u);
  WT_ASSERT_ERR(push_all(&u, id, 0, 1000, 1, NULL), WT_FAILED_PRECONDITION,
                "backend 'test' does not take PushWeights");
  /* Validation comes before any receive. */
  u.names[0] = "model.nope";
  Wt__V1__UpdateWeightsRequest req = WT__V1__UPDATE_WEIGHTS_REQUEST__INIT;
  req.update_info = &u.info;
  WT_ASSERT_ERR(call("UpdateWeights", &req.base,
                     &wt__v1__update_weights_response__descriptor, NULL),
                WT_INVALID_ARGUMENT, "parameter 'model.nope'");
  CU_ASSERT_EQUAL(T.receives, 0);
  upd_all(&u);

  /* Every worker receives at once while the call is pending; the server
   * keeps answering. */
  wt_rpc_pending *p = NULL;
  WT_ASSERT_OK(update_start(&u, id, &p));
  CU_ASSERT_FATAL(wait_blocked(3, 5000));
  assert_version("", 0);
  info = server_info();
  CU_ASSERT_STRING_EQUAL(info->workers[1]->state, "updating");
  wt_pb_free(&info->base);
  WT_ASSERT_ERR(finish_round("early", id), WT_FAILED_PRECONDITION,
                "UpdateWeights is still running in round 1");
  set_release(true);
  ProtobufCMessage *resp = NULL;
  WT_ASSERT_OK(wt_rpc_pending_wait(p, &resp));
  Wt__V1__UpdateWeightsResponse *ur = (Wt__V1__UpdateWeightsResponse *)resp;
  CU_ASSERT_EQUAL(ur->tensors_received, 7);
  CU_ASSERT_EQUAL(ur->bytes_received, 6080);
  wt_pb_free(resp);
  WT_ASSERT_OK(finish_round("u1", id));
  assert_model_seed(5);

  /* An abort cancels a blocked receive on every worker. */
  set_release(false);
  WT_ASSERT_OK(init_test_backend("6", 5000, NULL));
  WT_ASSERT_OK(start_round(&id));
  WT_ASSERT_OK(update_start(&u, id, &p));
  CU_ASSERT_FATAL(wait_blocked(3, 5000));
  bool aborted = false;
  WT_ASSERT_OK(abort_round(id, &aborted));
  CU_ASSERT(aborted);
  WT_ASSERT_ERR(wt_rpc_pending_wait(p, NULL), WT_ABORTED,
                "UpdateWeights: round 2 was aborted: AbortWeightUpdate: test");
  CU_ASSERT(wait_blocked(0, 1000));
  assert_version("u1", 1);
  assert_model_seed(5);

  /* The engine's deadline ends a receive; the round stays open but its
   * partial tensors cannot commit. */
  WT_ASSERT_OK(init_test_backend("7", 200, NULL));
  WT_ASSERT_OK(start_round(&id));
  WT_ASSERT_ERR(call("UpdateWeights", &req.base,
                     &wt__v1__update_weights_response__descriptor, NULL),
                WT_DEADLINE_EXCEEDED,
                "worker 0: test engine (worker 0): no data within 200 ms");
  WT_ASSERT_ERR(finish_round("u-partial", id), WT_FAILED_PRECONDITION,
                "was only partly received");
  set_release(true);
  WT_ASSERT_OK(call("UpdateWeights", &req.base,
                    &wt__v1__update_weights_response__descriptor, NULL));
  WT_ASSERT_OK(finish_round("u3", id));
  assert_model_seed(7);
  stop_server();
}

/* A receive that takes longer than the round timeout is not idle: the
 * engine's own deadline bounds it. */
static void test_long_receive_not_idle(void) {
  start_test_backend_server(1, 300);
  WT_ASSERT_OK(init_test_backend("8", 5000, NULL));
  uint64_t id = 0;
  WT_ASSERT_OK(start_round(&id));
  upd u;
  upd_all(&u);
  wt_rpc_pending *p = NULL;
  WT_ASSERT_OK(update_start(&u, id, &p));
  CU_ASSERT_FATAL(wait_blocked(1, 5000));
  sleep_ms(800);
  set_release(true);
  WT_ASSERT_OK(wt_rpc_pending_wait(p, NULL));
  WT_ASSERT_OK(finish_round("slow", id));
  assert_model_seed(8);
  stop_server();
}

/* A client-chosen string echoed whole into a status would make the status
 * larger than gRPC carries in trailers: the client would get an unrelated
 * error instead of the one naming what was wrong. */
static void test_long_strings_in_errors(void) {
  start_server("tiny", 1, WT_STAGING_SHADOW, 0);
  WT_ASSERT_OK(init_grpc(1000));
  uint64_t id = 0;
  WT_ASSERT_OK(start_round(&id));
  size_t len = 64 * 1024;
  char *name = malloc(len + 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(name);
  memset(name, 'x', len);
  name[len] = '\0';

  upd u;
  upd_all(&u);
  u.names[1] = name;
  WT_ASSERT_ERR(push_all(&u, id, 0, 1000, 1, NULL), WT_INVALID_ARGUMENT,
                "(update_info.names[1]) is not in the model");
  upd_all(&u);
  u.dtypes[1] = name;
  WT_ASSERT_ERR(push_all(&u, id, 0, 1000, 1, NULL), WT_INVALID_ARGUMENT,
                "parameter '");

  Wt__V1__ChecksumWeightsRequest req = WT__V1__CHECKSUM_WEIGHTS_REQUEST__INIT;
  char *names[1] = {name};
  req.n_names = 1;
  req.names = names;
  WT_ASSERT_ERR(call("ChecksumWeights", &req.base,
                     &wt__v1__checksum_weights_response__descriptor, NULL),
                WT_NOT_FOUND, "is not in the model");

  /* A version is kept (64 of them) and sent in every GetServerInfo and
   * GetWeightVersion: a huge one is refused, and the round stays open. */
  WT_ASSERT_ERR(finish_round(name, id), WT_INVALID_ARGUMENT,
                "weight_version is 65536 bytes; at most 4096");
  WT_ASSERT_OK(finish_round("short", id));
  assert_version("short", 1);

  Wt__V1__WeightTransferInitInfo info = WT__V1__WEIGHT_TRANSFER_INIT_INFO__INIT;
  info.backend = name;
  WT_ASSERT_ERR(init_info_call(&info), WT_NOT_FOUND, "backend '");
  info.backend_init_case = WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_GRPC;
  Wt__V1__GrpcInitInfo g = WT__V1__GRPC_INIT_INFO__INIT;
  info.grpc = &g;
  WT_ASSERT_ERR(init_info_call(&info), WT_INVALID_ARGUMENT,
                "init_info carries grpc settings");
  free(name);
  assert_serving();
  stop_server();
}

/* A call run on a thread of its own, for calls that overlap. */
typedef struct bg_call {
  const char *method;
  const ProtobufCMessage *req;
  const ProtobufCMessageDescriptor *type;
  wt_status *st;
  int64_t end_ms;
} bg_call;

static void *bg_main(void *p) {
  bg_call *b = p;
  char path[128];
  snprintf(path, sizeof(path), SVC "%s", b->method);
  ProtobufCMessage *r = NULL;
  b->st = wt_rpc_unary(F.ch, path, b->req, b->type, 120000, &r);
  b->end_ms = now_ms();
  wt_pb_free(r);
  return NULL;
}

/* ChecksumWeights of `n` copies of one tensor's name; returns its ms. */
static int64_t time_checksums(char **names, size_t n) {
  Wt__V1__ChecksumWeightsRequest req = WT__V1__CHECKSUM_WEIGHTS_REQUEST__INIT;
  req.n_names = n;
  req.names = names;
  bg_call b = {"ChecksumWeights", &req.base,
               &wt__v1__checksum_weights_response__descriptor, NULL, 0};
  int64_t t0 = now_ms();
  bg_main(&b);
  WT_ASSERT_OK(b.st);
  return b.end_ms - t0;
}

/* A long ChecksumWeights holds a store's read lock, so a finish waits for
 * it; the finish must not hold up every other call meanwhile (it used to
 * wait for the store's write lock holding the server's lock). */
static void test_finish_waiting_for_readers_stalls_nothing(void) {
  start_server("small", 1, WT_STAGING_SHADOW, 0);
  WT_ASSERT_OK(init_grpc(0));
  uint64_t id = 0;
  WT_ASSERT_OK(start_round(&id));
  upd u;
  upd_all(&u);
  WT_ASSERT_OK(push_all(&u, id, 0, 1u << 20, 1, NULL));

  /* Enough copies of the 512 KiB embedding for about a second. */
  enum { PROBE = 100, MAX_REPEAT = 40000 };
  char **names = malloc(MAX_REPEAT * sizeof(*names));
  CU_ASSERT_PTR_NOT_NULL_FATAL(names);
  for (size_t i = 0; i < MAX_REPEAT; i++)
    names[i] = "model.embed_tokens.weight";
  int64_t probe_ms = time_checksums(names, PROBE);
  size_t repeat = (size_t)(PROBE * 1000 / (probe_ms > 0 ? probe_ms : 1));
  if (repeat > MAX_REPEAT) repeat = MAX_REPEAT;
  if (repeat < PROBE) repeat = PROBE;

  Wt__V1__ChecksumWeightsRequest creq = WT__V1__CHECKSUM_WEIGHTS_REQUEST__INIT;
  creq.n_names = repeat;
  creq.names = names;
  bg_call sum = {"ChecksumWeights", &creq.base,
                 &wt__v1__checksum_weights_response__descriptor, NULL, 0};
  Wt__V1__FinishWeightUpdateRequest freq =
      WT__V1__FINISH_WEIGHT_UPDATE_REQUEST__INIT;
  freq.weight_version = "after-readers";
  freq.round_id = id;
  bg_call fin = {"FinishWeightUpdate", &freq.base,
                 &wt__v1__finish_weight_update_response__descriptor, NULL, 0};
  pthread_t ts, tf;
  CU_ASSERT_FATAL(pthread_create(&ts, NULL, bg_main, &sum) == 0);
  sleep_ms(200);
  CU_ASSERT_FATAL(pthread_create(&tf, NULL, bg_main, &fin) == 0);
  sleep_ms(200);

  Wt__V1__GetWeightVersionRequest vreq =
      WT__V1__GET_WEIGHT_VERSION_REQUEST__INIT;
  ProtobufCMessage *r = NULL;
  wt_status *st = wt_rpc_unary(F.ch, SVC "GetWeightVersion", &vreq.base,
                               &wt__v1__weight_version__descriptor, 1000, &r);
  int64_t answered = now_ms();
  WT_ASSERT_OK(st);
  wt_pb_free(r);
  Wt__V1__GetServerInfoRequest ireq = WT__V1__GET_SERVER_INFO_REQUEST__INIT;
  WT_ASSERT_OK(wt_rpc_unary(F.ch, SVC "GetServerInfo", &ireq.base,
                            &wt__v1__server_info__descriptor, 1000, NULL));

  pthread_join(ts, NULL);
  pthread_join(tf, NULL);
  WT_ASSERT_OK(sum.st);
  WT_ASSERT_OK(fin.st);
  /* Otherwise the checksum ended too soon to prove anything. */
  CU_ASSERT(sum.end_ms > answered);
  CU_ASSERT(fin.end_ms >= sum.end_ms - 50);
  assert_version("after-readers", 1);
  assert_model_seed(1);

  /* An abort while the finish waits for the readers wins: the finish
   * reports it and nothing of the round becomes visible. */
  WT_ASSERT_OK(start_round(&id));
  WT_ASSERT_OK(push_all(&u, id, 0, 1u << 20, 2, NULL));
  freq.weight_version = "never";
  freq.round_id = id;
  CU_ASSERT_FATAL(pthread_create(&ts, NULL, bg_main, &sum) == 0);
  sleep_ms(200);
  CU_ASSERT_FATAL(pthread_create(&tf, NULL, bg_main, &fin) == 0);
  sleep_ms(200);
  bool aborted = false;
  WT_ASSERT_OK(abort_round(id, &aborted));
  CU_ASSERT(aborted);
  pthread_join(ts, NULL);
  pthread_join(tf, NULL);
  WT_ASSERT_OK(sum.st);
  WT_ASSERT_ERR(fin.st, WT_ABORTED, "FinishWeightUpdate: round 2 was aborted");
  fin.st = NULL;
  assert_version("after-readers", 1);
  assert_model_seed(1);
  assert_serving();
  free(names);
  stop_server();
}

/* A long ChecksumWeights stops when the server stops (or its client
 * leaves) instead of holding the shutdown until its last digest. */
static void test_stop_during_long_checksum(void) {
  start_server("small", 1, WT_STAGING_SHADOW, 0);
  enum { PROBE = 100, MAX_REPEAT = 40000 };
  char **names = malloc(MAX_REPEAT * sizeof(*names));
  CU_ASSERT_PTR_NOT_NULL_FATAL(names);
  for (size_t i = 0; i < MAX_REPEAT; i++)
    names[i] = "model.embed_tokens.weight";
  /* About four seconds of hashing. */
  int64_t probe_ms = time_checksums(names, PROBE);
  size_t repeat = (size_t)(PROBE * 4000 / (probe_ms > 0 ? probe_ms : 1));
  if (repeat > MAX_REPEAT) repeat = MAX_REPEAT;
  if (repeat < PROBE) repeat = PROBE;
  Wt__V1__ChecksumWeightsRequest creq = WT__V1__CHECKSUM_WEIGHTS_REQUEST__INIT;
  creq.n_names = repeat;
  creq.names = names;
  bg_call sum = {"ChecksumWeights", &creq.base,
                 &wt__v1__checksum_weights_response__descriptor, NULL, 0};
  pthread_t ts;
  int64_t started = now_ms();
  CU_ASSERT_FATAL(pthread_create(&ts, NULL, bg_main, &sum) == 0);
  sleep_ms(300);
  int64_t t0 = now_ms();
  wt_server_stop(F.srv); /* drains for 300 ms, then cancels */
  F.srv = NULL;
  int64_t stop_ms = now_ms() - t0;
  pthread_join(ts, NULL);
  CU_ASSERT_PTR_NOT_NULL(sum.st);
  wt_status_free(sum.st);
  if (stop_ms >= 1500)
    fprintf(stderr, "\n  stop took %lld ms (checksum of ~%lld ms)\n",
            (long long)stop_ms,
            (long long)(probe_ms * (int64_t)repeat / PROBE));
  CU_ASSERT(stop_ms < 1500);
  CU_ASSERT(sum.end_ms - started < 2000);
  free(names);
  stop_server();
}

/* A push that went quiet is ended by the round's abort, not left waiting
 * for a client that may never send again (a vanished host keeps its TCP
 * connection open for hours): the first write after the abort already
 * gets the abort's status, without the server having read it. */
static void test_stalled_push_ends_with_its_round(void) {
  start_server("tiny", 1, WT_STAGING_SHADOW, 300);
  WT_ASSERT_OK(init_grpc(1000));
  uint64_t id = 0;
  WT_ASSERT_OK(start_round(&id));
  upd u;
  upd_all(&u);
  pusher p;
  WT_ASSERT_OK(push_open(&p, &u, id, 2048, 1000, 1));
  WT_ASSERT_OK(push_send(&p, 1000));
  sleep_ms(1000);
  WT_ASSERT_ERR(push_send(&p, 1000), WT_ABORTED,
                "PushWeights: round 1 was aborted: idle for");
  wt_status_free(push_close(&p, NULL));
  WT_ASSERT_OK(start_round(&id));
  WT_ASSERT_OK(push_all(&u, id, 2048, 1000, 3, NULL));
  WT_ASSERT_OK(finish_round("after-stall", id));
  assert_model_seed(3);
  stop_server();
}

void wt_test_suite_server(void) {
  CU_pSuite s = CU_add_suite("server", NULL, NULL);
  CU_add_test(s, "server info, world size, parameters",
              test_info_and_parameters);
  CU_add_test(s, "out-of-order calls name the state", test_out_of_order);
  CU_add_test(s, "init errors", test_init_errors);
  CU_add_test(s, "validation before any byte is written", test_validation);
  CU_add_test(s, "a PushWeights round", test_push_round);
  CU_add_test(s, "three workers", test_many_workers);
  CU_add_test(s, "a stream cut midway", test_stream_cut);
  CU_add_test(s, "inplace staging marks the store incomplete",
              test_inplace_incomplete);
  CU_add_test(s, "calls answered during a push", test_calls_during_push);
  CU_add_test(s, "round timeout", test_round_timeout);
  CU_add_test(s, "garbage bytes to every method", test_garbage);
  CU_add_test(s, "WatchWeightVersion", test_watch);
  CU_add_test(s, "ChecksumWeights", test_checksums);
  CU_add_test(s, "stop during a push", test_stop_during_push);
  CU_add_test(s, "start errors name the option", test_start_errors);
  CU_add_test(s, "a safetensors checkpoint as the model",
              test_checkpoint_model);
  CU_add_test(s, "UpdateWeights through a receiving backend",
              test_update_weights);
  CU_add_test(s, "a long receive is not idle", test_long_receive_not_idle);
  CU_add_test(s, "long client strings keep their errors",
              test_long_strings_in_errors);
  CU_add_test(s, "a finish waiting for readers stalls nothing",
              test_finish_waiting_for_readers_stalls_nothing);
  CU_add_test(s, "stop during a long checksum", test_stop_during_long_checksum);
  CU_add_test(s, "a stalled push ends with its round",
              test_stalled_push_ends_with_its_round);
}
