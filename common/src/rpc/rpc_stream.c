/* rpc_stream.c: WT_RPC_WATCH streams (see wt/rpc.h): server streams that
 * hold no thread. A stream is opened on the polling thread; messages are
 * queued from any thread and sent one batch at a time, each next one
 * started when the previous completes (on the polling thread); the status
 * follows the last queued message.
 *
 * References: one for the RECV_CLOSE_ON_SERVER batch, one for each send or
 * status batch in flight, and one for the method's owner (the service),
 * dropped by wt_rpc_stream_release. The gRPC call is unreferenced, and the
 * stream freed, when all are gone.
 */

#include <grpc/grpc.h>
#include <grpc/support/alloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wt/clock.h"
#include "wt/log.h"
#include "wt/pb.h"
#include "wt/rpc.h"
#include "wt/lock.h"

#include "rpc_internal.h"

struct wt_rpc_stream {
  wt_rpc_server *server;
  const wt_rpc_method *method;
  rpc_pool *pool;
  rpc_peer *peer_slot; /* its place in its peer's quota, or NULL */
  grpc_call *call;
  char *peer; /* gpr_malloc'd */
  rpc_tag send_tag;
  rpc_tag close_tag;
  void *user;

  wt_mutex mu; /* everything below */
  int refs;
  grpc_byte_buffer *queue[WT_RPC_STREAM_QUEUE]; /* ring of waiting messages */
  int qhead, qlen;
  uint64_t dropped;
  grpc_byte_buffer *in_flight; /* the message of the batch in flight */
  int64_t busy_since_ms;       /* when the batch in flight started */
  bool busy;                   /* a send or status batch is in flight */
  bool metadata_sent;
  bool end_requested;
  bool status_sent;
  bool closed;  /* RECV_CLOSE_ON_SERVER completed: the call is over */
  bool refused; /* the opener said no: it holds no reference, hears no close */
  int close_cancelled;
  grpc_status_code end_code;
  grpc_slice end_details;
};

static void stream_free(wt_rpc_stream *s) {
  for (int i = 0; i < s->qlen; i++)
    grpc_byte_buffer_destroy(s->queue[(s->qhead + i) % WT_RPC_STREAM_QUEUE]);
  if (s->in_flight) grpc_byte_buffer_destroy(s->in_flight);
  grpc_slice_unref(s->end_details);
  grpc_call_unref(s->call);
  if (s->peer) gpr_free(s->peer);
  wt_mutex_destroy(&s->mu);
  free(s);
}

/* Drops one reference; called with s->mu held, which it releases. */
static void unref_unlock(wt_rpc_stream *s) {
  bool last = --s->refs == 0;
  wt_mutex_unlock(&s->mu);
  if (last) stream_free(s);
}

/* Starts the next batch if none is in flight: the oldest waiting message,
 * else the status once one was asked for. Under s->mu. */
static void pump_locked(wt_rpc_stream *s) {
  if (s->busy || s->closed || s->status_sent) return;
  grpc_op ops[2];
  size_t n = 0;
  memset(ops, 0, sizeof(ops));
  if (!s->metadata_sent) ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
  if (s->qlen > 0) {
    s->in_flight = s->queue[s->qhead];
    s->qhead = (s->qhead + 1) % WT_RPC_STREAM_QUEUE;
    s->qlen--;
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = s->in_flight;
  } else if (s->end_requested) {
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = s->end_code;
    ops[n++].data.send_status_from_server.status_details =
        s->end_code == GRPC_STATUS_OK ? NULL : &s->end_details;
    s->status_sent = true;
  } else {
    return;
  }
  grpc_call_error err =
      grpc_call_start_batch(s->call, ops, n, &s->send_tag, NULL);
  if (err != GRPC_CALL_OK) {
    WT_LOGW(RPC_MOD, "%s: cannot send on a stream: %s", s->method->path,
            grpc_call_error_to_string(err));
    if (s->in_flight) grpc_byte_buffer_destroy(s->in_flight);
    s->in_flight = NULL;
    return;
  }
  s->metadata_sent = true;
  s->busy = true;
  s->busy_since_ms = wt_mono_ms();
  s->refs++;
}

void rpc_stream_accept(wt_rpc_server *srv, const wt_rpc_method *m,
                       rpc_pool *pool, grpc_call *call,
                       ProtobufCMessage *request, rpc_peer *peer_slot) {
  wt_rpc_stream *s = calloc(1, sizeof(*s));
  if (s == NULL) {
    grpc_call_cancel_with_status(call, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                 "out of memory", NULL);
    grpc_call_unref(call);
    wt_pb_free(request);
    wt_mutex_lock(&srv->mu);
    pool->running--;
    rpc_peer_release_locked(srv, peer_slot);
    pthread_cond_broadcast(&srv->cv);
    wt_mutex_unlock(&srv->mu);
    return;
  }
  s->server = srv;
  s->method = m;
  s->pool = pool;
  s->peer_slot = peer_slot;
  s->call = call;
  s->peer = rpc_server_peer(srv, call);
  s->send_tag.kind = TAG_STREAM_SEND;
  s->send_tag.owner = s;
  s->close_tag.kind = TAG_STREAM_CLOSE;
  s->close_tag.owner = s;
  s->end_details = grpc_empty_slice();
  wt_mutex_init(&s->mu, WT_LOCK_RPC_STREAM, 0, "rpc_stream.mu");
  s->refs = 2; /* the close batch's and the owner's */
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  op.data.recv_close_on_server.cancelled = &s->close_cancelled;
  grpc_call_error err =
      grpc_call_start_batch(call, &op, 1, &s->close_tag, NULL);
  if (err != GRPC_CALL_OK) {
    /* Without it the call's end would go unnoticed: give up on it. */
    WT_LOGW(RPC_MOD, "%s: cannot watch a stream: %s", m->path,
            grpc_call_error_to_string(err));
    grpc_call_cancel(call, NULL);
    wt_pb_free(request);
    s->refs = 1;
    s->closed = true;
    wt_mutex_lock(&srv->mu);
    pool->running--;
    rpc_peer_release_locked(srv, peer_slot);
    pthread_cond_broadcast(&srv->cv);
    wt_mutex_unlock(&srv->mu);
    wt_mutex_lock(&s->mu);
    unref_unlock(s);
    return;
  }
  wt_status *st = m->open(s, request, srv->user);
  wt_pb_free(request);
  if (st != NULL) {
    /* Refused: the owner keeps no reference and is not told of the close. */
    wt_mutex_lock(&s->mu);
    s->refused = true;
    wt_mutex_unlock(&s->mu);
    wt_rpc_stream_end(s, st);
    wt_status_free(st);
    wt_rpc_stream_release(s);
  }
}

void rpc_stream_on_send(wt_rpc_stream *s, int ok) {
  wt_mutex_lock(&s->mu);
  if (s->in_flight) grpc_byte_buffer_destroy(s->in_flight);
  s->in_flight = NULL;
  s->busy = false;
  if (ok) pump_locked(s);
  unref_unlock(s);
}

void rpc_stream_on_close(wt_rpc_stream *s) {
  wt_mutex_lock(&s->mu);
  s->closed = true;
  /* What will not be sent now. */
  for (int i = 0; i < s->qlen; i++)
    grpc_byte_buffer_destroy(s->queue[(s->qhead + i) % WT_RPC_STREAM_QUEUE]);
  s->qlen = 0;
  uint64_t dropped = s->dropped;
  bool refused = s->refused;
  wt_mutex_unlock(&s->mu);
  if (dropped > 0)
    WT_LOGD(RPC_MOD, "%s (peer %s): %llu message(s) dropped for a slow reader",
            s->method->path, s->peer ? s->peer : "?",
            (unsigned long long)dropped);
  if (s->method->closed && !refused) s->method->closed(s, s->server->user);
  wt_rpc_server *srv = s->server;
  wt_mutex_lock(&srv->mu);
  s->pool->running--;
  rpc_peer_release_locked(srv, s->peer_slot);
  s->peer_slot = NULL;
  pthread_cond_broadcast(&srv->cv);
  wt_mutex_unlock(&srv->mu);
  wt_mutex_lock(&s->mu);
  unref_unlock(s);
}

void wt_rpc_stream_set_user(wt_rpc_stream *s, void *p) {
  s->user = p;
}

void *wt_rpc_stream_user(const wt_rpc_stream *s) {
  return s->user;
}

const char *wt_rpc_stream_peer(const wt_rpc_stream *s) {
  return s->peer ? s->peer : "";
}

wt_status *wt_rpc_stream_send(wt_rpc_stream *s, const ProtobufCMessage *msg) {
  const ProtobufCMessageDescriptor *want = s->method->response;
  if (msg == NULL || (want != NULL && msg->descriptor != want))
    return wt_status_new(WT_INTERNAL, "%s: a stream message of the wrong type",
                         s->method->path);
  grpc_byte_buffer *bb = NULL;
  wt_status *st = wt_pb_pack(msg, &bb);
  if (st != NULL) return wt_status_prefix(st, "%s: send", s->method->path);
  wt_mutex_lock(&s->mu);
  if (s->closed || s->end_requested) {
    wt_mutex_unlock(&s->mu);
    grpc_byte_buffer_destroy(bb);
    return NULL;
  }
  if (s->busy && wt_mono_ms() - s->busy_since_ms > WT_RPC_WRITE_STALL_MS) {
    /* A client whose flow control has let nothing through for that long
     * is silent: its stream ends, as a reader's blocked write does. */
    char why[256];
    snprintf(why, sizeof(why),
             "%s: the client (%s) read nothing for %d ms: the stream ends",
             s->method->path, s->peer ? s->peer : "?", WT_RPC_WRITE_STALL_MS);
    grpc_call_cancel_with_status(s->call, GRPC_STATUS_DEADLINE_EXCEEDED, why,
                                 NULL);
    s->end_requested = true;
    wt_mutex_unlock(&s->mu);
    grpc_byte_buffer_destroy(bb);
    return NULL;
  }
  if (s->qlen == WT_RPC_STREAM_QUEUE) {
    /* A client that does not read: it resumes at newer messages. */
    grpc_byte_buffer_destroy(s->queue[s->qhead]);
    s->qhead = (s->qhead + 1) % WT_RPC_STREAM_QUEUE;
    s->qlen--;
    s->dropped++;
  }
  s->queue[(s->qhead + s->qlen) % WT_RPC_STREAM_QUEUE] = bb;
  s->qlen++;
  pump_locked(s);
  wt_mutex_unlock(&s->mu);
  return NULL;
}

void wt_rpc_stream_end(wt_rpc_stream *s, const wt_status *st) {
  wt_mutex_lock(&s->mu);
  if (!s->end_requested && !s->closed) {
    s->end_requested = true;
    s->end_code = (grpc_status_code)wt_code_to_grpc(wt_status_code(st));
    grpc_slice_unref(s->end_details);
    s->end_details = rpc_status_details(st ? wt_status_message(st) : "");
    pump_locked(s);
  }
  wt_mutex_unlock(&s->mu);
}

void wt_rpc_stream_release(wt_rpc_stream *s) {
  wt_mutex_lock(&s->mu);
  unref_unlock(s);
}
