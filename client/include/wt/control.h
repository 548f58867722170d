/* wt/control.h: the control plane under the sync client, as a table of
 * calls.
 *
 * The sync client's round orchestration (wt/client.h: fan-out to every
 * server, deadlines, abort on the first failure, re-init, the trainer
 * engine's rendezvous and sends while calls are pending) reaches the
 * servers only through a wt_control_ops table. wt's own table speaks gRPC
 * to wt-servers (wt_control_grpc_new); a caller may hand its own
 * (vLLM's HTTP routes, a framework's RPC, a test's recorder) with
 * wt_sync_client_new_with, and every guarantee of the orchestration holds
 * whichever drives it.
 *
 * The calls are the four of vLLM's VLLMWeightSyncClient (init, start,
 * update, finish) plus world size and abort where a control plane has
 * them, and server info, which lets the client see that a worker needs a
 * new init. Each takes and gives the wt.v1 protobuf messages of the method
 * of the same name (the language-neutral contract, proto/wt/v1/wt.proto),
 * so a table over another transport translates messages, never semantics.
 *
 * Calls are asynchronous: the orchestration starts a method on every server
 * before it waits for any, runs the trainer engine while they are pending
 * (NCCL's rendezvous beside InitWeightTransferEngine, the data beside
 * UpdateWeights), and cancels the others when one fails. A control plane
 * whose calls are synchronous runs each on a thread of its own.
 */
#ifndef WT_CONTROL_H
#define WT_CONTROL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wt/rpc_types.h"
#include "wt/status.h"
#include "wt/v1/wt.pb-c.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* The methods, each with its wt.v1 request and response. */
typedef enum wt_control_method {
  WT_CONTROL_WORLD_SIZE = 0,  /* GetWorldSizeRequest -> GetWorldSizeResponse */
  WT_CONTROL_INIT = 1,        /* InitWeightTransferEngine{Request,Response} */
  WT_CONTROL_START = 2,       /* StartWeightUpdate{Request,Response} */
  WT_CONTROL_UPDATE = 3,      /* UpdateWeights{Request,Response} */
  WT_CONTROL_FINISH = 4,      /* FinishWeightUpdate{Request,Response} */
  WT_CONTROL_ABORT = 5,       /* AbortWeightUpdate{Request,Response} */
  WT_CONTROL_SERVER_INFO = 6, /* GetServerInfoRequest -> ServerInfo */
  WT_CONTROL_METHODS = 7
} wt_control_method;

#define WT_CONTROL_BIT(m) (1u << (m))
/* What every control plane must have. */
#define WT_CONTROL_REQUIRED                                             \
  (WT_CONTROL_BIT(WT_CONTROL_INIT) | WT_CONTROL_BIT(WT_CONTROL_START) | \
   WT_CONTROL_BIT(WT_CONTROL_UPDATE) | WT_CONTROL_BIT(WT_CONTROL_FINISH))

/* "InitWeightTransferEngine", ...: the wt.v1 method's name. Static. */
const char *wt_control_method_name(wt_control_method m);
/* The method's response message type. */
const ProtobufCMessageDescriptor *wt_control_response_type(wt_control_method m);

/* One pending call of a control plane; its own type. */
typedef struct wt_control_call wt_control_call;

typedef struct wt_control_ops {
  /* "grpc" for wt's own; names the control plane in messages. */
  const char *name;
  /* WT_CONTROL_BIT set of the methods it has; at least WT_CONTROL_REQUIRED.
   * Without WORLD_SIZE each server counts one rank; without ABORT a failed
   * round is left to the servers' round timeout; without SERVER_INFO the
   * client never re-inits by itself. */
  uint32_t methods;

  /* The servers, fixed for the plane's life: how many, and server k's name
   * as messages show it ("host:port", a URL); static or owned by `self`. */
  size_t (*server_count)(void *self);
  const char *(*target)(void *self, size_t k);

  /* Starts method `m` on server k with `request` (the method's wt.v1
   * request; borrowed until call_wait returns) and returns at once. The
   * call's deadline is `deadline_ms` from now. An error here means the call
   * never started; otherwise *call must reach call_wait exactly once. */
  wt_status *(*call_start)(void *self, size_t k, wt_control_method m,
                           const ProtobufCMessage *request, int64_t deadline_ms,
                           wt_control_call **call);
  /* True once the call ended, waiting at most `wait_ms` (0: a poll). Not
   * concurrently with call_wait. */
  bool (*call_done)(void *self, wt_control_call *call, int64_t wait_ms);
  /* Makes the call end soon with CANCELLED, from any thread, until
   * call_wait returned. */
  void (*call_cancel)(void *self, wt_control_call *call);
  /* Waits for the end, frees the call, and returns its status; the
   * response (the method's wt.v1 response, the caller's to free with
   * wt_pb_free) into *response when it is not NULL. Errors name the server
   * and the method. */
  wt_status *(*call_wait)(void *self, wt_control_call *call,
                          ProtobufCMessage **response);

  /* Optional: server k's gRPC channel to a wt-server, for the calls beyond
   * a round (parameters, versions, watch, checksums) and the backends that
   * move bytes over it (`grpc`); NULL when it has none. */
  wt_rpc_channel *(*channel)(void *self, size_t k);

  /* Optional: releases `self`; called once by the client that owns the
   * plane. */
  void (*destroy)(void *self);
} wt_control_ops;

/* A control plane: its table (static) and its state. */
typedef struct wt_control_plane {
  const wt_control_ops *ops;
  void *self;
} wt_control_plane;

struct wt_client_options;

/* wt's own control plane: a gRPC channel to each of `targets[0..n)` (n >= 1,
 * "host:port", no duplicates), with opts' deadlines, TLS and token (may be
 * NULL). The caller owns *out: it passes it to wt_sync_client_new_with,
 * or releases it with wt_control_plane_destroy. */
wt_status *wt_control_grpc_new(const char *const *targets, size_t n,
                               const struct wt_client_options *opts,
                               wt_control_plane *out);

/* Releases a control plane not handed to a client; {NULL} is ignored. */
void wt_control_plane_destroy(wt_control_plane *cp);

/* Checks that `ops` has what a client needs: INVALID_ARGUMENT naming the
 * missing entry. */
wt_status *wt_control_ops_check(const wt_control_ops *ops);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_CONTROL_H */
