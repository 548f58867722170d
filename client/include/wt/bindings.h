/* wt/bindings.h: the surface of libwt_client for language bindings
 * (python/, through ctypes) and for control planes that speak dicts.
 *
 * Everything here takes and gives JSON text (wt/pb.h's mapping: the
 * proto's field names, bytes as base64) instead of protobuf-c structs, and
 * plain arguments instead of option structs, so a binding needs no header
 * parser. The semantics are those of wt/client.h and wt/control.h.
 *
 * Ownership: strings passed in are borrowed for the call; strings handed
 * out (char **) are malloc'd, the caller's, released with wt_bindings_free.
 * Statuses are the caller's (wt_status_free). */
#ifndef WT_BINDINGS_H
#define WT_BINDINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wt/client.h"
#include "wt/control.h"
#include "wt/status.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* Frees a string this header handed out. NULL is ignored. */
void wt_bindings_free(void *p);

/* wt_sync_client_new with its options as arguments (0 or NULL: the
 * default of each; see wt_client_options). */
wt_status *wt_bindings_client_new(
    const char *const *targets, size_t n, int64_t timeout_ms,
    int64_t data_timeout_ms, const char *token_file, const char *runtime_base,
    bool no_token_discovery, const char *adapter, int64_t keepalive_timeout_ms,
    int64_t tcp_user_timeout_ms, wt_sync_client **out);

/* wt_sync_client_new_with, the same options. Takes `cp` in every case. */
wt_status *wt_bindings_client_new_with(wt_control_plane *cp, int64_t timeout_ms,
                                       int64_t data_timeout_ms,
                                       wt_sync_client **out);

/* wt_sync_client_init_transfer with the init info as JSON (a
 * WeightTransferInitInfo object; INVALID_ARGUMENT naming the field when it
 * does not parse). With make_trainer the trainer engine of the backend is
 * made too (*trainer, the caller's: wt_trainer_destroy), else only the
 * servers are initialised (vLLM's init_weight_transfer_engine). vLLM's own
 * NCCL init dict (nccl_unique_id_b64, rank_offset, world_size, packed
 * fields) is taken as the nccl backend's; its TCPStore mode
 * (master_address) is INVALID_ARGUMENT naming the field and the mode wt
 * takes. */
wt_status *wt_bindings_init_transfer(wt_sync_client *c,
                                     const char *init_info_json,
                                     bool make_trainer, wt_trainer **trainer);

/* The Python path's init info, built once and in one direction: the
 * init info the trainer engine of `backend` builds from its options
 * (wt_trainer_init_info; `options_json` a JSON object of strings, NULL or
 * "{}": none: secrets the backend draws for this init, rendezvous,
 * defaults), the fields the caller's `init_info_json` names (wt's JSON or
 * vLLM's dict; NULL or "": none) set over it (wt_pb_merge_json: each field
 * it names wins, a message field merges, a map merges by key, null
 * clears; `backend` is always the engine's). Touches no client, so a bad
 * option or field fails before anything is set up: INVALID_ARGUMENT
 * naming it, NOT_FOUND for an unknown backend. *out is opaque, the
 * caller's (wt_bindings_init_info_free). */
wt_status *wt_bindings_trainer_init_info_new(const char *backend,
                                             const char *options_json,
                                             const char *init_info_json,
                                             void **out);
/* Releases what wt_bindings_trainer_init_info_new made. NULL is ignored. */
void wt_bindings_init_info_free(void *info);

/* wt_sync_client_init_transfer with `info` (from
 * wt_bindings_trainer_init_info_new, borrowed for the call) and a trainer
 * engine (*trainer, the caller's: wt_trainer_destroy). No JSON comes back. */
wt_status *wt_bindings_trainer_init_transfer(wt_sync_client *c,
                                             const void *info,
                                             wt_trainer **trainer);

/* The init info of the client's last init, as sent (JSON into *json);
 * FAILED_PRECONDITION before any init. */
wt_status *wt_bindings_client_init_info(wt_sync_client *c, char **json);

/* Many trainer ranks (docs/multirank.md): every rank's layout (a
 * wt.v1.ShardPlan whose ranks list what each rank holds, as JSON) becomes
 * the plan (wt's JSON into *plan_json, the caller's to free with
 * wt_bindings_free), with its digest. INVALID_ARGUMENT naming the rank and
 * the tensor when the layouts disagree, overlap or leave bytes uncovered. */
wt_status *wt_bindings_shard_plan(const char *layouts_json, char **plan_json);

/* The init info the trainer engine of `backend` builds from its options
 * (as wt_bindings_trainer_init_info_new, without a caller's fields) as
 * JSON into *json. */
wt_status *wt_bindings_trainer_init_info(const char *backend,
                                         const char *options_json, char **json);

/* The protocol's update_weights(update_info): UpdateWeights with the update
 * info (a WeightTransferUpdateInfo object as JSON) on every server of this
 * client's round, waited for (data deadline). Nothing else moves: the bytes
 * are a sender's that runs beside it. On a failure the round is aborted on
 * every server. vLLM's update dict (shapes as lists of ints) is taken as
 * well as wt's ({"dims": [...]}). */
wt_status *wt_bindings_update_info(wt_sync_client *c,
                                   const char *update_info_json);

/* Server k's GetServerInfo as JSON (a ServerInfo object) into *json. */
wt_status *wt_bindings_server_info(wt_sync_client *c, size_t k, char **json);

/* Server k's parameters whose names start with `prefix` (NULL: all) as a
 * ListParametersResponse object in JSON (dtype: PyTorch's names). */
wt_status *wt_bindings_list_parameters(wt_sync_client *c, size_t k,
                                       const char *prefix, char **json);

/* --- a control plane over a synchronous callback ----------------------------
 */

/* The answer a callback gives, through one of the two calls below; owned
 * by the plane, valid until the callback returns. */
typedef struct wt_control_reply wt_control_reply;

/* The method's response as a JSON object (its wt.v1 response type; "{}" or
 * NULL: the default response). Copied. */
void wt_control_reply_ok(wt_control_reply *r, const char *response_json);
/* A failure: a wt code (gRPC's numbers; 0 is taken as UNKNOWN) and its
 * message (copied). */
void wt_control_reply_error(wt_control_reply *r, int code, const char *message);

/* Called once per call, on a thread of the plane's own (one per call, so
 * that the orchestration's calls to every server run at once), with the
 * server's index, the method (wt_control_method) and its request as a JSON
 * object (the method's wt.v1 request type). It must answer through `reply`
 * before it returns; returning without an answer is INTERNAL. It may block
 * (a synchronous RPC); the call's deadline and cancel end the wait for it,
 * not the callback itself, whose late answer is dropped. */
typedef void (*wt_control_callback)(void *user, size_t server, int method,
                                    const char *request_json,
                                    wt_control_reply *reply);

/* A control plane (wt/control.h) of `n` servers named `targets[0..n)`
 * (copied; names in messages) whose calls are `fn`'s, for the methods in
 * `methods` (WT_CONTROL_BIT set; at least WT_CONTROL_REQUIRED). A
 * `flags` (below) chooses the dicts. A
 * StartWeightUpdate answered without a round id (a control plane that has
 * none, as vLLM's) gets one of the plane's own, so the orchestration's
 * rules hold; an InitWeightTransferEngine answered with neither `ready` nor
 * a `message` (a plane that raises on failure) is ready. Destroying the plane
 * waits for the callbacks still running. The caller owns *out
 * (wt_sync_client_new_with takes it). */
wt_status *wt_control_callback_new(const char *const *targets, size_t n,
                                   uint32_t methods, uint32_t flags,
                                   wt_control_callback fn, void *user,
                                   wt_control_plane *out);

/* flags: the requests are the dicts an unmodified vLLM worker's routes take
 * instead of wt.v1's (client/src/control_vllm.c says which release):
 * InitWeightTransferEngine {"init_info": {nccl_unique_id_b64, rank_offset,
 * world_size, packed, packed_buffer_size_bytes, packed_num_buffers}},
 * UpdateWeights {"update_info": {names, dtype_names, shapes}},
 * FinishWeightUpdate {"weight_version"}; a backend other than nccl is
 * INVALID_ARGUMENT naming it before any call. */
#define WT_CONTROL_VLLM_DICTS 1u

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_BINDINGS_H */
