/* rpc_server.c: the server half of the RPC layer (see wt/rpc.h): lifecycle,
 * the polling thread, request slots, and admission.
 *
 * Threads: one polling thread runs grpc_completion_queue_next and never
 * blocks on anything but short locks. Each admission class has a pool of
 * handler threads, started as calls need them up to the class's limit and
 * kept until shutdown; an accepted call waits in its class's queue for one
 * of them (rpc_call.c runs it). WT_RPC_WATCH calls never reach a pool
 * thread (rpc_stream.c).
 *
 * Request slots and rejected calls are owned by their one outstanding tag.
 */

#include <errno.h>
#include <grpc/compression.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wt/log.h"
#include "wt/pb.h"
#include "wt/rpc.h"
#include "wt/lock.h"

#include "rpc_internal.h"

#define DEFAULT_LISTEN "127.0.0.1:50051"
#define DEFAULT_REQUESTS_PER_METHOD 4
#define DEFAULT_MAX_HANDLER_THREADS 64
/* How often the polling thread wakes without events. */
#define POLL_INTERVAL_MS 200
#define DEFAULT_MAX_CONCURRENT_STREAMS 2048
#define DEFAULT_MAX_METADATA_BYTES (16 * 1024)
#define DEFAULT_HANDSHAKE_TIMEOUT_MS 5000
/* Refused calls are logged at most this often (a flood of bad tokens must
 * not become a flood of log lines). */
#define AUTH_LOG_INTERVAL_MS 1000

/* A registered-method or catch-all request waiting for a call. */
typedef struct request_slot {
  rpc_tag tag;
  wt_rpc_server *server;
  size_t method; /* index into server->methods; unused for TAG_GENERIC */
  grpc_call *call;
  gpr_timespec deadline;
  grpc_metadata_array metadata;
  grpc_call_details details;
} request_slot;

/* A call answered with a status by the polling thread (unknown method,
 * malformed request, server busy), kept until its last batch completes. */
typedef struct reject_call {
  rpc_tag tag;
  grpc_call *call;
  grpc_slice details;
  int cancelled;
} reject_call;

/* ---- rejected calls ------------------------------------------------------ */

/* Answers `call` with `code` and a message, without a handler thread; takes
 * over the caller's reference to `call`. Runs on the polling thread. */
static void reject(grpc_call *call, wt_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void reject(grpc_call *call, wt_code code, const char *fmt, ...) {
  char *msg = NULL;
  va_list ap;
  va_start(ap, fmt);
  if (vasprintf(&msg, fmt, ap) < 0) msg = NULL;
  va_end(ap);
  WT_LOGD(RPC_MOD, "answering %s: %s", wt_code_name(code), msg ? msg : "");

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
  r->details = rpc_status_details(msg ? msg : "out of memory");
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
    WT_LOGW(RPC_MOD, "cannot answer a call: %s",
            grpc_call_error_to_string(err));
    grpc_call_unref(call);
    grpc_slice_unref(r->details);
    free(r);
  }
}

static void reject_done(reject_call *r) {
  grpc_call_unref(r->call);
  grpc_slice_unref(r->details);
  free(r);
}

/* ---- pools --------------------------------------------------------------- */

static void *pool_main(void *arg) {
  rpc_pool *p = arg;
  wt_rpc_server *s = p->server;
  wt_mutex_lock(&s->mu);
  for (;;) {
    while (p->head == NULL && !s->pools_quit) {
      p->idle++;
      wt_cond_wait(&p->work_cv, &s->mu);
      p->idle--;
    }
    if (p->head == NULL) break;
    wt_rpc_call *c = p->head;
    p->head = c->next;
    if (p->head == NULL) p->tail = NULL;
    p->queued--;
    p->running++;
    wt_mutex_unlock(&s->mu);
    wt_status *st = rpc_call_handle(c);
    /* The place is free before the reply goes out, so a client that calls
     * again the moment it has its answer finds it free. */
    wt_mutex_lock(&s->mu);
    p->running--;
    if (st == wt_status_parked_()) {
      /* Its owner completes or resumes it, perhaps already did: c is not
       * this thread's any more. It keeps its peer's place until it ends. */
      p->parked++;
      pthread_cond_broadcast(&s->cv);
      continue;
    }
    rpc_peer_release_locked(s, c->peer_slot);
    c->peer_slot = NULL;
    p->finishing++;
    pthread_cond_broadcast(&s->cv);
    wt_mutex_unlock(&s->mu);
    rpc_call_finish(c, st);
    wt_mutex_lock(&s->mu);
    p->finishing--;
  }
  wt_mutex_unlock(&s->mu);
  return NULL;
}

/* Admits a call of pool p, or says why not (the caller rejects). Under mu. */
static bool pool_admit_locked(rpc_pool *p) {
  int queue =
      p->cfg.max_queued > p->queue_floor ? p->cfg.max_queued : p->queue_floor;
  return p->running + p->queued < p->cfg.max_running + queue;
}

/* Queues an admitted call for a thread (at the head: `first`, a resumed
 * call, which was admitted before), starting one when no thread is idle or
 * about to be (a client that calls again the moment it has its answer
 * would otherwise start a thread per call until the limit) and the class
 * has fewer than its limit. Under mu. */
static void pool_enqueue_locked(rpc_pool *p, wt_rpc_call *c, bool first) {
  c->next = NULL;
  if (first) {
    c->next = p->head;
    p->head = c;
    if (p->tail == NULL) p->tail = c;
  } else {
    if (p->tail)
      p->tail->next = c;
    else
      p->head = c;
    p->tail = c;
  }
  p->queued++;
  if (p->idle + p->finishing < p->queued && p->nthreads < p->cfg.max_running) {
    pthread_t tid;
    int rc = pthread_create(&tid, NULL, pool_main, p);
    if (rc == 0)
      p->threads[p->nthreads++] = tid;
    else
      WT_LOGW(RPC_MOD, "class '%s': cannot start a handler thread: %s",
              p->cfg.name, strerror(rc));
  }
  pthread_cond_signal(&p->work_cv);
}

wt_status *wt_rpc_call_park(wt_rpc_call *call) {
  (void)call;
  return wt_status_parked_();
}

void wt_rpc_call_complete(wt_rpc_call *c, wt_status *st) {
  wt_rpc_server *s = c->server;
  rpc_pool *p = c->pool;
  wt_mutex_lock(&s->mu);
  p->parked--;
  rpc_peer_release_locked(s, c->peer_slot);
  c->peer_slot = NULL;
  p->finishing++;
  pthread_cond_broadcast(&s->cv);
  wt_mutex_unlock(&s->mu);
  rpc_call_finish(c, st);
  wt_mutex_lock(&s->mu);
  p->finishing--;
  pthread_cond_broadcast(&s->cv);
  wt_mutex_unlock(&s->mu);
}

void wt_rpc_call_resume(wt_rpc_call *c, wt_rpc_resume_fn fn, void *arg) {
  wt_rpc_server *s = c->server;
  rpc_pool *p = c->pool;
  c->resume_fn = fn;
  c->resume_arg = arg;
  wt_mutex_lock(&s->mu);
  p->parked--;
  pool_enqueue_locked(p, c, true); /* it was admitted: ahead of the queue */
  wt_mutex_unlock(&s->mu);
}

void wt_rpc_server_class_queue_floor(wt_rpc_server *s, size_t cls, int n) {
  if (cls >= s->npools) return;
  wt_mutex_lock(&s->mu);
  s->pools[cls].queue_floor = n > 0 ? n : 0;
  wt_mutex_unlock(&s->mu);
}

bool wt_rpc_is_parked(const wt_status *st) {
  return st == wt_status_parked_();
}

int wt_rpc_server_parked(wt_rpc_server *s, size_t cls) {
  if (cls >= s->npools) return 0;
  wt_mutex_lock(&s->mu);
  int n = s->pools[cls].parked;
  wt_mutex_unlock(&s->mu);
  return n;
}

void wt_rpc_server_class_load(wt_rpc_server *s, size_t cls,
                              wt_rpc_class_load *out) {
  memset(out, 0, sizeof(*out));
  if (cls >= s->npools) return;
  wt_mutex_lock(&s->mu);
  out->running = s->pools[cls].running;
  out->queued = s->pools[cls].queued;
  out->threads = s->pools[cls].nthreads;
  out->refused = s->pools[cls].refused;
  wt_mutex_unlock(&s->mu);
}

/* ---- request slots ------------------------------------------------------- */

static void slot_free(request_slot *slot) {
  grpc_metadata_array_destroy(&slot->metadata);
  if (slot->tag.kind == TAG_GENERIC) grpc_call_details_destroy(&slot->details);
  free(slot);
}

/* Asks gRPC for the next call of the slot's method; frees the slot when that
 * is not possible. */
static void slot_post(request_slot *slot) {
  wt_rpc_server *s = slot->server;
  slot->call = NULL;
  grpc_metadata_array_init(&slot->metadata);
  grpc_call_error err;
  if (slot->tag.kind == TAG_GENERIC) {
    grpc_call_details_init(&slot->details);
    err = grpc_server_request_call(s->server, &slot->call, &slot->details,
                                   &slot->metadata, s->cq, s->cq, &slot->tag);
  } else {
    err = grpc_server_request_registered_call(
        s->server, s->registered[slot->method], &slot->call, &slot->deadline,
        &slot->metadata, NULL, s->cq, s->cq, &slot->tag);
  }
  if (err != GRPC_CALL_OK) {
    WT_LOGE(RPC_MOD, "cannot request calls: %s",
            grpc_call_error_to_string(err));
    slot_free(slot);
  }
}

static wt_status *slot_new(wt_rpc_server *s, rpc_tag_kind kind, size_t method) {
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
  wt_mutex_lock(&s->mu);
  bool running = s->state == STATE_RUNNING;
  wt_mutex_unlock(&s->mu);
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
  grpc_call *call = slot->call;
  char *method = grpc_slice_to_c_string(slot->details.method);
  grpc_metadata_array_destroy(&slot->metadata);
  grpc_call_details_destroy(&slot->details);
  slot_recycle(slot);
  reject(call, WT_UNIMPLEMENTED, "unknown method %s", method);
  gpr_free(method);
}

/* WT_OK, or why the call may not run: UNAUTHENTICATED (no or a wrong
 * token), PERMISSION_DENIED (a token whose scope lacks the method's).
 * *scope is what the caller may do (the call keeps it: wt_rpc_call_trainer):
 * its token's scope; everything without tokens (--no-auth: any caller may
 * drive rounds); nothing on a public method (its token is not read). */
static wt_code authorize(wt_rpc_server *s, const wt_rpc_method *m,
                         const grpc_metadata_array *md, uint32_t *scope) {
  *scope = 0;
  if (m->scope == WT_SCOPE_PUBLIC) return WT_OK;
  *scope = WT_SCOPE_ALL;
  if (s->ntokens == 0) return WT_OK;
  bool presented;
  *scope = rpc_token_scope(s->tokens, s->ntokens, md, &presented);
  uint32_t need = m->scope ? m->scope : WT_SCOPE_TRAINER;
  if (*scope == 0) return WT_UNAUTHENTICATED;
  return (*scope & need) == need ? WT_OK : WT_PERMISSION_DENIED;
}

static void refuse(wt_rpc_server *s, grpc_call *call, const wt_rpc_method *m,
                   wt_code code) {
  bool denied = code == WT_PERMISSION_DENIED;
  atomic_fetch_add(denied ? &s->denied : &s->unauthenticated, 1);
  int64_t now = wt_mono_ms();
  if (now - s->auth_log_ms >= AUTH_LOG_INTERVAL_MS) {
    char *peer = rpc_server_peer(s, call);
    WT_LOGW(RPC_MOD, "%s from %s: %s%s", m->path, peer ? peer : "?",
            denied ? "refused: a reader token" : "refused: no or a wrong token",
            s->auth_unlogged ? " (and more refusals not logged)" : "");
    gpr_free(peer);
    s->auth_log_ms = now;
    s->auth_unlogged = 0;
  } else {
    s->auth_unlogged++;
  }
  if (denied)
    reject(call, WT_PERMISSION_DENIED,
           "%s: the token's scope is 'reader'; this call needs a 'trainer' "
           "token",
           m->path);
  else
    reject(call, WT_UNAUTHENTICATED,
           "%s: missing or wrong bearer token (send \"authorization: Bearer "
           "TOKEN\"; wt-push/wt-ctl --token-file)",
           m->path);
}

/* An authorized call whose request message is being read. */
typedef struct request_read {
  rpc_tag tag;
  wt_rpc_server *server;
  const wt_rpc_method *method;
  grpc_call *call;
  gpr_timespec deadline;
  uint32_t scope; /* what the caller's token allows */
  grpc_byte_buffer *payload;
  struct request_read *next; /* waiting for its turn to be read */
} request_read;

/* Requests that wait for a read to start (a call's body stays in HTTP/2's
 * flow-control window meanwhile): past this the call is refused. */
#define MAX_WAITING_READS 4096

/* Starts reading r's request; polling thread only. */
static void read_start(wt_rpc_server *s, request_read *r) {
  s->reads++;
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &r->payload;
  grpc_call_error err = grpc_call_start_batch(r->call, &op, 1, &r->tag, NULL);
  if (err != GRPC_CALL_OK) {
    s->reads--;
    reject(r->call, WT_INTERNAL, "%s: cannot read the request: %s",
           r->method->path, grpc_call_error_to_string(err));
    free(r);
  }
}

/* A read ended: the next waiting request's turn. */
static void read_next(wt_rpc_server *s) {
  while (s->reads < s->max_reads && s->read_head != NULL) {
    request_read *r = s->read_head;
    s->read_head = r->next;
    if (s->read_head == NULL) s->read_tail = NULL;
    s->read_waiting--;
    read_start(s, r);
  }
}

static void admit_call(wt_rpc_server *s, const wt_rpc_method *m,
                       grpc_call *call, gpr_timespec deadline, uint32_t scope,
                       ProtobufCMessage *request, int64_t held);

static void on_request(request_slot *slot, int ok) {
  if (!ok) {
    slot_free(slot);
    return;
  }
  wt_rpc_server *s = slot->server;
  const wt_rpc_method *m = &s->methods[slot->method];
  grpc_call *call = slot->call;
  gpr_timespec deadline = slot->deadline;
  uint32_t scope = 0;
  wt_code refused = authorize(s, m, &slot->metadata, &scope);
  grpc_metadata_array_destroy(&slot->metadata);
  slot_recycle(slot);
  if (refused != WT_OK) {
    /* Nothing of the body was read for a stranger. */
    refuse(s, call, m, refused);
    return;
  }
  if (s->listener != NULL && m->scope != WT_SCOPE_PUBLIC) {
    /* the connection may stay past the grace */
    char *peer = grpc_call_get_peer(call);
    rpc_listener_authorized(s->listener, peer, m->scope ? m->scope : scope);
    gpr_free(peer);
  }
  if (m->kind == WT_RPC_CLIENT_STREAM || m->kind == WT_RPC_BIDI_STREAM) {
    admit_call(s, m, call, deadline, scope, NULL, 0);
    return;
  }
  /* Now, and only now, the request message; only max_reads at once (gRPC
   * buffers a whole message before it hands it over), the rest wait their
   * turn with their bodies unread. */
  if (s->reads >= s->max_reads && s->read_waiting >= MAX_WAITING_READS) {
    reject(call, WT_RESOURCE_EXHAUSTED,
           "%s: server busy: %d requests being read and %d waiting (the "
           "limit)",
           m->path, s->reads, s->read_waiting);
    return;
  }
  request_read *r = calloc(1, sizeof(*r));
  if (r == NULL) {
    reject(call, WT_RESOURCE_EXHAUSTED, "%s: out of memory", m->path);
    return;
  }
  r->tag.kind = TAG_READ;
  r->tag.owner = r;
  r->server = s;
  r->method = m;
  r->call = call;
  r->deadline = deadline;
  r->scope = scope;
  if (s->reads < s->max_reads) {
    read_start(s, r);
    return;
  }
  if (s->read_tail)
    s->read_tail->next = r;
  else
    s->read_head = r;
  s->read_tail = r;
  s->read_waiting++;
}

/* The request of an authorized call arrived (ok: the read completed; a
 * NULL payload: the client half-closed without one). */
static void on_read(request_read *r, int ok) {
  wt_rpc_server *s = r->server;
  const wt_rpc_method *m = r->method;
  grpc_call *call = r->call;
  grpc_byte_buffer *payload = r->payload;
  gpr_timespec deadline = r->deadline;
  uint32_t scope = r->scope;
  free(r);
  s->reads--;
  read_next(s);
  ProtobufCMessage *request = NULL;
  if (!ok || payload == NULL) {
    if (payload) grpc_byte_buffer_destroy(payload);
    reject(call, WT_INVALID_ARGUMENT,
           "request %s: missing (the client sent no message)",
           m->request->name);
    return;
  }
  /* What it will hold until its handler is done: its unpacked request is
   * about the size of its bytes. */
  int64_t size = (int64_t)grpc_byte_buffer_length(payload);
  /* A public method's caller is a stranger: a health probe's request is a
   * service name, so a large one costs it a refusal, not an unpacking. */
  if (m->scope == WT_SCOPE_PUBLIC && size > WT_RPC_MAX_PUBLIC_REQUEST_BYTES) {
    grpc_byte_buffer_destroy(payload);
    reject(call, WT_INVALID_ARGUMENT,
           "request %s: %lld bytes; a call without a token may send at most "
           "%d",
           m->request->name, (long long)size, WT_RPC_MAX_PUBLIC_REQUEST_BYTES);
    return;
  }
  int64_t held = atomic_fetch_add(&s->held_bytes, size) + size;
  if (held > s->max_held_bytes && size > 0) {
    atomic_fetch_sub(&s->held_bytes, size);
    grpc_byte_buffer_destroy(payload);
    reject(call, WT_RESOURCE_EXHAUSTED,
           "%s: server busy: the requests of calls in progress hold %lld "
           "bytes (the limit is %lld)",
           m->path, (long long)(held - size), (long long)s->max_held_bytes);
    return;
  }
  wt_status *st = wt_pb_unpack(payload, m->request, &request);
  grpc_byte_buffer_destroy(payload);
  if (st != NULL) {
    atomic_fetch_sub(&s->held_bytes, size);
    reject(call, wt_status_code(st), "request %s", wt_status_message(st));
    wt_status_free(st);
    return;
  }
  admit_call(s, m, call, deadline, scope, request, size);
}

/* An authorized call with its request (NULL for a client stream): into
 * its class's pool, or refused when the class is full. */
static void admit_call(wt_rpc_server *s, const wt_rpc_method *m,
                       grpc_call *call, gpr_timespec deadline, uint32_t scope,
                       ProtobufCMessage *request, int64_t request_bytes) {
  size_t cls = m->admission;
  /* A trainer's calls go to the trainers' class (wt_rpc_class.trainers),
   * whatever their method's: readers never delay or refuse them. */
  if (s->trainer_class != SIZE_MAX && s->ntokens > 0 &&
      (scope & WT_SCOPE_TRAINER) && m->kind != WT_RPC_WATCH &&
      m->scope != WT_SCOPE_PUBLIC)
    cls = s->trainer_class;
  rpc_pool *p = &s->pools[cls];
  char key[80] = "";
  if (p->cfg.max_per_peer > 0) rpc_server_peer_key(s, call, key, sizeof(key));
  wt_mutex_lock(&s->mu);
  rpc_state state = s->state;
  int running = p->running, queued = p->queued;
  bool admit = state == STATE_RUNNING && pool_admit_locked(p);
  rpc_peer *slot = NULL;
  int held = 0, share = 0;
  bool peer_full = false;
  if (admit && p->cfg.max_per_peer > 0) {
    slot = rpc_peer_take_locked(s, key, cls, &held, &share);
    admit = slot != NULL;
    peer_full = !admit;
  }
  if (admit && m->kind == WT_RPC_WATCH) p->running++;
  if (!admit && state == STATE_RUNNING) p->refused++;
  wt_mutex_unlock(&s->mu);
  if (!admit) {
    wt_pb_free(request);
    atomic_fetch_sub(&s->held_bytes, request_bytes);
    if (state != STATE_RUNNING)
      reject(call, WT_UNAVAILABLE, "%s: the server is shutting down", m->path);
    else if (peer_full && held < 0)
      reject(call, WT_RESOURCE_EXHAUSTED, "%s: out of memory", m->path);
    else if (peer_full)
      reject(call, WT_RESOURCE_EXHAUSTED,
             "%s: server busy for this peer (%s): it has %d %s %s open, its "
             "share (%d) while %d peers hold some (at least the limit per "
             "peer%s%s)",
             m->path, key, held, p->cfg.name,
             m->kind == WT_RPC_WATCH ? "streams" : "calls running or waiting",
             share, p->peers, p->cfg.option_per_peer ? "; raise it with " : "",
             p->cfg.option_per_peer ? p->cfg.option_per_peer : "");
    else if (m->kind == WT_RPC_WATCH)
      reject(call, WT_RESOURCE_EXHAUSTED,
             "%s: server busy: %d %s streams open (the limit%s%s)", m->path,
             running, p->cfg.name, p->cfg.option ? "; raise it with " : "",
             p->cfg.option ? p->cfg.option : "");
    else
      reject(call, WT_RESOURCE_EXHAUSTED,
             "%s: server busy: %d %s calls running and %d waiting (the "
             "limit%s%s)",
             m->path, running, p->cfg.name, queued,
             p->cfg.option ? "; raise it with " : "",
             p->cfg.option ? p->cfg.option : "");
    return;
  }
  if (m->kind == WT_RPC_WATCH) {
    rpc_stream_accept(s, m, p, call, request, slot); /* frees request */
    atomic_fetch_sub(&s->held_bytes, request_bytes);
    return;
  }
  wt_rpc_call *c = rpc_call_new(s, m, p, call, deadline, scope, request);
  if (c == NULL) {
    wt_pb_free(request);
    atomic_fetch_sub(&s->held_bytes, request_bytes);
    wt_mutex_lock(&s->mu);
    rpc_peer_release_locked(s, slot);
    wt_mutex_unlock(&s->mu);
    reject(call, WT_RESOURCE_EXHAUSTED, "%s: out of memory", m->path);
    return;
  }
  c->peer_slot = slot;
  c->held_bytes = request_bytes;
  wt_mutex_lock(&s->mu);
  pool_enqueue_locked(p, c, false);
  wt_mutex_unlock(&s->mu);
}

/* ---- polling thread ------------------------------------------------------ */

static void dispatch(wt_rpc_server *s, rpc_tag *t, int ok) {
  switch (t->kind) {
    case TAG_REQUEST:
      on_request(t->owner, ok);
      break;
    case TAG_READ:
      on_read(t->owner, ok);
      break;
    case TAG_GENERIC:
      on_generic(t->owner, ok);
      break;
    case TAG_REJECT:
      reject_done(t->owner);
      break;
    case TAG_CALL_OP:
      rpc_call_on_op(t->owner, ok);
      break;
    case TAG_CALL_CLOSE:
      rpc_call_on_close(t->owner);
      break;
    case TAG_CALL_STATUS:
      rpc_call_on_status(t->owner, ok);
      break;
    case TAG_STREAM_SEND:
      rpc_stream_on_send(t->owner, ok);
      break;
    case TAG_STREAM_CLOSE:
      rpc_stream_on_close(t->owner);
      break;
    case TAG_SHUTDOWN:
      wt_mutex_lock(&s->mu);
      s->shutdown_notified = true;
      pthread_cond_broadcast(&s->cv);
      wt_mutex_unlock(&s->mu);
      break;
  }
}

/* Runs until the completion queue is shut down and drained. */
static void poll_loop(wt_rpc_server *s) {
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(
        s->cq, rpc_deadline_after_ms(POLL_INTERVAL_MS), NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    if (ev.type == GRPC_OP_COMPLETE) dispatch(s, ev.tag, ev.success);
  }
}

static void *poller_main(void *arg) {
  poll_loop(arg);
  return NULL;
}

/* ---- lifecycle ------------------------------------------------------------
 */

static wt_status *validate_methods(const wt_rpc_method *methods, size_t n,
                                   size_t nclasses) {
  for (size_t i = 0; i < n; i++) {
    const wt_rpc_method *m = &methods[i];
    if (m->path == NULL || m->path[0] != '/' ||
        strchr(m->path + 1, '/') == NULL)
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "method %zu: path '%s' is not \"/package.Service/"
                           "Method\"",
                           i, m->path ? m->path : "(null)");
    if (m->kind != WT_RPC_UNARY && m->kind != WT_RPC_CLIENT_STREAM &&
        m->kind != WT_RPC_SERVER_STREAM && m->kind != WT_RPC_WATCH &&
        m->kind != WT_RPC_BIDI_STREAM)
      return wt_status_new(WT_INVALID_ARGUMENT, "method %s: unknown kind %d",
                           m->path, (int)m->kind);
    if (m->kind == WT_RPC_WATCH ? m->open == NULL : m->handler == NULL)
      return wt_status_new(
          WT_INVALID_ARGUMENT, "method %s: no %s", m->path,
          m->kind == WT_RPC_WATCH ? "open function" : "handler");
    if (m->admission >= nclasses)
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "method %s: admission class %u of %zu", m->path,
                           m->admission, nclasses);
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

static void pools_free(wt_rpc_server *s) {
  for (size_t i = 0; s->pools && i < s->npools; i++) {
    pthread_cond_destroy(&s->pools[i].work_cv);
    free(s->pools[i].threads);
  }
  free(s->pools);
  s->pools = NULL;
}

static wt_status *pools_new(wt_rpc_server *s, const wt_rpc_server_options *o) {
  wt_rpc_class fallback = {.name = "default",
                           .max_running = o->max_handler_threads > 0
                                              ? o->max_handler_threads
                                              : DEFAULT_MAX_HANDLER_THREADS};
  const wt_rpc_class *classes = o->classes ? o->classes : &fallback;
  size_t n = o->classes ? o->nclasses : 1;
  if (n == 0)
    return wt_status_new(WT_INVALID_ARGUMENT, "server: no admission class");
  s->pools = calloc(n, sizeof(*s->pools));
  if (s->pools == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "server: out of memory");
  s->npools = n;
  s->trainer_class = SIZE_MAX;
  for (size_t i = 0; i < n; i++) {
    rpc_pool *p = &s->pools[i];
    pthread_cond_init(&p->work_cv, NULL);
    p->cfg = classes[i];
    if (p->cfg.trainers && s->trainer_class == SIZE_MAX) s->trainer_class = i;
    p->index = i;
    p->server = s;
    if (p->cfg.name == NULL) p->cfg.name = "unnamed";
    if (p->cfg.max_running <= 0 || p->cfg.max_queued < 0)
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "server: admission class '%s' allows %d calls and "
                           "%d waiting; it needs at least one call and no "
                           "negative queue",
                           p->cfg.name, p->cfg.max_running, p->cfg.max_queued);
    p->threads = calloc((size_t)p->cfg.max_running, sizeof(*p->threads));
    if (p->threads == NULL)
      return wt_status_new(WT_RESOURCE_EXHAUSTED, "server: out of memory");
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
  WT_CHECK(validate_methods(methods, n, opts->classes ? opts->nclasses : 1));

  wt_rpc_server *s = calloc(1, sizeof(*s));
  if (s == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  s->methods = methods;
  s->n_methods = n;
  s->user = user;
  s->listen = strdup(opts->listen ? opts->listen : DEFAULT_LISTEN);
  s->registered = calloc(n ? n : 1, sizeof(*s->registered));
  if (s->listen == NULL || s->registered == NULL ||
      (st = pools_new(s, opts)) != NULL) {
    pools_free(s);
    free(s->listen);
    free(s->registered);
    free(s);
    if (st == NULL) st = wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
    goto out;
  }
  s->requests_per_method = opts->requests_per_method > 0
                               ? opts->requests_per_method
                               : DEFAULT_REQUESTS_PER_METHOD;
  s->on_shutdown = opts->on_shutdown;
  s->tokens = opts->tokens;
  s->ntokens = opts->tokens ? opts->ntokens : 0;
  if (opts->tls != NULL) {
    s->tls_cert = opts->tls->cert_file ? strdup(opts->tls->cert_file) : NULL;
    s->tls_key = opts->tls->key_file ? strdup(opts->tls->key_file) : NULL;
    s->tls_ca = opts->tls->ca_file ? strdup(opts->tls->ca_file) : NULL;
  }
  s->max_concurrent_streams = opts->max_concurrent_streams > 0
                                  ? opts->max_concurrent_streams
                                  : DEFAULT_MAX_CONCURRENT_STREAMS;
  s->max_metadata_bytes = opts->max_metadata_bytes > 0
                              ? opts->max_metadata_bytes
                              : DEFAULT_MAX_METADATA_BYTES;
  s->handshake_timeout_ms = opts->handshake_timeout_ms > 0
                                ? opts->handshake_timeout_ms
                                : DEFAULT_HANDSHAKE_TIMEOUT_MS;
  s->max_connections = opts->max_connections;
  s->max_reads =
      opts->max_reads > 0 ? opts->max_reads : WT_RPC_DEFAULT_MAX_READS;
  s->max_held_bytes = opts->max_held_bytes > 0 ? opts->max_held_bytes
                                               : WT_RPC_DEFAULT_MAX_HELD_BYTES;
  atomic_init(&s->held_bytes, 0);
  s->auth_grace_ms = opts->auth_grace_ms;
  s->idle_ms = opts->idle_ms != 0 ? opts->idle_ms : WT_RPC_DEFAULT_IDLE_MS;
  s->shutdown_tag.kind = TAG_SHUTDOWN;
  s->shutdown_tag.owner = s;
  s->state = STATE_NEW;
  wt_mutex_init(&s->mu, WT_LOCK_RPC_SERVER, 0, "rpc_server.mu");
  wt_cond_init_monotonic(&s->cv);

  grpc_init();
  grpc_arg args[12];
  size_t nargs = wt_rpc_message_limit_args(
      args, opts->max_receive_message_bytes, opts->max_send_message_bytes);
  /* Limits on what one connection may hold (see docs/trust.md:
   * gRPC 1.51's HTTP/2 and HPACK code predates several denial-of-service
   * fixes, and these bound what a stranger's connection can make it do). */
  const struct {
    const char *key;
    int value;
  } limits[] = {
      {GRPC_ARG_MAX_CONCURRENT_STREAMS, s->max_concurrent_streams},
      {GRPC_ARG_MAX_METADATA_SIZE, s->max_metadata_bytes},
      {GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, s->handshake_timeout_ms},
      /* Clients' keepalive pings (wt_rpc_channel_options), also while a
       * client-streaming push sends this side nothing; faster pingers are
       * sent GOAWAY. */
      {GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
       WT_RPC_MIN_PING_INTERVAL_MS},
      {GRPC_ARG_HTTP2_MAX_PING_STRIKES, 2},
      /* No call in progress this long: GOAWAY (the client reconnects on
       * its next call). INT_MAX is gRPC's "never". */
      {GRPC_ARG_MAX_CONNECTION_IDLE_MS, s->idle_ms > 0 ? s->idle_ms : INT_MAX},
      /* No compressed requests: a gzip of 16 KiB inflates to 16 MiB on the
       * polling thread before anyone is known (trust row 1). A compressed
       * message is refused by gRPC (UNIMPLEMENTED) without inflating it;
       * wt's own clients never compress (delta rounds carry zstd frames). */
      {GRPC_COMPRESSION_CHANNEL_ENABLED_ALGORITHMS_BITSET,
       1 << GRPC_COMPRESS_NONE},
  };
  for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
    memset(&args[nargs], 0, sizeof(args[nargs]));
    args[nargs].type = GRPC_ARG_INTEGER;
    args[nargs].key = (char *)limits[i].key;
    args[nargs].value.integer = limits[i].value;
    nargs++;
  }
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
    /* A call arrives with its metadata only: nothing of its body is read
     * (or buffered, beyond HTTP/2's window) before its token is checked.
     * The polling thread then reads a unary or server-stream request and
     * can reject a malformed one without a handler thread. */
    s->registered[i] = grpc_server_register_method(
        s->server, methods[i].path, NULL, GRPC_SRM_PAYLOAD_NONE, 0);
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
  rpc_listener_stop(s->listener);
  grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
  grpc_server_cancel_all_calls(s->server);
  for (;;) {
    wt_mutex_lock(&s->mu);
    bool done = s->shutdown_notified;
    wt_mutex_unlock(&s->mu);
    if (done) break;
    grpc_event ev = grpc_completion_queue_next(
        s->cq, rpc_deadline_after_ms(POLL_INTERVAL_MS), NULL);
    if (ev.type == GRPC_OP_COMPLETE) dispatch(s, ev.tag, ev.success);
  }
  grpc_server_destroy(s->server);
  s->server = NULL;
  grpc_completion_queue_shutdown(s->cq);
  poll_loop(s);
  wt_mutex_lock(&s->mu);
  s->state = STATE_DONE;
  wt_mutex_unlock(&s->mu);
}

wt_status *wt_rpc_server_start(wt_rpc_server *s) {
  wt_status *st = NULL;
  wt_mutex_lock(&s->mu);
  rpc_state state = s->state;
  wt_mutex_unlock(&s->mu);
  if (state != STATE_NEW)
    WT_FAIL(WT_FAILED_PRECONDITION, "server on %s: already started", s->listen);

  if (s->tls_cert != NULL) {
    wt_rpc_tls tls = {
        .cert_file = s->tls_cert, .key_file = s->tls_key, .ca_file = s->tls_ca};
    WT_CHECK(rpc_tls_server_new(&tls, &s->tls));
  }
  grpc_server_start(s->server);
  wt_mutex_lock(&s->mu);
  s->state = STATE_RUNNING;
  wt_mutex_unlock(&s->mu);
  /* wt's own listener hands gRPC the connections it accepts (TLS ones
   * terminated by it). */
  st = rpc_listener_start(s->server, s->listen, s->tls, s->max_connections,
                          s->auth_grace_ms, s->handshake_timeout_ms,
                          &s->listener, &s->port);

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
    wt_mutex_lock(&s->mu);
    s->state = STATE_SHUTTING_DOWN;
    wt_mutex_unlock(&s->mu);
    stop_inline(s);
    s->port = 0;
    goto out;
  }
  s->poller_started = true;
  WT_LOGD(RPC_MOD, "serving %zu methods on %s (port %d)", s->n_methods,
          s->listen, s->port);
out:
  return st;
}

/* Waits on the server's condition until `pred` holds or `deadline` (ms on
 * the monotonic clock, -1: none) passes. Called and returns with s->mu
 * held. */
static bool wait_until(wt_rpc_server *s, bool (*pred)(wt_rpc_server *),
                       int64_t deadline, const char *what) {
  int64_t next_warn = wt_mono_ms() + 5000;
  while (!pred(s)) {
    int64_t now = wt_mono_ms();
    if (deadline >= 0 && now >= deadline) return false;
    if (now >= next_warn) {
      WT_LOGW(RPC_MOD, "shutdown: still waiting for %s", what);
      next_warn = now + 5000;
    }
    int64_t step = POLL_INTERVAL_MS;
    if (deadline >= 0 && deadline - now < step) step = deadline - now;
    wt_cond_wait_until(&s->cv, &s->mu, now + step);
  }
  return true;
}

static bool shutdown_notified(wt_rpc_server *s) {
  return s->shutdown_notified;
}

static bool calls_done(wt_rpc_server *s) {
  for (size_t i = 0; i < s->npools; i++)
    if (s->pools[i].running > 0 || s->pools[i].queued > 0 ||
        s->pools[i].parked > 0 || s->pools[i].finishing > 0)
      return false;
  return true;
}

static int calls_in_progress(wt_rpc_server *s) {
  int n = 0;
  for (size_t i = 0; i < s->npools; i++)
    n += s->pools[i].running + s->pools[i].queued + s->pools[i].parked;
  return n;
}

void wt_rpc_server_shutdown(wt_rpc_server *s, int64_t deadline_ms) {
  wt_mutex_lock(&s->mu);
  if (s->state != STATE_RUNNING) {
    wt_mutex_unlock(&s->mu);
    return;
  }
  s->state = STATE_SHUTTING_DOWN;
  wt_mutex_unlock(&s->mu);

  rpc_listener_stop(s->listener); /* no connection is added from here */
  int64_t deadline = wt_mono_ms() + (deadline_ms > 0 ? deadline_ms : 0);
  grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
  if (s->on_shutdown) s->on_shutdown(s->user);

  wt_mutex_lock(&s->mu);
  if (!wait_until(s, shutdown_notified, deadline, "calls to finish")) {
    int left = calls_in_progress(s);
    /* Only worth a line when the caller meant to give calls time. */
    if (left > 0)
      wt_log(deadline_ms > 0 ? WT_LOG_INFO : WT_LOG_DEBUG, RPC_MOD,
             "shutdown: cancelling %d calls still in progress", left);
    wt_mutex_unlock(&s->mu);
    grpc_server_cancel_all_calls(s->server);
    wt_mutex_lock(&s->mu);
    wait_until(s, shutdown_notified, -1, "cancelled calls to end");
  }
  wait_until(s, calls_done, -1, "handlers to return");
  s->pools_quit = true;
  for (size_t i = 0; i < s->npools; i++)
    pthread_cond_broadcast(&s->pools[i].work_cv);
  wt_mutex_unlock(&s->mu);
  for (size_t i = 0; i < s->npools; i++)
    for (int t = 0; t < s->pools[i].nthreads; t++)
      pthread_join(s->pools[i].threads[t], NULL);

  grpc_server_destroy(s->server);
  s->server = NULL;
  grpc_completion_queue_shutdown(s->cq);
  pthread_join(s->poller, NULL); /* it drains the queue before returning */
  s->poller_started = false;
  wt_mutex_lock(&s->mu);
  s->state = STATE_DONE;
  wt_mutex_unlock(&s->mu);
  WT_LOGD(RPC_MOD, "server on %s stopped", s->listen);
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
  rpc_listener_destroy(s->listener);
  rpc_tls_server_free(s->tls);
  wt_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  pools_free(s);
  while (s->read_head != NULL) { /* none once the queue drained */
    request_read *r = s->read_head;
    s->read_head = r->next;
    grpc_call_unref(r->call);
    free(r);
  }
  while (s->peers != NULL) { /* none when every call ended */
    rpc_peer *e = s->peers;
    s->peers = e->next;
    free(e);
  }
  free(s->registered);
  free(s->listen);
  free(s->tls_cert);
  free(s->tls_key);
  free(s->tls_ca);
  free(s);
  grpc_shutdown();
}

void wt_rpc_server_conn_counts(wt_rpc_server *s, wt_rpc_conn_counts *out) {
  memset(out, 0, sizeof(*out));
  if (s->listener != NULL) rpc_listener_counts(s->listener, out);
}

void wt_rpc_server_auth_counts(wt_rpc_server *s, wt_rpc_auth_counts *out) {
  out->unauthenticated = atomic_load(&s->unauthenticated);
  out->denied = atomic_load(&s->denied);
}
