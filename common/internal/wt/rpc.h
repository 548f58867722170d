/* wt/rpc.h: the small RPC layer of wt, on the gRPC C core API.
 *
 * Server: one completion queue and one polling thread. Methods come from one
 * table; each method belongs to an admission class (wt_rpc_class), and each
 * class has its own pool of handler threads and its own limits, so that one
 * kind of caller (readers, watchers) can never take the capacity another
 * (the trainer's round calls) keeps. An accepted call of a unary, client- or
 * server-stream method waits in its class's queue for one of the class's
 * threads, runs its handler there (a handler may block: waiting for a
 * round's data, reading a client stream), and frees its place the moment
 * its status is sent. A call beyond the class's threads and queue is
 * answered RESOURCE_EXHAUSTED naming the class and the option that raises
 * its limit. Inside a handler the blocking helpers (wt_rpc_call_read/_write)
 * start one gRPC batch and wait on the call's condition variable, which the
 * polling thread signals. A WT_RPC_WATCH method holds no thread at all: its
 * stream is opened on the polling thread and fed from any thread
 * (wt_rpc_stream_send), so thousands can be open. Unknown methods are
 * answered UNIMPLEMENTED; malformed requests INVALID_ARGUMENT.
 *
 * Client: a channel, and calls that each carry a deadline (the channel's
 * default when 0 is passed). Every error of a call keeps the code the server
 * (or gRPC) gave and names the target, the method and the code before the
 * message: "127.0.0.1:50051 /wt.v1.WeightTransfer/GetServerInfo: UNAVAILABLE:
 * failed to connect ...", "... /StartWeightUpdate: FAILED_PRECONDITION: <the
 * server's message>".
 *
 * Each channel and each server holds one grpc_init() reference, dropped by
 * its destroy; when the last one goes, gRPC's internals are torn down
 * synchronously, so leak checkers at exit see nothing of gRPC.
 */
#ifndef WT_RPC_H
#define WT_RPC_H

#include <grpc/byte_buffer.h>
#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stdint.h>

#include "wt/rpc_types.h"
#include "wt/secure.h"
#include "wt/status.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* Default limits: large data always streams in chunks well below these. */
#define WT_RPC_DEFAULT_MAX_RECEIVE_BYTES (16 * 1024 * 1024)
#define WT_RPC_DEFAULT_MAX_SEND_BYTES (16 * 1024 * 1024)
#define WT_RPC_DEFAULT_DEADLINE_MS 30000

/* ------------------------------------------------------------------------ */
/* Server                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum wt_rpc_kind {
  WT_RPC_UNARY = 0,
  WT_RPC_CLIENT_STREAM = 1,
  WT_RPC_SERVER_STREAM = 2, /* a handler thread writes with wt_rpc_call_write */
  WT_RPC_WATCH = 3, /* a server stream without a thread: wt_rpc_stream */
  /* Both ways (gRPC reflection): the handler reads with wt_rpc_call_read*
   * and writes with wt_rpc_call_write, holding its thread throughout. */
  WT_RPC_BIDI_STREAM = 4,
} wt_rpc_kind;

typedef struct wt_rpc_server wt_rpc_server;
/* One accepted call, as a handler sees it. Valid until the handler returns. */
typedef struct wt_rpc_call wt_rpc_call;
/* One open WT_RPC_WATCH stream (see below). */
typedef struct wt_rpc_stream wt_rpc_stream;

/* An admission class: the calls of its methods share `max_running` handler
 * threads (for WT_RPC_WATCH methods: open streams) and up to `max_queued`
 * calls wait for one of them. The strings must outlive the server. */
typedef struct wt_rpc_class {
  const char *name;   /* "round", "reader", ...: names it in the busy error */
  int max_running;    /* > 0 */
  int max_queued;     /* >= 0 */
  const char *option; /* what raises the limit, e.g. "wt-server
                         --max-reader-calls"; NULL: nothing said */
  /* The share of one peer (a user id for a connection from this host, the
   * socket's owner from /proc/net/tcp; else an IP address): the calls
   * running and waiting (streams open, for WT_RPC_WATCH) it may hold while
   * P peers hold some is the larger of max_per_peer and the class's whole
   * room (max_running + max_queued) over P. A peer alone may use all of
   * it; under contention each keeps at least its share. 0: no limit. */
  int max_per_peer;
  const char *option_per_peer; /* what raises it, as `option` */
  /* max_per_peer is a cap even for a peer alone: for a class open to
   * callers without a token, where no peer is known enough to be given the
   * whole room. */
  bool per_peer_cap;
  /* Calls whose bearer token has the trainer's scope are admitted in this
   * class whatever their method's (not watch streams or public calls): a
   * trainer's reader calls never wait behind readers, nor count in a
   * reader's share of its uid or address. At most one class says so. */
  bool trainers;
} wt_rpc_class;

/* A handler. `request` is the unpacked request for WT_RPC_UNARY and
 * WT_RPC_SERVER_STREAM (owned by the layer, freed after the handler returns)
 * and NULL for WT_RPC_CLIENT_STREAM and WT_RPC_BIDI_STREAM (read the stream
 * with wt_rpc_call_read).
 * `user` is the server's user pointer. The returned status is sent to the
 * client (NULL: OK) and freed by the layer. A unary or client-stream handler
 * that returns OK sends the message given to wt_rpc_call_respond(), or the
 * empty (default) response when it gave none. */
typedef wt_status *(*wt_rpc_handler)(wt_rpc_call *call,
                                     const ProtobufCMessage *request,
                                     void *user);

/* A parked call's continuation (wt_rpc_call_resume): runs on a thread of
 * the call's class, like a handler, and returns like one (NULL, an error,
 * or wt_rpc_call_park(call) to park again). `arg` is the resumer's. */
typedef wt_status *(*wt_rpc_resume_fn)(wt_rpc_call *call, void *arg,
                                       void *user);

/* A WT_RPC_WATCH method's opening, on the polling thread when the call
 * arrives: it must not block. `request` is borrowed for the call. An error
 * ends the call with it; otherwise the stream stays open, referenced by the
 * caller, which releases it (wt_rpc_stream_release) exactly once, at the
 * latest in `closed`. */
typedef wt_status *(*wt_rpc_stream_open_fn)(wt_rpc_stream *s,
                                            const ProtobufCMessage *request,
                                            void *user);
/* Runs once, on the polling thread, when a stream that opened is over (the
 * client left, it was ended, the server stopped); sends are ignored from
 * then on. */
typedef void (*wt_rpc_stream_closed_fn)(wt_rpc_stream *s, void *user);

/* One row of the method table. The table and its strings must outlive the
 * server. */
typedef struct wt_rpc_method {
  const char *path; /* "/wt.v1.WeightTransfer/GetServerInfo" */
  wt_rpc_kind kind;
  /* Type of the request (of each message, for a client stream). */
  const ProtobufCMessageDescriptor *request;
  /* Type of the response (of each message, for a server stream); checked by
   * wt_rpc_call_respond/_write/wt_rpc_stream_send. */
  const ProtobufCMessageDescriptor *response;
  wt_rpc_handler handler;         /* every kind but WT_RPC_WATCH */
  uint32_t admission;             /* index into the server's classes */
  wt_rpc_stream_open_fn open;     /* WT_RPC_WATCH */
  wt_rpc_stream_closed_fn closed; /* WT_RPC_WATCH */
  /* What a bearer token must allow for this method (WT_SCOPE_*) when the
   * server checks tokens; 0 means WT_SCOPE_TRAINER, the narrowest. */
  uint32_t scope;
} wt_rpc_method;

/* Zero (or a NULL options pointer) means the default for every field. */
typedef struct wt_rpc_server_options {
  /* "host:port"; port 0 picks a free port (see wt_rpc_server_port). Default
   * "127.0.0.1:50051". Copied by wt_rpc_server_new. */
  const char *listen;
  /* GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH / _SEND_: 0 gives the defaults above,
   * -1 no limit. */
  int max_receive_message_bytes;
  int max_send_message_bytes;
  /* Requests kept outstanding per method. Default 4. */
  int requests_per_method;
  /* The admission classes (copied) that methods name by index. None: one
   * class, "default", of max_handler_threads threads and no queue. */
  const wt_rpc_class *classes;
  size_t nclasses;
  /* The "default" class's threads when `classes` is NULL. Default 64. */
  int max_handler_threads;
  /* Called once, on the thread calling wt_rpc_server_shutdown, after the
   * server stopped accepting calls and before in-flight calls are waited for
   * and then cancelled: the service aborts a running round here so that its
   * blocked handlers return. Receives the server's user pointer. */
  void (*on_shutdown)(void *user);
  /* TLS (NULL or no cert_file: plaintext HTTP/2). */
  const wt_rpc_tls *tls;
  /* Bearer tokens (borrowed; must outlive the server). With ntokens > 0
   * every call must carry "authorization: Bearer TOKEN" with a token whose
   * scope covers the method's; a call without one, or with a token that
   * matches none, is answered UNAUTHENTICATED, one with a token whose scope
   * does not cover the method PERMISSION_DENIED. Both are decided on the
   * polling thread before the call takes a place in its class, and logged
   * with the peer (at most one line a second). */
  const wt_token *tokens;
  size_t ntokens;
  /* HTTP/2 limits for clients that misbehave (0: the default):
   * streams one connection may have open (default 2048; gRPC clients
   * share one connection between channels to the same target, and queue
   * streams beyond the limit), the request
   * metadata a call may carry (default 16 KiB), and the TLS/HTTP/2
   * handshake a new connection must finish within (default 5000 ms). */
  int max_concurrent_streams;
  int max_metadata_bytes;
  int handshake_timeout_ms;
  /* Connections (see docs/trust.md, "Connections" and "TLS"): at most
   * max_connections open (default WT_RPC_DEFAULT_MAX_CONNECTIONS, lowered to
   * what the descriptor limit allows at two descriptors each after
   * WT_RPC_FD_RESERVE); a connection that has made no authorized call
   * within auth_grace_ms (default WT_RPC_DEFAULT_AUTH_GRACE_MS) is closed,
   * and one with no call in progress for idle_ms (default
   * WT_RPC_DEFAULT_IDLE_MS; -1: never) is sent GOAWAY (clients reconnect on
   * their next call). Over the cap a new connection takes the place of the
   * oldest one without an authorized call, else of the reader whose last
   * call is oldest; a connection that made a trainer call is never closed
   * to make room. Under TLS wt terminates TLS itself (gRPC 1.51 takes
   * an accepted connection in plaintext only) and the same holds, at three
   * descriptors a connection; its handshake must also finish within
   * handshake_timeout_ms. */
  int max_connections;
  int auth_grace_ms;
  int idle_ms;
  /* Authorized calls' requests: at most max_reads being read at once (the
   * others wait their turn, their bodies unread, up to 4096), and at most
   * max_held_bytes of requests held by calls read and not yet handled
   * (queued or running); beyond that a call is refused RESOURCE_EXHAUSTED,
   * not buffered. 0: WT_RPC_DEFAULT_MAX_READS,
   * WT_RPC_DEFAULT_MAX_HELD_BYTES. */
  int max_reads;
  int64_t max_held_bytes;
} wt_rpc_server_options;

#define WT_RPC_DEFAULT_MAX_READS 64
#define WT_RPC_DEFAULT_MAX_HELD_BYTES (256ll << 20)

#define WT_RPC_DEFAULT_MAX_CONNECTIONS 1024
/* A gRPC client sends its first call's headers right behind the
 * connection preface; 3 s covers a loaded machine's scheduling many times
 * over, while a stranger's connection holds its descriptors no longer. */
#define WT_RPC_DEFAULT_AUTH_GRACE_MS 3000
#define WT_RPC_DEFAULT_IDLE_MS (5 * 60 * 1000)
/* Descriptors kept out of the connection budget for the server's own files,
 * engines (UCX endpoints, CUDA) and outgoing channels. */
#define WT_RPC_FD_RESERVE 256

void wt_rpc_server_conn_counts(wt_rpc_server *server, wt_rpc_conn_counts *out);

void wt_rpc_server_auth_counts(wt_rpc_server *server, wt_rpc_auth_counts *out);

/* Creates a server for `methods[0..n)` (not started). `opts` may be NULL; the
 * method table must outlive the server; `user` is passed to handlers. The
 * caller owns *out and releases it with wt_rpc_server_destroy(). A duplicate
 * or malformed path, a method naming no class, or a class without threads
 * is INVALID_ARGUMENT. */
wt_status *wt_rpc_server_new(const wt_rpc_server_options *opts,
                             const wt_rpc_method *methods, size_t n, void *user,
                             wt_rpc_server **out);

/* Binds the listen address (HTTP/2 over TLS when the options gave a
 * certificate, plaintext otherwise) and starts the polling thread. A busy or
 * invalid address is UNAVAILABLE naming it; an unreadable or malformed
 * certificate, key or CA file INVALID_ARGUMENT naming the file. */
wt_status *wt_rpc_server_start(wt_rpc_server *server);

/* The bound port (the real one when the options asked for port 0); 0 before
 * a successful start. */
int wt_rpc_server_port(const wt_rpc_server *server);

/* Stops accepting calls, runs on_shutdown, lets in-flight calls finish for up
 * to `deadline_ms` (<= 0: cancel them at once), then cancels the rest (their
 * blocked reads and writes return CANCELLED and cancel callbacks run; open
 * watch streams close), joins every handler thread, and drains the
 * completion queue. Idempotent; does not free. Must not be called from a
 * handler. */
void wt_rpc_server_shutdown(wt_rpc_server *server, int64_t deadline_ms);

/* Shuts down (deadline 0, when not done yet) and frees the server. NULL is
 * ignored. */
void wt_rpc_server_destroy(wt_rpc_server *server);

/* What an admission class holds now: calls running (or streams open) and
 * calls waiting for a thread; handler threads alive; and calls refused
 * RESOURCE_EXHAUSTED for want of room (the class's or the peer's quota)
 * since the server started. For tests and the metrics. */
typedef struct wt_rpc_class_load {
  int running;
  int queued;
  int threads;
  uint64_t refused;
} wt_rpc_class_load;
void wt_rpc_server_class_load(wt_rpc_server *server, size_t cls,
                              wt_rpc_class_load *out);

/* --- inside a handler; every function takes the handler's own call ------- */

/* The method's path; owned by the method table. */
const char *wt_rpc_call_method(const wt_rpc_call *call);

/* The peer, e.g. "ipv4:127.0.0.1:53412"; owned by the call. */
const char *wt_rpc_call_peer(const wt_rpc_call *call);

/* Who the peer is for quotas (wt_rpc_class.max_per_peer): "uid:N" for a
 * connection from this host, "ip:ADDR" otherwise; into key[0..n). */
void wt_rpc_call_peer_key(const wt_rpc_call *call, char *key, size_t n);

/* True when the caller may drive rounds: authorization granted it the
 * trainer's scope (a trainer's token, whose calls run in the trainers'
 * class, wt_rpc_class.trainers; or a server without tokens, --no-auth,
 * where every caller may, though its call stays in its method's class).
 * False on a public method, whose token is not read. */
bool wt_rpc_call_trainer(const wt_rpc_call *call);

/* True once the client cancelled, went away, or the deadline passed (or the
 * server is shutting down and cancelled the call). Thread-safe. */
bool wt_rpc_call_cancelled(wt_rpc_call *call);

/* Milliseconds until the client's deadline (0 when passed), or -1 when the
 * call has none. */
int64_t wt_rpc_call_remaining_ms(const wt_rpc_call *call);

/* Sets (fn != NULL) or clears the function run when the call becomes
 * cancelled, so a handler blocked on its own condition variable can wake up:
 *
 *   wt_rpc_call_set_cancel_callback(call, wake, round);   // wake broadcasts
 *   lock(round); while (!done && !wt_rpc_call_cancelled(call)) wait(round);
 *   unlock(round); wt_rpc_call_set_cancel_callback(call, NULL, NULL);
 *
 * `fn` runs at most once, on the polling thread, for a cancellation that
 * happens while it is set (one that happened before shows in
 * wt_rpc_call_cancelled, hence the check in the wait loop). It must only
 * signal, never block. Set and clear it without holding a lock that `fn`
 * takes; after a clearing call returns `fn` is not running and will not run.
 * The layer clears it when the handler returns. */
void wt_rpc_call_set_cancel_callback(wt_rpc_call *call, void (*fn)(void *arg),
                                     void *arg);

/* Ends the call now, from any thread, while its handler has not returned:
 * the client gets `code` and `message` (copied), and the handler's blocked
 * read or write returns CANCELLED. For a server that must not wait for a
 * client gone quiet (its TCP connection may outlive its host by hours). */
void wt_rpc_call_cancel(wt_rpc_call *call, wt_code code, const char *message);

/* Reads the next message of a client stream into *msg, a new message of the
 * method's request type that the caller frees with wt_pb_free(); *msg is
 * NULL at the end of the stream. Blocks until a message arrives; CANCELLED
 * (or DEADLINE_EXCEEDED) when the client went away. A malformed message is
 * INVALID_ARGUMENT "request <Type>: ...", after which the stream may be read
 * further. */
wt_status *wt_rpc_call_read(wt_rpc_call *call, ProtobufCMessage **msg);

/* As wt_rpc_call_read, without parsing: the caller owns *bb (NULL at the end
 * of the stream) and releases it with grpc_byte_buffer_destroy(). */
wt_status *wt_rpc_call_read_raw(wt_rpc_call *call, grpc_byte_buffer **bb);

/* As wt_rpc_call_read_raw, waiting at most `timeout_ms` (< 0: no limit) for
 * the message: a client that sends nothing for that long has its call ended
 * with DEADLINE_EXCEEDED "<what>" (what the handler waited for), which is
 * also returned. */
wt_status *wt_rpc_call_read_raw_within(wt_rpc_call *call, int64_t timeout_ms,
                                       const char *what, grpc_byte_buffer **bb);

/* The largest request a method open to callers without a token
 * (WT_SCOPE_PUBLIC: the health service) takes; a larger one is
 * INVALID_ARGUMENT before it is unpacked. */
#define WT_RPC_MAX_PUBLIC_REQUEST_BYTES 4096

/* How long a write of a server or bidi stream may wait for the client's
 * flow control (a client that reads nothing holds a thread otherwise). */
#define WT_RPC_WRITE_STALL_MS 10000

/* Sends one message of a server stream; blocks until gRPC's flow control
 * accepted it, at most WT_RPC_WRITE_STALL_MS: a client that reads nothing
 * for that long has its call ended with DEADLINE_EXCEEDED, also returned.
 * `msg` stays the caller's. CANCELLED when the client went away. */
wt_status *wt_rpc_call_write(wt_rpc_call *call, const ProtobufCMessage *msg);

/* --- waits without a thread --------------------------------------------
 *
 * A handler that must wait for other parties (a trainer rank for the
 * others) parks its call instead of blocking: it records the call where
 * the party that ends the wait finds it, then returns
 * wt_rpc_call_park(call). The call then holds no thread and no place of
 * its class (only its place in its peer's share, until it ends); it stays
 * open until its owner either completes it (wt_rpc_call_complete, from any
 * thread, exactly once) or resumes it (wt_rpc_call_resume: a continuation
 * on a thread of the class, ahead of calls waiting for admission). From
 * the return on, the handler's thread must not touch the call.
 *
 * The owner also ends what it parked when the call is cancelled (poll
 * wt_rpc_call_cancelled) and when the server shuts down (the server's
 * on_shutdown is the place): wt_rpc_server_shutdown waits for every parked
 * call to end. */
wt_status *wt_rpc_call_park(wt_rpc_call *call);
/* That status (common/src/core/status.c): immortal, so the status
 * helpers (free, prefix, copy, WT_CHECK) pass it through unchanged. */
wt_status *wt_status_parked_(void);
/* Whether `st` is wt_rpc_call_park's status. */
bool wt_rpc_is_parked(const wt_status *st);

/* Ends a parked call with `st` (taken; NULL: OK, sending the response set
 * with wt_rpc_call_respond, which the owner may call on a parked call
 * before this). Never blocks; any thread. */
void wt_rpc_call_complete(wt_rpc_call *call, wt_status *st);

/* Runs fn(call, arg, user) for a parked call on a thread of its class,
 * before the calls that wait for one. `arg` stays the caller's (fn frees it
 * if it owns it). Never blocks; any thread. */
void wt_rpc_call_resume(wt_rpc_call *call, wt_rpc_resume_fn fn, void *arg);

/* Lets class `cls` queue at least `n` calls (0: its configured queue
 * only), for a burst the caller expects: a shard plan's ranks all calling
 * at once. The caller bounds n. */
void wt_rpc_server_class_queue_floor(wt_rpc_server *s, size_t cls, int n);

/* Calls of class `cls` parked now (tests, metrics). */
int wt_rpc_server_parked(wt_rpc_server *s, size_t cls);

/* Sets the response of a unary or client-stream call, sent when the handler
 * returns OK (ignored otherwise). `msg` is serialised at once and stays the
 * caller's, so it may live on the handler's stack. A second call replaces the
 * first. INTERNAL when `msg` is not of the method's response type. */
wt_status *wt_rpc_call_respond(wt_rpc_call *call, const ProtobufCMessage *msg);

/* --- WT_RPC_WATCH streams: any thread ------------------------------------ */

/* The stream's own pointer for the caller (NULL until set). */
void wt_rpc_stream_set_user(wt_rpc_stream *s, void *p);
void *wt_rpc_stream_user(const wt_rpc_stream *s);
/* "ipv4:127.0.0.1:53412"; owned by the stream. */
const char *wt_rpc_stream_peer(const wt_rpc_stream *s);

/* Messages a stream keeps waiting for a client that does not read; past
 * this the oldest waiting one is dropped (a watcher that fell behind
 * resumes at a newer message). */
#define WT_RPC_STREAM_QUEUE 64

/* Queues `msg` (serialised now; stays the caller's) and returns at once;
 * sent in order, one at a time. Ignored (NULL returned) once the stream
 * closed or ended. INTERNAL when `msg` is not of the method's response
 * type. */
wt_status *wt_rpc_stream_send(wt_rpc_stream *s, const ProtobufCMessage *msg);

/* Ends the stream with `st` (NULL: OK; copied) once the queued messages
 * went out. Only the first call counts. */
void wt_rpc_stream_end(wt_rpc_stream *s, const wt_status *st);

/* Drops the caller's reference; the stream is freed once the call is over
 * too. Exactly once per opened stream. */
void wt_rpc_stream_release(wt_rpc_stream *s);

/* ------------------------------------------------------------------------ */
/* Client                                                                   */
/* ------------------------------------------------------------------------ */

/* Zero (or a NULL options pointer) means the default for every field. */
typedef struct wt_rpc_channel_options {
  /* Deadline of a call that passes deadline_ms 0. Default
   * WT_RPC_DEFAULT_DEADLINE_MS. */
  int64_t default_deadline_ms;
  /* As in wt_rpc_server_options. */
  int max_receive_message_bytes;
  int max_send_message_bytes;
  /* TLS to the server (NULL: plaintext). */
  const wt_rpc_tls *tls;
  /* A bearer token (copied) sent as "authorization: Bearer TOKEN" on every
   * call; NULL: none. */
  const char *token;
  /* HTTP/2 keepalive while calls are open: a ping every keepalive_time_ms,
   * and a connection whose ping is not answered within
   * keepalive_timeout_ms is closed, failing its calls with UNAVAILABLE (a
   * cut link or a vanished host is noticed in seconds rather than at the
   * call's deadline). 0: WT_RPC_KEEPALIVE_TIME_MS and
   * WT_RPC_KEEPALIVE_TIMEOUT_MS; keepalive_time_ms < 0: no keepalive. */
  int keepalive_time_ms;
  int keepalive_timeout_ms;
  /* TCP_USER_TIMEOUT of the channel's sockets: how long bytes it sent may
   * stay unacknowledged by the server's kernel (or its receive window stay
   * shut) before the connection is dropped and its calls fail UNAVAILABLE
   * naming this setting. A loaded server's kernel still acknowledges, so
   * this tells a cut link from a slow process, which keepalive_timeout_ms
   * (a ping's answer from the server's process) leaves time for. 0:
   * WT_RPC_TCP_USER_TIMEOUT_MS; < 0: gRPC's own (the keepalive timeout, or
   * none with keepalive off). Set only with a gRPC whose socket mutator
   * layout this layer knows (wt_rpc_tcp_user_timeout_supported). */
  int tcp_user_timeout_ms;
} wt_rpc_channel_options;

#define WT_RPC_KEEPALIVE_TIME_MS 1000
#define WT_RPC_KEEPALIVE_TIMEOUT_MS 20000
/* A cut link is noticed about this long after the first byte it swallowed
 * (the kernel drops the connection at the retransmission that passes it:
 * 1.3 s after for 1 s on a LAN). While a call is open a ping goes out
 * after WT_RPC_KEEPALIVE_TIME_MS without a read, so there is one within a
 * second of the cut (at once while data moves): the cut is noticed within
 * 2.5 s (measured: 2.6 s to a ucx trainer's exit). 1.5 s took 3.1 s. The
 * server's accepted sockets take the same value. */
#define WT_RPC_TCP_USER_TIMEOUT_MS 1000
/* How long past a call's deadline a wait gives gRPC to end the operation
 * it waits for. gRPC 1.51 holds a send's completion while its transport's
 * write to the socket is unfinished, and a server that stopped reading
 * (its kernel still acknowledging a shut window) holds that write until
 * the connection dies; past this grace the channel's connections are shut
 * down, so the call ends and gRPC lets go of the bytes it was sending. */
#define WT_RPC_DEADLINE_GRACE_MS 500
/* A server takes a client's pings this often (a client that pings faster,
 * twice, gets GOAWAY); below WT_RPC_KEEPALIVE_TIME_MS. */
#define WT_RPC_MIN_PING_INTERVAL_MS 500

/* Creates a channel to `target` ("host:port", or any gRPC target URI), over
 * TLS when opts->tls is given. Connecting is lazy: a server that is not
 * there (or a TLS handshake that fails) shows up as UNAVAILABLE (or
 * DEADLINE_EXCEEDED) on the first call. An unreadable TLS file is
 * INVALID_ARGUMENT naming it. The caller owns *out and releases it with
 * wt_rpc_channel_destroy() after every call on it ended. */
wt_status *wt_rpc_channel_new(const char *target,
                              const wt_rpc_channel_options *opts,
                              wt_rpc_channel **out);

/* NULL is ignored. */
void wt_rpc_channel_destroy(wt_rpc_channel *ch);

/* Whether this gRPC takes a channel's own tcp_user_timeout_ms (and lets a
 * wait past a deadline shut the channel's connections down): true for the
 * gRPC versions whose socket mutator layout was checked (1.51). */
bool wt_rpc_tcp_user_timeout_supported(void);

/* Whether the link to the channel's server looks cut: its connection's
 * kernel retransmitted what it sent WT_RPC_SILENT_RETRANSMITS times in a
 * row without an acknowledgement (about 0.6 s of silence on a LAN, longer
 * on a slower path, as TCP's own timers scale). A loaded or stopped server's
 * kernel still acknowledges, so it never looks so. *silent_ms (may be
 * NULL): since the last acknowledgement. False when unknown (no
 * connection, or a gRPC whose sockets this layer does not see). */
bool wt_rpc_channel_link_silent(wt_rpc_channel *ch, int64_t *silent_ms);
#define WT_RPC_SILENT_RETRANSMITS 2

/* The target as given; owned by the channel. */
const char *wt_rpc_channel_target(const wt_rpc_channel *ch);

/* In every call below: `method` is a full path ("/wt.v1.WeightTransfer/
 * GetServerInfo") copied by the call; `deadline_ms` is relative, 0 for the
 * channel's default, WT_RPC_NO_DEADLINE for none; `request`/`msg` stay the
 * caller's; a response is a new message of `response_type` that the caller
 * frees with wt_pb_free(). */

/* A unary call; blocks until the response or the deadline. */
wt_status *wt_rpc_unary(wt_rpc_channel *ch, const char *method,
                        const ProtobufCMessage *request,
                        const ProtobufCMessageDescriptor *response_type,
                        int64_t deadline_ms, ProtobufCMessage **response);

/* An asynchronous unary call: started now, waited for later (a trainer's
 * UpdateWeights stays pending while its data moves). */
typedef struct wt_rpc_pending wt_rpc_pending;

/* Sends the request and returns without waiting. The caller owns *out and
 * must pass it to wt_rpc_pending_wait() exactly once. */
wt_status *wt_rpc_unary_start(wt_rpc_channel *ch, const char *method,
                              const ProtobufCMessage *request,
                              const ProtobufCMessageDescriptor *response_type,
                              int64_t deadline_ms, wt_rpc_pending **out);

/* True when the call has completed (wt_rpc_pending_wait would not block).
 * Not concurrently with wt_rpc_pending_wait. */
bool wt_rpc_pending_done(wt_rpc_pending *p);

/* The same, waiting up to `ms` milliseconds for the call to complete (a
 * watcher that must notice the end at once, and also look at other things
 * now and then). */
bool wt_rpc_pending_done_within(wt_rpc_pending *p, int64_t ms);

/* Waits for the call to end and frees `p`. `response` may be NULL to discard
 * the response. */
wt_status *wt_rpc_pending_wait(wt_rpc_pending *p, ProtobufCMessage **response);

/* Cancels the call (its wait returns CANCELLED unless it already ended).
 * Thread-safe, also while another thread waits; does not free `p`, so it must
 * not be called once wt_rpc_pending_wait has returned. */
void wt_rpc_pending_cancel(wt_rpc_pending *p);

/* A client stream: open, write*, finish, destroy. */
typedef struct wt_rpc_client_stream wt_rpc_client_stream;

/* Starts the call. The caller owns *out and releases it with
 * wt_rpc_client_stream_destroy(). */
wt_status *wt_rpc_client_stream_open(wt_rpc_channel *ch, const char *method,
                                     int64_t deadline_ms,
                                     wt_rpc_client_stream **out);

/* Sends one message; blocks until gRPC's flow control accepted it. When the
 * server already ended the call, returns the server's status (e.g. its
 * FAILED_PRECONDITION) rather than a bare write error. */
wt_status *wt_rpc_client_stream_write(wt_rpc_client_stream *s,
                                      const ProtobufCMessage *msg);

/* As wt_rpc_client_stream_write, for bytes the caller serialised itself
 * (e.g. a chunk header plus a slice that refers to tensor memory). Takes
 * ownership of `bb` in every case. */
wt_status *wt_rpc_client_stream_write_raw(wt_rpc_client_stream *s,
                                          grpc_byte_buffer *bb);

/* Half-closes, then waits for the server's response and status. `response`
 * may be NULL to discard it. Call at most once. */
wt_status *wt_rpc_client_stream_finish(
    wt_rpc_client_stream *s, const ProtobufCMessageDescriptor *response_type,
    ProtobufCMessage **response);

/* Cancels the call; thread-safe (may run while another thread is blocked in
 * write or finish, which then return CANCELLED). Does not free `s`. */
void wt_rpc_client_stream_cancel(wt_rpc_client_stream *s);

/* Cancels the call if it has not finished, and frees `s`. NULL is ignored. */
void wt_rpc_client_stream_destroy(wt_rpc_client_stream *s);

/* A server stream: open with the request, read until done, destroy. */
typedef struct wt_rpc_server_stream wt_rpc_server_stream;

/* Sends the request and half-closes. The caller owns *out and releases it
 * with wt_rpc_server_stream_destroy(). */
wt_status *wt_rpc_server_stream_open(wt_rpc_channel *ch, const char *method,
                                     const ProtobufCMessage *request,
                                     int64_t deadline_ms,
                                     wt_rpc_server_stream **out);

/* Reads the next message into *msg and sets *done false; at the end of the
 * stream sets *msg NULL and *done true and returns the server's final
 * status (NULL when OK). Blocks until a message arrives or the deadline. */
wt_status *wt_rpc_server_stream_read(wt_rpc_server_stream *s,
                                     const ProtobufCMessageDescriptor *type,
                                     ProtobufCMessage **msg, bool *done);

/* Cancels the call; thread-safe (a blocked read returns CANCELLED). Does not
 * free `s`. */
void wt_rpc_server_stream_cancel(wt_rpc_server_stream *s);

/* Cancels the call if it has not ended, and frees `s`. NULL is ignored. */
void wt_rpc_server_stream_destroy(wt_rpc_server_stream *s);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_RPC_H */
