/* backends/nccl/nccl_shared.h: what both halves of the `nccl` backend agree on,
 * the logic that needs no GPU (NCCL itself is behind wt/nccl_seam.h).
 *
 * Wire, as vLLM's: the trainer draws the 128-byte ncclUniqueId and sends it
 * in init_info.nccl.nccl_unique_id (vLLM's NCCLWeightTransferInitInfo
 * carries the same bytes as standard base64 in nccl_unique_id_b64:
 * wt_base64_encode/decode convert); world_size and rank_offset are the
 * common init info's (vLLM's fields of the same names); the trainer is rank
 * 0 and worker i of a server is rank rank_offset + i; every rank enters the
 * init at once, and right after it joins one float32, one-element sum
 * all-reduce (the warm-up vLLM's PyNcclCommunicator.from_unique_id_bytes
 * issues) before any other collective. packed, packed_buffer_size_bytes and
 * packed_num_buffers are vLLM's NCCLWeightTransferConfig fields (1 GiB and
 * 2 by default); each bucket is one ncclBroadcast of uint8 from rank 0.
 */
#ifndef WT_BACKENDS_NCCL_H
#define WT_BACKENDS_NCCL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wt/cuda.h"
#include "wt/init_info.h"
#include "wt/memory.h"
#include "wt/nccl_seam.h"
#include "wt/packing.h"
#include "wt/status.h"
#include "wt/v1/wt.pb-c.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* The largest world an init may name: NCCL's bootstrap sizes its tables by
 * the rank count, so a stranger's init may not ask for billions. */
#define WT_NCCL_MAX_WORLD 65536u

/* --- logic without a GPU -------------------------------------------------- */

/* The settings of an init, checked. */
typedef struct wt_nccl_settings {
  uint32_t world_size;
  uint32_t rank_offset; /* the first worker's rank */
  bool packed;
  uint64_t buffer_bytes;
  uint32_t num_buffers;
  unsigned char unique_id[WT_NCCL_UNIQUE_ID_BYTES];
} wt_nccl_settings;

/* Checks an init info for the nccl backend, for a server of `nworkers`
 * workers (0: the trainer's side, which checks world_size only):
 * INVALID_ARGUMENT naming the field when init_info.nccl is missing, the
 * unique id is not exactly 128 bytes, world_size is below 2 or above
 * WT_NCCL_MAX_WORLD, rank_offset is
 * 0 (the trainer's rank) or the server's last rank (rank_offset + nworkers
 * - 1) is past world_size - 1, packed_buffer_size_bytes is 0, or
 * packed_num_buffers is 0 or above WT_NCCL_MAX_BUFFERS. Fills *out. */
wt_status *wt_nccl_check_init(const Wt__V1__WeightTransferInitInfo *init,
                              uint32_t nworkers, wt_nccl_settings *out);

/* The rank of worker `index` of a server: rank_offset + index. */
static inline int wt_nccl_worker_rank(const wt_nccl_settings *s,
                                      uint32_t index) {
  return (int)(s->rank_offset + index);
}

/* Where bucket b of a packed round goes on either side: buffer and stream
 * b % num_buffers, and the bucket that must have finished on that stream
 * before the buffer is reused (b - num_buffers; none for the first ones). */
typedef struct wt_nccl_step {
  size_t bucket;
  uint32_t buffer; /* and stream */
  bool waits;      /* for bucket `after` on the same stream */
  size_t after;
} wt_nccl_step;

/* The schedule of `plan` with `num_buffers` (>= 1) buffers: out[0..nbuckets).
 * The caller owns *out (free). */
wt_status *wt_nccl_schedule(const wt_pack_plan *plan, uint32_t num_buffers,
                            wt_nccl_step **out);

/* Waits until `comm`'s pending operation is done and, when `stream` is not
 * NULL, `stream` has finished what was queued on it (cudaStreamQuery
 * through `cuda`), polling both. On the deadline (a monotonic time in ms),
 * a cancel (*cancel set) or an error, aborts `comm` (*comm becomes NULL)
 * and returns DEADLINE_EXCEEDED, CANCELLED or the error, each naming
 * `what` ("rank 1 of 2: the communicator's init"). */
wt_status *wt_nccl_wait(const wt_nccl_api *nccl, const wt_cuda_api *cuda,
                        void **comm, void *stream, int64_t deadline_ms,
                        const atomic_bool *cancel, const char *what);

/* --- one rank, the same on both sides ------------------------------------- */

/* What a rank holds, the trainer's (rank 0) and each worker's alike: the
 * communicator, its streams, its buffers, the warm-up's float, and how its
 * messages start. Zeroed by the caller, then wt_nccl_rank_open. */
typedef struct wt_nccl_rank {
  const wt_nccl_api *nccl;
  const wt_cuda_api *cuda;
  wt_device device;
  void *comm; /* NULL until joined, and once aborted */
  void *streams[WT_NCCL_MAX_BUFFERS];
  uint32_t nstreams;
  wt_mem_region bufs[WT_NCCL_MAX_BUFFERS];
  uint32_t nbufs;
  uint64_t buf_bytes; /* each buffer's size, 0: none yet */
  wt_mem_region one;  /* the warm-up's float */
  atomic_bool cancelled;
  char where[128];        /* "nccl trainer (rank 0 of 3)", "nccl worker ..." */
  const char *again_hint; /* what to call after an abort */
} wt_nccl_rank;

/* Loads the CUDA and NCCL modules (CUDA's asynchronous calls needed),
 * makes `nstreams` streams on `device` and the warm-up's float. Messages
 * start with `where`; a communicator found aborted says `again_hint`
 * ("InitWeightTransferEngine again"). On failure what was made is
 * released (wt_nccl_rank_close). */
wt_status *wt_nccl_rank_open(wt_nccl_rank *r, wt_device device,
                             uint32_t nstreams, const char *where,
                             const char *again_hint);

/* Joins a world of `world` ranks as `rank` with the trainer's `id`: the
 * communicator's init, waited for up to `timeout_ms` ("<join_what>"), then
 * vLLM's warm-up (a one-element float32 all-reduce) and its wait. */
wt_status *wt_nccl_rank_join(wt_nccl_rank *r,
                             const unsigned char id[WT_NCCL_UNIQUE_ID_BYTES],
                             uint32_t world, int rank, int64_t timeout_ms,
                             const char *join_what);

/* wt_nccl_wait on the rank's communicator and r->cancelled, naming
 * "<where>: <what>"; FAILED_PRECONDITION when the communicator was aborted
 * already. */
wt_status *wt_nccl_rank_wait(wt_nccl_rank *r, void *stream, int64_t timeout_ms,
                             const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* `n` buffers of at least `bytes` each on the rank's device ("<what>" in
 * an allocation error). */
wt_status *wt_nccl_rank_buffers(wt_nccl_rank *r, uint32_t n, uint64_t bytes,
                                const char *what);

/* Aborts the communicator if there is one (it cannot continue). */
void wt_nccl_rank_abort(wt_nccl_rank *r);

/* Releases everything: the communicator (destroyed: nothing is in flight
 * between calls), buffers, the float, streams. */
void wt_nccl_rank_close(wt_nccl_rank *r);
WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_BACKENDS_NCCL_H */
