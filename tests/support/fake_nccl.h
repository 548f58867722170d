/* fake_nccl.h: a wt_nccl_api (wt/nccl_seam.h) that emulates NCCL communicators
 * between threads of one process, on the emulated GPU (fake_cuda.h), so
 * that the nccl backend's logic (rendezvous, warm-up, broadcasts, deadlines,
 * aborts) runs without a GPU.
 *
 * A communicator is the set of ranks that called comm_init with the same
 * unique id; its init is pending until all `nranks` have joined. A
 * collective is matched across ranks by its order (the k-th call of every
 * rank); it runs once the last rank has posted it, and until then each
 * rank's stream reports it not done (fake_cuda_stream_busy). A rank that
 * aborts breaks the communicator: every other rank's comm_state then
 * reports a remote error, as NCCL's does when a peer is gone, while its
 * collectives stay queued (their streams busy) until it aborts too. A rank
 * that gives up during the init leaves the others pending (waiting for
 * rank 0, as NCCL's bootstrap does) until their own deadlines. */
#ifndef WT_TEST_FAKE_NCCL_H
#define WT_TEST_FAKE_NCCL_H

#include <stdint.h>

#include "backends/nccl/nccl_shared.h"

typedef struct fake_nccl_stats {
  uint64_t inits, aborts, destroys;
  uint64_t broadcasts, broadcast_bytes; /* collectives that ran, per rank */
  uint64_t all_reduces;
  int64_t comms_now; /* made and not yet aborted or destroyed */
} fake_nccl_stats;

/* Installs the fake for the whole process (wt_nccl_api_override) and zeroes
 * its counters. */
void fake_nccl_install(void);
/* Back to the module (every communicator must be gone by then). */
void fake_nccl_uninstall(void);
fake_nccl_stats fake_nccl_get_stats(void);
/* What version_code (ncclGetVersion) answers; 0 by default. */
void fake_nccl_set_version(int code);

#endif
