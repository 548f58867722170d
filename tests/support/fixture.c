/* fixture.c: servers, hand-made calls, expected contents and PushWeights
 * streams for the suites (see fixture.h). */

#include "fixture.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define WTT_HELD_HEAP 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WTT_HELD_HEAP 1
#endif
#endif
#ifdef WTT_HELD_HEAP
/* The sanitizer runtime's own (GCC 12 ships no allocator_interface.h):
 * the bytes the program has allocated and not freed, quarantine apart. */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

#include "grpc/health/v1/health.pb-c.h"
#include "wt/cuda.h"
#include "wt/dtype.h"
#include "wt/pb.h"
#include "wt/safetensors.h"
#include "wt/synthetic.h"

void wtt_sleep_ms(int ms) {
  usleep((useconds_t)ms * 1000);
}

int wtt_open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (d == NULL) return -1;
  int n = 0;
  while (readdir(d) != NULL) n++;
  closedir(d);
  return n - 3; /* ".", ".." and the directory's own */
}

long wtt_rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f && fgets(line, sizeof(line), f))
    if (strncmp(line, "VmRSS:", 6) == 0) kib = atol(line + 6);
  if (f) fclose(f);
  return kib;
}

long wtt_held_kib(void) {
#ifdef WTT_HELD_HEAP
  return (long)(__sanitizer_get_current_allocated_bytes() / 1024);
#else
  return wtt_rss_kib();
#endif
}

const char *wtt_held_what(void) {
#ifdef WTT_HELD_HEAP
  return "heap";
#else
  return "RSS";
#endif
}

/* --- servers -------------------------------------------------------------- */

void wtt_server_start(wtt_server *s, const char *layout,
                      const wt_server_options *o) {
  char model[64];
  snprintf(model, sizeof(model), "synthetic:%s", layout);
  wt_server_options opts = {0};
  if (o != NULL) opts = *o;
  if (opts.listen == NULL) opts.listen = "127.0.0.1:0";
  if (opts.model == NULL) opts.model = model;
  if (opts.drain_ms == 0) opts.drain_ms = 300;
  memset(s, 0, sizeof(*s));
  WT_ASSERT_OK(wt_server_start(&opts, &s->srv));
  CU_ASSERT_FATAL(wt_server_port(s->srv) > 0);
  s->workers = wt_server_workers(s->srv);
  /* The listen address's host (127.0.0.2 for a second "host"). */
  const char *colon = strrchr(opts.listen, ':');
  int hlen = colon ? (int)(colon - opts.listen) : (int)strlen(opts.listen);
  snprintf(s->target, sizeof(s->target), "%.*s:%d", hlen, opts.listen,
           wt_server_port(s->srv));
  WT_ASSERT_OK(wt_rpc_channel_new(s->target, NULL, &s->ch));
  WT_ASSERT_OK(wt_synthetic_layout(layout, &s->metas, &s->n));
}

void wtt_server_start_simple(wtt_server *s, const char *layout,
                             uint32_t workers, wt_staging staging,
                             uint32_t round_timeout_ms) {
  wt_server_options o = {.workers = workers,
                         .staging = staging,
                         .round_timeout_ms = round_timeout_ms};
  wtt_server_start(s, layout, &o);
}

void wtt_server_stop(wtt_server *s) {
  wt_rpc_channel_destroy(s->ch);
  wt_server_stop(s->srv);
  wt_tensor_meta_array_free(s->metas, s->n);
  memset(s, 0, sizeof(*s));
}

size_t wtt_layout_index(const wtt_server *s, const char *name) {
  for (size_t i = 0; i < s->n; i++)
    if (strcmp(s->metas[i].name, name) == 0) return i;
  return (size_t)-1;
}

void wtt_servers_start(wtt_servers *s, size_t n, const char *const *models,
                       const uint32_t *workers, wt_staging staging,
                       wt_registry *engines) {
  memset(s, 0, sizeof(*s));
  CU_ASSERT_FATAL(n <= 4);
  for (size_t k = 0; k < n; k++) {
    wt_server_options o = {.listen = "127.0.0.1:0",
                           .model = models[k],
                           .workers = workers[k],
                           .staging = staging,
                           .drain_ms = 200,
                           .engine_registry = engines};
    WT_ASSERT_OK(wt_server_start(&o, &s->srv[k]));
    snprintf(s->target[k], sizeof(s->target[k]), "127.0.0.1:%d",
             wt_server_port(s->srv[k]));
    s->targets[k] = s->target[k];
    s->n = k + 1;
  }
}

void wtt_servers_stop(wtt_servers *s) {
  for (size_t k = 0; k < s->n; k++) wt_server_stop(s->srv[k]);
  memset(s, 0, sizeof(*s));
}

wt_sync_client *wtt_client_of(const wtt_servers *s) {
  wt_sync_client *c = NULL;
  wt_client_options o = {.timeout_ms = 10000, .data_timeout_ms = 20000};
  WT_ASSERT_OK(wt_sync_client_new(s->targets, s->n, &o, &c));
  return c;
}

void wtt_assert_servers_hold(wt_sync_client *c, wt_source *src,
                             wt_hash_alg alg) {
  char(*local)[WT_DIGEST_HEX_MAX] = NULL;
  size_t n = 0;
  const wt_tensor_meta *m = wt_source_metas(src, &n);
  WT_ASSERT_OK(wt_source_checksums(src, alg, &local));
  for (size_t k = 0; k < wt_sync_client_server_count(c); k++) {
    wt_param_checksum *sums = NULL;
    size_t ns = 0;
    WT_ASSERT_OK(
        wt_sync_client_checksums(c, k, NULL, 0, alg, true, &sums, &ns));
    CU_ASSERT_EQUAL(ns, n * wt_sync_client_server_world_size(c, k));
    size_t matched = 0;
    for (size_t j = 0; j < ns; j++)
      for (size_t i = 0; i < n; i++)
        if (strcmp(sums[j].name, m[i].name) == 0) {
          if (strcmp(sums[j].digest, local[i]) != 0)
            fprintf(stderr, "\n  %s worker %u '%s': %s, want %s\n",
                    wt_sync_client_target(c, k), sums[j].worker, m[i].name,
                    sums[j].digest, local[i]);
          CU_ASSERT_STRING_EQUAL(sums[j].digest, local[i]);
          matched++;
        }
    CU_ASSERT_EQUAL(matched, ns);
    wt_param_checksums_free(sums, ns);
  }
  free(local);
}

/* --- calls ---------------------------------------------------------------- */

wt_status *wtt_call(wt_rpc_channel *ch, const char *method,
                    const ProtobufCMessage *req,
                    const ProtobufCMessageDescriptor *type,
                    ProtobufCMessage **resp) {
  ProtobufCMessage *r = NULL;
  char path[128];
  snprintf(path, sizeof(path), WTT_SVC "%s", method);
  wt_status *st = wt_rpc_unary(ch, path, req, type, WTT_DEADLINE_MS, &r);
  if (resp != NULL)
    *resp = r;
  else
    wt_pb_free(r);
  return st;
}

wt_status *wtt_init(wt_rpc_channel *ch, Wt__V1__WeightTransferInitInfo *info,
                    Wt__V1__InitWeightTransferEngineResponse **resp) {
  Wt__V1__InitWeightTransferEngineRequest req =
      WT__V1__INIT_WEIGHT_TRANSFER_ENGINE_REQUEST__INIT;
  req.init_info = info;
  return wtt_call(ch, "InitWeightTransferEngine", &req.base,
                  &wt__v1__init_weight_transfer_engine_response__descriptor,
                  (ProtobufCMessage **)resp);
}

wt_status *wtt_init_grpc(wt_rpc_channel *ch, uint64_t chunk_bytes,
                         uint32_t workers) {
  Wt__V1__GrpcInitInfo g = WT__V1__GRPC_INIT_INFO__INIT;
  Wt__V1__UInt64Value chunk = WT__V1__UINT64_VALUE__INIT;
  chunk.value = chunk_bytes;
  if (chunk_bytes) g.chunk_size_bytes = &chunk;
  Wt__V1__WeightTransferInitInfo info = WT__V1__WEIGHT_TRANSFER_INIT_INFO__INIT;
  info.backend = "grpc";
  info.backend_init_case = WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_GRPC;
  info.grpc = &g;
  Wt__V1__InitWeightTransferEngineResponse *r = NULL;
  wt_status *st = wtt_init(ch, &info, &r);
  if (st == NULL) {
    CU_ASSERT(r->ready);
    CU_ASSERT_EQUAL(r->n_endpoints, workers);
    CU_ASSERT_PTR_NOT_NULL(strstr(r->message, "grpc"));
  }
  wt_pb_free(r ? &r->base : NULL);
  return st;
}

wt_status *wtt_start(wt_rpc_channel *ch, uint64_t *id) {
  Wt__V1__StartWeightUpdateRequest req =
      WT__V1__START_WEIGHT_UPDATE_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  wt_status *st =
      wtt_call(ch, "StartWeightUpdate", &req.base,
               &wt__v1__start_weight_update_response__descriptor, &resp);
  if (st == NULL && id != NULL)
    *id = ((Wt__V1__StartWeightUpdateResponse *)resp)->round_id;
  wt_pb_free(resp);
  return st;
}

wt_status *wtt_update(wt_rpc_channel *ch,
                      const Wt__V1__WeightTransferUpdateInfo *info,
                      uint64_t round_id) {
  Wt__V1__UpdateWeightsRequest req = WT__V1__UPDATE_WEIGHTS_REQUEST__INIT;
  req.update_info = (Wt__V1__WeightTransferUpdateInfo *)info;
  req.round_id = round_id;
  return wtt_call(ch, "UpdateWeights", &req.base,
                  &wt__v1__update_weights_response__descriptor, NULL);
}

wt_status *wtt_finish(wt_rpc_channel *ch, const char *version,
                      uint64_t round_id) {
  Wt__V1__FinishWeightUpdateRequest req =
      WT__V1__FINISH_WEIGHT_UPDATE_REQUEST__INIT;
  req.weight_version = (char *)version;
  req.round_id = round_id;
  ProtobufCMessage *resp = NULL;
  wt_status *st =
      wtt_call(ch, "FinishWeightUpdate", &req.base,
               &wt__v1__finish_weight_update_response__descriptor, &resp);
  if (st == NULL)
    CU_ASSERT_STRING_EQUAL(
        ((Wt__V1__FinishWeightUpdateResponse *)resp)->weight_version, version);
  wt_pb_free(resp);
  return st;
}

wt_status *wtt_abort(wt_rpc_channel *ch, uint64_t round_id, bool *aborted) {
  Wt__V1__AbortWeightUpdateRequest req =
      WT__V1__ABORT_WEIGHT_UPDATE_REQUEST__INIT;
  req.round_id = round_id;
  req.reason = "test";
  ProtobufCMessage *resp = NULL;
  wt_status *st =
      wtt_call(ch, "AbortWeightUpdate", &req.base,
               &wt__v1__abort_weight_update_response__descriptor, &resp);
  if (st == NULL && aborted != NULL)
    *aborted = ((Wt__V1__AbortWeightUpdateResponse *)resp)->aborted;
  wt_pb_free(resp);
  return st;
}

char *wtt_version(wt_rpc_channel *ch, uint64_t *sequence) {
  Wt__V1__GetWeightVersionRequest req =
      WT__V1__GET_WEIGHT_VERSION_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  WT_ASSERT_OK(wtt_call(ch, "GetWeightVersion", &req.base,
                        &wt__v1__weight_version__descriptor, &resp));
  Wt__V1__WeightVersion *v = (Wt__V1__WeightVersion *)resp;
  char *out = strdup(v->version);
  if (sequence) *sequence = v->sequence;
  wt_pb_free(resp);
  return out;
}

void wtt_assert_version(wt_rpc_channel *ch, const char *want,
                        uint64_t want_seq) {
  uint64_t seq = 99;
  char *v = wtt_version(ch, &seq);
  CU_ASSERT_STRING_EQUAL(v, want);
  CU_ASSERT_EQUAL(seq, want_seq);
  free(v);
}

Wt__V1__ServerInfo *wtt_info(wt_rpc_channel *ch) {
  Wt__V1__GetServerInfoRequest req = WT__V1__GET_SERVER_INFO_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  WT_ASSERT_OK(wtt_call(ch, "GetServerInfo", &req.base,
                        &wt__v1__server_info__descriptor, &resp));
  return (Wt__V1__ServerInfo *)resp;
}

void wtt_assert_serving(wt_rpc_channel *ch, uint32_t workers) {
  Wt__V1__GetWorldSizeRequest req = WT__V1__GET_WORLD_SIZE_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  WT_ASSERT_OK(wtt_call(ch, "GetWorldSize", &req.base,
                        &wt__v1__get_world_size_response__descriptor, &resp));
  CU_ASSERT_EQUAL(((Wt__V1__GetWorldSizeResponse *)resp)->world_size, workers);
  wt_pb_free(resp);
}

static void *bg_main(void *p) {
  wtt_bg_call *b = p;
  char path[128];
  snprintf(path, sizeof(path), WTT_SVC "%s", b->method);
  ProtobufCMessage *r = NULL;
  b->st = wt_rpc_unary(b->ch, path, b->req, b->type,
                       b->deadline_ms ? b->deadline_ms : 120000, &r);
  b->end_ms = wt_mono_ms();
  wt_pb_free(r);
  return NULL;
}

void wtt_bg_start(wtt_bg_call *b) {
  b->st = NULL;
  b->end_ms = 0;
  CU_ASSERT_FATAL(pthread_create(&b->thread, NULL, bg_main, b) == 0);
}

wt_status *wtt_bg_join(wtt_bg_call *b) {
  pthread_join(b->thread, NULL);
  wt_status *st = b->st;
  b->st = NULL;
  return st;
}

wt_rpc_server_stream *wtt_watch_open(wt_rpc_channel *ch) {
  Wt__V1__WatchWeightVersionRequest req =
      WT__V1__WATCH_WEIGHT_VERSION_REQUEST__INIT;
  wt_rpc_server_stream *s = NULL;
  WT_ASSERT_OK(wt_rpc_server_stream_open(ch, WTT_SVC "WatchWeightVersion",
                                         &req.base, WTT_DEADLINE_MS, &s));
  return s;
}

void wtt_watch_expect(wt_rpc_server_stream *s, const char *version,
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

/* --- expected contents ---------------------------------------------------- */

void wtt_expected_digest(const wt_tensor_meta *m, uint64_t seed,
                         wt_hash_alg alg, char hex[WT_DIGEST_HEX_MAX]) {
  unsigned char *b = malloc(m->nbytes ? m->nbytes : 1);
  wt_synthetic_fill(m, seed, 0, b, m->nbytes);
  WT_ASSERT_OK(wt_digest_hex(alg, b, m->nbytes, hex));
  free(b);
}

void wtt_assert_model(const wtt_server *s, const uint64_t *seeds,
                      wt_hash_alg alg) {
  Wt__V1__ChecksumWeightsRequest req = WT__V1__CHECKSUM_WEIGHTS_REQUEST__INIT;
  req.algorithm = (Wt__V1__ChecksumAlgorithm)alg;
  req.all_workers = true;
  ProtobufCMessage *resp = NULL;
  WT_ASSERT_OK(wtt_call(s->ch, "ChecksumWeights", &req.base,
                        &wt__v1__checksum_weights_response__descriptor, &resp));
  Wt__V1__ChecksumWeightsResponse *r = (Wt__V1__ChecksumWeightsResponse *)resp;
  CU_ASSERT_EQUAL(r->algorithm, (Wt__V1__ChecksumAlgorithm)alg);
  CU_ASSERT_EQUAL_FATAL(r->n_checksums, s->n * s->workers);
  for (size_t k = 0; k < r->n_checksums; k++) {
    const Wt__V1__ParameterChecksum *c = r->checksums[k];
    size_t i = wtt_layout_index(s, c->name);
    CU_ASSERT_FATAL(i < s->n);
    char want[WT_DIGEST_HEX_MAX];
    wtt_expected_digest(&s->metas[i], seeds[i], alg, want);
    if (strcmp(c->digest, want) != 0)
      fprintf(stderr, "\n  worker %u '%s': digest %s, want seed %lu's %s\n",
              c->worker, c->name, c->digest, (unsigned long)seeds[i], want);
    CU_ASSERT_STRING_EQUAL(c->digest, want);
    CU_ASSERT_EQUAL(c->worker, k / s->n);
  }
  wt_pb_free(resp);
  for (uint32_t w = 0; w < s->workers; w++) {
    wt_param_store *ps = wt_server_store(s->srv, w);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ps);
    for (size_t i = 0; i < s->n; i++) {
      const wt_tensor_meta *m = &s->metas[i];
      unsigned char *want = malloc(m->nbytes + 1), *got = malloc(m->nbytes + 1);
      wt_synthetic_fill(m, seeds[i], 0, want, m->nbytes);
      WT_ASSERT_OK(wt_param_store_read(ps, i, 0, got, m->nbytes));
      CU_ASSERT_EQUAL(memcmp(want, got, m->nbytes), 0);
      free(want);
      free(got);
    }
  }
}

void wtt_assert_model_seed(const wtt_server *s, uint64_t seed) {
  uint64_t *seeds = calloc(s->n, sizeof(*seeds));
  for (size_t i = 0; i < s->n; i++) seeds[i] = seed;
  wtt_assert_model(s, seeds, WT_HASH_SHA256);
  free(seeds);
}

void wtt_assert_model_seed_direct(const wtt_server *s, uint64_t seed) {
  size_t cap = 1 << 20;
  unsigned char *want = malloc(cap), *got = malloc(cap);
  CU_ASSERT_FATAL(want != NULL && got != NULL);
  for (uint32_t w = 0; w < s->workers; w++)
    for (size_t i = 0; i < s->n; i++)
      for (uint64_t at = 0; at < s->metas[i].nbytes; at += cap) {
        size_t len = s->metas[i].nbytes - at < cap
                         ? (size_t)(s->metas[i].nbytes - at)
                         : cap;
        wt_synthetic_fill(&s->metas[i], seed, at, want, len);
        WT_ASSERT_OK(
            wt_param_store_read(wt_server_store(s->srv, w), i, at, got, len));
        if (memcmp(want, got, len) != 0) {
          CU_FAIL("a worker's bytes are not the trainer's");
          printf("\n  worker %u: '%s' differs in [%llu, +%zu)\n", w,
                 s->metas[i].name, (unsigned long long)at, len);
          goto out;
        }
      }
out:
  free(want);
  free(got);
}

/* --- update info ---------------------------------------------------------- */

void wtt_upd_init(wtt_upd *u, const wt_tensor_meta *metas, const size_t *idx,
                  size_t n) {
  memset(u, 0, sizeof(*u));
  wt__v1__weight_transfer_update_info__init(&u->info);
  CU_ASSERT_FATAL(n <= WTT_MAX_TENSORS);
  u->metas = metas;
  for (size_t k = 0; k < n; k++) {
    size_t i = idx ? idx[k] : k;
    const wt_tensor_meta *m = &metas[i];
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

/* --- PushWeights ---------------------------------------------------------- */

wt_status *wtt_push_open(wtt_pusher *p, wt_rpc_channel *ch, const wtt_upd *u,
                         uint64_t round_id, uint64_t packed_buffer,
                         size_t chunk, uint64_t seed) {
  return wtt_push_open_delta(p, ch, u, round_id, packed_buffer, chunk, seed,
                             NULL);
}

wt_status *wtt_push_delta_chunk(wtt_pusher *p, uint32_t bucket, uint64_t offset,
                                uint64_t raw_len, uint64_t base_digest,
                                const void *frame, size_t len) {
  Wt__V1__DeltaChunk c = WT__V1__DELTA_CHUNK__INIT;
  c.bucket = bucket;
  c.offset = offset;
  c.raw_length = raw_len;
  c.base_digest = base_digest;
  c.data.data = (uint8_t *)frame;
  c.data.len = len;
  Wt__V1__PushWeightsChunk msg = WT__V1__PUSH_WEIGHTS_CHUNK__INIT;
  msg.payload_case = WT__V1__PUSH_WEIGHTS_CHUNK__PAYLOAD_DELTA;
  msg.delta = &c;
  return wt_rpc_client_stream_write(p->s, &msg.base);
}

wt_status *wtt_push_open_delta(wtt_pusher *p, wt_rpc_channel *ch,
                               const wtt_upd *u, uint64_t round_id,
                               uint64_t packed_buffer, size_t chunk,
                               uint64_t seed, const Wt__V1__DeltaBase *base) {
  memset(p, 0, sizeof(*p));
  p->chunk = chunk;
  size_t n = u->info.n_names;
  uint64_t sizes[WTT_MAX_TENSORS];
  for (size_t k = 0; k < n; k++) sizes[k] = u->metas[u->idx[k]].nbytes;
  /* Library calls may fail (the alloc suite makes them): returned, and
   * wtt_push_close still cleans up. */
  wt_status *st = wt_pack_plan_build(
      sizes, n, packed_buffer ? packed_buffer : 64u << 20, &p->plan);
  if (st != NULL) return st;
  p->bucket = calloc(p->plan->nbuckets + 1, sizeof(*p->bucket));
  for (size_t b = 0; b < p->plan->nbuckets; b++)
    p->bucket[b] = malloc(p->plan->buckets[b].nbytes + 1);
  for (size_t k = 0; k < n; k++) {
    const wt_tensor_meta *m = &u->metas[u->idx[k]];
    wt_synthetic_fill(
        m, seed, 0,
        p->bucket[p->plan->tensor_bucket[k]] + p->plan->tensor_offset[k],
        m->nbytes);
  }
  st = wt_rpc_client_stream_open(ch, WTT_SVC "PushWeights", WTT_DEADLINE_MS,
                                 &p->s);
  if (st != NULL) return st;
  Wt__V1__PushWeightsHeader h = WT__V1__PUSH_WEIGHTS_HEADER__INIT;
  h.update_info = (Wt__V1__WeightTransferUpdateInfo *)&u->info;
  h.round_id = round_id;
  h.packed_buffer_size_bytes = packed_buffer;
  h.delta_base = (Wt__V1__DeltaBase *)base;
  Wt__V1__PushWeightsChunk msg = WT__V1__PUSH_WEIGHTS_CHUNK__INIT;
  msg.payload_case = WT__V1__PUSH_WEIGHTS_CHUNK__PAYLOAD_HEADER;
  msg.header = &h;
  return wt_rpc_client_stream_write(p->s, &msg.base);
}

wt_status *wtt_push_raw_chunk(wtt_pusher *p, uint32_t bucket, uint64_t offset,
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

wt_status *wtt_push_send(wtt_pusher *p, uint64_t bytes) {
  uint64_t target = bytes > UINT64_MAX - p->sent ? UINT64_MAX : p->sent + bytes;
  while (p->b < p->plan->nbuckets && p->sent < target) {
    uint64_t size = p->plan->buckets[p->b].nbytes;
    if (p->off == size) {
      p->b++;
      p->off = 0;
      continue;
    }
    size_t len = size - p->off < p->chunk ? (size_t)(size - p->off) : p->chunk;
    wt_status *st = wtt_push_raw_chunk(p, (uint32_t)p->b, p->off,
                                       p->bucket[p->b] + p->off, len);
    if (st != NULL) return st;
    p->off += len;
    p->sent += len;
  }
  return NULL;
}

wt_status *wtt_push_close(wtt_pusher *p, Wt__V1__PushWeightsResponse **resp) {
  ProtobufCMessage *r = NULL;
  wt_status *st = NULL;
  if (p->s != NULL) /* NULL: wtt_push_open failed before the stream */
    st = wt_rpc_client_stream_finish(
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

void wtt_push_cut(wtt_pusher *p) {
  /* As a trainer killed midway: the server has taken the stream by then (a
   * call cancelled before the server accepted it never reaches a handler,
   * and no round can fail for it). */
  wtt_sleep_ms(50);
  wt_rpc_client_stream_cancel(p->s);
  wt_status_free(wtt_push_close(p, NULL));
}

wt_status *wtt_push_all(wt_rpc_channel *ch, const wtt_upd *u, uint64_t round_id,
                        uint64_t packed_buffer, size_t chunk, uint64_t seed,
                        Wt__V1__PushWeightsResponse **resp) {
  wtt_pusher p;
  wt_status *st =
      wtt_push_open(&p, ch, u, round_id, packed_buffer, chunk, seed);
  if (st == NULL) st = wtt_push_send(&p, UINT64_MAX);
  /* A write error means the server answered early: its status says why. */
  wt_status *fin = wtt_push_close(&p, resp);
  if (st != NULL && fin != NULL) {
    wt_status_free(st);
    return fin;
  }
  return st ? st : fin;
}

int64_t wtt_wait_left_updating(wt_rpc_channel *ch, int64_t ms) {
  int64_t start = wt_mono_ms();
  for (;;) {
    Wt__V1__ServerInfo *info = wtt_info(ch);
    bool updating = info == NULL || strcmp(info->state, "updating") == 0;
    for (size_t i = 0; info != NULL && i < info->n_workers; i++)
      updating = updating || strcmp(info->workers[i]->state, "updating") == 0;
    if (info != NULL) wt_pb_free(&info->base);
    int64_t now = wt_mono_ms();
    if (!updating) return now - start;
    if (now - start > ms) return -1;
    wtt_sleep_ms(2);
  }
}

void wtt_commit_round(const wtt_server *s, const char *version, uint64_t seed) {
  uint64_t id = 0;
  WT_ASSERT_OK(wtt_start(s->ch, &id));
  wtt_upd u;
  wtt_upd_init(&u, s->metas, NULL, s->n);
  WT_ASSERT_OK(wtt_push_all(s->ch, &u, id, 0, 1 << 20, seed, NULL));
  WT_ASSERT_OK(wtt_finish(s->ch, version, id));
}

uint64_t wtt_serve_round(wtt_server *s, const char *layout, uint32_t workers,
                         wt_staging staging, uint64_t chunk_bytes) {
  wtt_server_start_simple(s, layout, workers, staging, 0);
  WT_ASSERT_OK(wtt_init_grpc(s->ch, chunk_bytes, s->workers));
  uint64_t id = 0;
  WT_ASSERT_OK(wtt_start(s->ch, &id));
  return id;
}

void wtt_bg_finish(wtt_bg_call *b, Wt__V1__FinishWeightUpdateRequest *req,
                   wt_rpc_channel *ch, const char *version, uint64_t round_id) {
  wt__v1__finish_weight_update_request__init(req);
  req->weight_version = (char *)version;
  req->round_id = round_id;
  *b =
      (wtt_bg_call){.ch = ch,
                    .method = "FinishWeightUpdate",
                    .req = &req->base,
                    .type = &wt__v1__finish_weight_update_response__descriptor};
  wtt_bg_start(b);
}

const float WTT_CKPT_A[6] = {1, 2, 3, 4, 5, 6};
const uint16_t WTT_CKPT_B[3] = {0x3f80, 0x4000, 0x4040};

void wtt_write_checkpoint(const char *dir, const char *name, char *path,
                          size_t cap) {
  snprintf(path, cap, "%s/%s", dir, name);
  int64_t s23[2] = {2, 3}, s3[1] = {3};
  wt_st_write_tensor t[2] = {
      {"a.weight", WT_DTYPE_FLOAT32, 2, s23, WTT_CKPT_A},
      {"b.bias", WT_DTYPE_BFLOAT16, 1, s3, WTT_CKPT_B},
  };
  WT_ASSERT_OK(wt_safetensors_write(path, t, 2, NULL));
}

void wtt_device_model_fill(wtt_device_model *d, const wtt_server *s,
                           uint64_t seed, uint64_t align) {
  wt_device dev = {.type = WT_DEVICE_CUDA, .index = 0};
  uint64_t total = 0;
  CU_ASSERT_FATAL(s->n <= 16);
  for (size_t k = 0; k < s->n; k++)
    total += (s->metas[k].nbytes + align - 1) / align * align;
  WT_ASSERT_OK(wt_cuda_bind(0));
  if (d->r.len == 0)
    WT_ASSERT_OK(wt_mem_alloc(WT_MEM_DEVICE, dev, total, "trainer", &d->r));
  uint64_t off = 0;
  for (size_t k = 0; k < s->n; k++) {
    const wt_tensor_meta *m = &s->metas[k];
    unsigned char *host = malloc(m->nbytes ? m->nbytes : 1);
    wt_synthetic_fill(m, seed, 0, host, m->nbytes);
    WT_ASSERT_OK(wt_mem_write(&d->r, off, host, m->nbytes, NULL));
    free(host);
    d->t[k] = (wt_source_tensor){.name = m->name,
                                 .dtype = m->dtype,
                                 .ndim = m->ndim,
                                 .shape = m->shape,
                                 .data = (char *)d->r.base + off,
                                 .nbytes = m->nbytes,
                                 .kind = WT_MEM_DEVICE,
                                 .device = dev};
    off += (m->nbytes + align - 1) / align * align;
  }
  d->n = s->n;
}

wt_status *wtt_health_check(wt_rpc_channel *ch, const char *service,
                            int *status) {
  Grpc__Health__V1__HealthCheckRequest req =
      GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
  req.service = (char *)service;
  ProtobufCMessage *resp = NULL;
  wt_status *st = wt_rpc_unary(
      ch, "/grpc.health.v1.Health/Check", &req.base,
      &grpc__health__v1__health_check_response__descriptor, 2000, &resp);
  if (st == NULL)
    *status = ((Grpc__Health__V1__HealthCheckResponse *)resp)->status;
  wt_pb_free(resp);
  return st;
}
