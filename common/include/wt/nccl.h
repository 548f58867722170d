/* wt/nccl.h: which NCCL the process loads (libwt_common).
 *
 * The `nccl` backend reaches NCCL through a module loaded on first use
 * (the private wt/nccl_seam.h); a program (the Python package's nccl
 * trainer engine, say) may choose the library it binds to, and the
 * version its peers run, before the first nccl engine starts. Owned by
 * libwt_common; it returns a status the caller frees (wt/status.h). */
#ifndef WT_NCCL_H
#define WT_NCCL_H

#include "wt/status.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* Chooses the process's NCCL, before the first nccl engine runs: `library`
 * (a path to a libnccl.so.2, say the nvidia-nccl wheel's that vLLM runs;
 * NULL or "": the one the module was linked with) is loaded first, so the
 * module binds to it; a second, different path is FAILED_PRECONDITION
 * naming both (one NCCL per process). With `expect_version`
 * ("MAJOR.MINOR.PATCH", the peers' NCCL), the loaded NCCL's version must
 * be that one: NCCL refuses a peer of another version at init, so the
 * mismatch is FAILED_PRECONDITION naming both versions, before any
 * collective. NULL: no check. A version not of that form is
 * INVALID_ARGUMENT; checking one where NCCL's module does not load (wt
 * built without NCCL, no NCCL here) is FAILED_PRECONDITION saying why. */
wt_status *wt_nccl_select(const char *library, const char *expect_version);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_NCCL_H */
