/* rpc_client.c: the client half of the RPC layer (see wt/rpc.h).
 *
 * Each call owns a completion queue of the pluck kind, so a call is waited
 * for on the caller's own thread and calls never share a polling thread. A
 * call keeps one batch holding GRPC_OP_RECV_STATUS_ON_CLIENT outstanding from
 * its start; that batch ends when the call ends for any reason, and is
 * plucked (after a cancel if need be) before the queue is destroyed.
 */

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wt/log.h"
#include "wt/pb.h"
#include "wt/rpc.h"

#include "rpc_internal.h"

/* Tags: each call has its own queue, so small constants are unique. */
#define TAG_STATUS ((void *)(intptr_t)1)
#define TAG_SEND ((void *)(intptr_t)2)
#define TAG_WRITE ((void *)(intptr_t)3)
#define TAG_FINISH ((void *)(intptr_t)4)
#define TAG_READ ((void *)(intptr_t)5)
#define TAG_UNARY ((void *)(intptr_t)6)

struct wt_rpc_channel {
  char *target;
  grpc_channel *channel;
  int64_t default_deadline_ms;
  grpc_metadata auth;       /* "authorization: Bearer ..." */
  size_t nmd;               /* 1 with a token, else 0 */
  int keepalive_timeout_ms; /* the pings' answer deadline; 0: no keepalive */
};

/* What gRPC 1.51 says when a keepalive ping went unanswered. */
#define KEEPALIVE_WATCHDOG_DETAILS "keepalive watchdog timeout"

/* What every kind of client call shares. */
typedef struct client_call {
  wt_rpc_channel *ch;
  char *method;
  grpc_completion_queue *cq;
  grpc_call *call;
  grpc_metadata_array initial_metadata;
  grpc_metadata_array trailing_metadata;
  grpc_status_code status;
  grpc_slice details;
  void *status_tag;        /* the batch that holds RECV_STATUS_ON_CLIENT */
  bool status_outstanding; /* that batch has not been plucked yet */
  bool status_received;
} client_call;

struct wt_rpc_pending {
  client_call cc;
  const ProtobufCMessageDescriptor *type;
  grpc_byte_buffer *request; /* kept until the batch that sends it ends */
  grpc_byte_buffer *response;
  bool done;
};

struct wt_rpc_client_stream {
  client_call cc;
  bool finished;
};

struct wt_rpc_server_stream {
  client_call cc;
  bool done;
};

/* ---- channel --------------------------------------------------------------
 */

wt_status *wt_rpc_channel_new(const char *target,
                              const wt_rpc_channel_options *opts,
                              wt_rpc_channel **out) {
  wt_rpc_channel_options defaults;
  memset(&defaults, 0, sizeof(defaults));
  if (opts == NULL) opts = &defaults;
  *out = NULL;
  if (target == NULL || target[0] == '\0')
    return wt_status_new(WT_INVALID_ARGUMENT, "channel target: empty");
  wt_rpc_channel *ch = calloc(1, sizeof(*ch));
  if (ch == NULL || (ch->target = strdup(target)) == NULL) {
    free(ch);
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  }
  ch->default_deadline_ms = opts->default_deadline_ms > 0
                                ? opts->default_deadline_ms
                                : WT_RPC_DEFAULT_DEADLINE_MS;
  if (opts->token != NULL) {
    size_t tl = strlen(opts->token);
    char *v = malloc(tl + 8);
    if (v == NULL) {
      free(ch->target);
      free(ch);
      return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
    }
    memcpy(v, "Bearer ", 7);
    memcpy(v + 7, opts->token, tl + 1);
    ch->auth.key = grpc_slice_from_static_string("authorization");
    ch->auth.value = grpc_slice_from_copied_string(v);
    memset(v, 0, tl + 7);
    free(v);
    ch->nmd = 1;
  }
  grpc_init();
  grpc_channel_credentials *creds = NULL;
  wt_status *st = rpc_channel_credentials(opts->tls, &creds);
  if (st != NULL) {
    if (ch->nmd) grpc_slice_unref(ch->auth.value);
    free(ch->target);
    free(ch);
    grpc_shutdown();
    return st;
  }
  grpc_arg args[7];
  size_t nargs = wt_rpc_message_limit_args(
      args, opts->max_receive_message_bytes, opts->max_send_message_bytes);
  if (opts->keepalive_time_ms >= 0) {
    ch->keepalive_timeout_ms = opts->keepalive_timeout_ms > 0
                                   ? opts->keepalive_timeout_ms
                                   : WT_RPC_KEEPALIVE_TIMEOUT_MS;
    const struct {
      const char *key;
      int value;
    } ka[] = {
        {GRPC_ARG_KEEPALIVE_TIME_MS, opts->keepalive_time_ms
                                         ? opts->keepalive_time_ms
                                         : WT_RPC_KEEPALIVE_TIME_MS},
        {GRPC_ARG_KEEPALIVE_TIMEOUT_MS, ch->keepalive_timeout_ms},
        /* A push blocked by flow control sends no data: keep pinging. */
        {GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0},
    };
    for (size_t i = 0; i < sizeof(ka) / sizeof(ka[0]); i++) {
      memset(&args[nargs], 0, sizeof(args[nargs]));
      args[nargs].type = GRPC_ARG_INTEGER;
      args[nargs].key = (char *)ka[i].key;
      args[nargs].value.integer = ka[i].value;
      nargs++;
    }
  }
  if (opts->tls != NULL && opts->tls->server_name != NULL) {
    memset(&args[nargs], 0, sizeof(args[nargs]));
    args[nargs].type = GRPC_ARG_STRING;
    args[nargs].key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
    args[nargs].value.string = (char *)opts->tls->server_name;
    nargs++;
  }
  grpc_channel_args channel_args = {nargs, args};
  ch->channel = grpc_channel_create(target, creds, &channel_args);
  grpc_channel_credentials_release(creds);
  if (ch->channel == NULL) {
    if (ch->nmd) grpc_slice_unref(ch->auth.value);
    free(ch->target);
    free(ch);
    grpc_shutdown();
    return wt_status_new(WT_INVALID_ARGUMENT, "channel target '%s': rejected",
                         target);
  }
  *out = ch;
  return NULL;
}

void wt_rpc_channel_destroy(wt_rpc_channel *ch) {
  if (ch == NULL) return;
  grpc_channel_destroy(ch->channel);
  if (ch->nmd) grpc_slice_unref(ch->auth.value);
  free(ch->target);
  free(ch);
  grpc_shutdown();
}

const char *wt_rpc_channel_target(const wt_rpc_channel *ch) {
  return ch->target;
}

/* ---- calls in common ------------------------------------------------------
 */

static wt_status *cc_open(client_call *cc, wt_rpc_channel *ch,
                          const char *method, int64_t deadline_ms) {
  memset(cc, 0, sizeof(*cc));
  cc->ch = ch;
  cc->details = grpc_empty_slice();
  grpc_metadata_array_init(&cc->initial_metadata);
  grpc_metadata_array_init(&cc->trailing_metadata);
  if (method == NULL || method[0] != '/')
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s: method '%s' is not a \"/package.Service/Method\" "
                         "path",
                         ch->target, method ? method : "(null)");
  cc->method = strdup(method);
  if (cc->method == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  if (deadline_ms == 0) deadline_ms = ch->default_deadline_ms;
  gpr_timespec deadline =
      deadline_ms < 0
          ? gpr_inf_future(GPR_CLOCK_MONOTONIC)
          : gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                         gpr_time_from_millis(deadline_ms, GPR_TIMESPAN));
  cc->cq = grpc_completion_queue_create_for_pluck(NULL);
  grpc_slice path = grpc_slice_from_copied_string(method);
  cc->call =
      grpc_channel_create_call(ch->channel, NULL, GRPC_PROPAGATE_DEFAULTS,
                               cc->cq, path, NULL, deadline, NULL);
  grpc_slice_unref(path);
  if (cc->call == NULL)
    return wt_status_new(WT_INTERNAL, "%s %s: cannot create the call",
                         ch->target, method);
  return NULL;
}

/* Fills `op` as the call's SEND_INITIAL_METADATA, with the channel's
 * token. */
static void cc_initial_metadata(const client_call *cc, grpc_op *op) {
  op->op = GRPC_OP_SEND_INITIAL_METADATA;
  op->data.send_initial_metadata.count = cc->ch->nmd;
  op->data.send_initial_metadata.metadata =
      cc->ch->nmd ? (grpc_metadata *)&cc->ch->auth : NULL;
}

/* Waits for `tag` on the call's own queue. The call's deadline (or a cancel)
 * bounds the wait. Returns the batch's success flag. */
static int cc_pluck(client_call *cc, void *tag) {
  grpc_event ev = grpc_completion_queue_pluck(
      cc->cq, tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  return ev.type == GRPC_OP_COMPLETE && ev.success;
}

static wt_status *cc_start(client_call *cc, const grpc_op *ops, size_t n,
                           void *tag) {
  grpc_call_error err = grpc_call_start_batch(cc->call, ops, n, tag, NULL);
  if (err != GRPC_CALL_OK)
    return wt_status_new(WT_INTERNAL, "%s %s: cannot start a batch: %s",
                         cc->ch->target, cc->method,
                         grpc_call_error_to_string(err));
  return NULL;
}

/* Starts the batch that learns the call's status, on its own. */
static wt_status *cc_start_status(client_call *cc) {
  grpc_op ops[2];
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[0].data.recv_initial_metadata.recv_initial_metadata =
      &cc->initial_metadata;
  ops[1].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[1].data.recv_status_on_client.trailing_metadata = &cc->trailing_metadata;
  ops[1].data.recv_status_on_client.status = &cc->status;
  ops[1].data.recv_status_on_client.status_details = &cc->details;
  wt_status *st = cc_start(cc, ops, 2, TAG_STATUS);
  if (st == NULL) {
    cc->status_tag = TAG_STATUS;
    cc->status_outstanding = true;
  }
  return st;
}

static void cc_wait_status(client_call *cc) {
  if (!cc->status_outstanding) return;
  cc_pluck(cc, cc->status_tag);
  cc->status_outstanding = false;
  cc->status_received = true;
}

/* True when the status has arrived, waiting up to `ms` (0: not at all). */
static bool cc_poll_status_within(client_call *cc, int64_t ms) {
  if (!cc->status_outstanding) return cc->status_received;
  gpr_timespec until =
      ms <= 0 ? gpr_inf_past(GPR_CLOCK_REALTIME)
              : gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                             gpr_time_from_millis(ms, GPR_TIMESPAN));
  grpc_event ev =
      grpc_completion_queue_pluck(cc->cq, cc->status_tag, until, NULL);
  if (ev.type != GRPC_OP_COMPLETE) return false;
  cc->status_outstanding = false;
  cc->status_received = true;
  return true;
}

static bool cc_poll_status(client_call *cc) {
  return cc_poll_status_within(cc, 0);
}

/* The received status as a wt_status (NULL when OK), naming target and
 * method. */
static wt_status *cc_status(const client_call *cc) {
  if (cc->status == GRPC_STATUS_OK) return NULL;
  wt_code code = wt_code_from_grpc((int)cc->status);
  size_t len = GRPC_SLICE_LENGTH(cc->details);
  if (len == 0)
    return wt_status_new(code, "%s %s: %s", cc->ch->target, cc->method,
                         wt_code_name(code));
  const char *details = (const char *)GRPC_SLICE_START_PTR(cc->details);
  /* gRPC's words name neither side nor the setting: say which. */
  const char *ka = KEEPALIVE_WATCHDOG_DETAILS;
  if (cc->ch->keepalive_timeout_ms > 0 && len == strlen(ka) &&
      memcmp(details, ka, len) == 0)
    return wt_status_new(
        code,
        "%s %s: %s: %s (the server left a keepalive ping unanswered for "
        "%d ms, this client's keepalive_timeout_ms; a server that is alive "
        "but loaded needs a longer one)",
        cc->ch->target, cc->method, wt_code_name(code), ka,
        cc->ch->keepalive_timeout_ms);
  return wt_status_new(code, "%s %s: %s: %.*s", cc->ch->target, cc->method,
                       wt_code_name(code), (int)len, details);
}

/* Opens a streaming call: starts `ops` (its opening batch, which begins with
 * SEND_INITIAL_METADATA), then the status batch, and waits for the opening
 * batch. A call the server ended at once returns the server's status. */
static wt_status *cc_open_streaming(client_call *cc, const grpc_op *ops,
                                    size_t n) {
  wt_status *st = cc_start(cc, ops, n, TAG_SEND);
  if (st != NULL) return st;
  st = cc_start_status(cc);
  if (st != NULL) {
    grpc_call_cancel(cc->call, NULL);
    cc_pluck(cc, TAG_SEND);
    return st;
  }
  if (!cc_pluck(cc, TAG_SEND)) {
    cc_wait_status(cc);
    st = cc_status(cc);
    if (st == NULL)
      st = wt_status_new(WT_UNAVAILABLE, "%s %s: the call ended at once",
                         cc->ch->target, cc->method);
    return st;
  }
  return NULL;
}

/* Ends the call (cancelling it if it has not ended) and frees what it holds.
 * `cc` itself belongs to the caller. */
static void cc_close(client_call *cc) {
  if (cc->call != NULL) {
    if (cc->status_outstanding) {
      grpc_call_cancel(cc->call, NULL);
      cc_wait_status(cc);
    }
    grpc_call_unref(cc->call);
  }
  if (cc->cq != NULL) {
    grpc_completion_queue_shutdown(cc->cq);
    grpc_event ev;
    do {
      ev = grpc_completion_queue_pluck(
          cc->cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    } while (ev.type != GRPC_QUEUE_SHUTDOWN);
    grpc_completion_queue_destroy(cc->cq);
  }
  grpc_metadata_array_destroy(&cc->initial_metadata);
  grpc_metadata_array_destroy(&cc->trailing_metadata);
  grpc_slice_unref(cc->details);
  free(cc->method);
}

static wt_status *cc_unpack_response(const client_call *cc,
                                     grpc_byte_buffer *bb,
                                     const ProtobufCMessageDescriptor *type,
                                     ProtobufCMessage **response) {
  if (bb == NULL)
    return wt_status_new(WT_INTERNAL, "%s %s: the server sent no response",
                         cc->ch->target, cc->method);
  if (response == NULL) return NULL;
  wt_status *st = wt_pb_unpack(bb, type, response);
  if (st != NULL) {
    /* A response that does not parse is the server's fault (INTERNAL); one
     * this side has no memory for is RESOURCE_EXHAUSTED. */
    wt_code code = wt_status_code(st) == WT_RESOURCE_EXHAUSTED
                       ? WT_RESOURCE_EXHAUSTED
                       : WT_INTERNAL;
    wt_status *wrapped =
        wt_status_new(code, "%s %s: response %s", cc->ch->target, cc->method,
                      wt_status_message(st));
    wt_status_free(st);
    st = wrapped;
  }
  return st;
}

/* ---- unary ----------------------------------------------------------------
 */

wt_status *wt_rpc_unary_start(wt_rpc_channel *ch, const char *method,
                              const ProtobufCMessage *request,
                              const ProtobufCMessageDescriptor *response_type,
                              int64_t deadline_ms, wt_rpc_pending **out) {
  wt_status *st = NULL;
  grpc_byte_buffer *bb = NULL;
  *out = NULL;
  wt_rpc_pending *p = calloc(1, sizeof(*p));
  if (p == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  p->type = response_type;
  WT_CHECK(cc_open(&p->cc, ch, method, deadline_ms));
  st = wt_pb_pack(request, &bb);
  if (st != NULL) {
    st = wt_status_prefix(st, "%s %s: request", ch->target, method);
    goto out;
  }
  grpc_op ops[6];
  memset(ops, 0, sizeof(ops));
  cc_initial_metadata(&p->cc, &ops[0]);
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = bb;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata =
      &p->cc.initial_metadata;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &p->response;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata =
      &p->cc.trailing_metadata;
  ops[5].data.recv_status_on_client.status = &p->cc.status;
  ops[5].data.recv_status_on_client.status_details = &p->cc.details;
  WT_CHECK(cc_start(&p->cc, ops, 6, TAG_UNARY));
  p->cc.status_tag = TAG_UNARY;
  p->cc.status_outstanding = true;
  p->request = bb;
  bb = NULL;
  *out = p;
  p = NULL;
out:
  if (bb) grpc_byte_buffer_destroy(bb);
  if (p != NULL) {
    cc_close(&p->cc);
    free(p);
  }
  return st;
}

bool wt_rpc_pending_done(wt_rpc_pending *p) {
  if (!p->done) p->done = cc_poll_status(&p->cc);
  return p->done;
}

bool wt_rpc_pending_done_within(wt_rpc_pending *p, int64_t ms) {
  if (!p->done) p->done = cc_poll_status_within(&p->cc, ms);
  return p->done;
}

void wt_rpc_pending_cancel(wt_rpc_pending *p) {
  grpc_call_cancel(p->cc.call, NULL);
}

wt_status *wt_rpc_pending_wait(wt_rpc_pending *p, ProtobufCMessage **response) {
  if (response) *response = NULL;
  cc_wait_status(&p->cc);
  wt_status *st = cc_status(&p->cc);
  if (st == NULL)
    st = cc_unpack_response(&p->cc, p->response, p->type, response);
  if (p->response) grpc_byte_buffer_destroy(p->response);
  if (p->request) grpc_byte_buffer_destroy(p->request);
  cc_close(&p->cc);
  free(p);
  return st;
}

wt_status *wt_rpc_unary(wt_rpc_channel *ch, const char *method,
                        const ProtobufCMessage *request,
                        const ProtobufCMessageDescriptor *response_type,
                        int64_t deadline_ms, ProtobufCMessage **response) {
  if (response) *response = NULL;
  wt_rpc_pending *p = NULL;
  wt_status *st =
      wt_rpc_unary_start(ch, method, request, response_type, deadline_ms, &p);
  if (st != NULL) return st;
  return wt_rpc_pending_wait(p, response);
}

/* ---- client stream --------------------------------------------------------
 */

wt_status *wt_rpc_client_stream_open(wt_rpc_channel *ch, const char *method,
                                     int64_t deadline_ms,
                                     wt_rpc_client_stream **out) {
  wt_status *st = NULL;
  *out = NULL;
  wt_rpc_client_stream *s = calloc(1, sizeof(*s));
  if (s == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  WT_CHECK(cc_open(&s->cc, ch, method, deadline_ms));
  grpc_op op;
  memset(&op, 0, sizeof(op));
  cc_initial_metadata(&s->cc, &op);
  WT_CHECK(cc_open_streaming(&s->cc, &op, 1));
  *out = s;
  s = NULL;
out:
  if (s != NULL) {
    cc_close(&s->cc);
    free(s);
  }
  return st;
}

/* The status for a stream the server already ended. */
static wt_status *ended_status(const client_call *cc, const char *what) {
  wt_status *st = cc_status(cc);
  if (st == NULL)
    st = wt_status_new(WT_FAILED_PRECONDITION,
                       "%s %s: %s: the server already finished the call",
                       cc->ch->target, cc->method, what);
  return st;
}

wt_status *wt_rpc_client_stream_write_raw(wt_rpc_client_stream *s,
                                          grpc_byte_buffer *bb) {
  wt_status *st = NULL;
  if (s->finished)
    WT_FAIL(WT_FAILED_PRECONDITION, "%s %s: write after finish",
            s->cc.ch->target, s->cc.method);
  if (cc_poll_status(&s->cc)) {
    st = ended_status(&s->cc, "write");
    goto out;
  }
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_SEND_MESSAGE;
  op.data.send_message.send_message = bb;
  WT_CHECK(cc_start(&s->cc, &op, 1, TAG_WRITE));
  if (!cc_pluck(&s->cc, TAG_WRITE)) {
    /* The call is over; its status says why (the server's error, the
     * deadline, a cancel). */
    cc_wait_status(&s->cc);
    st = ended_status(&s->cc, "write");
  }
out:
  if (bb) grpc_byte_buffer_destroy(bb);
  return st;
}

wt_status *wt_rpc_client_stream_write(wt_rpc_client_stream *s,
                                      const ProtobufCMessage *msg) {
  grpc_byte_buffer *bb = NULL;
  wt_status *st = wt_pb_pack(msg, &bb);
  if (st != NULL)
    return wt_status_prefix(st, "%s %s: write", s->cc.ch->target, s->cc.method);
  return wt_rpc_client_stream_write_raw(s, bb);
}

wt_status *wt_rpc_client_stream_finish(
    wt_rpc_client_stream *s, const ProtobufCMessageDescriptor *response_type,
    ProtobufCMessage **response) {
  wt_status *st = NULL;
  grpc_byte_buffer *bb = NULL;
  if (response) *response = NULL;
  if (s->finished)
    WT_FAIL(WT_FAILED_PRECONDITION, "%s %s: finish called twice",
            s->cc.ch->target, s->cc.method);
  s->finished = true;
  grpc_op ops[2];
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[1].op = GRPC_OP_RECV_MESSAGE;
  ops[1].data.recv_message.recv_message = &bb;
  WT_CHECK(cc_start(&s->cc, ops, 2, TAG_FINISH));
  cc_pluck(&s->cc, TAG_FINISH); /* the status tells how it went */
  cc_wait_status(&s->cc);
  WT_CHECK(cc_status(&s->cc));
  WT_CHECK(cc_unpack_response(&s->cc, bb, response_type, response));
out:
  if (bb) grpc_byte_buffer_destroy(bb);
  return st;
}

void wt_rpc_client_stream_cancel(wt_rpc_client_stream *s) {
  grpc_call_cancel(s->cc.call, NULL);
}

void wt_rpc_client_stream_destroy(wt_rpc_client_stream *s) {
  if (s == NULL) return;
  cc_close(&s->cc);
  free(s);
}

/* ---- server stream --------------------------------------------------------
 */

wt_status *wt_rpc_server_stream_open(wt_rpc_channel *ch, const char *method,
                                     const ProtobufCMessage *request,
                                     int64_t deadline_ms,
                                     wt_rpc_server_stream **out) {
  wt_status *st = NULL;
  grpc_byte_buffer *bb = NULL;
  *out = NULL;
  wt_rpc_server_stream *s = calloc(1, sizeof(*s));
  if (s == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  WT_CHECK(cc_open(&s->cc, ch, method, deadline_ms));
  st = wt_pb_pack(request, &bb);
  if (st != NULL) {
    st = wt_status_prefix(st, "%s %s: request", ch->target, method);
    goto out;
  }
  grpc_op ops[3];
  memset(ops, 0, sizeof(ops));
  cc_initial_metadata(&s->cc, &ops[0]);
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = bb;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  WT_CHECK(cc_open_streaming(&s->cc, ops, 3));
  *out = s;
  s = NULL;
out:
  if (bb) grpc_byte_buffer_destroy(bb);
  if (s != NULL) {
    cc_close(&s->cc);
    free(s);
  }
  return st;
}

wt_status *wt_rpc_server_stream_read(wt_rpc_server_stream *s,
                                     const ProtobufCMessageDescriptor *type,
                                     ProtobufCMessage **msg, bool *done) {
  *msg = NULL;
  *done = false;
  if (!s->done) {
    grpc_byte_buffer *bb = NULL;
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &bb;
    wt_status *st = cc_start(&s->cc, &op, 1, TAG_READ);
    if (st != NULL) return st;
    cc_pluck(&s->cc, TAG_READ);
    if (bb != NULL) {
      st = cc_unpack_response(&s->cc, bb, type, msg);
      grpc_byte_buffer_destroy(bb);
      return st;
    }
    s->done = true;
    cc_wait_status(&s->cc);
  }
  *done = true;
  return cc_status(&s->cc);
}

void wt_rpc_server_stream_cancel(wt_rpc_server_stream *s) {
  grpc_call_cancel(s->cc.call, NULL);
}

void wt_rpc_server_stream_destroy(wt_rpc_server_stream *s) {
  if (s == NULL) return;
  cc_close(&s->cc);
  free(s);
}
