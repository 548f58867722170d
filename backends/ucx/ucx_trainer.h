/* ucx_trainer.h: what the files of the ucx trainer engine share
 * (ucx_trainer.c: the table, init and settings; ucx_trainer_conn.c: the
 * connections; ucx_trainer_send.c: the data path; ucx_trainer_chain.c: the
 * fan-out and its routes), as the worker side splits ucx_worker.c,
 *  ucx_worker_conn.c and ucx_worker_chain.c. Not installed. */
#ifndef WT_UCX_TRAINER_INTERNAL_H
#define WT_UCX_TRAINER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "wt/delta_state.h"
#include "wt/cuda.h"
#include "wt/trainer.h"
#include "backends/ucx/ucx_shared.h"
#include "wt/visibility.h"

#define UCX_GRACE_MS 1000
/* How long a cancelled send waits for a dead worker's endpoint to report
 * the failure (see drain). */
#define UCX_CANCEL_GRACE_MS 300

typedef struct peer {
  size_t server;
  uint32_t rank;
  char name[320]; /* "HOST:PORT worker R (ADDR:PORT)" */
  char host[256]; /* where its listener is */
  uint32_t port;
  struct sockaddr_storage addr;
  socklen_t addrlen;
  unsigned char *worker_address; /* NULL: connect by sockaddr */
  size_t worker_address_len;
  ucp_ep_h ep;
  bool failed;
  ucs_status_t why;
  bool moved; /* a bucket of this round reached it */
} peer;

/* One send buffer and the sends of the bucket it holds. */
typedef struct sbuf {
  unsigned char *data;
  uint64_t cap;
  int device;     /* data is on this GPU; -1: host memory */
  ucp_mem_h memh; /* device data: its registration */
  size_t bucket;
  bool busy;
  size_t j0, j1; /* the peers it goes to: [j0, j1) */
  void **reqs;   /* one per peer */
  /* A delta pass: the bucket's delta message (ucx_shared.h), host
   * memory of enc_cap bytes. */
  unsigned char *enc;
  uint64_t enc_cap;
} sbuf;

enum { FANOUT_PARALLEL, FANOUT_SEQUENTIAL, FANOUT_CHAIN, FANOUT_AUTO };

typedef struct ucx_trainer {
  const wt_trainer_ctx *ctx; /* the servers; borrowed */
  wt_ucx *ucx;
  uint64_t buffer_bytes;
  uint32_t num_buffers;
  int64_t timeout_ms;
  int64_t connect_timeout_ms; /* a peer's first bucket of a round */
  bool by_sockaddr;           /* options["ucx_connect"] == "sockaddr" */
  /* The settings table's fields (ints, set by apply_settings). */
  int peer_errors;   /* options["ucx_peer_errors"] != "off" */
  int fanout;        /* this round's: FANOUT_* but AUTO */
  int fanout_option; /* options["ucx_fanout"]: FANOUT_* */
  int split_option;  /* options["ucx_split_tensors"] != "off" */
  bool split;        /* this round's plan is split (update info) */
  /* A split plan's tensor that spans buckets: the source's last yield,
   * kept for the next bucket (held_index SIZE_MAX: none). */
  wt_source_tensor held;
  size_t held_index;
  peer **peers; /* stable addresses: UCX error callbacks point at them */
  size_t npeers;
  sbuf *bufs;
  bool lanes_logged;
  uint8_t secret[WT_UCX_SECRET_BYTES]; /* init_info.ucx.auth_secret */
  uint8_t hello[WT_UCX_HELLO_BYTES];
  /* A rank of a shard plan (docs/multirank.md): its tags carry its rank
   * (wt_ucx_rank_bucket), and its rounds fan out in parallel. */
  bool ranked;
  uint32_t rank;
  unsigned char *route; /* the route message being sent */
  void **route_reqs;    /* its sends, one per peer */
  /* Per server: its update info, and the base a delta round names. */
  Wt__V1__UcxUpdateInfo *uinfo;
  Wt__V1__DeltaBase *ubase;
  Wt__V1__UInt64Value ubuf;
  /* Delta rounds (docs/delta.md): the state both delta backends keep, this
   * round's choice per server (delta_to, of ctx->nservers), whether the
   * round keeps the base, and the last round's figures. The peers are
   * ordered full first, then delta (nfull), each group in server order. */
  wt_delta_state d;
  bool *delta_to;
  bool try_delta, keep_base;
  uint64_t layout;
  size_t nfull;
  unsigned char *xor_buf; /* one segment */
  int64_t encode_ns;
  wt_delta_stats stats;
  /* Device sources: the round's GPU (-1: host), CUDA, the packing stream. */
  int device;
  const wt_cuda_api *cuda;
  void *stream;
  int stream_device;
} ucx_trainer;

typedef struct wait_arg {
  ucx_trainer *t;
  sbuf *b;
} wait_arg;

/* ---- connections (ucx_trainer_conn.c) ---- */

/* Creates p's endpoint to its worker; the connection completes while both
 * sides progress. */
WT_HIDDEN wt_status *wt_ucxt_peer_connect(ucx_trainer *t, peer *p);
/* Force-closes p's endpoint, ending its sends in flight. */
WT_HIDDEN void wt_ucxt_peer_close(ucx_trainer *t, peer *p);
/* The table's init_response: server k's workers, one endpoint each. */
WT_HIDDEN wt_status *wt_ucxt_init_response(
    void *self, size_t k,
    const Wt__V1__InitWeightTransferEngineResponse *response);

/* ---- fan-out and routes (ucx_trainer_chain.c) ---- */

/* The round's fan-out (FANOUT_*, never AUTO). */
WT_HIDDEN int wt_ucxt_round_fanout(const ucx_trainer *t);
/* The round id of p's server in the round in progress. */
WT_HIDDEN uint64_t wt_ucxt_round_of(ucx_trainer *t, const peer *p);
/* Sends each worker the trainer sends to its route message: in a chain,
 * the rest of the group [j0, j1) to its first worker; otherwise an empty
 * route to each of them. */
WT_HIDDEN wt_status *wt_ucxt_send_routes(ucx_trainer *t, size_t j0, size_t j1);
WT_HIDDEN wt_status *wt_ucxt_drain_routes(ucx_trainer *t);

/* ---- the data path (ucx_trainer_send.c) ---- */

/* Where the source's tensors are: *device -1 for host memory, else the
 * one GPU they are all on; INVALID_ARGUMENT naming two tensors when they
 * are in different places. Rewinds the source before and after. */
WT_HIDDEN wt_status *wt_ucxt_source_device(wt_source *src, int *device);
/* Frees b's data (host or device) and its registration. */
WT_HIDDEN void wt_ucxt_sbuf_free(ucx_trainer *t, sbuf *b);
/* The table's send_weights. */
WT_HIDDEN wt_status *wt_ucxt_send_weights(void *self, wt_source *source,
                                          wt_progress_fn progress, void *user);

#endif /* WT_UCX_TRAINER_INTERNAL_H */
