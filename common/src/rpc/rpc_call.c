/* rpc_call.c: a call as its handler sees it (see wt/rpc.h): the blocking
 * helpers a handler uses on its pool thread, and the status it sends.
 *
 * A handler's helpers start one batch on the call (under the call's mutex,
 * so batches of one call never start concurrently) and wait on the call's
 * condition variable, which the polling thread signals when the batch
 * completes (rpc_call_on_op). The call is freed when the pool's reference
 * (dropped once the status is sent) and the RECV_CLOSE_ON_SERVER batch's
 * (dropped when it completes) are both gone, so no tag outlives its owner.
 */

#include <grpc/grpc.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wt/log.h"
#include "wt/pb.h"
#include "wt/rpc.h"
#include "wt/lock.h"

#include "rpc_internal.h"

static void call_unref(wt_rpc_call *c) {
  if (atomic_fetch_sub(&c->refs, 1) != 1) return;
  grpc_call_unref(c->call);
  if (c->peer) gpr_free(c->peer);
  wt_pb_free(c->request);
  if (c->held_bytes) atomic_fetch_sub(&c->server->held_bytes, c->held_bytes);
  if (c->response) grpc_byte_buffer_destroy(c->response);
  grpc_slice_unref(c->status_details);
  wt_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  wt_mutex_destroy(&c->cb_mu);
  free(c);
}

wt_rpc_call *rpc_call_new(wt_rpc_server *s, const wt_rpc_method *m,
                          rpc_pool *pool, grpc_call *call,
                          gpr_timespec deadline, uint32_t scope,
                          ProtobufCMessage *request) {
  wt_rpc_call *c = calloc(1, sizeof(*c));
  if (c == NULL) return NULL;
  c->server = s;
  c->method = m;
  c->pool = pool;
  c->scope = scope;
  c->call = call;
  c->deadline = gpr_convert_clock_type(deadline, GPR_CLOCK_MONOTONIC);
  c->peer = rpc_server_peer(s, call);
  c->request = request;
  c->op_tag.kind = TAG_CALL_OP;
  c->op_tag.owner = c;
  c->close_tag.kind = TAG_CALL_CLOSE;
  c->close_tag.owner = c;
  c->status_tag.kind = TAG_CALL_STATUS;
  c->status_tag.owner = c;
  c->status_details = grpc_empty_slice();
  atomic_init(&c->refs, 1); /* the pool's */
  atomic_init(&c->cancelled, false);
  wt_mutex_init(&c->mu, WT_LOCK_RPC_CALL, 0, "rpc_call.mu");
  wt_cond_init_monotonic(&c->cv); /* read deadlines are on that clock */
  wt_mutex_init(&c->cb_mu, WT_LOCK_RPC_CANCEL, 0, "rpc_call.cb_mu");

  /* Learn early when the client goes away, also while the call waits for a
   * thread, so reads and writes, and a handler waiting on its own
   * condition, stop promptly. */
  grpc_op close_op;
  memset(&close_op, 0, sizeof(close_op));
  close_op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  close_op.data.recv_close_on_server.cancelled = &c->close_cancelled;
  atomic_fetch_add(&c->refs, 1);
  grpc_call_error err =
      grpc_call_start_batch(c->call, &close_op, 1, &c->close_tag, NULL);
  if (err != GRPC_CALL_OK) {
    WT_LOGW(RPC_MOD, "%s: cannot watch for cancellation: %s", m->path,
            grpc_call_error_to_string(err));
    atomic_fetch_sub(&c->refs, 1);
  }
  return c;
}

/* Starts one batch on the call and waits until it completes, or, with a
 * timeout (>= 0), until it passes: then the call is cancelled with
 * `timeout_status` and the batch waited for. Returns the batch's success
 * flag, -1 when it could not be started, -2 when it timed out. */
static int call_run_batch(wt_rpc_call *c, const grpc_op *ops, size_t n,
                          int64_t timeout_ms, const char *timeout_status) {
  wt_mutex_lock(&c->mu);
  c->op_done = false;
  grpc_call_error err =
      grpc_call_start_batch(c->call, ops, n, &c->op_tag, NULL);
  if (err != GRPC_CALL_OK) {
    wt_mutex_unlock(&c->mu);
    WT_LOGW(RPC_MOD, "%s: cannot start a batch: %s", c->method->path,
            grpc_call_error_to_string(err));
    return -1;
  }
  bool timed_out = false;
  if (timeout_ms >= 0) {
    int64_t until = wt_mono_ms() + timeout_ms;
    while (!c->op_done)
      if (wt_cond_wait_until(&c->cv, &c->mu, until) != 0) break;
    if (!c->op_done) {
      timed_out = true;
      atomic_store(&c->cancelled, true);
      grpc_slice details = rpc_status_details(timeout_status);
      char *text = grpc_slice_to_c_string(details);
      grpc_call_cancel_with_status(c->call, GRPC_STATUS_DEADLINE_EXCEEDED, text,
                                   NULL);
      gpr_free(text);
      grpc_slice_unref(details);
    }
  }
  while (!c->op_done) wt_cond_wait(&c->cv, &c->mu);
  int ok = c->op_ok;
  wt_mutex_unlock(&c->mu);
  return timed_out ? -2 : ok;
}

/* The status for a read or write that failed because the call is over. */
static wt_status *call_failed(wt_rpc_call *c, const char *what) {
  if (wt_rpc_call_remaining_ms(c) == 0)
    return wt_status_new(WT_DEADLINE_EXCEEDED,
                         "%s: %s: the client's deadline passed",
                         c->method->path, what);
  if (rpc_server_stopping(c->server))
    return wt_status_new(WT_CANCELLED, "%s: %s: the server is shutting down",
                         c->method->path, what);
  return wt_status_new(WT_CANCELLED,
                       "%s: %s: the client (%s) cancelled the call or went "
                       "away",
                       c->method->path, what, c->peer ? c->peer : "?");
}

/* Starts the batch that sends the status (and the response of a unary or
 * client-stream call) and returns without waiting; the batch holds a
 * reference until it completes. */
static void call_send_status(wt_rpc_call *c, const wt_status *st) {
  grpc_op ops[3];
  size_t n = 0;
  memset(ops, 0, sizeof(ops));
  if (!c->initial_metadata_sent) ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
  if (st == NULL && c->method->kind != WT_RPC_SERVER_STREAM &&
      c->method->kind != WT_RPC_BIDI_STREAM) {
    if (c->response == NULL) /* the default message encodes as no bytes */
      c->response = grpc_raw_byte_buffer_create(NULL, 0);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = c->response;
  }
  grpc_slice_unref(c->status_details);
  c->status_details = rpc_status_details(st ? wt_status_message(st) : "");
  atomic_store(&c->status_code, (int)wt_status_code(st));
  ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[n].data.send_status_from_server.status =
      wt_code_to_grpc(wt_status_code(st));
  ops[n++].data.send_status_from_server.status_details =
      st ? &c->status_details : NULL;
  atomic_fetch_add(&c->refs, 1);
  wt_mutex_lock(&c->mu);
  grpc_call_error err =
      grpc_call_start_batch(c->call, ops, n, &c->status_tag, NULL);
  wt_mutex_unlock(&c->mu);
  if (err != GRPC_CALL_OK) {
    WT_LOGW(RPC_MOD, "%s: cannot send the status: %s", c->method->path,
            grpc_call_error_to_string(err));
    atomic_fetch_sub(&c->refs, 1); /* the pool's own ref keeps it alive */
  }
}

void rpc_call_on_status(wt_rpc_call *c, int ok) {
  if (!ok)
    WT_LOGD(RPC_MOD, "%s: status %s not delivered (the call was over)",
            c->method->path,
            wt_code_name((wt_code)atomic_load(&c->status_code)));
  call_unref(c);
}

wt_status *rpc_call_handle(wt_rpc_call *c) {
  if (c->resume_fn == NULL && wt_rpc_call_cancelled(c))
    /* It waited for a thread longer than its client did. (A continuation
     * runs anyway: it owns its argument, and sees the cancel itself.) */
    return call_failed(c, "waiting for a handler thread");
  /* The handler's lines name the peer (and, where it sets one, the
   * round); the thread's context is put back for its next call. */
  wt_log_context old =
      wt_log_context_set((wt_log_context){0, -1, wt_rpc_call_peer(c)});
  wt_status *st;
  if (c->resume_fn != NULL) {
    wt_rpc_resume_fn fn = c->resume_fn;
    c->resume_fn = NULL;
    st = fn(c, c->resume_arg, c->server->user);
  } else {
    st = c->method->handler(c, c->request, c->server->user);
  }
  if (st == wt_status_parked_()) {
    wt_log_context_set(old);
    return st; /* the call is its owner's now: touch nothing */
  }
  if (st != NULL)
    WT_LOGD(RPC_MOD, "%s: %s: %s", c->method->path,
            wt_code_name(wt_status_code(st)), wt_status_message(st));
  wt_log_context_set(old);
  return st;
}

void rpc_call_finish(wt_rpc_call *c, wt_status *st) {
  call_send_status(c, st);
  wt_status_free(st);
  wt_pb_free(c->request);
  c->request = NULL;
  atomic_fetch_sub(&c->server->held_bytes, c->held_bytes);
  c->held_bytes = 0;
  wt_mutex_lock(&c->cb_mu);
  c->cancel_fn = NULL;
  wt_mutex_unlock(&c->cb_mu);
  call_unref(c);
}

void rpc_call_on_op(wt_rpc_call *c, int ok) {
  wt_mutex_lock(&c->mu);
  c->op_done = true;
  c->op_ok = ok;
  pthread_cond_broadcast(&c->cv);
  wt_mutex_unlock(&c->mu);
}

void rpc_call_on_close(wt_rpc_call *c) {
  wt_mutex_lock(&c->mu);
  bool cancelled = c->close_cancelled != 0;
  if (cancelled) atomic_store(&c->cancelled, true);
  wt_mutex_unlock(&c->mu);
  if (cancelled) {
    WT_LOGD(RPC_MOD, "%s: cancelled (peer %s)", c->method->path,
            c->peer ? c->peer : "?");
    wt_mutex_lock(&c->cb_mu);
    if (c->cancel_fn) c->cancel_fn(c->cancel_arg);
    wt_mutex_unlock(&c->cb_mu);
  }
  call_unref(c);
}

/* ---- the handler's API --------------------------------------------------- */

const char *wt_rpc_call_method(const wt_rpc_call *call) {
  return call->method->path;
}

void wt_rpc_call_peer_key(const wt_rpc_call *call, char *key, size_t n) {
  rpc_server_peer_key(call->server, call->call, key, n);
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

bool wt_rpc_call_trainer(const wt_rpc_call *call) {
  return (call->scope & WT_SCOPE_TRAINER) != 0;
}

bool wt_rpc_call_cancelled(wt_rpc_call *call) {
  return atomic_load(&call->cancelled) || wt_rpc_call_remaining_ms(call) == 0;
}

void wt_rpc_call_set_cancel_callback(wt_rpc_call *call, void (*fn)(void *arg),
                                     void *arg) {
  wt_mutex_lock(&call->cb_mu);
  call->cancel_fn = fn;
  call->cancel_arg = fn ? arg : NULL;
  wt_mutex_unlock(&call->cb_mu);
}

void wt_rpc_call_cancel(wt_rpc_call *c, wt_code code, const char *message) {
  grpc_slice details = rpc_status_details(message ? message : "");
  char *text = grpc_slice_to_c_string(details);
  atomic_store(&c->cancelled, true);
  grpc_call_error err = grpc_call_cancel_with_status(
      c->call, (grpc_status_code)wt_code_to_grpc(code), text, NULL);
  if (err != GRPC_CALL_OK)
    WT_LOGW(RPC_MOD, "%s: cannot cancel the call: %s", c->method->path,
            grpc_call_error_to_string(err));
  gpr_free(text);
  grpc_slice_unref(details);
}

wt_status *wt_rpc_call_read_raw_within(wt_rpc_call *c, int64_t timeout_ms,
                                       const char *what,
                                       grpc_byte_buffer **bb) {
  *bb = NULL;
  if (c->method->kind != WT_RPC_CLIENT_STREAM &&
      c->method->kind != WT_RPC_BIDI_STREAM)
    return wt_status_new(WT_INTERNAL, "%s: read on a %s method",
                         c->method->path, rpc_kind_name(c->method->kind));
  if (wt_rpc_call_cancelled(c)) return call_failed(c, "read");
  char why[512] = "";
  if (timeout_ms >= 0)
    snprintf(why, sizeof(why),
             "%s: no message within %lld ms while waiting "
             "for %s",
             c->method->path, (long long)timeout_ms, what ? what : "data");
  grpc_byte_buffer *buf = NULL;
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &buf;
  int ok = call_run_batch(c, &op, 1, timeout_ms, why);
  if (ok == -1)
    return wt_status_new(WT_INTERNAL, "%s: read: cannot start a batch",
                         c->method->path);
  if (ok == -2) {
    if (buf) grpc_byte_buffer_destroy(buf);
    return wt_status_new(WT_DEADLINE_EXCEEDED, "%s", why);
  }
  if (!ok || (buf == NULL && grpc_call_failed_before_recv_message(c->call))) {
    if (buf) grpc_byte_buffer_destroy(buf);
    return call_failed(c, "read");
  }
  *bb = buf;
  return NULL;
}

wt_status *wt_rpc_call_read_raw(wt_rpc_call *c, grpc_byte_buffer **bb) {
  return wt_rpc_call_read_raw_within(c, -1, NULL, bb);
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
  if (c->method->kind != WT_RPC_SERVER_STREAM &&
      c->method->kind != WT_RPC_BIDI_STREAM)
    WT_FAIL(WT_INTERNAL, "%s: write on a %s method", c->method->path,
            rpc_kind_name(c->method->kind));
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
  /* A blocked write counts as silence, as a blocked read does. */
  char why[512];
  snprintf(why, sizeof(why),
           "%s: the client (%s) read nothing for %d ms: a write waited for "
           "its flow control",
           c->method->path, c->peer ? c->peer : "?", WT_RPC_WRITE_STALL_MS);
  int ok = call_run_batch(c, ops, n, WT_RPC_WRITE_STALL_MS, why);
  if (ok == -2) {
    c->initial_metadata_sent = true;
    WT_FAIL(WT_DEADLINE_EXCEEDED, "%s", why);
  }
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
  if (c->method->kind == WT_RPC_SERVER_STREAM ||
      c->method->kind == WT_RPC_BIDI_STREAM)
    WT_FAIL(WT_INTERNAL, "%s: respond on a server stream (use write)",
            c->method->path);
  WT_CHECK(check_response_type(c, msg));
  WT_CHECK(wt_pb_pack(msg, &bb));
  if (c->response) grpc_byte_buffer_destroy(c->response);
  c->response = bb;
out:
  return st;
}
