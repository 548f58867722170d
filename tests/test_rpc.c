/* test_rpc.c: the RPC layer on gRPC core, client and server together over
 * loopback, with the wt.v1 messages. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "wt/clock.h"
#include "wt/pb.h"
#include "wt/rpc.h"
#include "wt/signals.h"
#include "wt/v1/wt.pb-c.h"
#include "wt_test.h"

#define SVC "/wt.v1.WeightTransfer/"
#define M_VERSION SVC "GetWeightVersion"
#define M_FINISH SVC "FinishWeightUpdate"
#define M_PUSH SVC "PushWeights"
#define M_WATCH SVC "WatchWeightVersion"
#define M_UPDATE SVC "UpdateWeights"
#define WATCH_COUNT 5
#define SERVER_MAX_RECEIVE (4 << 20)

typedef struct fixture {
  wt_rpc_server *server;
  wt_rpc_channel *ch;
  char target[64];

  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool release;       /* lets blocked UpdateWeights handlers return OK */
  int blocked;        /* UpdateWeights handlers waiting now */
  int saw_cancel;     /* UpdateWeights handlers woken by a cancellation */
  int pushes_read;    /* PushWeights messages read so far */
  bool push_done;     /* the PushWeights handler returned */
  wt_code push_code;  /* ... with this code */
  uint64_t push_sum;  /* sum of every data byte PushWeights received */
  int shutdown_hooks; /* on_shutdown calls */
  int64_t watch_remaining_ms; /* wt_rpc_call_remaining_ms seen by a watch */
  bool version_trainer;       /* wt_rpc_call_trainer seen by GetWeightVersion */
  wt_rpc_call *push_call;     /* the running PushWeights call, or NULL */
  wt_rpc_stream *streams[8];  /* open WT_RPC_WATCH streams */
  wt_rpc_call *parked[64];    /* FinishWeightUpdate("park") calls parked */
  int nparked;
  int nstreams, streams_closed;
} fixture;

static fixture F;

/* F's field `x`, read under F.mu. */
#define F_READ(x)                \
  __extension__({                \
    pthread_mutex_lock(&F.mu);   \
    __typeof__(F.x) v_ = F.x;    \
    pthread_mutex_unlock(&F.mu); \
    v_;                          \
  })

/* Waits until `pred` holds (under F.mu), for up to `ms`. */
static bool wait_for(bool (*pred)(void), int64_t ms) {
  int64_t end = wt_mono_ms() + ms;
  pthread_mutex_lock(&F.mu);
  while (!pred() && wt_mono_ms() < end) {
    pthread_mutex_unlock(&F.mu);
    usleep(2000);
    pthread_mutex_lock(&F.mu);
  }
  bool ok = pred();
  pthread_mutex_unlock(&F.mu);
  return ok;
}

static bool one_blocked(void) {
  return F.blocked == 1;
}
static bool none_blocked(void) {
  return F.blocked == 0;
}
static bool push_done(void) {
  return F.push_done;
}
static bool three_pushes_read(void) {
  return F.pushes_read >= 3;
}

/* ---- handlers ---------------------------------------------------------------
 */

static wt_status *h_version(wt_rpc_call *call, const ProtobufCMessage *req,
                            void *user) {
  CU_ASSERT_PTR_EQUAL(req->descriptor,
                      &wt__v1__get_weight_version_request__descriptor);
  CU_ASSERT_PTR_EQUAL(user, &F);
  pthread_mutex_lock(&F.mu);
  F.version_trainer = wt_rpc_call_trainer(call);
  pthread_mutex_unlock(&F.mu);
  Wt__V1__WeightVersion v = WT__V1__WEIGHT_VERSION__INIT;
  v.version = "v7";
  v.sequence = 7;
  return wt_rpc_call_respond(call, &v.base);
}

static wt_status *h_finish(wt_rpc_call *call, const ProtobufCMessage *req,
                           void *user) {
  const Wt__V1__FinishWeightUpdateRequest *r =
      (const Wt__V1__FinishWeightUpdateRequest *)req;
  if (strcmp(r->weight_version, "bad") == 0)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "no round in progress (state: idle)");
  if (strncmp(r->weight_version, "echo:", 5) == 0)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "weight_version '%s' is not valid here",
                         r->weight_version);
  if (strcmp(r->weight_version, "park") == 0) {
    /* Waits for the test, without a thread: the test completes or
     * resumes it. */
    pthread_mutex_lock(&F.mu);
    F.parked[F.nparked++] = call;
    pthread_mutex_unlock(&F.mu);
    return wt_rpc_call_park(call);
  }
  if (strcmp(r->weight_version, "wrong-type") == 0) {
    Wt__V1__WeightVersion v = WT__V1__WEIGHT_VERSION__INIT;
    return wt_rpc_call_respond(call, &v.base);
  }
  Wt__V1__FinishWeightUpdateResponse resp =
      WT__V1__FINISH_WEIGHT_UPDATE_RESPONSE__INIT;
  char *big = NULL;
  if (strncmp(r->weight_version, "big:", 4) == 0) {
    size_t n = strtoul(r->weight_version + 4, NULL, 10);
    big = malloc(n + 1);
    memset(big, 'b', n);
    big[n] = '\0';
    resp.weight_version = big;
  } else {
    resp.weight_version = r->weight_version;
  }
  wt_status *st = wt_rpc_call_respond(call, &resp.base);
  free(big);
  return st;
}

static wt_status *h_push(wt_rpc_call *call, const ProtobufCMessage *req,
                         void *user) {
  CU_ASSERT_PTR_NULL(req);
  Wt__V1__PushWeightsResponse resp = WT__V1__PUSH_WEIGHTS_RESPONSE__INIT;
  wt_status *st = NULL;
  uint64_t sum = 0;
  pthread_mutex_lock(&F.mu);
  F.push_call = call;
  pthread_mutex_unlock(&F.mu);
  for (;;) {
    ProtobufCMessage *m = NULL;
    st = wt_rpc_call_read(call, &m);
    if (st != NULL || m == NULL) break;
    const Wt__V1__PushWeightsChunk *c = (const Wt__V1__PushWeightsChunk *)m;
    if (c->payload_case == WT__V1__PUSH_WEIGHTS_CHUNK__PAYLOAD_CHUNK) {
      resp.tensors_received++;
      resp.bytes_received += c->chunk->data.len;
      for (size_t i = 0; i < c->chunk->data.len; i++)
        sum += c->chunk->data.data[i];
    }
    wt_pb_free(m);
    pthread_mutex_lock(&F.mu);
    F.pushes_read++;
    pthread_mutex_unlock(&F.mu);
  }
  if (st == NULL) st = wt_rpc_call_respond(call, &resp.base);
  pthread_mutex_lock(&F.mu);
  F.push_call = NULL;
  F.push_done = true;
  F.push_code = wt_status_code(st);
  F.push_sum = sum;
  pthread_mutex_unlock(&F.mu);
  return st;
}

static wt_status *h_watch(wt_rpc_call *call, const ProtobufCMessage *req,
                          void *user) {
  pthread_mutex_lock(&F.mu);
  F.watch_remaining_ms = wt_rpc_call_remaining_ms(call);
  pthread_mutex_unlock(&F.mu);
  for (int i = 1; i <= WATCH_COUNT; i++) {
    char name[16];
    snprintf(name, sizeof(name), "v%d", i);
    Wt__V1__WeightVersion v = WT__V1__WEIGHT_VERSION__INIT;
    v.version = name;
    v.sequence = (uint64_t)i;
    wt_status *st = wt_rpc_call_write(call, &v.base);
    if (st != NULL) return st;
  }
  return NULL;
}

static void wake(void *arg) {
  fixture *f = arg;
  pthread_mutex_lock(&f->mu);
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
}

/* Blocks until the test releases it or the call is cancelled, as a round
 * waiting for its data would. */
static wt_status *h_update(wt_rpc_call *call, const ProtobufCMessage *req,
                           void *user) {
  fixture *f = user;
  wt_rpc_call_set_cancel_callback(call, wake, f);
  pthread_mutex_lock(&f->mu);
  f->blocked++;
  while (!f->release && !wt_rpc_call_cancelled(call))
    pthread_cond_wait(&f->cv, &f->mu);
  bool cancelled = !f->release;
  if (cancelled) f->saw_cancel++;
  f->blocked--;
  pthread_mutex_unlock(&f->mu);
  wt_rpc_call_set_cancel_callback(call, NULL, NULL);
  if (cancelled) return wt_status_new(WT_CANCELLED, "update cancelled");
  Wt__V1__UpdateWeightsResponse resp = WT__V1__UPDATE_WEIGHTS_RESPONSE__INIT;
  resp.tensors_received = 11;
  return wt_rpc_call_respond(call, &resp.base);
}

/* WT_RPC_WATCH: kept open; the test sends on it. A request with
 * all_workers set is refused by the opener. */
#define M_CHECK "/wt.v1.WeightTransfer/ChecksumWeights"
static wt_status *s_open(wt_rpc_stream *st, const ProtobufCMessage *req,
                         void *user) {
  const Wt__V1__ChecksumWeightsRequest *r =
      (const Wt__V1__ChecksumWeightsRequest *)req;
  if (r->all_workers)
    return wt_status_new(WT_PERMISSION_DENIED, "not this one");
  pthread_mutex_lock(&F.mu);
  F.streams[F.nstreams++] = st;
  pthread_mutex_unlock(&F.mu);
  return NULL;
}

static void s_closed(wt_rpc_stream *st, void *user) {
  pthread_mutex_lock(&F.mu);
  for (int i = 0; i < F.nstreams; i++)
    if (F.streams[i] == st) F.streams[i] = F.streams[--F.nstreams];
  F.streams_closed++;
  pthread_mutex_unlock(&F.mu);
  wt_rpc_stream_release(st);
}

static const wt_rpc_method methods[] = {
    {M_VERSION, WT_RPC_UNARY, &wt__v1__get_weight_version_request__descriptor,
     &wt__v1__weight_version__descriptor, h_version, 0, NULL, NULL,
     WT_SCOPE_READER},
    {M_FINISH, WT_RPC_UNARY, &wt__v1__finish_weight_update_request__descriptor,
     &wt__v1__finish_weight_update_response__descriptor, h_finish, 0, NULL,
     NULL, 0},
    {M_PUSH, WT_RPC_CLIENT_STREAM, &wt__v1__push_weights_chunk__descriptor,
     &wt__v1__push_weights_response__descriptor, h_push, 0, NULL, NULL, 0},
    {M_WATCH, WT_RPC_SERVER_STREAM,
     &wt__v1__watch_weight_version_request__descriptor,
     &wt__v1__weight_version__descriptor, h_watch, 0, NULL, NULL, 0},
    {M_UPDATE, WT_RPC_UNARY, &wt__v1__update_weights_request__descriptor,
     &wt__v1__update_weights_response__descriptor, h_update, 0, NULL, NULL, 0},
    {M_CHECK, WT_RPC_WATCH, &wt__v1__checksum_weights_request__descriptor,
     &wt__v1__weight_version__descriptor, NULL, 0, s_open, s_closed, 0},
};
#define N_METHODS (sizeof(methods) / sizeof(methods[0]))

static void on_shutdown(void *user) {
  fixture *f = user;
  pthread_mutex_lock(&f->mu);
  f->shutdown_hooks++;
  /* The owner of parked calls ends them when the server stops. */
  while (f->nparked > 0)
    wt_rpc_call_complete(f->parked[--f->nparked],
                         wt_status_new(WT_UNAVAILABLE, "stopping"));
  pthread_mutex_unlock(&f->mu);
}

/* ---- fixture ----------------------------------------------------------------
 */

static void start_with(wt_rpc_server_options *opts,
                       const wt_rpc_channel_options *copts) {
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
  memset(&F, 0, sizeof(F));
  F.mu = mu;
  F.cv = cv;
  opts->listen = "127.0.0.1:0";
  opts->on_shutdown = on_shutdown;
  if (opts->max_receive_message_bytes == 0)
    opts->max_receive_message_bytes = SERVER_MAX_RECEIVE;
  WT_ASSERT_OK(wt_rpc_server_new(opts, methods, N_METHODS, &F, &F.server));
  WT_ASSERT_OK(wt_rpc_server_start(F.server));
  CU_ASSERT_FATAL(wt_rpc_server_port(F.server) > 0);
  snprintf(F.target, sizeof(F.target), "127.0.0.1:%d",
           wt_rpc_server_port(F.server));
  WT_ASSERT_OK(wt_rpc_channel_new(F.target, copts, &F.ch));
}

static void start(void) {
  wt_rpc_server_options opts;
  memset(&opts, 0, sizeof(opts));
  start_with(&opts, NULL);
}

static void stop(void) {
  pthread_mutex_lock(&F.mu);
  F.release = true;
  pthread_cond_broadcast(&F.cv);
  pthread_mutex_unlock(&F.mu);
  wt_rpc_channel_destroy(F.ch);
  wt_rpc_server_destroy(F.server);
  F.ch = NULL;
  F.server = NULL;
}

static void release_blocked(void) {
  pthread_mutex_lock(&F.mu);
  F.release = true;
  pthread_cond_broadcast(&F.cv);
  pthread_mutex_unlock(&F.mu);
}

/* GetWeightVersion works over `ch` (the server is serving). */
static void assert_serving_on(wt_rpc_channel *ch) {
  Wt__V1__GetWeightVersionRequest req =
      WT__V1__GET_WEIGHT_VERSION_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  WT_ASSERT_OK(wt_rpc_unary(ch, M_VERSION, &req.base,
                            &wt__v1__weight_version__descriptor, 5000, &resp));
  CU_ASSERT_PTR_NOT_NULL_FATAL(resp);
  CU_ASSERT_STRING_EQUAL(((Wt__V1__WeightVersion *)resp)->version, "v7");
  wt_pb_free(resp);
}

static void assert_serving(void) {
  assert_serving_on(F.ch);
}

static wt_status *finish_call(const char *version, int64_t deadline_ms,
                              ProtobufCMessage **resp) {
  Wt__V1__FinishWeightUpdateRequest req =
      WT__V1__FINISH_WEIGHT_UPDATE_REQUEST__INIT;
  req.weight_version = (char *)version;
  return wt_rpc_unary(F.ch, M_FINISH, &req.base,
                      &wt__v1__finish_weight_update_response__descriptor,
                      deadline_ms, resp);
}

static wt_status *update_start(int64_t deadline_ms, wt_rpc_pending **p) {
  Wt__V1__UpdateWeightsRequest req = WT__V1__UPDATE_WEIGHTS_REQUEST__INIT;
  req.round_id = 1;
  return wt_rpc_unary_start(F.ch, M_UPDATE, &req.base,
                            &wt__v1__update_weights_response__descriptor,
                            deadline_ms, p);
}

static grpc_byte_buffer *buffer_of(const void *data, size_t len) {
  grpc_slice slice = grpc_slice_from_copied_buffer(data, len);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
  grpc_slice_unref(slice);
  return bb;
}

/* ---- tests
 * ------------------------------------------------------------------- */

/* With tokens, a call keeps the scope its token granted: a trainer's
 * token makes it the trainer's, a reader's not; a call without a token, or
 * a reader's on a trainer's method, never reaches a handler. */
static void test_call_scope_is_its_tokens(void) {
  wt_token tokens[] = {{"trainer-token-0123456789", WT_SCOPE_ALL},
                       {"reader-token-0123456789", WT_SCOPE_READER}};
  wt_rpc_server_options opts;
  memset(&opts, 0, sizeof(opts));
  opts.tokens = tokens;
  opts.ntokens = 2;
  wt_rpc_channel_options copts = {.token = tokens[0].token};
  start_with(&opts, &copts);
  assert_serving_on(F.ch);
  CU_ASSERT_TRUE(F_READ(version_trainer));

  wt_rpc_channel *reader = NULL;
  wt_rpc_channel_options ropts = {.token = tokens[1].token};
  WT_ASSERT_OK(wt_rpc_channel_new(F.target, &ropts, &reader));
  assert_serving_on(reader);
  CU_ASSERT_FALSE(F_READ(version_trainer));
  /* FinishWeightUpdate needs the trainer's scope */
  ProtobufCMessage *resp = NULL;
  Wt__V1__FinishWeightUpdateRequest fin =
      WT__V1__FINISH_WEIGHT_UPDATE_REQUEST__INIT;
  fin.weight_version = "step-1";
  wt_status *st = wt_rpc_unary(
      reader, M_FINISH, &fin.base,
      &wt__v1__finish_weight_update_response__descriptor, 5000, &resp);
  CU_ASSERT_EQUAL(wt_status_code(st), WT_PERMISSION_DENIED);
  CU_ASSERT_PTR_NULL(resp);
  wt_status_free(st);
  wt_rpc_channel_destroy(reader);
  stop();
}

static void test_unary(void) {
  start();
  Wt__V1__GetWeightVersionRequest req =
      WT__V1__GET_WEIGHT_VERSION_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  WT_ASSERT_OK(wt_rpc_unary(F.ch, M_VERSION, &req.base,
                            &wt__v1__weight_version__descriptor, 0, &resp));
  Wt__V1__WeightVersion *v = (Wt__V1__WeightVersion *)resp;
  CU_ASSERT_STRING_EQUAL(v->version, "v7");
  CU_ASSERT_EQUAL(v->sequence, 7);
  wt_pb_free(resp);
  /* A server without tokens (--no-auth): every caller may drive rounds, so
   * each is the trainer (its checksums hash at the trainer's priority). */
  CU_ASSERT_TRUE(F_READ(version_trainer));

  WT_ASSERT_OK(finish_call("step-3", 0, &resp));
  CU_ASSERT_STRING_EQUAL(
      ((Wt__V1__FinishWeightUpdateResponse *)resp)->weight_version, "step-3");
  wt_pb_free(resp);
  stop();
}

static void test_error_status(void) {
  start();
  ProtobufCMessage *resp = (ProtobufCMessage *)1;
  wt_status *st = finish_call("bad", 0, &resp);
  CU_ASSERT_PTR_NULL(resp);
  CU_ASSERT_EQUAL(wt_status_code(st), WT_FAILED_PRECONDITION);
  char want[256];
  snprintf(want, sizeof(want),
           "%s " M_FINISH
           ": FAILED_PRECONDITION: no round in progress "
           "(state: idle)",
           F.target);
  CU_ASSERT_STRING_EQUAL(wt_status_message(st), want);
  wt_status_free(st);

  /* A handler that answers with the wrong message type is a server bug the
   * client hears about, not a silent mix-up. */
  WT_ASSERT_ERR(finish_call("wrong-type", 0, &resp), WT_INTERNAL,
                "is a wt.v1.WeightVersion, expected a "
                "wt.v1.FinishWeightUpdateResponse");
  stop();
}

/* A status quoting a client's long string still arrives with its code, its
 * start and its end (gRPC refuses header blocks of more than a few KiB). */
static void test_long_error_message(void) {
  start();
  size_t len = 64 * 1024;
  char *v = malloc(len + 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(v);
  memcpy(v, "echo:", 5);
  /* Two-byte UTF-8 characters: a cut must not split one. */
  for (size_t i = 5; i + 1 < len; i += 2) {
    v[i] = (char)0xC3;
    v[i + 1] = (char)0xA9;
  }
  v[len - (len - 5) % 2] = '\0';
  wt_status *st = finish_call(v, 0, NULL);
  CU_ASSERT_EQUAL(wt_status_code(st), WT_INVALID_ARGUMENT);
  const char *m = wt_status_message(st);
  CU_ASSERT_PTR_NOT_NULL(strstr(m, "INVALID_ARGUMENT: weight_version 'echo:"));
  CU_ASSERT_PTR_NOT_NULL(strstr(m, " ... "));
  size_t n = strlen(m);
  CU_ASSERT(n < 1400);
  const char *tail = "' is not valid here";
  CU_ASSERT(n > strlen(tail) && strcmp(m + n - strlen(tail), tail) == 0);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)m[i];
    if (c == 0xC3) CU_ASSERT((unsigned char)m[i + 1] == 0xA9);
    if (c == 0xA9) CU_ASSERT(i > 0 && (unsigned char)m[i - 1] == 0xC3);
  }
  wt_status_free(st);
  free(v);
  assert_serving();
  stop();
}

static void test_client_stream(void) {
  start();
  enum { CHUNKS = 200, CHUNK = 64 * 1024 };
  uint8_t *data = malloc(CHUNK);
  CU_ASSERT_PTR_NOT_NULL_FATAL(data);
  wt_rpc_client_stream *s = NULL;
  WT_ASSERT_OK(wt_rpc_client_stream_open(F.ch, M_PUSH, 10000, &s));
  uint64_t sum = 0;
  for (int i = 0; i < CHUNKS; i++) {
    for (size_t k = 0; k < CHUNK; k++) data[k] = (uint8_t)(i + k * 7);
    for (size_t k = 0; k < CHUNK; k++) sum += data[k];
    Wt__V1__BucketChunk chunk = WT__V1__BUCKET_CHUNK__INIT;
    chunk.offset = (uint64_t)i * CHUNK;
    chunk.data.data = data;
    chunk.data.len = CHUNK;
    Wt__V1__PushWeightsChunk msg = WT__V1__PUSH_WEIGHTS_CHUNK__INIT;
    msg.payload_case = WT__V1__PUSH_WEIGHTS_CHUNK__PAYLOAD_CHUNK;
    msg.chunk = &chunk;
    WT_ASSERT_OK(wt_rpc_client_stream_write(s, &msg.base));
    /* Half-way through, other methods are still answered. */
    if (i == CHUNKS / 2) assert_serving();
  }
  ProtobufCMessage *resp = NULL;
  WT_ASSERT_OK(wt_rpc_client_stream_finish(
      s, &wt__v1__push_weights_response__descriptor, &resp));
  Wt__V1__PushWeightsResponse *r = (Wt__V1__PushWeightsResponse *)resp;
  CU_ASSERT_EQUAL(r->tensors_received, CHUNKS);
  CU_ASSERT_EQUAL(r->bytes_received, (uint64_t)CHUNKS * CHUNK);
  wt_pb_free(resp);
  wt_rpc_client_stream_destroy(s);
  CU_ASSERT_TRUE(wait_for(push_done, 2000));
  CU_ASSERT_EQUAL(F_READ(push_sum), sum);
  free(data);

  /* An empty stream is a valid one. */
  WT_ASSERT_OK(wt_rpc_client_stream_open(F.ch, M_PUSH, 5000, &s));
  WT_ASSERT_OK(wt_rpc_client_stream_finish(
      s, &wt__v1__push_weights_response__descriptor, &resp));
  CU_ASSERT_EQUAL(((Wt__V1__PushWeightsResponse *)resp)->bytes_received, 0);
  wt_pb_free(resp);
  wt_rpc_client_stream_destroy(s);
  stop();
}

static void test_server_stream(void) {
  start();
  Wt__V1__WatchWeightVersionRequest req =
      WT__V1__WATCH_WEIGHT_VERSION_REQUEST__INIT;
  wt_rpc_server_stream *s = NULL;
  WT_ASSERT_OK(wt_rpc_server_stream_open(F.ch, M_WATCH, &req.base, 5000, &s));
  for (int i = 1; i <= WATCH_COUNT; i++) {
    ProtobufCMessage *m = NULL;
    bool done = true;
    WT_ASSERT_OK(wt_rpc_server_stream_read(
        s, &wt__v1__weight_version__descriptor, &m, &done));
    CU_ASSERT_FALSE(done);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL(((Wt__V1__WeightVersion *)m)->sequence, (uint64_t)i);
    wt_pb_free(m);
  }
  for (int k = 0; k < 2; k++) { /* the end, and reading past it */
    ProtobufCMessage *m = (ProtobufCMessage *)1;
    bool done = false;
    WT_ASSERT_OK(wt_rpc_server_stream_read(
        s, &wt__v1__weight_version__descriptor, &m, &done));
    CU_ASSERT_TRUE(done);
    CU_ASSERT_PTR_NULL(m);
  }
  wt_rpc_server_stream_destroy(s);
  /* The server sees the client's deadline. */
  int64_t seen_ms = F_READ(watch_remaining_ms);
  CU_ASSERT(seen_ms > 3000 && seen_ms <= 5100);

  /* Abandoning a stream half-read is fine too; so is having no deadline. */
  WT_ASSERT_OK(wt_rpc_server_stream_open(F.ch, M_WATCH, &req.base,
                                         WT_RPC_NO_DEADLINE, &s));
  ProtobufCMessage *m = NULL;
  bool done = true;
  WT_ASSERT_OK(wt_rpc_server_stream_read(s, &wt__v1__weight_version__descriptor,
                                         &m, &done));
  wt_pb_free(m);
  wt_rpc_server_stream_destroy(s);
  CU_ASSERT_EQUAL(F_READ(watch_remaining_ms), -1);
  assert_serving();
  stop();
}

static bool two_streams(void) {
  return F.nstreams == 2;
}
static bool streams_gone(void) {
  return F.nstreams == 0;
}

static void send_seq(wt_rpc_stream *st, uint64_t seq) {
  Wt__V1__WeightVersion v = WT__V1__WEIGHT_VERSION__INIT;
  v.sequence = seq;
  WT_ASSERT_OK(wt_rpc_stream_send(st, &v.base));
}

static uint64_t read_seq(wt_rpc_server_stream *s, bool *done) {
  ProtobufCMessage *m = NULL;
  *done = true;
  WT_ASSERT_OK(wt_rpc_server_stream_read(s, &wt__v1__weight_version__descriptor,
                                         &m, done));
  uint64_t seq = m ? ((Wt__V1__WeightVersion *)m)->sequence : 0;
  wt_pb_free(m);
  return seq;
}

/* WT_RPC_WATCH streams: opened without a thread, fed from any thread in
 * order, ended with a status after what was queued; a client that does not
 * read loses the oldest waiting messages, not the newest; a client that
 * leaves closes its stream; a refused opening ends the call, and its
 * opener is not told of a close (it holds no reference). */
static void test_watch_streams(void) {
  start();
  F.nstreams = F.streams_closed = 0;
  Wt__V1__ChecksumWeightsRequest req = WT__V1__CHECKSUM_WEIGHTS_REQUEST__INIT;
  wt_rpc_server_stream *a = NULL, *b = NULL;
  WT_ASSERT_OK(wt_rpc_server_stream_open(F.ch, M_CHECK, &req.base, 10000, &a));
  WT_ASSERT_OK(wt_rpc_server_stream_open(F.ch, M_CHECK, &req.base, 10000, &b));
  CU_ASSERT_FATAL(wait_for(two_streams, 5000));
  wt_rpc_stream *sa = F.streams[0], *sb = F.streams[1];
  wt_rpc_class_load l;
  wt_rpc_server_class_load(F.server, 0, &l);
  CU_ASSERT_EQUAL(l.running, 2); /* counted, on no thread */
  CU_ASSERT_EQUAL(l.threads, 0);
  for (uint64_t q = 1; q <= 3; q++) send_seq(sa, q);
  /* A message of the wrong type is the caller's bug, said at once. */
  Wt__V1__GetWeightVersionRequest wrong =
      WT__V1__GET_WEIGHT_VERSION_REQUEST__INIT;
  WT_ASSERT_ERR(wt_rpc_stream_send(sa, &wrong.base), WT_INTERNAL, "wrong type");
  wt_status *bye = wt_status_new(WT_ABORTED, "that is all");
  /* F.mu keeps s_closed (which releases the stream) waiting until both
   * ends were made: the first may close the stream at once. */
  pthread_mutex_lock(&F.mu);
  wt_rpc_stream_end(sa, bye);
  wt_rpc_stream_end(sa, NULL); /* only the first end counts */
  pthread_mutex_unlock(&F.mu);
  wt_status_free(bye);
  /* (sa may be closed and released by s_closed from here on.) */
  bool done = false;
  for (uint64_t q = 1; q <= 3; q++) CU_ASSERT_EQUAL(read_seq(a, &done), q);
  ProtobufCMessage *m = NULL;
  WT_ASSERT_ERR(wt_rpc_server_stream_read(
                    a, &wt__v1__weight_version__descriptor, &m, &done),
                WT_ABORTED, "that is all");
  CU_ASSERT_TRUE(done);
  wt_rpc_server_stream_destroy(a);

  /* b does not read: of 200 messages, it gets the newest ones in order. */
  for (uint64_t q = 1; q <= 200; q++) send_seq(sb, q);
  wt_rpc_stream_end(sb, NULL);
  uint64_t last = 0, got = 0;
  for (;;) {
    uint64_t q = read_seq(b, &done);
    if (done) break;
    CU_ASSERT(q > last);
    last = q;
    got++;
  }
  CU_ASSERT_EQUAL(last, 200);
  CU_ASSERT(got >= WT_RPC_STREAM_QUEUE);
  wt_rpc_server_stream_destroy(b);
  CU_ASSERT_TRUE(wait_for(streams_gone, 5000));

  /* A client that leaves closes its stream on the server. */
  WT_ASSERT_OK(wt_rpc_server_stream_open(F.ch, M_CHECK, &req.base, 10000, &a));
  int64_t end = wt_mono_ms() + 5000;
  while (F_READ(nstreams) < 1 && wt_mono_ms() < end) usleep(2000);
  wt_rpc_server_stream_destroy(a);
  CU_ASSERT_TRUE(wait_for(streams_gone, 5000));
  CU_ASSERT_EQUAL(F_READ(streams_closed), 3);
  /* A refused opening ends the call with the opener's status. */
  req.all_workers = true;
  WT_ASSERT_OK(wt_rpc_server_stream_open(F.ch, M_CHECK, &req.base, 10000, &a));
  WT_ASSERT_ERR(wt_rpc_server_stream_read(
                    a, &wt__v1__weight_version__descriptor, &m, &done),
                WT_PERMISSION_DENIED, "not this one");
  wt_rpc_server_stream_destroy(a);
  /* ... and its opener, which kept nothing, hears of no close. */
  usleep(200 * 1000);
  CU_ASSERT_EQUAL(F_READ(streams_closed), 3);
  /* Shutdown with one open: it closes. */
  req.all_workers = false;
  WT_ASSERT_OK(wt_rpc_server_stream_open(F.ch, M_CHECK, &req.base, 10000, &a));
  end = wt_mono_ms() + 5000;
  while (F_READ(nstreams) < 1 && wt_mono_ms() < end) usleep(2000);
  stop();
  CU_ASSERT_EQUAL(F_READ(nstreams), 0);
  wt_rpc_server_stream_destroy(a);
}

static void test_unknown_method(void) {
  start();
  Wt__V1__GetWeightVersionRequest req =
      WT__V1__GET_WEIGHT_VERSION_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  int64_t t0 = wt_mono_ms();
  WT_ASSERT_ERR(wt_rpc_unary(F.ch, SVC "NoSuchMethod", &req.base,
                             &wt__v1__weight_version__descriptor, 10000, &resp),
                WT_UNIMPLEMENTED, "unknown method " SVC "NoSuchMethod");
  CU_ASSERT(wt_mono_ms() - t0 < 2000);
  /* A stream to an unknown method ends the same way. */
  wt_rpc_client_stream *s = NULL;
  WT_ASSERT_OK(wt_rpc_client_stream_open(F.ch, "/other.Svc/Push", 10000, &s));
  WT_ASSERT_ERR(wt_rpc_client_stream_finish(s, NULL, NULL), WT_UNIMPLEMENTED,
                "unknown method /other.Svc/Push");
  wt_rpc_client_stream_destroy(s);
  CU_ASSERT(wt_mono_ms() - t0 < 2000);
  assert_serving();
  stop();
}

/* Raw bytes, as any client could send them: the server answers
 * INVALID_ARGUMENT naming the request type and keeps serving. */
static void test_garbage_request(void) {
  start();
  static const char garbage[] =
      "\x0a\x05"
      "ab";
  /* To a unary method (the request arrives with the call). */
  wt_rpc_client_stream *s = NULL;
  WT_ASSERT_OK(wt_rpc_client_stream_open(F.ch, M_FINISH, 5000, &s));
  WT_ASSERT_OK(wt_rpc_client_stream_write_raw(s, buffer_of(garbage, 4)));
  WT_ASSERT_ERR(
      wt_rpc_client_stream_finish(s, NULL, NULL), WT_INVALID_ARGUMENT,
      "request wt.v1.FinishWeightUpdateRequest: malformed message (4 bytes)");
  wt_rpc_client_stream_destroy(s);
  assert_serving();

  /* A unary call without any request message. */
  WT_ASSERT_OK(wt_rpc_client_stream_open(F.ch, M_FINISH, 5000, &s));
  WT_ASSERT_ERR(wt_rpc_client_stream_finish(s, NULL, NULL), WT_INVALID_ARGUMENT,
                "request wt.v1.FinishWeightUpdateRequest: missing");
  wt_rpc_client_stream_destroy(s);

  /* To a client stream, after a good message. */
  WT_ASSERT_OK(wt_rpc_client_stream_open(F.ch, M_PUSH, 5000, &s));
  Wt__V1__PushWeightsChunk ok = WT__V1__PUSH_WEIGHTS_CHUNK__INIT;
  WT_ASSERT_OK(wt_rpc_client_stream_write(s, &ok.base));
  wt_status *st = wt_rpc_client_stream_write_raw(s, buffer_of(garbage, 4));
  if (st != NULL) { /* the server may have answered already */
    CU_ASSERT_EQUAL(wt_status_code(st), WT_INVALID_ARGUMENT);
    wt_status_free(st);
  }
  WT_ASSERT_ERR(wt_rpc_client_stream_finish(s, NULL, NULL), WT_INVALID_ARGUMENT,
                "request wt.v1.PushWeightsChunk: malformed");
  wt_rpc_client_stream_destroy(s);

  /* And to a server stream. */
  WT_ASSERT_OK(wt_rpc_client_stream_open(F.ch, M_WATCH, 5000, &s));
  WT_ASSERT_OK(wt_rpc_client_stream_write_raw(s, buffer_of("\x07", 1)));
  WT_ASSERT_ERR(wt_rpc_client_stream_finish(s, NULL, NULL), WT_INVALID_ARGUMENT,
                "request wt.v1.WatchWeightVersionRequest: malformed");
  wt_rpc_client_stream_destroy(s);
  assert_serving();
  stop();
}

static void test_deadline_exceeded(void) {
  start();
  Wt__V1__UpdateWeightsRequest req = WT__V1__UPDATE_WEIGHTS_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  int64_t t0 = wt_mono_ms();
  char want[256];
  snprintf(want, sizeof(want), "%s " M_UPDATE ": DEADLINE_EXCEEDED", F.target);
  const char *needle = want;
  WT_ASSERT_ERR(
      wt_rpc_unary(F.ch, M_UPDATE, &req.base,
                   &wt__v1__update_weights_response__descriptor, 300, &resp),
      WT_DEADLINE_EXCEEDED, needle);
  int64_t took = wt_mono_ms() - t0;
  CU_ASSERT(took >= 250);
  CU_ASSERT(took < 1500);
  /* The server saw the deadline pass too, and its handler returned. */
  CU_ASSERT_TRUE(wait_for(none_blocked, 2000));
  CU_ASSERT_EQUAL(F_READ(saw_cancel), 1);
  assert_serving();
  stop();
}

/* While one handler waits (an UpdateWeights round waiting for its data),
 * every other method is answered; then the pending call completes. */
static void test_async_unary_while_blocked(void) {
  start();
  wt_rpc_pending *p = NULL;
  WT_ASSERT_OK(update_start(10000, &p));
  CU_ASSERT_TRUE_FATAL(wait_for(one_blocked, 5000));
  CU_ASSERT_FALSE(wt_rpc_pending_done(p));

  assert_serving();
  Wt__V1__WatchWeightVersionRequest wreq =
      WT__V1__WATCH_WEIGHT_VERSION_REQUEST__INIT;
  wt_rpc_server_stream *s = NULL;
  WT_ASSERT_OK(wt_rpc_server_stream_open(F.ch, M_WATCH, &wreq.base, 5000, &s));
  int n = 0;
  for (;;) {
    ProtobufCMessage *m = NULL;
    bool done = false;
    WT_ASSERT_OK(wt_rpc_server_stream_read(
        s, &wt__v1__weight_version__descriptor, &m, &done));
    if (done) break;
    n++;
    wt_pb_free(m);
  }
  CU_ASSERT_EQUAL(n, WATCH_COUNT);
  wt_rpc_server_stream_destroy(s);
  CU_ASSERT_FALSE(wt_rpc_pending_done(p));

  release_blocked();
  int64_t end = wt_mono_ms() + 5000;
  while (!wt_rpc_pending_done(p) && wt_mono_ms() < end) usleep(1000);
  CU_ASSERT_TRUE(wt_rpc_pending_done(p));
  ProtobufCMessage *resp = NULL;
  WT_ASSERT_OK(wt_rpc_pending_wait(p, &resp));
  CU_ASSERT_EQUAL(((Wt__V1__UpdateWeightsResponse *)resp)->tensors_received,
                  11);
  wt_pb_free(resp);
  stop();
}

static void test_async_unary_cancel(void) {
  start();
  wt_rpc_pending *p = NULL;
  WT_ASSERT_OK(update_start(10000, &p));
  CU_ASSERT_TRUE_FATAL(wait_for(one_blocked, 5000));
  int64_t t0 = wt_mono_ms();
  wt_rpc_pending_cancel(p);
  WT_ASSERT_ERR(wt_rpc_pending_wait(p, NULL), WT_CANCELLED, M_UPDATE);
  CU_ASSERT_TRUE(wait_for(none_blocked, 2000));
  CU_ASSERT(wt_mono_ms() - t0 < 1000);
  CU_ASSERT_EQUAL(F_READ(saw_cancel), 1);

  /* A pending call can be dropped without reading its response. */
  WT_ASSERT_OK(update_start(10000, &p));
  CU_ASSERT_TRUE_FATAL(wait_for(one_blocked, 5000));
  release_blocked();
  WT_ASSERT_OK(wt_rpc_pending_wait(p, NULL));
  stop();
}

static void test_message_too_large(void) {
  wt_rpc_server_options opts;
  memset(&opts, 0, sizeof(opts));
  wt_rpc_channel_options copts = {.max_receive_message_bytes = 1 << 20,
                                  .max_send_message_bytes = 8 << 20};
  start_with(&opts, &copts);
  ProtobufCMessage *resp = NULL;

  /* Above the server's receive limit. */
  size_t n = SERVER_MAX_RECEIVE + 1024;
  char *big = malloc(n + 1);
  memset(big, 'x', n);
  big[n] = '\0';
  WT_ASSERT_ERR(finish_call(big, 5000, &resp), WT_RESOURCE_EXHAUSTED, M_FINISH);
  assert_serving();

  /* Above the client's send limit: refused before it leaves. */
  char *huge = malloc((9 << 20) + 1);
  memset(huge, 'y', 9 << 20);
  huge[9 << 20] = '\0';
  WT_ASSERT_ERR(finish_call(huge, 5000, &resp), WT_RESOURCE_EXHAUSTED,
                M_FINISH);

  /* A response above the client's receive limit. */
  WT_ASSERT_ERR(finish_call("big:2000000", 5000, &resp), WT_RESOURCE_EXHAUSTED,
                M_FINISH);
  WT_ASSERT_OK(finish_call("big:1000", 5000, &resp));
  CU_ASSERT_EQUAL(
      strlen(((Wt__V1__FinishWeightUpdateResponse *)resp)->weight_version),
      1000);
  wt_pb_free(resp);
  assert_serving();
  free(big);
  free(huge);
  stop();
}

/* The server ends a call from another thread (a round aborted under an
 * idle stream): the handler's blocked read returns, the client gets the
 * server's code and message. */
static void test_server_cancels_call(void) {
  start();
  wt_rpc_client_stream *s = NULL;
  WT_ASSERT_OK(wt_rpc_client_stream_open(F.ch, M_PUSH, 10000, &s));
  uint8_t bytes[1024] = {1};
  for (int i = 0; i < 3; i++) {
    Wt__V1__BucketChunk chunk = WT__V1__BUCKET_CHUNK__INIT;
    chunk.data.data = bytes;
    chunk.data.len = sizeof(bytes);
    Wt__V1__PushWeightsChunk msg = WT__V1__PUSH_WEIGHTS_CHUNK__INIT;
    msg.payload_case = WT__V1__PUSH_WEIGHTS_CHUNK__PAYLOAD_CHUNK;
    msg.chunk = &chunk;
    WT_ASSERT_OK(wt_rpc_client_stream_write(s, &msg.base));
  }
  CU_ASSERT_TRUE_FATAL(wait_for(three_pushes_read, 5000));
  pthread_mutex_lock(&F.mu);
  /* The handler is blocked in its next read, so the call is alive. */
  CU_ASSERT_PTR_NOT_NULL_FATAL(F.push_call);
  wt_rpc_call_cancel(F.push_call, WT_ABORTED, "round 7 was aborted: test");
  pthread_mutex_unlock(&F.mu);
  CU_ASSERT_TRUE(wait_for(push_done, 2000));
  CU_ASSERT_EQUAL(F_READ(push_code), WT_CANCELLED);
  WT_ASSERT_ERR(wt_rpc_client_stream_finish(
                    s, &wt__v1__push_weights_response__descriptor, NULL),
                WT_ABORTED, "ABORTED: round 7 was aborted: test");
  wt_rpc_client_stream_destroy(s);
  assert_serving();
  stop();
}

static void test_client_cancels_stream(void) {
  start();
  wt_rpc_client_stream *s = NULL;
  WT_ASSERT_OK(wt_rpc_client_stream_open(F.ch, M_PUSH, 10000, &s));
  uint8_t bytes[1024] = {1};
  for (int i = 0; i < 3; i++) {
    Wt__V1__BucketChunk chunk = WT__V1__BUCKET_CHUNK__INIT;
    chunk.data.data = bytes;
    chunk.data.len = sizeof(bytes);
    Wt__V1__PushWeightsChunk msg = WT__V1__PUSH_WEIGHTS_CHUNK__INIT;
    msg.payload_case = WT__V1__PUSH_WEIGHTS_CHUNK__PAYLOAD_CHUNK;
    msg.chunk = &chunk;
    WT_ASSERT_OK(wt_rpc_client_stream_write(s, &msg.base));
  }
  CU_ASSERT_TRUE_FATAL(wait_for(three_pushes_read, 5000));
  int64_t t0 = wt_mono_ms();
  wt_rpc_client_stream_cancel(s);
  /* The handler, blocked in its next read, learns at once. */
  CU_ASSERT_TRUE(wait_for(push_done, 2000));
  CU_ASSERT(wt_mono_ms() - t0 < 1000);
  CU_ASSERT_EQUAL(F_READ(push_code), WT_CANCELLED);
  Wt__V1__PushWeightsChunk msg = WT__V1__PUSH_WEIGHTS_CHUNK__INIT;
  WT_ASSERT_ERR(wt_rpc_client_stream_write(s, &msg.base), WT_CANCELLED, M_PUSH);
  wt_rpc_client_stream_destroy(s);
  assert_serving();
  stop();
}

/* When the server finished a stream early (say a validation error after the
 * header), the client's next write says so. */
static void test_write_after_server_finished(void) {
  start();
  wt_rpc_client_stream *s = NULL;
  WT_ASSERT_OK(wt_rpc_client_stream_open(F.ch, M_PUSH, 5000, &s));
  WT_ASSERT_OK(wt_rpc_client_stream_write_raw(s, buffer_of("\x07", 1)));
  CU_ASSERT_TRUE(wait_for(push_done, 2000));
  usleep(50 * 1000); /* let the status travel */
  Wt__V1__PushWeightsChunk msg = WT__V1__PUSH_WEIGHTS_CHUNK__INIT;
  WT_ASSERT_ERR(wt_rpc_client_stream_write(s, &msg.base), WT_INVALID_ARGUMENT,
                "request wt.v1.PushWeightsChunk: malformed");
  wt_rpc_client_stream_destroy(s);
  stop();
}

static void test_shutdown_with_call_in_flight(void) {
  start();
  wt_rpc_pending *p = NULL;
  WT_ASSERT_OK(update_start(20000, &p));
  CU_ASSERT_TRUE_FATAL(wait_for(one_blocked, 5000));
  int64_t t0 = wt_mono_ms();
  wt_rpc_server_shutdown(F.server, 300);
  int64_t took = wt_mono_ms() - t0;
  CU_ASSERT(took >= 250);
  CU_ASSERT(took < 2000);
  CU_ASSERT_EQUAL(F_READ(shutdown_hooks), 1);
  CU_ASSERT_EQUAL(F.blocked, 0);
  CU_ASSERT_EQUAL(F_READ(saw_cancel), 1);
  wt_status *st = wt_rpc_pending_wait(p, NULL);
  CU_ASSERT_PTR_NOT_NULL(st);
  CU_ASSERT(wt_status_code(st) == WT_CANCELLED ||
            wt_status_code(st) == WT_UNAVAILABLE);
  wt_status_free(st);
  /* Shutting down twice is harmless; so are calls to a stopped server. */
  wt_rpc_server_shutdown(F.server, 300);
  CU_ASSERT_EQUAL(F_READ(shutdown_hooks), 1);
  Wt__V1__GetWeightVersionRequest req =
      WT__V1__GET_WEIGHT_VERSION_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  st = wt_rpc_unary(F.ch, M_VERSION, &req.base,
                    &wt__v1__weight_version__descriptor, 2000, &resp);
  CU_ASSERT_PTR_NOT_NULL(st);
  wt_status_free(st);
  stop();
}

/* A server with nothing in flight stops at once, whatever its deadline. */
static void test_idle_shutdown_is_quick(void) {
  start();
  assert_serving();
  int64_t t0 = wt_mono_ms();
  wt_rpc_server_shutdown(F.server, 5000);
  CU_ASSERT(wt_mono_ms() - t0 < 1000);
  stop();
}

static void test_no_server(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET};
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  CU_ASSERT_EQUAL_FATAL(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
  getsockname(fd, (struct sockaddr *)&addr, &len);
  close(fd); /* nothing listens there now */
  char target[64];
  snprintf(target, sizeof(target), "127.0.0.1:%d", ntohs(addr.sin_port));

  wt_rpc_channel *ch = NULL;
  WT_ASSERT_OK(wt_rpc_channel_new(target, NULL, &ch));
  CU_ASSERT_STRING_EQUAL(wt_rpc_channel_target(ch), target);
  Wt__V1__GetWeightVersionRequest req =
      WT__V1__GET_WEIGHT_VERSION_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  char want[256];
  snprintf(want, sizeof(want), "%s " M_VERSION ": ", target);
  int64_t t0 = wt_mono_ms();
  wt_status *st =
      wt_rpc_unary(ch, M_VERSION, &req.base,
                   &wt__v1__weight_version__descriptor, 2000, &resp);
  CU_ASSERT_PTR_NOT_NULL_FATAL(st);
  CU_ASSERT(wt_status_code(st) == WT_UNAVAILABLE ||
            wt_status_code(st) == WT_DEADLINE_EXCEEDED);
  CU_ASSERT_PTR_NOT_NULL(strstr(wt_status_message(st), want));
  CU_ASSERT(wt_mono_ms() - t0 < 2500);
  wt_status_free(st);

  wt_rpc_client_stream *s = NULL;
  st = wt_rpc_client_stream_open(ch, M_PUSH, 2000, &s);
  if (st == NULL) /* connecting may show at the first write or the finish */
    st = wt_rpc_client_stream_finish(s, NULL, NULL);
  CU_ASSERT_PTR_NOT_NULL(st);
  CU_ASSERT(wt_status_code(st) == WT_UNAVAILABLE ||
            wt_status_code(st) == WT_DEADLINE_EXCEEDED);
  wt_status_free(st);
  wt_rpc_client_stream_destroy(s);
  wt_rpc_channel_destroy(ch);
}

/* ---- a server that stopped reading ------------------------------------------
 *
 * A peer that speaks HTTP/2 just far enough to open every window wide (its
 * SETTINGS, a connection WINDOW_UPDATE, the ACK of the client's SETTINGS)
 * and then reads nothing, as a SIGSTOPped or hung server whose kernel still
 * answers: the client's kernel fills the peer's small receive buffer and
 * then waits on a shut window, so gRPC's write to the socket never
 * finishes, and gRPC 1.51 holds the completion of every send on that
 * connection until it does. */

#define STALLED_CONNS 4

typedef struct stalled_peer {
  int lfd;
  int fds[STALLED_CONNS];
  uint16_t ports[STALLED_CONNS]; /* the client's end of each */
  _Atomic int n;
  char target[64];
  pthread_t thread;
} stalled_peer;

static void *stalled_accept(void *arg) {
  stalled_peer *p = arg;
  static const uint8_t frames[] = {
      /* SETTINGS: INITIAL_WINDOW_SIZE 2^31-1, MAX_FRAME_SIZE 2^24-1 */
      0,    0,    12,   0x4,  0,    0,
      0,    0,    0,                      /* */
      0,    0x4,  0x7f, 0xff, 0xff, 0xff, /* */
      0,    0x5,  0x00, 0xff, 0xff, 0xff, /* */
      0,    0,    0,    0x4,  0x1,  0,
      0,    0,    0, /* SETTINGS ACK */
      0,    0,    4,    0x8,  0,    0,
      0,    0,    0,          /* WINDOW_UPDATE, the connection: */
      0x7f, 0xff, 0x00, 0x00, /* up to 2^31-1 */
  };
  while (p->n < STALLED_CONNS) {
    struct sockaddr_in a;
    socklen_t alen = sizeof(a);
    int fd = accept(p->lfd, (struct sockaddr *)&a, &alen);
    if (fd < 0) break;
    int i = atomic_load(&p->n);
    p->ports[i] = ntohs(a.sin_port);
    p->fds[i] = fd;
    atomic_store(&p->n, i + 1);
    if (write(fd, frames, sizeof(frames)) != (ssize_t)sizeof(frames)) break;
  }
  return NULL;
}

static void stalled_start(stalled_peer *p) {
  memset(p, 0, sizeof(*p));
  p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CU_ASSERT_FATAL(p->lfd >= 0);
  int small = 16 * 1024; /* inherited by what it accepts */
  setsockopt(p->lfd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  struct sockaddr_in addr = {.sin_family = AF_INET};
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  CU_ASSERT_FATAL(bind(p->lfd, (struct sockaddr *)&addr, sizeof(addr)) == 0);
  CU_ASSERT_FATAL(listen(p->lfd, 8) == 0);
  getsockname(p->lfd, (struct sockaddr *)&addr, &len);
  snprintf(p->target, sizeof(p->target), "127.0.0.1:%d", ntohs(addr.sin_port));
  CU_ASSERT_FATAL(pthread_create(&p->thread, NULL, stalled_accept, p) == 0);
}

/* Waits (a little) until the peer accepted `n` connections. */
static bool stalled_accepted(stalled_peer *p, int n) {
  for (int i = 0; i < 2000 && atomic_load(&p->n) < n; i++) usleep(1000);
  return atomic_load(&p->n) >= n;
}

static void stalled_stop(stalled_peer *p) {
  shutdown(p->lfd, SHUT_RDWR); /* ends the accept */
  pthread_join(p->thread, NULL);
  close(p->lfd);
  for (int i = 0; i < p->n; i++) close(p->fds[i]);
}

/* TCP_USER_TIMEOUT of this process's socket whose local port is `port`
 * (the client's end of a connection), or -1. */
static int user_timeout_of(uint16_t port) {
  for (int fd = 3; fd < 1024; fd++) {
    struct sockaddr_storage a;
    socklen_t alen = sizeof(a);
    if (getsockname(fd, (struct sockaddr *)&a, &alen) != 0) continue;
    if (a.ss_family != AF_INET && a.ss_family != AF_INET6) continue;
    uint16_t p = a.ss_family == AF_INET
                     ? ntohs(((struct sockaddr_in *)&a)->sin_port)
                     : ntohs(((struct sockaddr_in6 *)&a)->sin6_port);
    if (p != port) continue;
    int v = -1;
    socklen_t vlen = sizeof(v);
    if (getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &v, &vlen) == 0) return v;
  }
  return -1;
}

enum { STALL_DEADLINE_MS = 1000, STALL_CHUNK = 4 << 20 };

typedef struct canceller {
  wt_rpc_client_stream *s;
  int after_ms;
  int64_t at_ms; /* when it cancelled */
} canceller;

static void *cancel_later(void *arg) {
  canceller *c = arg;
  usleep((useconds_t)c->after_ms * 1000);
  c->at_ms = wt_mono_ms();
  wt_rpc_client_stream_cancel(c->s);
  return NULL;
}

/* Writes 4 MiB messages until one fails; returns its status. */
static wt_status *write_until_error(wt_rpc_client_stream *s, uint8_t *data) {
  wt_status *st = NULL;
  for (int i = 0; i < 64 && st == NULL; i++) {
    Wt__V1__BucketChunk chunk = WT__V1__BUCKET_CHUNK__INIT;
    chunk.offset = (uint64_t)i * STALL_CHUNK;
    chunk.data.data = data;
    chunk.data.len = STALL_CHUNK;
    Wt__V1__PushWeightsChunk msg = WT__V1__PUSH_WEIGHTS_CHUNK__INIT;
    msg.payload_case = WT__V1__PUSH_WEIGHTS_CHUNK__PAYLOAD_CHUNK;
    msg.chunk = &chunk;
    st = wt_rpc_client_stream_write(s, &msg.base);
  }
  return st;
}

/* Every wait on a call ends within WT_RPC_DEADLINE_GRACE_MS and a little
 * past its deadline, though gRPC would hold the stream's write, and a
 * unary's whole batch, until its connection died (here: gRPC's own
 * TCP_USER_TIMEOUT, its keepalive timeout, a minute); the connection is
 * shut down, and the error says so. Each wait is measured (the suite also
 * runs beside busy loops: the bound is the deadline plus 1 s). */
static void test_stalled_server_deadlines(void) {
  stalled_peer peer;
  stalled_start(&peer);
  wt_rpc_channel_options o = {.keepalive_timeout_ms = 60000,
                              .tcp_user_timeout_ms = -1};
  wt_rpc_channel *ch = NULL;
  WT_ASSERT_OK(wt_rpc_channel_new(peer.target, &o, &ch));
  uint8_t *data = calloc(1, STALL_CHUNK);
  CU_ASSERT_PTR_NOT_NULL_FATAL(data);

  int64_t t0 = wt_mono_ms();
  wt_rpc_client_stream *s = NULL;
  WT_ASSERT_OK(wt_rpc_client_stream_open(ch, M_PUSH, STALL_DEADLINE_MS, &s));
  wt_status *st = write_until_error(s, data);
  int64_t took = wt_mono_ms() - t0;
  CU_ASSERT_PTR_NOT_NULL_FATAL(st);
  CU_ASSERT_EQUAL(wt_status_code(st), WT_DEADLINE_EXCEEDED);
  CU_ASSERT_PTR_NOT_NULL(strstr(wt_status_message(st), peer.target));
  CU_ASSERT_PTR_NOT_NULL(strstr(wt_status_message(st), "shut down"));
  printf("\n  a write to a server that reads nothing: %s after %lld ms",
         wt_status_message(st), (long long)took);
  wt_status_free(st);
  CU_ASSERT(took < STALL_DEADLINE_MS + 1000);
  wt_rpc_client_stream_destroy(s);
  CU_ASSERT(wt_mono_ms() - t0 < STALL_DEADLINE_MS + 1000);

  /* A unary call whose request the connection cannot take. */
  Wt__V1__BucketChunk chunk = WT__V1__BUCKET_CHUNK__INIT;
  chunk.data.data = data;
  chunk.data.len = STALL_CHUNK;
  Wt__V1__PushWeightsChunk big = WT__V1__PUSH_WEIGHTS_CHUNK__INIT;
  big.payload_case = WT__V1__PUSH_WEIGHTS_CHUNK__PAYLOAD_CHUNK;
  big.chunk = &chunk;
  ProtobufCMessage *resp = NULL;
  t0 = wt_mono_ms();
  st = wt_rpc_unary(ch, M_UPDATE, &big.base,
                    &wt__v1__update_weights_response__descriptor,
                    STALL_DEADLINE_MS, &resp);
  took = wt_mono_ms() - t0;
  CU_ASSERT_PTR_NOT_NULL_FATAL(st);
  CU_ASSERT_EQUAL(wt_status_code(st), WT_DEADLINE_EXCEEDED);
  CU_ASSERT_PTR_NOT_NULL(strstr(wt_status_message(st), peer.target));
  printf("\n  a unary call to it: %s after %lld ms", wt_status_message(st),
         (long long)took);
  wt_status_free(st);
  CU_ASSERT(took < STALL_DEADLINE_MS + 1000);

  /* A cancel from another thread ends a write gRPC holds within the
   * grace, long before the deadline. */
  WT_ASSERT_OK(wt_rpc_client_stream_open(ch, M_PUSH, 60000, &s));
  canceller c = {.s = s, .after_ms = 300};
  pthread_t th;
  CU_ASSERT_FATAL(pthread_create(&th, NULL, cancel_later, &c) == 0);
  st = write_until_error(s, data);
  int64_t t1 = wt_mono_ms();
  pthread_join(th, NULL);
  CU_ASSERT_PTR_NOT_NULL(st);
  wt_status_free(st);
  wt_rpc_client_stream_destroy(s);
  took = wt_mono_ms() - c.at_ms;
  printf("\n  a stream to it cancelled: ended %lld ms after the cancel",
         (long long)(t1 - c.at_ms));
  CU_ASSERT(took < WT_RPC_DEADLINE_GRACE_MS + 1000);

  free(data);
  wt_rpc_channel_destroy(ch);
  stalled_stop(&peer);
}

/* The channel's sockets carry its own TCP_USER_TIMEOUT, set apart from
 * the keepalive timeout that gRPC sets it to; the kernel then drops a
 * connection whose window stays shut that long, and the call's error names
 * the setting. */
static void test_tcp_user_timeout(void) {
  if (!wt_rpc_tcp_user_timeout_supported()) {
    printf("\n  (skipped: this gRPC keeps its own TCP_USER_TIMEOUT)");
    return;
  }
  stalled_peer peer;
  stalled_start(&peer);
  wt_rpc_channel_options o = {.keepalive_timeout_ms = 60000,
                              .tcp_user_timeout_ms = 700};
  wt_rpc_channel *ch = NULL;
  WT_ASSERT_OK(wt_rpc_channel_new(peer.target, &o, &ch));
  uint8_t *data = calloc(1, STALL_CHUNK);
  CU_ASSERT_PTR_NOT_NULL_FATAL(data);
  int64_t t0 = wt_mono_ms();
  wt_rpc_client_stream *s = NULL;
  WT_ASSERT_OK(wt_rpc_client_stream_open(ch, M_PUSH, 30000, &s));
  CU_ASSERT_FATAL(stalled_accepted(&peer, 1));
  CU_ASSERT_EQUAL(user_timeout_of(peer.ports[0]), 700);
  wt_status *st = write_until_error(s, data);
  int64_t took = wt_mono_ms() - t0;
  CU_ASSERT_PTR_NOT_NULL_FATAL(st);
  CU_ASSERT_EQUAL(wt_status_code(st), WT_UNAVAILABLE);
  CU_ASSERT_PTR_NOT_NULL(strstr(wt_status_message(st), "tcp_user_timeout_ms"));
  CU_ASSERT_PTR_NOT_NULL(strstr(wt_status_message(st), "700 ms"));
  printf("\n  a shut window for 700 ms (tcp_user_timeout_ms): %s after %lld ms",
         wt_status_message(st), (long long)took);
  wt_status_free(st);
  CU_ASSERT(took < 700 + 1500);
  wt_rpc_client_stream_destroy(s);
  wt_rpc_channel_destroy(ch);

  /* -1 leaves gRPC's own: the keepalive timeout. */
  o.tcp_user_timeout_ms = -1;
  WT_ASSERT_OK(wt_rpc_channel_new(peer.target, &o, &ch));
  WT_ASSERT_OK(wt_rpc_client_stream_open(ch, M_PUSH, 30000, &s));
  CU_ASSERT_FATAL(stalled_accepted(&peer, 2));
  CU_ASSERT_EQUAL(user_timeout_of(peer.ports[1]), 60000);
  wt_rpc_client_stream_destroy(s);
  wt_rpc_channel_destroy(ch);
  free(data);
  stalled_stop(&peer);
}

static void test_handler_cap(void) {
  wt_rpc_server_options opts;
  memset(&opts, 0, sizeof(opts));
  opts.max_handler_threads = 1;
  start_with(&opts, NULL);
  wt_rpc_pending *p = NULL;
  WT_ASSERT_OK(update_start(10000, &p));
  CU_ASSERT_TRUE_FATAL(wait_for(one_blocked, 5000));
  Wt__V1__GetWeightVersionRequest req =
      WT__V1__GET_WEIGHT_VERSION_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  WT_ASSERT_ERR(wt_rpc_unary(F.ch, M_VERSION, &req.base,
                             &wt__v1__weight_version__descriptor, 2000, &resp),
                WT_RESOURCE_EXHAUSTED,
                "server busy: 1 default calls running and 0 waiting (the "
                "limit)");
  release_blocked();
  WT_ASSERT_OK(wt_rpc_pending_wait(p, NULL));
  /* The slot is free the moment a reply is sent: call after call on the
   * one thread, none refused. */
  for (int i = 0; i < 100; i++) {
    WT_ASSERT_OK(wt_rpc_unary(F.ch, M_VERSION, &req.base,
                              &wt__v1__weight_version__descriptor, 2000,
                              &resp));
    wt_pb_free(resp);
  }
  wt_rpc_class_load l;
  wt_rpc_server_class_load(F.server, 0, &l);
  CU_ASSERT_EQUAL(l.threads, 1);
  CU_ASSERT_EQUAL(l.queued, 0);
  stop();
}

static bool one_parked(void) {
  return F.nparked == 1;
}

static int g_want_parked;
static bool n_parked(void) {
  return F.nparked == g_want_parked;
}

/* A parked call's continuation: answers on a handler thread. */
static wt_status *resumed(wt_rpc_call *call, void *arg, void *user) {
  (void)user;
  Wt__V1__FinishWeightUpdateResponse resp =
      WT__V1__FINISH_WEIGHT_UPDATE_RESPONSE__INIT;
  resp.weight_version = arg;
  return wt_rpc_call_respond(call, &resp.base);
}

/* Issue 45, item 3: calls that wait for another party hold no thread and
 * no place. With one handler thread, 32 parked calls; the server still
 * answers; each parked call ends as its owner says (completed from the
 * test's thread, or resumed onto the handler thread); one still parked at
 * shutdown is ended by the owner's on_shutdown, and the stop returns. */
static void test_parked_calls(void) {
  wt_rpc_server_options opts;
  memset(&opts, 0, sizeof(opts));
  opts.max_handler_threads = 1;
  start_with(&opts, NULL);
  wt_rpc_pending *p[33];
  Wt__V1__FinishWeightUpdateRequest req =
      WT__V1__FINISH_WEIGHT_UPDATE_REQUEST__INIT;
  req.weight_version = "park";
  /* One after another (a burst is bounded by the class's queue, as any
   * burst): each parks, and the next finds the one thread free. */
  for (int i = 0; i < 32; i++) {
    WT_ASSERT_OK(wt_rpc_unary_start(
        F.ch, M_FINISH, &req.base,
        &wt__v1__finish_weight_update_response__descriptor, 20000, &p[i]));
    g_want_parked = i + 1;
    CU_ASSERT_TRUE_FATAL(wait_for(n_parked, 10000));
  }
  CU_ASSERT_EQUAL(wt_rpc_server_parked(F.server, 0), 32);
  assert_serving(); /* the one thread is free */
  wt_rpc_class_load l;
  wt_rpc_server_class_load(F.server, 0, &l);
  CU_ASSERT_EQUAL(l.threads, 1);
  CU_ASSERT_EQUAL(l.running, 0);
  /* Which pending call each parked one is: by arrival, not known; each
   * answer says what ended it. */
  pthread_mutex_lock(&F.mu);
  wt_rpc_call *mine[32];
  memcpy(mine, F.parked, sizeof(mine));
  F.nparked = 0;
  pthread_mutex_unlock(&F.mu);
  for (int i = 0; i < 32; i++) {
    if (i % 2 == 0) {
      Wt__V1__FinishWeightUpdateResponse resp =
          WT__V1__FINISH_WEIGHT_UPDATE_RESPONSE__INIT;
      resp.weight_version = "completed";
      wt_rpc_call_complete(mine[i], wt_rpc_call_respond(mine[i], &resp.base));
    } else {
      wt_rpc_call_resume(mine[i], resumed, "resumed");
    }
  }
  int completed = 0, resumes = 0;
  for (int i = 0; i < 32; i++) {
    ProtobufCMessage *resp = NULL;
    WT_ASSERT_OK(wt_rpc_pending_wait(p[i], &resp));
    if (resp == NULL) continue;
    const char *v =
        ((Wt__V1__FinishWeightUpdateResponse *)resp)->weight_version;
    completed += strcmp(v, "completed") == 0;
    resumes += strcmp(v, "resumed") == 0;
    wt_pb_free(resp);
  }
  CU_ASSERT_EQUAL(completed, 16);
  CU_ASSERT_EQUAL(resumes, 16);
  CU_ASSERT_EQUAL(wt_rpc_server_parked(F.server, 0), 0);
  /* One left parked: the stop's on_shutdown ends it, and its client hears. */
  WT_ASSERT_OK(wt_rpc_unary_start(
      F.ch, M_FINISH, &req.base,
      &wt__v1__finish_weight_update_response__descriptor, 20000, &p[32]));
  CU_ASSERT_TRUE_FATAL(wait_for(one_parked, 10000));
  int64_t t0 = wt_mono_ms();
  wt_rpc_server_shutdown(F.server, 5000);
  CU_ASSERT(wt_mono_ms() - t0 < 2000);
  WT_ASSERT_ERR(wt_rpc_pending_wait(p[32], NULL), WT_UNAVAILABLE, "stopping");
  stop();
}

/* What admitted calls' requests hold is bounded (#20, attack 2's second
 * half): past max_held_bytes a call is refused RESOURCE_EXHAUSTED at once,
 * not buffered, and a call with no request bytes still runs. */
static void test_requests_held_bounded(void) {
  wt_rpc_server_options opts;
  memset(&opts, 0, sizeof(opts));
  opts.max_handler_threads = 4;
  opts.max_held_bytes = 100;
  start_with(&opts, NULL);
  wt_rpc_pending *p = NULL;
  WT_ASSERT_OK(update_start(10000, &p)); /* holds its few bytes */
  CU_ASSERT_TRUE_FATAL(wait_for(one_blocked, 5000));
  char big[300];
  memset(big, 'v', sizeof(big) - 1);
  big[sizeof(big) - 1] = 0;
  WT_ASSERT_ERR(finish_call(big, 2000, NULL), WT_RESOURCE_EXHAUSTED,
                "the requests of calls in progress hold");
  assert_serving();
  release_blocked();
  WT_ASSERT_OK(wt_rpc_pending_wait(p, NULL));
  assert_serving();
  stop();
}

/* A client that calls again the moment it has its answer is served by the
 * thread that answered, which counts as about to be idle while it sends
 * the status: once warm, clients calling back to back start no more
 * threads (bench/growth.sh shows the case this guards, a new wt-push per
 * round, where a server's handler threads grew from 7 to 9). */
static void *calls_in_a_row(void *arg) {
  int *failed = arg;
  Wt__V1__GetWeightVersionRequest req =
      WT__V1__GET_WEIGHT_VERSION_REQUEST__INIT;
  for (int i = 0; i < 300; i++) {
    ProtobufCMessage *resp = NULL;
    wt_status *st =
        wt_rpc_unary(F.ch, M_VERSION, &req.base,
                     &wt__v1__weight_version__descriptor, 2000, &resp);
    if (st != NULL) (*failed)++;
    wt_status_free(st);
    wt_pb_free(resp);
  }
  return NULL;
}

/* Two clients, each calling back to back, 300 calls each. */
static void two_clients_in_a_row(void) {
  enum { CLIENTS = 2 };
  pthread_t t[CLIENTS];
  int failed[CLIENTS] = {0};
  for (int k = 0; k < CLIENTS; k++)
    CU_ASSERT_EQUAL_FATAL(
        pthread_create(&t[k], NULL, calls_in_a_row, &failed[k]), 0);
  for (int k = 0; k < CLIENTS; k++) {
    pthread_join(t[k], NULL);
    CU_ASSERT_EQUAL(failed[k], 0);
  }
}

static void test_back_to_back_calls_one_thread(void) {
  wt_rpc_server_options opts;
  memset(&opts, 0, sizeof(opts));
  opts.max_handler_threads = 16;
  start_with(&opts, NULL);
  /* The first calls may start a thread each while none is running yet;
   * after that, no call starts another. */
  two_clients_in_a_row();
  wt_rpc_class_load l;
  wt_rpc_server_class_load(F.server, 0, &l);
  int warm = l.threads;
  for (int i = 0; i < 3; i++) two_clients_in_a_row();
  wt_rpc_server_class_load(F.server, 0, &l);
  printf(
      "\n  2 clients x 300 calls in a row: %d handler thread(s); after "
      "1,800 more: %d",
      warm, l.threads);
  CU_ASSERT(warm <= 3);
  CU_ASSERT_EQUAL(l.threads, warm);
  stop();
}

static void test_server_config_errors(void) {
  wt_rpc_server *s = NULL;
  const wt_rpc_method twice[] = {methods[0], methods[0]};
  WT_ASSERT_ERR(wt_rpc_server_new(NULL, twice, 2, NULL, &s),
                WT_INVALID_ARGUMENT, M_VERSION ": registered twice");
  wt_rpc_method bad = methods[0];
  bad.path = "GetWeightVersion";
  WT_ASSERT_ERR(wt_rpc_server_new(NULL, &bad, 1, NULL, &s), WT_INVALID_ARGUMENT,
                "path 'GetWeightVersion'");
  CU_ASSERT_PTR_NULL(s);

  /* A port someone else listens on. */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET};
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  CU_ASSERT_EQUAL_FATAL(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
  CU_ASSERT_EQUAL_FATAL(listen(fd, 1), 0);
  getsockname(fd, (struct sockaddr *)&addr, &len);
  char listen_addr[64], want[128];
  snprintf(listen_addr, sizeof(listen_addr), "127.0.0.1:%d",
           ntohs(addr.sin_port));
  snprintf(want, sizeof(want), "listen address '%s'", listen_addr);
  const char *needle = want;
  wt_rpc_server_options opts;
  memset(&opts, 0, sizeof(opts));
  opts.listen = listen_addr;
  WT_ASSERT_OK(wt_rpc_server_new(&opts, methods, N_METHODS, NULL, &s));
  WT_ASSERT_ERR(wt_rpc_server_start(s), WT_UNAVAILABLE, needle);
  CU_ASSERT_EQUAL(wt_rpc_server_port(s), 0);
  wt_rpc_server_destroy(s);
  close(fd);

  /* Created and never started. */
  WT_ASSERT_OK(wt_rpc_server_new(NULL, methods, N_METHODS, NULL, &s));
  wt_rpc_server_destroy(s);

  wt_rpc_channel *ch = NULL;
  WT_ASSERT_ERR(wt_rpc_channel_new("", NULL, &ch), WT_INVALID_ARGUMENT,
                "target");
}

static void test_signal_wait(void) {
  sigset_t old;
  pthread_sigmask(SIG_SETMASK, NULL, &old);
  WT_ASSERT_OK(wt_signal_block_termination());
  CU_ASSERT_EQUAL(wt_signal_wait(10), 0);
  /* Sent to this thread only: other threads of the test runner (gRPC's)
   * do not block it. */
  pthread_kill(pthread_self(), SIGTERM);
  CU_ASSERT_EQUAL(wt_signal_wait(1000), SIGTERM);
  pthread_kill(pthread_self(), SIGINT);
  CU_ASSERT_EQUAL(wt_signal_wait(-1), SIGINT);
  CU_ASSERT_EQUAL(wt_signal_wait(0), 0);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  signal(SIGPIPE, SIG_DFL);
}

void wt_test_suite_rpc(void) {
  CU_pSuite s = CU_add_suite("rpc", NULL, NULL);
  CU_add_test(s, "unary round trip", test_unary);
  CU_add_test(s, "a call's scope is its token's",
              test_call_scope_is_its_tokens);
  CU_add_test(s, "error status and message", test_error_status);
  CU_add_test(s, "a long error message is cut, not lost",
              test_long_error_message);
  CU_add_test(s, "client stream of 200 x 64 KiB", test_client_stream);
  CU_add_test(s, "server stream", test_server_stream);
  CU_add_test(s, "watch streams without a thread", test_watch_streams);
  CU_add_test(s, "unknown method", test_unknown_method);
  CU_add_test(s, "garbage request bytes", test_garbage_request);
  CU_add_test(s, "deadline exceeded", test_deadline_exceeded);
  CU_add_test(s, "async unary while a handler blocks",
              test_async_unary_while_blocked);
  CU_add_test(s, "async unary cancel", test_async_unary_cancel);
  CU_add_test(s, "message too large", test_message_too_large);
  CU_add_test(s, "client cancels a stream", test_client_cancels_stream);
  CU_add_test(s, "the server cancels a call", test_server_cancels_call);
  CU_add_test(s, "write after the server finished",
              test_write_after_server_finished);
  CU_add_test(s, "shutdown with a call in flight",
              test_shutdown_with_call_in_flight);
  CU_add_test(s, "idle shutdown", test_idle_shutdown_is_quick);
  CU_add_test(s, "no server", test_no_server);
  CU_add_test(s, "parked calls hold no thread", test_parked_calls);
  CU_add_test(s, "a server that stopped reading: waits end by the deadline",
              test_stalled_server_deadlines);
  CU_add_test(s, "the channel's own TCP user timeout", test_tcp_user_timeout);
  CU_add_test(s, "handler cap", test_handler_cap);
  CU_add_test(s, "requests held are bounded", test_requests_held_bounded);
  CU_add_test(s, "back-to-back calls start one thread",
              test_back_to_back_calls_one_thread);
  CU_add_test(s, "configuration errors", test_server_config_errors);
  CU_add_test(s, "signal wait", test_signal_wait);
}
