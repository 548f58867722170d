/* fixture.h: what the suites that drive wt servers share: in-process
 * servers on 127.0.0.1:0, the service's calls made by hand over a channel
 * (wt.v1 messages built field by field, so a test can spoil any field), the
 * expected contents of synthetic models, and a trainer's side of a
 * PushWeights stream. Every helper asserts what it must and returns the
 * call's status for the test to judge. */
#ifndef WT_TEST_FIXTURE_H
#define WT_TEST_FIXTURE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "wt/clock.h"
#include "wt/checksum.h"
#include "wt/client.h"
#include "wt/memory.h"
#include "wt/packing.h"
#include "wt/rpc.h"
#include "wt/server.h"
#include "wt/source.h"
#include "wt/tensor.h"
#include "wt/v1/wt.pb-c.h"
#include "wt_test.h"

#define WTT_SVC "/wt.v1.WeightTransfer/"
#define WTT_DEADLINE_MS 10000

/* This process's resident set (VmRSS) in KiB; -1 when unknown. */
long wtt_rss_kib(void);
/* The memory this process holds that a leak or an unbounded buffer grows,
 * in KiB: the resident set, or under AddressSanitizer the heap bytes in use.
 * A sanitized process's RSS also holds ASan's quarantine of freed memory
 * (256 MiB by default), its shadow and its allocator's caches, which grow
 * with the number of allocations, not with what is kept; the live heap is
 * the measure there that means what RSS means in a normal build. */
long wtt_held_kib(void);
/* "RSS" or "heap": what wtt_held_kib() measures in this build. */
const char *wtt_held_what(void);
/* Descriptors this process has open now. */
int wtt_open_fds(void);
void wtt_sleep_ms(int ms);

/* --- in-process servers --------------------------------------------------- */

/* One server, a channel to it and its model's layout. */
typedef struct wtt_server {
  wt_server *srv;
  wt_rpc_channel *ch;
  char target[64];
  wt_tensor_meta *metas;
  size_t n;
  uint32_t workers;
} wtt_server;

/* Starts a server on 127.0.0.1:0 with `o` (NULL: defaults; listen, drain
 * and the model are filled in when unset) serving synthetic `layout`.
 * Fatal on failure. */
void wtt_server_start(wtt_server *s, const char *layout,
                      const wt_server_options *o);
/* The common case: workers, staging and the round timeout (0: default). */
void wtt_server_start_simple(wtt_server *s, const char *layout,
                             uint32_t workers, wt_staging staging,
                             uint32_t round_timeout_ms);
/* wtt_server_start_simple (default round timeout), a grpc init with chunks
 * of chunk_bytes (0: default), and a round opened; returns its id. */
uint64_t wtt_serve_round(wtt_server *s, const char *layout, uint32_t workers,
                         wt_staging staging, uint64_t chunk_bytes);
/* Stops the server (if not stopped already: srv NULL) and frees all. */
void wtt_server_stop(wtt_server *s);
/* Index of tensor `name` in the layout, or (size_t)-1. */
size_t wtt_layout_index(const wtt_server *s, const char *name);

/* Several servers for one client. */
typedef struct wtt_servers {
  wt_server *srv[4];
  char target[4][32];
  const char *targets[4];
  size_t n;
} wtt_servers;

/* Starts n servers, server k on models[k] with workers[k] workers,
 * `staging`, and `engines` (NULL: the built-in backends; borrowed). */
void wtt_servers_start(wtt_servers *s, size_t n, const char *const *models,
                       const uint32_t *workers, wt_staging staging,
                       wt_registry *engines);
void wtt_servers_stop(wtt_servers *s);
/* A client of every server of s, with short deadlines. */
wt_sync_client *wtt_client_of(const wtt_servers *s);
/* Every worker of every server of `c` holds exactly the bytes of `src`
 * (checksums with `alg`). */
void wtt_assert_servers_hold(wt_sync_client *c, wt_source *src,
                             wt_hash_alg alg);

/* --- calls ---------------------------------------------------------------- */

/* A unary call of `method` (the bare name: "GetServerInfo"). *resp (when
 * not NULL) is the caller's to wt_pb_free. */
wt_status *wtt_call(wt_rpc_channel *ch, const char *method,
                    const ProtobufCMessage *req,
                    const ProtobufCMessageDescriptor *type,
                    ProtobufCMessage **resp);
wt_status *wtt_init(wt_rpc_channel *ch, Wt__V1__WeightTransferInitInfo *info,
                    Wt__V1__InitWeightTransferEngineResponse **resp);
/* A grpc init with chunks of chunk_bytes (0: default); checks the answer
 * lists `workers` endpoints. */
wt_status *wtt_init_grpc(wt_rpc_channel *ch, uint64_t chunk_bytes,
                         uint32_t workers);
wt_status *wtt_start(wt_rpc_channel *ch, uint64_t *round_id);
wt_status *wtt_finish(wt_rpc_channel *ch, const char *version,
                      uint64_t round_id);
/* An UpdateWeights of `info` (borrowed) in round `round_id`. */
wt_status *wtt_update(wt_rpc_channel *ch,
                      const Wt__V1__WeightTransferUpdateInfo *info,
                      uint64_t round_id);
wt_status *wtt_abort(wt_rpc_channel *ch, uint64_t round_id, bool *aborted);
/* The visible version (malloc'd; "" before the first commit). */
char *wtt_version(wt_rpc_channel *ch, uint64_t *sequence);
void wtt_assert_version(wt_rpc_channel *ch, const char *want,
                        uint64_t want_seq);
/* The caller wt_pb_frees it. */
Wt__V1__ServerInfo *wtt_info(wt_rpc_channel *ch);
/* grpc.health.v1.Health/Check of `service` ("" for the server): *status
 * is the answer's ServingStatus (1 SERVING, 2 NOT_SERVING). */
wt_status *wtt_health_check(wt_rpc_channel *ch, const char *service,
                            int *status);
/* GetWorldSize answers `workers`. */
void wtt_assert_serving(wt_rpc_channel *ch, uint32_t workers);

/* A call on a thread of its own, for calls that overlap. */
typedef struct wtt_bg_call {
  wt_rpc_channel *ch;
  const char *method;
  const ProtobufCMessage *req;
  const ProtobufCMessageDescriptor *type;
  int64_t deadline_ms; /* 0: 120 s */
  wt_status *st;
  int64_t end_ms;
  pthread_t thread;
} wtt_bg_call;
void wtt_bg_start(wtt_bg_call *b);
/* Joins it; returns its status (the caller's). */
wt_status *wtt_bg_join(wtt_bg_call *b);

/* A FinishWeightUpdate of `round_id` as `version` in the background: *b
 * and *req (which it points to) are the caller's and must stay put. */
void wtt_bg_finish(wtt_bg_call *b, Wt__V1__FinishWeightUpdateRequest *req,
                   wt_rpc_channel *ch, const char *version, uint64_t round_id);

/* A WatchWeightVersion stream, and the next version it must send. */
wt_rpc_server_stream *wtt_watch_open(wt_rpc_channel *ch);
void wtt_watch_expect(wt_rpc_server_stream *s, const char *version,
                      uint64_t seq);

/* --- expected contents ---------------------------------------------------- */

/* The small checkpoint two suites load: "a.weight" (float32 [2, 3],
 * WTT_CKPT_A) and "b.bias" (bfloat16 [3], WTT_CKPT_B), 30 bytes in all,
 * written to dir/name; its path goes to path (cap bytes). */
extern const float WTT_CKPT_A[6];
extern const uint16_t WTT_CKPT_B[3];
void wtt_write_checkpoint(const char *dir, const char *name, char *path,
                          size_t cap);

void wtt_expected_digest(const wt_tensor_meta *m, uint64_t seed,
                         wt_hash_alg alg, char hex[WT_DIGEST_HEX_MAX]);
/* The model holds seeds[i]'s fill for tensor i: every tensor's checksum on
 * every worker over the wire, and the bytes of every worker's store
 * in-process. */
void wtt_assert_model(const wtt_server *s, const uint64_t *seeds,
                      wt_hash_alg alg);
void wtt_assert_model_seed(const wtt_server *s, uint64_t seed);
/* The same bytes, read from each worker's store in this process (no RPC):
 * for tests whose host is loaded on purpose, where ChecksumWeights' hashing
 * threads, niced below everything (docs/trust.md), would take their time. */
void wtt_assert_model_seed_direct(const wtt_server *s, uint64_t seed);

/* A trainer's tensors for s's model in one device allocation on cuda:0,
 * filled with synthetic `seed` (what wtt_assert_model_seed checks), each at
 * a multiple of `align` bytes (1: back to back). The allocation is made on
 * the first fill and kept; wt_mem_free(&d->r) releases it. */
typedef struct wtt_device_model {
  wt_mem_region r;
  wt_source_tensor t[16];
  size_t n;
} wtt_device_model;
void wtt_device_model_fill(wtt_device_model *d, const wtt_server *s,
                           uint64_t seed, uint64_t align);

/* --- update info ---------------------------------------------------------- */

#define WTT_MAX_TENSORS 128

/* An update info naming tensors idx[0..n) of `metas` (NULL idx: the first
 * n), which a test may then spoil field by field. */
typedef struct wtt_upd {
  Wt__V1__WeightTransferUpdateInfo info;
  char *names[WTT_MAX_TENSORS];
  char *dtypes[WTT_MAX_TENSORS];
  Wt__V1__Shape shapes[WTT_MAX_TENSORS];
  Wt__V1__Shape *sp[WTT_MAX_TENSORS];
  size_t idx[WTT_MAX_TENSORS];
  const wt_tensor_meta *metas;
} wtt_upd;

void wtt_upd_init(wtt_upd *u, const wt_tensor_meta *metas, const size_t *idx,
                  size_t n);

/* --- PushWeights ---------------------------------------------------------- */

/* A trainer's side of one PushWeights call: the packed buckets of `u`'s
 * tensors filled for `seed`, sent in chunks. */
typedef struct wtt_pusher {
  wt_rpc_client_stream *s;
  wt_pack_plan *plan;
  unsigned char **bucket; /* each bucket's bytes */
  size_t chunk;
  size_t b;     /* next bucket */
  uint64_t off; /* next offset in it */
  uint64_t sent;
} wtt_pusher;

/* Opens the stream and sends the header (packed_buffer 0: 64 MiB planned,
 * 0 sent). */
wt_status *wtt_push_open(wtt_pusher *p, wt_rpc_channel *ch, const wtt_upd *u,
                         uint64_t round_id, uint64_t packed_buffer,
                         size_t chunk, uint64_t seed);
/* wtt_push_open with a delta_base in the header (NULL: none). */
wt_status *wtt_push_open_delta(wtt_pusher *p, wt_rpc_channel *ch,
                               const wtt_upd *u, uint64_t round_id,
                               uint64_t packed_buffer, size_t chunk,
                               uint64_t seed, const Wt__V1__DeltaBase *base);
wt_status *wtt_push_raw_chunk(wtt_pusher *p, uint32_t bucket, uint64_t offset,
                              const void *data, size_t len);
/* A DeltaChunk as a stranger may write it: any fields, any frame. */
wt_status *wtt_push_delta_chunk(wtt_pusher *p, uint32_t bucket, uint64_t offset,
                                uint64_t raw_len, uint64_t base_digest,
                                const void *frame, size_t len);
/* Sends chunks until at least `bytes` more went out, or the plan ends. */
wt_status *wtt_push_send(wtt_pusher *p, uint64_t bytes);
/* Half-closes and returns the server's answer; frees the pusher. */
wt_status *wtt_push_close(wtt_pusher *p, Wt__V1__PushWeightsResponse **resp);
/* Cancels the stream midway (a trainer killed); frees the pusher. */
void wtt_push_cut(wtt_pusher *p);
/* A whole PushWeights of `u` for `seed`. */
wt_status *wtt_push_all(wt_rpc_channel *ch, const wtt_upd *u, uint64_t round_id,
                        uint64_t packed_buffer, size_t chunk, uint64_t seed,
                        Wt__V1__PushWeightsResponse **resp);
/* Waits (at most `ms`) until neither the server nor any of its workers is
 * "updating" (a failed round was aborted everywhere). Returns the ms it
 * took, or -1. */
int64_t wtt_wait_left_updating(wt_rpc_channel *ch, int64_t ms);
/* One whole round: start, push every tensor for `seed`, finish. */
void wtt_commit_round(const wtt_server *s, const char *version, uint64_t seed);

#endif /* WT_TEST_FIXTURE_H */
