/* wt/cuda.h: the thin seam between wt and the CUDA runtime.
 *
 * Nothing in libwt_common, libwt_server or libwt_client links CUDA. The few
 * CUDA calls wt makes (device count, binding a thread, allocations, copies,
 * a device's UUID) sit in one table, wt_cuda_api, implemented by the module
 * libwt_cuda.so (common/src/cuda_module.c, built only where CMake finds the
 * CUDA runtime: WT_WITH_CUDA) and loaded with dlopen the first time wt needs
 * it. So wt-server and the client build, start and serve on a machine
 * without CUDA, and asking for CUDA memory there is an error that says why
 * ("this build has no CUDA support", "libwt_cuda.so: <dlerror>",
 * "cudaGetDeviceCount: no CUDA-capable device is detected").
 *
 * Threads: CUDA's current device is per thread. Functions that take a device
 * require the calling thread to be bound to it (set_device) and fail naming
 * both devices otherwise; wt's workers bind their one thread at start
 * (wt/worker.h), and wt/memory.h's helpers bind the calling thread before
 * they copy. Every function is thread-safe.
 *
 * Tests replace the table (wt_cuda_api_override) with one that emulates
 * devices in host memory, so that the logic above the seam (device stores,
 * bounce-buffer copies, device binding) runs without a GPU.
 */
#ifndef WT_CUDA_H
#define WT_CUDA_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "wt/status.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

#define WT_CUDA_API_VERSION 3u
/* sizeof(cudaIpcMemHandle_t). */
#define WT_CUDA_IPC_HANDLE_BYTES 64
/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" plus NUL. */
#define WT_CUDA_UUID_MAX 48

typedef struct wt_cuda_api {
  uint32_t version; /* WT_CUDA_API_VERSION */
  const char *name; /* "CUDA runtime 13.0", "fake" */
  /* Devices visible to this process. */
  wt_status *(*device_count)(int *count);
  /* Binds the calling thread to `device` (cudaSetDevice). */
  wt_status *(*set_device)(int device);
  /* The calling thread's device. */
  wt_status *(*get_device)(int *device);
  /* Device memory on `device` (the calling thread's), zeroed. */
  wt_status *(*device_alloc)(int device, size_t len, void **ptr);
  void (*device_free)(int device, void *ptr);
  /* Page-locked host memory, usable with every device (portable). */
  wt_status *(*host_alloc)(size_t len, void **ptr);
  void (*host_free)(void *ptr);
  /* Synchronous copies between host memory and device memory of `device`
   * (the calling thread's). */
  wt_status *(*copy_to_device)(int device, void *dst, const void *src,
                               size_t len);
  wt_status *(*copy_to_host)(int device, void *dst, const void *src,
                             size_t len);
  /* The device's UUID as nvidia-smi prints it. */
  wt_status *(*device_uuid)(int device, char out[WT_CUDA_UUID_MAX]);
  /* Waits until the work queued on a cudaStream_t, or up to a recorded
   * cudaEvent_t, is done (a trainer's tensors are then ready). */
  wt_status *(*stream_synchronize)(void *stream);
  wt_status *(*event_synchronize)(void *event);

  /* --- version 2: CUDA IPC and asynchronous copies (the ipc backend) --- */

  /* The allocation that holds device pointer `ptr` (cuMemGetAddressRange):
   * its base and size, and its IPC handle (cudaIpcGetMemHandle on the
   * base). INVALID_ARGUMENT when ptr is not device memory. */
  wt_status *(*ipc_export)(const void *ptr, void **base, size_t *size,
                           unsigned char handle[WT_CUDA_IPC_HANDLE_BYTES]);
  /* Maps another process's export into this one on `device` (the calling
   * thread's), peer access enabled lazily (cudaIpcOpenMemHandle). */
  wt_status *(*ipc_open)(int device,
                         const unsigned char handle[WT_CUDA_IPC_HANDLE_BYTES],
                         void **base);
  void (*ipc_close)(int device, void *base);
  /* A non-blocking stream on `device` (the calling thread's). */
  wt_status *(*stream_create)(int device, void **stream);
  void (*stream_destroy)(void *stream);
  /* Queues a copy of len bytes between any two device (or host) pointers
   * on `stream` (cudaMemcpyAsync, cudaMemcpyDefault). */
  wt_status *(*copy_async)(void *dst, const void *src, size_t len,
                           void *stream);
  /* Whether the work queued on `stream` is done (cudaStreamQuery): *done
   * false while it runs; an error the stream hit is returned. Never
   * blocks, so a caller can poll it against a deadline. */
  wt_status *(*stream_query)(void *stream, int *done);

  /* --- version 3: registered host memory (the export's consumers) --- */

  /* Page-locks host memory [ptr, ptr + len) that this process mapped, for
   * every device (cudaHostRegister, cudaHostRegisterPortable, and
   * cudaHostRegisterReadOnly when read_only: a read-only mapping, which the
   * GPU then only reads), so that copies from it run at pinned speed. */
  wt_status *(*host_register)(void *ptr, size_t len, int read_only);
  void (*host_unregister)(void *ptr);
} wt_cuda_api;

/* The process's table: the override if one is set, else the module,
 * loaded on first use. When neither is available, FAILED_PRECONDITION
 * saying why (the same status every time for a failed load). The table is
 * static and valid until the process exits (or the override is changed). */
wt_status *wt_cuda_api_get(const wt_cuda_api **out);

/* Checks that `device` exists: FAILED_PRECONDITION naming it when CUDA is
 * unavailable or the device index is not below the device count. */
wt_status *wt_cuda_check_device(int device);

/* Binds the calling thread to `device` unless it already is. */
wt_status *wt_cuda_bind(int device);

/* Polls `stream` (api->stream_query) until the work queued on it is done:
 * NULL then. DEADLINE_EXCEEDED "did not finish within T ms" once
 * timeout_ms has passed, CANCELLED "cancelled" once *cancel (may be NULL)
 * is set, or the stream's own error; the caller prefixes what it waited
 * for. Sleeps 50 us between polls. */
wt_status *wt_cuda_stream_wait(const wt_cuda_api *api, void *stream,
                               int64_t timeout_ms, const atomic_bool *cancel);

/* Replaces the table for the whole process (tests); NULL goes back to the
 * module. Not thread-safe against users of the table: set it before any
 * server or client uses CUDA. */
void wt_cuda_api_override(const wt_cuda_api *api);

/* What the module exports, under the symbol "wt_cuda_module_api". */
typedef const wt_cuda_api *(*wt_cuda_module_fn)(void);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_CUDA_H */
