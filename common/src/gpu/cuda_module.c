/* cuda_module.c: libwt_cuda.so, the CUDA runtime behind wt/cuda.h. Built
 * only with WT_WITH_CUDA; loaded by cuda_loader.c on first use. Each entry
 * is one CUDA call and its error in words. */

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "wt/cuda.h"

static wt_status *cuda_error(cudaError_t err, const char *call) {
  return wt_status_new(
      err == cudaErrorMemoryAllocation ? WT_RESOURCE_EXHAUSTED
                                       : WT_FAILED_PRECONDITION,
      "%s: %s (%s)", call, cudaGetErrorString(err), cudaGetErrorName(err));
}

/* The calling thread must be bound to `device` (wt/cuda.h). */
static wt_status *check_bound(int device, const char *call) {
  int cur = -1;
  cudaError_t err = cudaGetDevice(&cur);
  if (err != cudaSuccess) return cuda_error(err, "cudaGetDevice");
  if (cur != device)
    return wt_status_new(WT_INTERNAL,
                         "%s for cuda:%d on a thread bound to cuda:%d", call,
                         device, cur);
  return NULL;
}

static wt_status *m_device_count(int *count) {
  cudaError_t err = cudaGetDeviceCount(count);
  if (err != cudaSuccess) {
    *count = 0;
    return cuda_error(err, "cudaGetDeviceCount");
  }
  return NULL;
}

static wt_status *m_set_device(int device) {
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) return cuda_error(err, "cudaSetDevice");
  return NULL;
}

static wt_status *m_get_device(int *device) {
  cudaError_t err = cudaGetDevice(device);
  if (err != cudaSuccess) return cuda_error(err, "cudaGetDevice");
  return NULL;
}

static wt_status *m_device_alloc(int device, size_t len, void **ptr) {
  wt_status *st = check_bound(device, "cudaMalloc");
  if (st != NULL) return st;
  cudaError_t err = cudaMalloc(ptr, len);
  if (err != cudaSuccess) return cuda_error(err, "cudaMalloc");
  err = cudaMemset(*ptr, 0, len);
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    cudaFree(*ptr);
    *ptr = NULL;
    return cuda_error(err, "cudaMemset");
  }
  return NULL;
}

static void m_device_free(int device, void *ptr) {
  (void)device;
  if (ptr != NULL) cudaFree(ptr);
}

static wt_status *m_host_alloc(size_t len, void **ptr) {
  cudaError_t err = cudaHostAlloc(ptr, len, cudaHostAllocPortable);
  if (err != cudaSuccess) return cuda_error(err, "cudaHostAlloc");
  memset(*ptr, 0, len);
  return NULL;
}

static void m_host_free(void *ptr) {
  if (ptr != NULL) cudaFreeHost(ptr);
}

static wt_status *m_copy_to_device(int device, void *dst, const void *src,
                                   size_t len) {
  wt_status *st = check_bound(device, "cudaMemcpy host to device");
  if (st != NULL) return st;
  cudaError_t err = cudaMemcpy(dst, src, len, cudaMemcpyHostToDevice);
  if (err != cudaSuccess) return cuda_error(err, "cudaMemcpy host to device");
  return NULL;
}

static wt_status *m_copy_to_host(int device, void *dst, const void *src,
                                 size_t len) {
  wt_status *st = check_bound(device, "cudaMemcpy device to host");
  if (st != NULL) return st;
  cudaError_t err = cudaMemcpy(dst, src, len, cudaMemcpyDeviceToHost);
  if (err != cudaSuccess) return cuda_error(err, "cudaMemcpy device to host");
  return NULL;
}

static wt_status *m_device_uuid(int device, char out[WT_CUDA_UUID_MAX]) {
  struct cudaDeviceProp prop;
  cudaError_t err = cudaGetDeviceProperties(&prop, device);
  if (err != cudaSuccess) return cuda_error(err, "cudaGetDeviceProperties");
  const unsigned char *u = (const unsigned char *)prop.uuid.bytes;
  snprintf(out, WT_CUDA_UUID_MAX,
           "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x"
           "%02x%02x",
           u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10],
           u[11], u[12], u[13], u[14], u[15]);
  return NULL;
}

static wt_status *m_stream_synchronize(void *stream) {
  cudaError_t err = cudaStreamSynchronize((cudaStream_t)stream);
  if (err != cudaSuccess) return cuda_error(err, "cudaStreamSynchronize");
  return NULL;
}

static wt_status *m_event_synchronize(void *event) {
  cudaError_t err = cudaEventSynchronize((cudaEvent_t)event);
  if (err != cudaSuccess) return cuda_error(err, "cudaEventSynchronize");
  return NULL;
}

/* cuMemGetAddressRange through cudart's driver entry point, so that the
 * module links the runtime only. */
typedef int (*mem_range_fn)(unsigned long long *base, size_t *size,
                            unsigned long long ptr);

static wt_status *m_ipc_export(const void *ptr, void **base, size_t *size,
                               unsigned char handle[WT_CUDA_IPC_HANDLE_BYTES]) {
  static mem_range_fn range = NULL;
  if (range == NULL) {
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q;
    cudaError_t err = cudaGetDriverEntryPointByVersion(
        "cuMemGetAddressRange", &fn, 12000, cudaEnableDefault, &q);
    if (err != cudaSuccess || fn == NULL || q != cudaDriverEntryPointSuccess)
      return wt_status_new(WT_FAILED_PRECONDITION,
                           "cuMemGetAddressRange: not available from this "
                           "driver (%s)",
                           cudaGetErrorString(err));
    range = (mem_range_fn)fn;
  }
  unsigned long long b = 0;
  size_t n = 0;
  if (range(&b, &n, (unsigned long long)(uintptr_t)ptr) != 0)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "cuMemGetAddressRange(%p): not device memory of "
                         "this process",
                         ptr);
  cudaIpcMemHandle_t h;
  cudaError_t err = cudaIpcGetMemHandle(&h, (void *)(uintptr_t)b);
  if (err != cudaSuccess) return cuda_error(err, "cudaIpcGetMemHandle");
  memcpy(handle, &h, WT_CUDA_IPC_HANDLE_BYTES);
  *base = (void *)(uintptr_t)b;
  *size = n;
  return NULL;
}

static wt_status *m_ipc_open(
    int device, const unsigned char handle[WT_CUDA_IPC_HANDLE_BYTES],
    void **base) {
  wt_status *st = check_bound(device, "cudaIpcOpenMemHandle");
  if (st != NULL) return st;
  cudaIpcMemHandle_t h;
  memcpy(&h, handle, WT_CUDA_IPC_HANDLE_BYTES);
  cudaError_t err =
      cudaIpcOpenMemHandle(base, h, cudaIpcMemLazyEnablePeerAccess);
  if (err != cudaSuccess) return cuda_error(err, "cudaIpcOpenMemHandle");
  return NULL;
}

static void m_ipc_close(int device, void *base) {
  (void)device;
  if (base != NULL) cudaIpcCloseMemHandle(base);
}

static wt_status *m_stream_create(int device, void **stream) {
  wt_status *st = check_bound(device, "cudaStreamCreateWithFlags");
  if (st != NULL) return st;
  cudaStream_t s = NULL;
  cudaError_t err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (err != cudaSuccess) return cuda_error(err, "cudaStreamCreateWithFlags");
  *stream = s;
  return NULL;
}

static void m_stream_destroy(void *stream) {
  if (stream != NULL) cudaStreamDestroy((cudaStream_t)stream);
}

static wt_status *m_copy_async(void *dst, const void *src, size_t len,
                               void *stream) {
  cudaError_t err =
      cudaMemcpyAsync(dst, src, len, cudaMemcpyDefault, (cudaStream_t)stream);
  if (err != cudaSuccess) return cuda_error(err, "cudaMemcpyAsync");
  return NULL;
}

static wt_status *m_stream_query(void *stream, int *done) {
  cudaError_t err = cudaStreamQuery((cudaStream_t)stream);
  *done = err == cudaSuccess;
  if (err == cudaSuccess || err == cudaErrorNotReady) return NULL;
  return cuda_error(err, "cudaStreamQuery");
}

static wt_status *m_host_register(void *ptr, size_t len, int read_only) {
  unsigned flags = cudaHostRegisterPortable;
  if (read_only) flags |= cudaHostRegisterReadOnly;
  cudaError_t err = cudaHostRegister(ptr, len, flags);
  if (err != cudaSuccess) return cuda_error(err, "cudaHostRegister");
  return NULL;
}

static void m_host_unregister(void *ptr) {
  if (ptr != NULL) cudaHostUnregister(ptr);
}

static char name[64];

static const wt_cuda_api api = {
    .version = WT_CUDA_API_VERSION,
    .name = name,
    .device_count = m_device_count,
    .set_device = m_set_device,
    .get_device = m_get_device,
    .device_alloc = m_device_alloc,
    .device_free = m_device_free,
    .host_alloc = m_host_alloc,
    .host_free = m_host_free,
    .copy_to_device = m_copy_to_device,
    .copy_to_host = m_copy_to_host,
    .device_uuid = m_device_uuid,
    .stream_synchronize = m_stream_synchronize,
    .event_synchronize = m_event_synchronize,
    .ipc_export = m_ipc_export,
    .ipc_open = m_ipc_open,
    .ipc_close = m_ipc_close,
    .stream_create = m_stream_create,
    .stream_destroy = m_stream_destroy,
    .copy_async = m_copy_async,
    .stream_query = m_stream_query,
    .host_register = m_host_register,
    .host_unregister = m_host_unregister,
};

/* Exported for cuda_loader.c (declared here for -Wmissing-declarations). */
const wt_cuda_api *wt_cuda_module_api(void);

const wt_cuda_api *wt_cuda_module_api(void) {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) v = CUDART_VERSION;
  snprintf(name, sizeof(name), "CUDA runtime %d.%d", v / 1000, v % 1000 / 10);
  return &api;
}
