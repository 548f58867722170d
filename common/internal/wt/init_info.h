/* wt/init_info.h: the one rule that ties an init info to its backend, for
 * the client and the server alike.
 *
 * A WeightTransferInitInfo names its backend in `backend`, or by the case of
 * its `backend_init` oneof (grpc, ucx, nccl, ipc), or both; when both are
 * given they must agree. A backend without a oneof message of its own (one
 * added as a plugin) is named by `backend` alone.
 */
#ifndef WT_INIT_INFO_H
#define WT_INIT_INFO_H

#include "wt/status.h"
#include "wt/v1/wt.pb-c.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* The backend the oneof case stands for ("grpc", ...), NULL for none. */
const char *wt_init_info_case_backend(
    Wt__V1__WeightTransferInitInfo__BackendInitCase c);

/* Sets *backend to the backend `info` names (a string owned by `info` or
 * static). INVALID_ARGUMENT when info is NULL ("init_info is missing"),
 * names none ("init_info.backend is empty"), or names two
 * ("init_info.backend is 'grpc' but init_info carries nccl settings"). */
wt_status *wt_init_info_backend(const Wt__V1__WeightTransferInitInfo *info,
                                const char **backend);

/* The ranks of a server's `nworkers` workers (rank_offset ..
 * rank_offset + nworkers - 1) lie in the init's world (world_size; 0
 * leaves the ranks unsaid, and passes): INVALID_ARGUMENT naming both
 * fields otherwise, and for a rank_offset of 0 (the trainer's). Every
 * server checks it at init, whatever the backend. */
wt_status *wt_init_info_check_ranks(const Wt__V1__WeightTransferInitInfo *info,
                                    uint32_t nworkers);

/* The nccl backend's packing: vLLM's defaults
 * (DEFAULT_PACKED_BUFFER_SIZE_BYTES, _NUM_BUFFERS). */
#define WT_NCCL_DEFAULT_BUFFER_BYTES (1ull << 30)
#define WT_NCCL_DEFAULT_NUM_BUFFERS 2u
/* At most this many buffers (and streams) in flight. */
#define WT_NCCL_MAX_BUFFERS 16u

/* The packing settings of init_info.nccl (x may be NULL: the defaults),
 * read alike by the nccl backend's two halves and the vLLM control plane:
 * packed_buffer_size_bytes (unset: 1 GiB; 0 refused) and
 * packed_num_buffers (unset: 2; 1 to WT_NCCL_MAX_BUFFERS).
 * INVALID_ARGUMENT naming the field. */
wt_status *wt_nccl_packing(const Wt__V1__NcclInitInfo *x,
                           uint64_t *buffer_bytes, uint32_t *num_buffers);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_INIT_INFO_H */
