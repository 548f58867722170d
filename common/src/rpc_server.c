/* rpc_server.c: the server half of the RPC layer (see wt/rpc.h).
 *
 * Threads: one polling thread runs grpc_completion_queue_next and never
 * blocks on anything else; each accepted call gets a handler thread. A
 * handler's blocking helpers start one batch on the call (under the call's
 * mutex, so batches of one call never start concurrently) and wait on the
 * call's condition variable, which the polling thread signals.
 *
 * Lifetimes: a wt_rpc_call holds two references, one for its handler thread
 * (dropped when the thread has been joined) and one for its
 * RECV_CLOSE_ON_SERVER batch (dropped when that completes); the gRPC call is
 * unreferenced when both are gone, so no tag can outlive its owner. Request
 * slots and rejected calls are owned by their one outstanding tag.
 */

#include <errno.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wt/log.h"
#include "wt/pb.h"
#include "wt/rpc.h"

#include "rpc_internal.h"

#define MOD "rpc"
#define DEFAULT_LISTEN "127.0.0.1:50051"
#define DEFAULT_REQUESTS_PER_METHOD 4
#define DEFAULT_MAX_HANDLER_THREADS 64
/* How often the polling thread wakes without events to join finished
 * handler threads. */
#define POLL_INTERVAL_MS 200

typedef enum tag_kind {
  TAG_REQUEST,    /* a registered-method slot: a call arrived (or shutdown) */
  TAG_GENERIC,    /* the catch-all slot: an unknown method */
  TAG_REJECT,     /* a call answered by the polling thread itself finished */
  TAG_CALL_OP,    /* a handler's batch completed */
  TAG_CALL_CLOSE, /* a call's RECV_CLOSE_ON_SERVER completed */
  TAG_SHUTDOWN,   /* grpc_server_shutdown_and_notify completed */
} tag_kind;

typedef struct tag {
  tag_kind kind;
  void *owner;
} tag;

typedef enum server_state {
  STATE_NEW,
  STATE_RUNNING,
  STATE_SHUTTING_DOWN,
  STATE_DONE,
} server_state;

struct wt_rpc_server {
  const wt_rpc_method *methods;
  size_t n_methods;
  void **registered; /* grpc_server_register_method handles, per method */
  void *user;
  char *listen;
  int requests_per_method;
  int max_handler_threads;
  void (*on_shutdown)(void *user);

  grpc_server *server;
  grpc_completion_queue *cq;
  int port;
  pthread_t poller;
  bool poller_started;
  tag shutdown_tag;

  pthread_mutex_t mu; /* guards everything below */
  pthread_cond_t cv;  /* shutdown_notified, zombies, n_threads changed */
  server_state state;
  bool shutdown_notified;
  int n_threads;        /* handler threads not joined yet */
  wt_rpc_call *zombies; /* handlers that returned, waiting to be joined */
};

struct wt_rpc_call {
  wt_rpc_server *server;
  const wt_rpc_method *method;
  grpc_call *call;
  gpr_timespec deadline; /* GPR_CLOCK_MONOTONIC */
  char *peer;            /* gpr_malloc'd */
  ProtobufCMessage *request;
  grpc_byte_buffer *response;
  tag op_tag;
  tag close_tag;
  atomic_int refs;
  atomic_bool cancelled;

  pthread_mutex_t mu; /* batch starts, op_done, op_ok */
  pthread_cond_t cv;
  bool op_done;
  int op_ok;
  int close_cancelled;        /* written by gRPC for RECV_CLOSE_ON_SERVER */
  bool initial_metadata_sent; /* handler thread only */

  pthread_mutex_t cb_mu; /* cancel_fn, cancel_arg */
  void (*cancel_fn)(void *arg);
  void *cancel_arg;

  pthread_t thread;
  wt_rpc_call *next_zombie;
};

/* A registered-method or catch-all request waiting for a call. */
typedef struct request_slot {
  tag tag;
  wt_rpc_server *server;
  size_t method; /* index into server->methods; unused for TAG_GENERIC */
  grpc_call *call;
  gpr_timespec deadline;
  grpc_metadata_array metadata;
  grpc_byte_buffer *payload;
  grpc_call_details details;
} request_slot;

/* A call answered with a status by the polling thread (unknown method,
 * malformed request, server busy), kept until its last batch completes. */
typedef struct reject_call {
  tag tag;
  grpc_call *call;
  grpc_slice details;
  int cancelled;
} reject_call;

/* ---- small helpers ------------------------------------------------------ */

static gpr_timespec deadline_after_ms(int64_t ms) {
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                      gpr_time_from_millis(ms, GPR_TIMESPAN));
}

static void abs_timespec_after_ms(struct timespec *ts, int64_t ms) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  ts->tv_sec += ms / 1000;
  ts->tv_nsec += (ms % 1000) * 1000000L;
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000L;
  }
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int init_monotonic_cond(pthread_cond_t *cv) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  int rc = pthread_cond_init(cv, &attr);
  pthread_condattr_destroy(&attr);
  return rc;
}

static const char *kind_name(wt_rpc_kind kind) {
  switch (kind) {
    case WT_RPC_UNARY:
      return "unary";
    case WT_RPC_CLIENT_STREAM:
      return "client stream";
    case WT_RPC_SERVER_STREAM:
      return "server stream";
  }
  return "unknown kind";
}

/* Status messages may quote what a client sent (a name, a version); gRPC
 * carries the message in a header block of a few KiB and answers a larger
 * one with an unrelated RESOURCE_EXHAUSTED. Longer messages keep their
 * start (the call, the parameter) and end (what was wrong) around "...". */
#define MAX_STATUS_BYTES 1024

/* Moves `i` back to the start of the UTF-8 sequence it points into. */
static size_t utf8_start(const char *s, size_t i) {
  while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
  return i;
}

static grpc_slice status_details(const char *msg) {
  size_t len = strlen(msg);
  if (len <= MAX_STATUS_BYTES) return grpc_slice_from_copied_string(msg);
  static const char cut[] = " ... ";
  size_t half = (MAX_STATUS_BYTES - (sizeof(cut) - 1)) / 2;
  size_t head = utf8_start(msg, half);
  size_t tail = utf8_start(msg, len - half);
  if (tail < head) tail = head;
  grpc_slice out = grpc_slice_malloc(head + (sizeof(cut) - 1) + (len - tail));
  char *p = (char *)GRPC_SLICE_START_PTR(out);
  memcpy(p, msg, head);
  memcpy(p + head, cut, sizeof(cut) - 1);
  memcpy(p + head + sizeof(cut) - 1, msg + tail, len - tail);
  return out;
}

/* ---- rejected calls ------------------------------------------------------ */

/* Answers `call` with `code` and a message, without a handler thread; takes
 * over the caller's reference to `call`. Runs on the polling thread. */
static void reject(wt_rpc_server *s, grpc_call *call, wt_code code,
                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void reject(wt_rpc_server *s, grpc_call *call, wt_code code,
                   const char *fmt, ...) {
  char *msg = NULL;
  va_list ap;
  va_start(ap, fmt);
  if (vasprintf(&msg, fmt, ap) < 0) msg = NULL;
  va_end(ap);
  WT_LOGD(MOD, "answering %s: %s", wt_code_name(code), msg ? msg : "");

  reject_call *r = calloc(1, sizeof(*r));
  if (r == NULL) {
    grpc_call_cancel_with_status(call, wt_code_to_grpc(code),
                                 msg ? msg : "out of memory", NULL);
    grpc_call_unref(call);
    free(msg);
    return;
  }
  r->tag.kind = TAG_REJECT;
  r->tag.owner = r;
  r->call = call;
  r->details = status_details(msg ? msg : "out of memory");
  free(msg);

  grpc_op ops[3];
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[1].data.send_status_from_server.status = wt_code_to_grpc(code);
  ops[1].data.send_status_from_server.status_details = &r->details;
  ops[2].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  ops[2].data.recv_close_on_server.cancelled = &r->cancelled;
  grpc_call_error err = grpc_call_start_batch(call, ops, 3, &r->tag, NULL);
  if (err != GRPC_CALL_OK) {
    WT_LOGW(MOD, "cannot answer a call: %s", grpc_call_error_to_string(err));
    grpc_call_unref(call);
    grpc_slice_unref(r->details);
    free(r);
  }
  (void)s;
}

static void reject_done(reject_call *r) {
  grpc_call_unref(r->call);
  grpc_slice_unref(r->details);
  free(r);
}

/* ---- calls ----------------------------------------------------------------
 */

static void call_unref(wt_rpc_call *c) {
  if (atomic_fetch_sub(&c->refs, 1) != 1) return;
  grpc_call_unref(c->call);
  if (c->peer) gpr_free(c->peer);
  wt_pb_free(c->request);
  if (c->response) grpc_byte_buffer_destroy(c->response);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->cb_mu);
  free(c);
}

/* Starts one batch on the call and waits until it completes. Returns the
 * batch's success flag, or -1 when it could not be started. */
static int call_run_batch(wt_rpc_call *c, const grpc_op *ops, size_t n) {
  pthread_mutex_lock(&c->mu);
  c->op_done = false;
  grpc_call_error err =
      grpc_call_start_batch(c->call, ops, n, &c->op_tag, NULL);
  if (err != GRPC_CALL_OK) {
    pthread_mutex_unlock(&c->mu);
    WT_LOGW(MOD, "%s: cannot start a batch: %s", c->method->path,
            grpc_call_error_to_string(err));
    return -1;
  }
  while (!c->op_done) pthread_cond_wait(&c->cv, &c->mu);
  int ok = c->op_ok;
  pthread_mutex_unlock(&c->mu);
  return ok;
}

/* The status for a read or write that failed because the call is over. */
static wt_status *call_failed(wt_rpc_call *c, const char *what) {
  if (wt_rpc_call_remaining_ms(c) == 0)
    return wt_status_new(WT_DEADLINE_EXCEEDED,
                         "%s: %s: the client's deadline passed",
                         c->method->path, what);
  pthread_mutex_lock(&c->server->mu);
  bool stopping = c->server->state >= STATE_SHUTTING_DOWN;
  pthread_mutex_unlock(&c->server->mu);
  if (stopping)
    return wt_status_new(WT_CANCELLED, "%s: %s: the server is shutting down",
                         c->method->path, what);
  return wt_status_new(WT_CANCELLED,
                       "%s: %s: the client (%s) cancelled the call or went "
                       "away",
                       c->method->path, what, c->peer ? c->peer : "?");
}

static void call_send_status(wt_rpc_call *c, const wt_status *st) {
  grpc_op ops[3];
  size_t n = 0;
  grpc_byte_buffer *empty = NULL;
  memset(ops, 0, sizeof(ops));
  if (!c->initial_metadata_sent) ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
  if (st == NULL && c->method->kind != WT_RPC_SERVER_STREAM) {
    if (c->response == NULL) /* the default message encodes as no bytes */
      c->response = empty = grpc_raw_byte_buffer_create(NULL, 0);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = c->response;
  }
  grpc_slice details = status_details(st ? wt_status_message(st) : "");
  ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[n].data.send_status_from_server.status =
      wt_code_to_grpc(wt_status_code(st));
  ops[n++].data.send_status_from_server.status_details = st ? &details : NULL;
  int ok = call_run_batch(c, ops, n);
  if (ok == 0)
    WT_LOGD(MOD, "%s: status %s not delivered (the call was over)",
            c->method->path, wt_code_name(wt_status_code(st)));
  grpc_slice_unref(details);
  (void)empty; /* freed with c->response */
}

static void *handler_main(void *arg) {
  wt_rpc_call *c = arg;
  wt_rpc_server *s = c->server;

  /* Learn early when the client goes away, so reads and writes, and a
   * handler waiting on its own condition, stop promptly. */
  grpc_op close_op;
  memset(&close_op, 0, sizeof(close_op));
  close_op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  close_op.data.recv_close_on_server.cancelled = &c->close_cancelled;
  atomic_fetch_add(&c->refs, 1);
  pthread_mutex_lock(&c->mu);
  grpc_call_error err =
      grpc_call_start_batch(c->call, &close_op, 1, &c->close_tag, NULL);
  pthread_mutex_unlock(&c->mu);
  if (err != GRPC_CALL_OK) {
    WT_LOGW(MOD, "%s: cannot watch for cancellation: %s", c->method->path,
            grpc_call_error_to_string(err));
    atomic_fetch_sub(&c->refs, 1); /* the thread's own ref keeps it alive */
  }

  wt_status *st = c->method->handler(c, c->request, s->user);
  if (st != NULL)
    WT_LOGD(MOD, "%s: %s: %s", c->method->path,
            wt_code_name(wt_status_code(st)), wt_status_message(st));
  call_send_status(c, st);
  wt_status_free(st);
  wt_pb_free(c->request);
  c->request = NULL;
  pthread_mutex_lock(&c->cb_mu);
  c->cancel_fn = NULL;
  pthread_mutex_unlock(&c->cb_mu);

  pthread_mutex_lock(&s->mu);
  c->next_zombie = s->zombies;
  s->zombies = c;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* Joins handler threads that returned. Any thread may call it. */
static void reap(wt_rpc_server *s) {
  pthread_mutex_lock(&s->mu);
  wt_rpc_call *z = s->zombies;
  s->zombies = NULL;
  pthread_mutex_unlock(&s->mu);
  while (z != NULL) {
    wt_rpc_call *next = z->next_zombie;
    pthread_join(z->thread, NULL);
    pthread_mutex_lock(&s->mu);
    s->n_threads--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    call_unref(z);
    z = next;
  }
}

/* ---- request slots --------------------------------------------------------
 */

static void slot_free(request_slot *slot) {
  grpc_metadata_array_destroy(&slot->metadata);
  if (slot->tag.kind == TAG_GENERIC) grpc_call_details_destroy(&slot->details);
  if (slot->payload) grpc_byte_buffer_destroy(slot->payload);
  free(slot);
}

/* Asks gRPC for the next call of the slot's method; frees the slot when that
 * is not possible. */
static void slot_post(request_slot *slot) {
  wt_rpc_server *s = slot->server;
  slot->call = NULL;
  slot->payload = NULL;
  grpc_metadata_array_init(&slot->metadata);
  grpc_call_error err;
  if (slot->tag.kind == TAG_GENERIC) {
    grpc_call_details_init(&slot->details);
    err = grpc_server_request_call(s->server, &slot->call, &slot->details,
                                   &slot->metadata, s->cq, s->cq, &slot->tag);
  } else {
    const wt_rpc_method *m = &s->methods[slot->method];
    err = grpc_server_request_registered_call(
        s->server, s->registered[slot->method], &slot->call, &slot->deadline,
        &slot->metadata,
        m->kind == WT_RPC_CLIENT_STREAM ? NULL : &slot->payload, s->cq, s->cq,
        &slot->tag);
  }
  if (err != GRPC_CALL_OK) {
    WT_LOGE(MOD, "cannot request calls: %s", grpc_call_error_to_string(err));
    slot_free(slot);
  }
}

static wt_status *slot_new(wt_rpc_server *s, tag_kind kind, size_t method) {
  request_slot *slot = calloc(1, sizeof(*slot));
  if (slot == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  slot->tag.kind = kind;
  slot->tag.owner = slot;
  slot->server = s;
  slot->method = method;
  slot_post(slot);
  return NULL;
}

/* Either posts the slot again for the next call or, during shutdown, frees
 * it. The slot's metadata has been released by the caller. */
static void slot_recycle(request_slot *slot) {
  wt_rpc_server *s = slot->server;
  pthread_mutex_lock(&s->mu);
  bool running = s->state == STATE_RUNNING;
  pthread_mutex_unlock(&s->mu);
  if (running) {
    slot_post(slot);
  } else {
    grpc_metadata_array_init(&slot->metadata); /* slot_free destroys it */
    if (slot->tag.kind == TAG_GENERIC) grpc_call_details_init(&slot->details);
    slot_free(slot);
  }
}

static void on_generic(request_slot *slot, int ok) {
  if (!ok) {
    slot_free(slot);
    return;
  }
  wt_rpc_server *s = slot->server;
  grpc_call *call = slot->call;
  char *method = grpc_slice_to_c_string(slot->details.method);
  grpc_metadata_array_destroy(&slot->metadata);
  grpc_call_details_destroy(&slot->details);
  slot_recycle(slot);
  reject(s, call, WT_UNIMPLEMENTED, "unknown method %s", method);
  gpr_free(method);
}

static void on_request(request_slot *slot, int ok) {
  if (!ok) {
    slot_free(slot);
    return;
  }
  wt_rpc_server *s = slot->server;
  const wt_rpc_method *m = &s->methods[slot->method];
  grpc_call *call = slot->call;
  grpc_byte_buffer *payload = slot->payload;
  gpr_timespec deadline = slot->deadline;
  slot->payload = NULL;
  grpc_metadata_array_destroy(&slot->metadata);
  slot_recycle(slot);

  ProtobufCMessage *request = NULL;
  if (m->kind != WT_RPC_CLIENT_STREAM) {
    if (payload == NULL) {
      reject(s, call, WT_INVALID_ARGUMENT,
             "request %s: missing (the client sent no message)",
             m->request->name);
      return;
    }
    wt_status *st = wt_pb_unpack(payload, m->request, &request);
    grpc_byte_buffer_destroy(payload);
    if (st != NULL) {
      reject(s, call, wt_status_code(st), "request %s", wt_status_message(st));
      wt_status_free(st);
      return;
    }
  }

  reap(s);
  pthread_mutex_lock(&s->mu);
  server_state state = s->state;
  int busy = s->n_threads;
  bool admit = state == STATE_RUNNING && busy < s->max_handler_threads;
  if (admit) s->n_threads++;
  pthread_mutex_unlock(&s->mu);
  if (!admit) {
    wt_pb_free(request);
    if (state != STATE_RUNNING)
      reject(s, call, WT_UNAVAILABLE, "%s: the server is shutting down",
             m->path);
    else
      reject(s, call, WT_RESOURCE_EXHAUSTED,
             "%s: server busy: %d calls in progress (the limit)", m->path,
             busy);
    return;
  }

  wt_rpc_call *c = calloc(1, sizeof(*c));
  if (c == NULL) goto fail;
  c->server = s;
  c->method = m;
  c->call = call;
  c->deadline = gpr_convert_clock_type(deadline, GPR_CLOCK_MONOTONIC);
  c->peer = grpc_call_get_peer(call);
  c->request = request;
  c->op_tag.kind = TAG_CALL_OP;
  c->op_tag.owner = c;
  c->close_tag.kind = TAG_CALL_CLOSE;
  c->close_tag.owner = c;
  atomic_init(&c->refs, 1); /* the handler thread's */
  atomic_init(&c->cancelled, false);
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  pthread_mutex_init(&c->cb_mu, NULL);
  int rc = pthread_create(&c->thread, NULL, handler_main, c);
  if (rc == 0) return;
  WT_LOGE(MOD, "%s: cannot start a handler thread: %s", m->path, strerror(rc));
  c->request = NULL;
  if (c->peer) gpr_free(c->peer);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->cb_mu);
  free(c);
fail:
  wt_pb_free(request);
  pthread_mutex_lock(&s->mu);
  s->n_threads--;
  pthread_mutex_unlock(&s->mu);
  reject(s, call, WT_RESOURCE_EXHAUSTED, "%s: cannot start a handler", m->path);
}

/* ---- polling thread ------------------------------------------------------ */

static void on_call_close(wt_rpc_call *c) {
  pthread_mutex_lock(&c->mu);
  bool cancelled = c->close_cancelled != 0;
  if (cancelled) atomic_store(&c->cancelled, true);
  pthread_mutex_unlock(&c->mu);
  if (cancelled) {
    WT_LOGD(MOD, "%s: cancelled (peer %s)", c->method->path,
            c->peer ? c->peer : "?");
    pthread_mutex_lock(&c->cb_mu);
    if (c->cancel_fn) c->cancel_fn(c->cancel_arg);
    pthread_mutex_unlock(&c->cb_mu);
  }
  call_unref(c);
}

static void dispatch(wt_rpc_server *s, tag *t, int ok) {
  switch (t->kind) {
    case TAG_REQUEST:
      on_request(t->owner, ok);
      break;
    case TAG_GENERIC:
      on_generic(t->owner, ok);
      break;
    case TAG_REJECT:
      reject_done(t->owner);
      break;
    case TAG_CALL_OP: {
      wt_rpc_call *c = t->owner;
      pthread_mutex_lock(&c->mu);
      c->op_done = true;
      c->op_ok = ok;
      pthread_cond_broadcast(&c->cv);
      pthread_mutex_unlock(&c->mu);
      break;
    }
    case TAG_CALL_CLOSE:
      on_call_close(t->owner);
      break;
    case TAG_SHUTDOWN:
      pthread_mutex_lock(&s->mu);
      s->shutdown_notified = true;
      pthread_cond_broadcast(&s->cv);
      pthread_mutex_unlock(&s->mu);
      break;
  }
}

/* Runs until the completion queue is shut down and drained. */
static void poll_loop(wt_rpc_server *s) {
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(
        s->cq, deadline_after_ms(POLL_INTERVAL_MS), NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    if (ev.type == GRPC_OP_COMPLETE) dispatch(s, ev.tag, ev.success);
    reap(s);
  }
}

static void *poller_main(void *arg) {
  poll_loop(arg);
  return NULL;
}

/* ---- lifecycle ------------------------------------------------------------
 */

static wt_status *validate_methods(const wt_rpc_method *methods, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const wt_rpc_method *m = &methods[i];
    if (m->path == NULL || m->path[0] != '/' ||
        strchr(m->path + 1, '/') == NULL)
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "method %zu: path '%s' is not \"/package.Service/"
                           "Method\"",
                           i, m->path ? m->path : "(null)");
    if (m->handler == NULL)
      return wt_status_new(WT_INVALID_ARGUMENT, "method %s: no handler",
                           m->path);
    if (m->kind != WT_RPC_UNARY && m->kind != WT_RPC_CLIENT_STREAM &&
        m->kind != WT_RPC_SERVER_STREAM)
      return wt_status_new(WT_INVALID_ARGUMENT, "method %s: unknown kind %d",
                           m->path, (int)m->kind);
    if (m->request == NULL ||
        m->request->magic != PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC)
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "method %s: no request message type", m->path);
    for (size_t j = 0; j < i; j++)
      if (strcmp(methods[j].path, m->path) == 0)
        return wt_status_new(WT_INVALID_ARGUMENT, "method %s: registered twice",
                             m->path);
  }
  return NULL;
}

wt_status *wt_rpc_server_new(const wt_rpc_server_options *opts,
                             const wt_rpc_method *methods, size_t n, void *user,
                             wt_rpc_server **out) {
  wt_status *st = NULL;
  wt_rpc_server_options defaults;
  memset(&defaults, 0, sizeof(defaults));
  if (opts == NULL) opts = &defaults;
  *out = NULL;
  WT_CHECK(validate_methods(methods, n));

  wt_rpc_server *s = calloc(1, sizeof(*s));
  if (s == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  s->methods = methods;
  s->n_methods = n;
  s->user = user;
  s->listen = strdup(opts->listen ? opts->listen : DEFAULT_LISTEN);
  s->registered = calloc(n ? n : 1, sizeof(*s->registered));
  if (s->listen == NULL || s->registered == NULL) {
    free(s->listen);
    free(s->registered);
    free(s);
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  }
  s->requests_per_method = opts->requests_per_method > 0
                               ? opts->requests_per_method
                               : DEFAULT_REQUESTS_PER_METHOD;
  s->max_handler_threads = opts->max_handler_threads > 0
                               ? opts->max_handler_threads
                               : DEFAULT_MAX_HANDLER_THREADS;
  s->on_shutdown = opts->on_shutdown;
  s->shutdown_tag.kind = TAG_SHUTDOWN;
  s->shutdown_tag.owner = s;
  s->state = STATE_NEW;
  pthread_mutex_init(&s->mu, NULL);
  init_monotonic_cond(&s->cv);

  grpc_init();
  grpc_arg args[3];
  size_t nargs = wt_rpc_message_limit_args(
      args, opts->max_receive_message_bytes, opts->max_send_message_bytes);
  /* gRPC binds with SO_REUSEPORT by default: a second server on a busy port
   * would start and silently share its calls. */
  memset(&args[nargs], 0, sizeof(args[nargs]));
  args[nargs].type = GRPC_ARG_INTEGER;
  args[nargs].key = (char *)GRPC_ARG_ALLOW_REUSEPORT;
  args[nargs].value.integer = 0;
  nargs++;
  grpc_channel_args channel_args = {nargs, args};
  s->server = grpc_server_create(&channel_args, NULL);
  s->cq = grpc_completion_queue_create_for_next(NULL);
  grpc_server_register_completion_queue(s->server, s->cq, NULL);
  for (size_t i = 0; i < n; i++) {
    /* A unary or server-stream request arrives with the call, so the
     * polling thread can reject a malformed one without a handler thread. */
    s->registered[i] = grpc_server_register_method(
        s->server, methods[i].path, NULL,
        methods[i].kind == WT_RPC_CLIENT_STREAM
            ? GRPC_SRM_PAYLOAD_NONE
            : GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER,
        0);
    if (s->registered[i] == NULL) {
      wt_rpc_server_destroy(s);
      WT_FAIL(WT_INVALID_ARGUMENT, "method %s: gRPC refused to register it",
              methods[i].path);
    }
  }
  *out = s;
out:
  return st;
}

int wt_rpc_server_port(const wt_rpc_server *server) {
  return server->port;
}

/* After a failed start: shuts gRPC's server down on this thread. */
static void stop_inline(wt_rpc_server *s) {
  grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
  grpc_server_cancel_all_calls(s->server);
  for (;;) {
    pthread_mutex_lock(&s->mu);
    bool done = s->shutdown_notified;
    pthread_mutex_unlock(&s->mu);
    if (done) break;
    grpc_event ev = grpc_completion_queue_next(
        s->cq, deadline_after_ms(POLL_INTERVAL_MS), NULL);
    if (ev.type == GRPC_OP_COMPLETE) dispatch(s, ev.tag, ev.success);
  }
  grpc_server_destroy(s->server);
  s->server = NULL;
  grpc_completion_queue_shutdown(s->cq);
  poll_loop(s);
  pthread_mutex_lock(&s->mu);
  s->state = STATE_DONE;
  pthread_mutex_unlock(&s->mu);
}

wt_status *wt_rpc_server_start(wt_rpc_server *s) {
  wt_status *st = NULL;
  pthread_mutex_lock(&s->mu);
  server_state state = s->state;
  pthread_mutex_unlock(&s->mu);
  if (state != STATE_NEW)
    WT_FAIL(WT_FAILED_PRECONDITION, "server on %s: already started", s->listen);

  grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
  s->port = grpc_server_add_http2_port(s->server, s->listen, creds);
  grpc_server_credentials_release(creds);
  if (s->port == 0)
    WT_FAIL(WT_UNAVAILABLE,
            "listen address '%s': cannot bind (address in use, or not "
            "host:port)",
            s->listen);
  grpc_server_start(s->server);
  pthread_mutex_lock(&s->mu);
  s->state = STATE_RUNNING;
  pthread_mutex_unlock(&s->mu);

  for (size_t i = 0; i < s->n_methods && st == NULL; i++)
    for (int k = 0; k < s->requests_per_method && st == NULL; k++)
      st = slot_new(s, TAG_REQUEST, i);
  for (int k = 0; k < 2 && st == NULL; k++) st = slot_new(s, TAG_GENERIC, 0);
  int rc = st ? 0 : pthread_create(&s->poller, NULL, poller_main, s);
  if (st != NULL || rc != 0) {
    if (st == NULL)
      st = wt_status_new(WT_RESOURCE_EXHAUSTED,
                         "server on %s: cannot start the polling thread: %s",
                         s->listen, strerror(rc));
    pthread_mutex_lock(&s->mu);
    s->state = STATE_SHUTTING_DOWN;
    pthread_mutex_unlock(&s->mu);
    stop_inline(s);
    s->port = 0;
    goto out;
  }
  s->poller_started = true;
  WT_LOGD(MOD, "serving %zu methods on %s (port %d)", s->n_methods, s->listen,
          s->port);
out:
  return st;
}

/* Waits on the server's condition until `pred` holds or `deadline` (ms on
 * the monotonic clock, -1: none) passes, joining finished handlers meanwhile.
 * Called and returns with s->mu held. */
static bool wait_until(wt_rpc_server *s, bool (*pred)(wt_rpc_server *),
                       int64_t deadline, const char *what) {
  int64_t next_warn = now_ms() + 5000;
  while (!pred(s)) {
    int64_t now = now_ms();
    if (deadline >= 0 && now >= deadline) return false;
    if (now >= next_warn) {
      WT_LOGW(MOD, "shutdown: still waiting for %s (%d handlers running)", what,
              s->n_threads);
      next_warn = now + 5000;
    }
    int64_t step = POLL_INTERVAL_MS;
    if (deadline >= 0 && deadline - now < step) step = deadline - now;
    struct timespec ts;
    abs_timespec_after_ms(&ts, step);
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    pthread_mutex_unlock(&s->mu);
    reap(s);
    pthread_mutex_lock(&s->mu);
  }
  return true;
}

static bool shutdown_notified(wt_rpc_server *s) {
  return s->shutdown_notified;
}
static bool handlers_joined(wt_rpc_server *s) {
  return s->n_threads == 0;
}

void wt_rpc_server_shutdown(wt_rpc_server *s, int64_t deadline_ms) {
  pthread_mutex_lock(&s->mu);
  if (s->state != STATE_RUNNING) {
    pthread_mutex_unlock(&s->mu);
    return;
  }
  s->state = STATE_SHUTTING_DOWN;
  pthread_mutex_unlock(&s->mu);

  int64_t deadline = now_ms() + (deadline_ms > 0 ? deadline_ms : 0);
  grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
  if (s->on_shutdown) s->on_shutdown(s->user);

  pthread_mutex_lock(&s->mu);
  if (!wait_until(s, shutdown_notified, deadline, "calls to finish")) {
    pthread_mutex_unlock(&s->mu);
    reap(s);
    pthread_mutex_lock(&s->mu);
    /* Only worth a line when the caller meant to give calls time. */
    if (s->n_threads > 0)
      wt_log(deadline_ms > 0 ? WT_LOG_INFO : WT_LOG_DEBUG, MOD,
             "shutdown: cancelling %d calls still in progress", s->n_threads);
    pthread_mutex_unlock(&s->mu);
    grpc_server_cancel_all_calls(s->server);
    pthread_mutex_lock(&s->mu);
    wait_until(s, shutdown_notified, -1, "cancelled calls to end");
  }
  wait_until(s, handlers_joined, -1, "handlers to return");
  pthread_mutex_unlock(&s->mu);

  grpc_server_destroy(s->server);
  s->server = NULL;
  grpc_completion_queue_shutdown(s->cq);
  pthread_join(s->poller, NULL); /* it drains the queue before returning */
  s->poller_started = false;
  pthread_mutex_lock(&s->mu);
  s->state = STATE_DONE;
  pthread_mutex_unlock(&s->mu);
  WT_LOGD(MOD, "server on %s stopped", s->listen);
}

void wt_rpc_server_destroy(wt_rpc_server *s) {
  if (s == NULL) return;
  wt_rpc_server_shutdown(s, 0);
  if (s->server != NULL) { /* never started */
    grpc_server_destroy(s->server);
    grpc_completion_queue_shutdown(s->cq);
    poll_loop(s);
  }
  grpc_completion_queue_destroy(s->cq);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s->registered);
  free(s->listen);
  free(s);
  grpc_shutdown();
}

/* ---- inside a handler -----------------------------------------------------
 */

const char *wt_rpc_call_method(const wt_rpc_call *call) {
  return call->method->path;
}

const char *wt_rpc_call_peer(const wt_rpc_call *call) {
  return call->peer ? call->peer : "";
}

int64_t wt_rpc_call_remaining_ms(const wt_rpc_call *call) {
  if (gpr_time_cmp(call->deadline, gpr_inf_future(GPR_CLOCK_MONOTONIC)) == 0)
    return -1;
  gpr_timespec left =
      gpr_time_sub(call->deadline, gpr_now(GPR_CLOCK_MONOTONIC));
  if (left.tv_sec < 0 || (left.tv_sec == 0 && left.tv_nsec == 0)) return 0;
  return (int64_t)left.tv_sec * 1000 + (left.tv_nsec + 999999) / 1000000;
}

bool wt_rpc_call_cancelled(wt_rpc_call *call) {
  return atomic_load(&call->cancelled) || wt_rpc_call_remaining_ms(call) == 0;
}

void wt_rpc_call_set_cancel_callback(wt_rpc_call *call, void (*fn)(void *arg),
                                     void *arg) {
  pthread_mutex_lock(&call->cb_mu);
  call->cancel_fn = fn;
  call->cancel_arg = fn ? arg : NULL;
  pthread_mutex_unlock(&call->cb_mu);
}

void wt_rpc_call_cancel(wt_rpc_call *c, wt_code code, const char *message) {
  grpc_slice details = status_details(message ? message : "");
  char *text = grpc_slice_to_c_string(details);
  atomic_store(&c->cancelled, true);
  grpc_call_error err = grpc_call_cancel_with_status(
      c->call, (grpc_status_code)wt_code_to_grpc(code), text, NULL);
  if (err != GRPC_CALL_OK)
    WT_LOGW(MOD, "%s: cannot cancel the call: %s", c->method->path,
            grpc_call_error_to_string(err));
  gpr_free(text);
  grpc_slice_unref(details);
}

wt_status *wt_rpc_call_read_raw(wt_rpc_call *c, grpc_byte_buffer **bb) {
  *bb = NULL;
  if (c->method->kind != WT_RPC_CLIENT_STREAM)
    return wt_status_new(WT_INTERNAL, "%s: read on a %s method",
                         c->method->path, kind_name(c->method->kind));
  if (wt_rpc_call_cancelled(c)) return call_failed(c, "read");
  grpc_byte_buffer *buf = NULL;
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &buf;
  int ok = call_run_batch(c, &op, 1);
  if (ok < 0)
    return wt_status_new(WT_INTERNAL, "%s: read: cannot start a batch",
                         c->method->path);
  if (!ok || (buf == NULL && grpc_call_failed_before_recv_message(c->call))) {
    if (buf) grpc_byte_buffer_destroy(buf);
    return call_failed(c, "read");
  }
  *bb = buf;
  return NULL;
}

wt_status *wt_rpc_call_read(wt_rpc_call *c, ProtobufCMessage **msg) {
  *msg = NULL;
  grpc_byte_buffer *bb = NULL;
  wt_status *st = wt_rpc_call_read_raw(c, &bb);
  if (st != NULL || bb == NULL) return st;
  st = wt_pb_unpack(bb, c->method->request, msg);
  grpc_byte_buffer_destroy(bb);
  if (st != NULL) {
    wt_status *wrapped =
        wt_status_new(wt_status_code(st), "request %s", wt_status_message(st));
    wt_status_free(st);
    st = wrapped;
  }
  return st;
}

static wt_status *check_response_type(wt_rpc_call *c,
                                      const ProtobufCMessage *msg) {
  const ProtobufCMessageDescriptor *want = c->method->response;
  if (msg == NULL || msg->descriptor == NULL)
    return wt_status_new(WT_INTERNAL, "%s: response is not a message",
                         c->method->path);
  if (want != NULL && msg->descriptor != want)
    return wt_status_new(WT_INTERNAL, "%s: response is a %s, expected a %s",
                         c->method->path, msg->descriptor->name, want->name);
  return NULL;
}

wt_status *wt_rpc_call_write(wt_rpc_call *c, const ProtobufCMessage *msg) {
  wt_status *st = NULL;
  grpc_byte_buffer *bb = NULL;
  if (c->method->kind != WT_RPC_SERVER_STREAM)
    WT_FAIL(WT_INTERNAL, "%s: write on a %s method", c->method->path,
            kind_name(c->method->kind));
  WT_CHECK(check_response_type(c, msg));
  if (wt_rpc_call_cancelled(c)) {
    st = call_failed(c, "write");
    goto out;
  }
  WT_CHECK(wt_pb_pack(msg, &bb));
  grpc_op ops[2];
  size_t n = 0;
  memset(ops, 0, sizeof(ops));
  if (!c->initial_metadata_sent) ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[n].op = GRPC_OP_SEND_MESSAGE;
  ops[n++].data.send_message.send_message = bb;
  int ok = call_run_batch(c, ops, n);
  if (ok < 0)
    WT_FAIL(WT_INTERNAL, "%s: write: cannot start a batch", c->method->path);
  c->initial_metadata_sent = true;
  if (!ok) st = call_failed(c, "write");
out:
  if (bb) grpc_byte_buffer_destroy(bb);
  return st;
}

wt_status *wt_rpc_call_respond(wt_rpc_call *c, const ProtobufCMessage *msg) {
  wt_status *st = NULL;
  grpc_byte_buffer *bb = NULL;
  if (c->method->kind == WT_RPC_SERVER_STREAM)
    WT_FAIL(WT_INTERNAL, "%s: respond on a server stream (use write)",
            c->method->path);
  WT_CHECK(check_response_type(c, msg));
  WT_CHECK(wt_pb_pack(msg, &bb));
  if (c->response) grpc_byte_buffer_destroy(c->response);
  c->response = bb;
out:
  return st;
}

/* ---- signals --------------------------------------------------------------
 */

static void termination_set(sigset_t *set) {
  sigemptyset(set);
  sigaddset(set, SIGINT);
  sigaddset(set, SIGTERM);
}

wt_status *wt_signal_block_termination(void) {
  sigset_t set;
  termination_set(&set);
  int rc = pthread_sigmask(SIG_BLOCK, &set, NULL);
  if (rc != 0) return wt_status_from_errno(rc, "blocking SIGINT and SIGTERM");
  /* A peer that closes its socket must cost an error code, not the
   * process. */
  signal(SIGPIPE, SIG_IGN);
  return NULL;
}

int wt_signal_wait(int64_t timeout_ms) {
  sigset_t set;
  termination_set(&set);
  for (;;) {
    int sig;
    if (timeout_ms < 0) {
      sig = sigwaitinfo(&set, NULL);
    } else {
      struct timespec ts = {(time_t)(timeout_ms / 1000),
                            (long)(timeout_ms % 1000) * 1000000L};
      sig = sigtimedwait(&set, NULL, &ts);
    }
    if (sig > 0) return sig;
    if (errno == EAGAIN) return 0;
    if (errno != EINTR) return 0;
  }
}
