/* init_info.c: an init info's backend (see wt/init_info.h). */

#include "wt/init_info.h"

#include <inttypes.h>

#include <string.h>

static const struct {
  Wt__V1__WeightTransferInitInfo__BackendInitCase c;
  const char *name;
} cases[] = {
    {WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_GRPC, "grpc"},
    {WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_UCX, "ucx"},
    {WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_NCCL, "nccl"},
    {WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_IPC, "ipc"},
};

const char *wt_init_info_case_backend(
    Wt__V1__WeightTransferInitInfo__BackendInitCase c) {
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    if (cases[i].c == c) return cases[i].name;
  return NULL;
}

wt_status *wt_init_info_backend(const Wt__V1__WeightTransferInitInfo *info,
                                const char **backend) {
  *backend = NULL;
  if (info == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "init_info is missing");
  const char *by_case = wt_init_info_case_backend(info->backend_init_case);
  const char *by_name = info->backend && *info->backend ? info->backend : NULL;
  if (by_name && by_case && strcmp(by_name, by_case) != 0)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "init_info.backend is '%.64s' but init_info carries "
                         "%s settings",
                         by_name, by_case);
  if (by_name == NULL && by_case == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "init_info.backend is empty");
  *backend = by_name ? by_name : by_case;
  return NULL;
}

wt_status *wt_init_info_check_ranks(const Wt__V1__WeightTransferInitInfo *info,
                                    uint32_t nworkers) {
  if (info->world_size == 0 || nworkers == 0) return NULL;
  if (info->rank_offset == 0)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "init_info.rank_offset is 0, the trainer's rank; a "
                         "server's workers start at 1 or later");
  uint64_t last = (uint64_t)info->rank_offset + nworkers - 1;
  if (last >= info->world_size)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "init_info.rank_offset %" PRIu32 " with %" PRIu32
                         " worker(s) needs ranks up to %" PRIu64
                         "; init_info.world_size %" PRIu32
                         " has ranks 0 to %" PRIu32
                         " (does the trainer know this server's world size?)",
                         info->rank_offset, nworkers, last, info->world_size,
                         info->world_size - 1);
  return NULL;
}

wt_status *wt_nccl_packing(const Wt__V1__NcclInitInfo *x,
                           uint64_t *buffer_bytes, uint32_t *num_buffers) {
  *buffer_bytes = x && x->packed_buffer_size_bytes
                      ? x->packed_buffer_size_bytes->value
                      : WT_NCCL_DEFAULT_BUFFER_BYTES;
  *num_buffers = x && x->packed_num_buffers ? x->packed_num_buffers->value
                                            : WT_NCCL_DEFAULT_NUM_BUFFERS;
  if (*buffer_bytes == 0)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "init_info.nccl.packed_buffer_size_bytes is 0");
  if (*num_buffers == 0 || *num_buffers > WT_NCCL_MAX_BUFFERS)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "init_info.nccl.packed_num_buffers is %" PRIu32
                         "; between 1 and %u",
                         *num_buffers, WT_NCCL_MAX_BUFFERS);
  return NULL;
}
