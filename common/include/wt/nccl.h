/* wt/nccl.h: the `nccl` backend's seam to NCCL, and the logic around it
 * that needs no GPU.
 *
 * The seam: the few NCCL calls wt makes (unique id, a non-blocking
 * communicator's init, its asynchronous state, abort, destroy, broadcast,
 * the warm-up all-reduce) sit in one table, wt_nccl_api, implemented by the
 * module libwt_nccl.so (common/src/nccl_module.c, built where CMake finds
 * NCCL: WT_WITH_NCCL) and loaded with dlopen the first time wt needs it, as
 * the CUDA module is (wt/cuda.h). So wt-server and libwt_client build,
 * start and serve where NCCL is missing, and asking for it says why. Tests
 * replace the table (wt_nccl_api_override) with one that emulates
 * communicators between threads of one process (tests/support/fake_nccl.h).
 *
 * Communicators are always non-blocking (ncclCommInitRankConfig with
 * config.blocking = 0): every call returns at once, and wt_nccl_wait polls
 * ncclCommGetAsyncError and cudaStreamQuery against the wait's deadline, so
 * no NCCL wait in wt is without one. On a deadline, a cancel or an error
 * the waiter aborts the communicator (ncclCommAbort, from the thread that
 * owns it, with no other NCCL call in flight): it cannot be used again.
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
#ifndef WT_NCCL_H
#define WT_NCCL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wt/cuda.h"
#include "wt/memory.h"
#include "wt/packing.h"
#include "wt/status.h"
#include "wt/v1/wt.pb-c.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WT_NCCL_API_VERSION 1u
/* sizeof(ncclUniqueId) */
#define WT_NCCL_UNIQUE_ID_BYTES 128
/* vLLM's defaults (DEFAULT_PACKED_BUFFER_SIZE_BYTES, _NUM_BUFFERS). */
#define WT_NCCL_DEFAULT_BUFFER_BYTES (1ull << 30)
#define WT_NCCL_DEFAULT_NUM_BUFFERS 2u
/* At most this many buffers (and streams) in flight. */
#define WT_NCCL_MAX_BUFFERS 16u
/* The largest world an init may name: NCCL's bootstrap sizes its tables by
 * the rank count, so a stranger's init may not ask for billions. */
#define WT_NCCL_MAX_WORLD 65536u

typedef struct wt_nccl_api {
  uint32_t version; /* WT_NCCL_API_VERSION */
  const char *name; /* "NCCL 2.28.9", "fake" */
  /* ncclGetVersion's code (22809 for 2.28.9). */
  int (*version_code)(void);
  wt_status *(*get_unique_id)(unsigned char id[WT_NCCL_UNIQUE_ID_BYTES]);
  /* Starts joining communicator `id` as `rank` of `nranks` on the calling
   * thread's device, non-blocking: *comm is valid at once, the init
   * completes while comm_state says pending. */
  wt_status *(*comm_init)(int nranks,
                          const unsigned char id[WT_NCCL_UNIQUE_ID_BYTES],
                          int rank, void **comm);
  /* ncclCommGetAsyncError: *pending true while an operation (the init, a
   * finalize) is in progress; an error the communicator hit is returned. */
  wt_status *(*comm_state)(void *comm, int *pending);
  /* ncclCommAbort: ends everything in flight; comm is gone after it. */
  void (*comm_abort)(void *comm);
  /* ncclCommDestroy of a communicator with nothing in flight (the caller
   * waited for it); comm is gone after it. */
  void (*comm_destroy)(void *comm);
  /* ncclBroadcast of `bytes` uint8 from `root` on `stream`: `send` is read
   * on the root, `recv` written on every rank (recv == send on the root is
   * allowed, as NCCL's in-place broadcast). */
  wt_status *(*broadcast)(const void *send, void *recv, size_t bytes, int root,
                          void *comm, void *stream);
  /* ncclAllReduce of `count` float32, ncclSum, on `stream`. */
  wt_status *(*all_reduce_f32)(const void *send, void *recv, size_t count,
                               void *comm, void *stream);
} wt_nccl_api;

/* The process's table: the override if set, else the module, loaded on
 * first use. FAILED_PRECONDITION saying why when neither is available. */
wt_status *wt_nccl_api_get(const wt_nccl_api **out);
/* Replaces the table for the whole process (tests); NULL: the module. */
void wt_nccl_api_override(const wt_nccl_api *api);
/* Chooses the process's NCCL, before the first nccl engine runs: `library`
 * (a path to a libnccl.so.2, say the nvidia-nccl wheel's that vLLM runs;
 * NULL or "": the one the module was linked with) is loaded first, so the
 * module binds to it; a second, different path is FAILED_PRECONDITION
 * naming both (one NCCL per process). With `expect_version`
 * ("MAJOR.MINOR.PATCH", the peers' NCCL), the loaded NCCL's version must
 * be that one: NCCL refuses a peer of another version at init, so the
 * mismatch is FAILED_PRECONDITION naming both versions, before any
 * collective. NULL: no check. */
wt_status *wt_nccl_select(const char *library, const char *expect_version);
/* "2.27.3" -> 22703 (ncclGetVersion's code); INVALID_ARGUMENT naming the
 * text otherwise. */
wt_status *wt_nccl_version_parse(const char *text, int *code);

/* What the module exports, under the symbol "wt_nccl_module_api". */
typedef const wt_nccl_api *(*wt_nccl_module_fn)(void);

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

/* The packing settings of init_info.nccl (x may be NULL: the defaults),
 * as both sides read them: packed_buffer_size_bytes (unset: 1 GiB; 0
 * refused) and packed_num_buffers (unset: 2; 1 to WT_NCCL_MAX_BUFFERS).
 * INVALID_ARGUMENT naming the field. */
wt_status *wt_nccl_packing(const Wt__V1__NcclInitInfo *x,
                           uint64_t *buffer_bytes, uint32_t *num_buffers);

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

/* Standard base64 (RFC 4648, with padding; not URL-safe), as vLLM's
 * nccl_unique_id_b64. encode writes 4 * ceil(n / 3) characters and a NUL
 * into out (room for that); decode takes exactly that form and writes at
 * most `cap` bytes: INVALID_ARGUMENT naming `what` otherwise. */
void wt_base64_encode(const unsigned char *in, size_t n, char *out);
wt_status *wt_base64_decode(const char *in, unsigned char *out, size_t cap,
                            size_t *n, const char *what);

#ifdef __cplusplus
}
#endif

#endif /* WT_NCCL_H */
