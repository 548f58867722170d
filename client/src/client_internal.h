/* client_internal.h: what the files of libwt_client share. Not installed.
 *
 * The client's rooms: control_grpc.c (wt's own control plane), fanout.c
 * (one call to every server through any control plane, and the calls of an
 * update around the trainer's sends), sync_client.c (the round
 * orchestration), inspect.c (the reader calls of one server),
 * trainer_registry.c (the trainer factory and the trainer handle),
 * update_lists.c (an update info's lists from a source), sources.c. */
#ifndef WT_CLIENT_INTERNAL_H
#define WT_CLIENT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wt/client.h"
#include "wt/control.h"
#include "wt/trainer.h"
#include "wt/visibility.h"

/* The keepalive timeout `opts` asks for, in ms (wt_client_options.
 * keepalive_timeout_ms): its own, WT_CLIENT_DEFAULT_KEEPALIVE_TIMEOUT_MS
 * for 0 or no options, -1 when keepalive is off. The channel's pings and
 * the failure abort's bound both follow it. */
static inline int64_t wt_client_keepalive_ms(const wt_client_options *opts) {
  int64_t ka = opts ? opts->keepalive_timeout_ms : 0;
  return ka == 0 ? WT_CLIENT_DEFAULT_KEEPALIVE_TIMEOUT_MS : ka < 0 ? -1 : ka;
}

/* The TCP user timeout `opts` asks for, in ms (wt_client_options.
 * tcp_user_timeout_ms): its own, WT_CLIENT_DEFAULT_TCP_USER_TIMEOUT_MS for
 * 0 or no options, -1 for gRPC's own. */
static inline int64_t wt_client_tcp_user_timeout_ms(
    const wt_client_options *opts) {
  int64_t ut = opts ? opts->tcp_user_timeout_ms : 0;
  return ut == 0 ? WT_CLIENT_DEFAULT_TCP_USER_TIMEOUT_MS : ut < 0 ? -1 : ut;
}

/* ---- fan-out (fanout.c) ------------------------------------------------- */

/* Per-server arrays of one method fanned out to every server: reqs[k] NULL
 * skips server k. */
typedef struct wt_fan {
  size_t n;
  const ProtobufCMessage **reqs;
  ProtobufCMessage **resps; /* each server's response, the fan's */
  wt_status **errs;         /* each server's status, the fan's */
  wt_control_call **calls;  /* pending calls */
} wt_fan;

WT_HIDDEN wt_status *wt_fan_alloc(size_t n, wt_fan *f);
/* Frees the arrays and what they own. */
WT_HIDDEN void wt_fan_free(wt_fan *f);

/* Starts `m` on every server with a request, stopping at the first that
 * cannot start (its error is also errs[k]); the calls started stay pending
 * until wt_fan_wait. */
WT_HIDDEN wt_status *wt_fan_start(const wt_control_plane *cp,
                                  wt_control_method m, int64_t deadline_ms,
                                  wt_fan *f);
/* Waits for every pending call, cancelling them first when `cancel`:
 * errs[k] and resps[k] are each server's. Returns a copy of the first
 * error in server order and logs the others, so that no server's failure
 * goes unsaid. */
WT_HIDDEN wt_status *wt_fan_wait(const wt_control_plane *cp, bool cancel,
                                 wt_fan *f);
/* wt_fan_start, then wt_fan_wait. */
WT_HIDDEN wt_status *wt_fan_out(const wt_control_plane *cp, wt_control_method m,
                                int64_t deadline_ms, wt_fan *f);

/* What runs on the trainer's side while every server's UpdateWeights is
 * pending (wt_fan_around). */
typedef struct wt_fan_sender {
  wt_status *(*send)(void *arg); /* may be NULL: nothing to send */
  void *arg;
  /* From the watcher's thread, when a server failed while send runs: makes
   * send return soon. May be NULL. */
  void (*cancel)(void *arg);
  void *cancel_arg;
  /* Once send returned, every server must answer within this (plus a
   * second for the answer to travel): a server past its own data deadline
   * has failed its round, and an answer that does not come is a link gone
   * dead. */
  int64_t answer_within_ms;
} wt_fan_sender;

/* Starts UpdateWeights with reqs[k] on every server, runs the sender while
 * they are pending (a server that fails first cancels it), and waits for
 * every call. The round's error: the server's when it failed first (with
 * the sender's when both failed on their own), else the sender's, else the
 * first server's; NULL when every server answered OK. */
WT_HIDDEN wt_status *wt_fan_around(const wt_control_plane *cp,
                                   const ProtobufCMessage *const *reqs,
                                   int64_t deadline_ms, const wt_fan_sender *s);

/* ---- vLLM's dicts (control_vllm.c) ----------------------------------------
 */

/* Request `req` of method `m` as the JSON an unmodified vLLM worker's route
 * takes (wt/bindings.h, WT_CONTROL_VLLM_DICTS); *out malloc'd. */
WT_HIDDEN wt_status *wt_vllm_request_json(wt_control_method m,
                                          const ProtobufCMessage *req,
                                          char **out);

/* The other way: vLLM's own init dict (NCCLWeightTransferInitInfo,
 * unique-id mode) or update dict (shapes as lists of ints), as its trainer
 * engines hand them to a VLLMWeightSyncClient, rewritten as wt.v1's JSON in
 * *out (malloc'd). *out stays NULL when `json` is already wt's form. A
 * TCPStore rendezvous (master_address, master_port) or a field vLLM's
 * dataclass lacks is INVALID_ARGUMENT naming the field. */
WT_HIDDEN wt_status *wt_vllm_init_info_from_dict(const char *json, char **out);
WT_HIDDEN wt_status *wt_vllm_update_info_from_dict(const char *json,
                                                   char **out);

/* ---- the client (sync_client.c) ------------------------------------------ */

/* UpdateWeights with `info` on every server of the client's round, waited
 * for; the round is aborted on a failure (wt/bindings.h). */
WT_HIDDEN wt_status *wt_sync_client_update_plain(
    wt_sync_client *c, const Wt__V1__WeightTransferUpdateInfo *info);

/* Server k's channel for the reader call `method`: INVALID_ARGUMENT for an
 * index out of range, UNIMPLEMENTED when the control plane has none. */
WT_HIDDEN wt_status *wt_sync_client_reader_channel(wt_sync_client *c, size_t k,
                                                   const char *method,
                                                   wt_rpc_channel **ch);

/* ---- the trainer handle (trainer_registry.c) ---------------------------- */

/* The client's weak hold on the trainer it made, to re-init it in place
 * (the caller's handle stays valid) when a server needs a new init: the
 * trainer empties the link when it is destroyed first, and each side drops
 * its reference; neither holds the other. */
typedef struct wt_trainer_link wt_trainer_link;

/* A new reference to t's link (made on first use); NULL when out of
 * memory. */
WT_HIDDEN wt_trainer_link *wt_trainer_link_get(wt_trainer *t);
/* The trainer, or NULL once it was destroyed. */
WT_HIDDEN wt_trainer *wt_trainer_link_trainer(wt_trainer_link *l);
/* Drops a reference; NULL is ignored. */
WT_HIDDEN void wt_trainer_link_put(wt_trainer_link *l);

/* Destroys t's engine and creates a new one from `args` (trainer_init);
 * on failure t has no engine (send_weights then fails) until the next
 * success. */
WT_HIDDEN wt_status *wt_trainer_reinit(wt_trainer *t,
                                       const wt_trainer_init_args *args);

#endif /* WT_CLIENT_INTERNAL_H */
