/* test_memory.c: memory kinds and devices (common/memory.c): names and
 * parsing, host and shared (memfd) regions, CUDA's kinds where CUDA is
 * missing, and device memory on emulated GPUs (support/fake_cuda.h), whose
 * copies go through the pinned bounce buffer in chunks. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "support/fake_cuda.h"
#include "wt/checksum.h"
#include "wt/cuda.h"
#include "wt/memory.h"
#include "wt_test.h"

static void test_names_and_parsing(void) {
  CU_ASSERT_STRING_EQUAL(wt_mem_kind_name(WT_MEM_HOST), "host");
  CU_ASSERT_STRING_EQUAL(wt_mem_kind_name(WT_MEM_SHARED), "shared");
  CU_ASSERT_STRING_EQUAL(wt_mem_kind_name(WT_MEM_PINNED), "pinned");
  CU_ASSERT_STRING_EQUAL(wt_mem_kind_name(WT_MEM_DEVICE), "device");
  CU_ASSERT_STRING_EQUAL(wt_mem_kind_name((wt_mem_kind)9), "unknown");
  wt_mem_kind k = WT_MEM_HOST;
  WT_ASSERT_OK(wt_mem_kind_parse("Shared", &k));
  CU_ASSERT_EQUAL(k, WT_MEM_SHARED);
  WT_ASSERT_ERR(wt_mem_kind_parse("hbm", &k), WT_INVALID_ARGUMENT,
                "memory kind 'hbm' is not one of: host, shared, pinned, "
                "device");
  CU_ASSERT_TRUE(wt_mem_kind_host_addressable(WT_MEM_PINNED));
  CU_ASSERT_FALSE(wt_mem_kind_host_addressable(WT_MEM_DEVICE));
  char buf[64];
  CU_ASSERT_STRING_EQUAL(wt_mem_kinds_format(WT_MEM_HOST_KINDS, buf, 64),
                         "host, shared, pinned");
  CU_ASSERT_STRING_EQUAL(wt_mem_kinds_format(0, buf, 64), "(none)");

  wt_device d;
  char name[WT_DEVICE_NAME_MAX];
  WT_ASSERT_OK(wt_device_parse("cpu", &d));
  CU_ASSERT_EQUAL(d.type, WT_DEVICE_CPU);
  WT_ASSERT_OK(wt_device_parse("cuda:12", &d));
  CU_ASSERT_EQUAL(d.type, WT_DEVICE_CUDA);
  CU_ASSERT_EQUAL(d.index, 12);
  CU_ASSERT_STRING_EQUAL(wt_device_format(d, name), "cuda:12");
  const char *bad[] = {"cuda:",     "cuda:-1", "cuda:01", "gpu0",
                       "cuda:1024", "cuda:1x", "CPU",     ""};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    WT_ASSERT_ERR(wt_device_parse(bad[i], &d), WT_INVALID_ARGUMENT,
                  "is neither 'cpu' nor 'cuda:N'");
  wt_device *list = NULL;
  size_t n = 0;
  WT_ASSERT_OK(wt_device_list_parse("cuda:0,cuda:1,cpu", &list, &n));
  CU_ASSERT_EQUAL_FATAL(n, 3);
  CU_ASSERT_EQUAL(list[1].index, 1);
  CU_ASSERT_EQUAL(list[2].type, WT_DEVICE_CPU);
  free(list);
  WT_ASSERT_ERR(wt_device_list_parse("cuda:0,cuda:0", &list, &n),
                WT_INVALID_ARGUMENT, "names cuda:0 twice");
  WT_ASSERT_ERR(wt_device_list_parse(",", &list, &n), WT_INVALID_ARGUMENT,
                "names no device");
  WT_ASSERT_ERR(wt_device_list_parse("cuda:0,tpu:1", &list, &n),
                WT_INVALID_ARGUMENT, "device 'tpu:1'");
}

static wt_status *fill_pattern(void *arg, uint64_t pos, void *buf, size_t len) {
  unsigned char *b = buf;
  uint64_t base = *(uint64_t *)arg;
  for (size_t i = 0; i < len; i++) b[i] = (unsigned char)((base + pos + i) * 7);
  return NULL;
}

static wt_status *hash_visit(void *arg, uint64_t pos, const void *buf,
                             size_t len) {
  wt_hasher_update(arg, buf, len);
  return NULL;
}

/* Writes a pattern into `r` through the kind, reads it back, and compares
 * the region's digest (wt_mem_visit) with the pattern's. */
static void roundtrip(const wt_mem_region *r, size_t off, size_t len) {
  uint64_t seed = 3;
  unsigned char *want = malloc(len), *got = malloc(len);
  CU_ASSERT_PTR_NOT_NULL_FATAL(want);
  fill_pattern(&seed, 0, want, len);
  WT_ASSERT_OK(wt_mem_fill(r, off, len, fill_pattern, &seed, NULL));
  WT_ASSERT_OK(wt_mem_read(r, off, got, len, NULL));
  CU_ASSERT_EQUAL(memcmp(want, got, len), 0);
  char a[WT_DIGEST_HEX_MAX], b[WT_DIGEST_HEX_MAX];
  wt_hasher *h = NULL;
  WT_ASSERT_OK(wt_hasher_new(WT_HASH_XXH3_64, &h));
  WT_ASSERT_OK(wt_mem_visit(r, off, len, hash_visit, h, NULL));
  wt_hasher_final_hex(h, a);
  wt_hasher_free(h);
  WT_ASSERT_OK(wt_digest_hex(WT_HASH_XXH3_64, want, len, b));
  CU_ASSERT_STRING_EQUAL(a, b);
  memset(got, 0, len);
  WT_ASSERT_OK(wt_mem_write(r, off, want, len, NULL));
  WT_ASSERT_OK(wt_mem_read(r, off, got, len, NULL));
  CU_ASSERT_EQUAL(memcmp(want, got, len), 0);
  WT_ASSERT_ERR(wt_mem_read(r, r->len - 1, got, 2, NULL), WT_OUT_OF_RANGE,
                "outside a");
  free(want);
  free(got);
}

static void test_host_and_shared(void) {
  const wt_device cpu = WT_DEVICE_CPU_INIT;
  wt_mem_region r;
  WT_ASSERT_OK(wt_mem_alloc(WT_MEM_HOST, cpu, 1 << 20, "t", &r));
  CU_ASSERT_PTR_NOT_NULL(r.base);
  CU_ASSERT_EQUAL(r.fd, -1);
  CU_ASSERT_EQUAL(((unsigned char *)r.base)[12345], 0); /* zeroed */
  roundtrip(&r, 100, 500000);
  wt_mem_free(&r);
  CU_ASSERT_PTR_NULL(r.base);
  wt_mem_free(&r); /* twice is harmless */

  WT_ASSERT_OK(wt_mem_alloc(WT_MEM_SHARED, cpu, 3 << 20, "t-shared", &r));
  CU_ASSERT_FATAL(r.fd >= 0);
  roundtrip(&r, 4096, 2 << 20);
  /* Sealed at its size: a process that maps it can trust its length. */
  int seals = fcntl(r.fd, F_GET_SEALS);
  CU_ASSERT(seals & F_SEAL_GROW);
  CU_ASSERT(seals & F_SEAL_SHRINK);
  CU_ASSERT_NOT_EQUAL(ftruncate(r.fd, 1), 0);
  /* A read-only open of it maps read-only, and sees the bytes. */
  char path[64];
  snprintf(path, sizeof(path), "/proc/self/fd/%d", r.fd);
  int ro = open(path, O_RDONLY | O_CLOEXEC);
  CU_ASSERT_FATAL(ro >= 0);
  const unsigned char *view = mmap(NULL, r.len, PROT_READ, MAP_SHARED, ro, 0);
  CU_ASSERT_FATAL(view != MAP_FAILED);
  CU_ASSERT_EQUAL(memcmp(view + 4096, (unsigned char *)r.base + 4096, 1 << 20),
                  0);
  CU_ASSERT_EQUAL(mmap(NULL, r.len, PROT_READ | PROT_WRITE, MAP_SHARED, ro, 0),
                  MAP_FAILED);
  CU_ASSERT_EQUAL(errno, EACCES);
  munmap((void *)view, r.len);
  close(ro);
  /* Nor can a reopen for writing (as the same user could make through
   * /proc) map it writable or write it: sealed against future writes,
   * while the owner's own mapping keeps writing. */
  CU_ASSERT(seals & F_SEAL_FUTURE_WRITE);
  int rw = open(path, O_RDWR | O_CLOEXEC);
  CU_ASSERT_FATAL(rw >= 0);
  CU_ASSERT_EQUAL(mmap(NULL, r.len, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0),
                  MAP_FAILED);
  CU_ASSERT_EQUAL(errno, EPERM);
  CU_ASSERT_EQUAL(pwrite(rw, "x", 1, 0), -1);
  CU_ASSERT_EQUAL(errno, EPERM);
  close(rw);
  roundtrip(&r, 8192, 1 << 20);
  wt_mem_free(&r);
  CU_ASSERT_EQUAL(r.fd, -1);

  /* Zero bytes: no memory at all. */
  WT_ASSERT_OK(wt_mem_alloc(WT_MEM_SHARED, cpu, 0, "empty", &r));
  CU_ASSERT_PTR_NULL(r.base);
  wt_mem_free(&r);
  /* Host kinds live on the host. */
  wt_device gpu = {WT_DEVICE_CUDA, 0};
  WT_ASSERT_ERR(wt_mem_kind_available(WT_MEM_HOST, gpu), WT_INVALID_ARGUMENT,
                "memory kind 'host' lives on the host, not on cuda:0");
  WT_ASSERT_ERR(wt_mem_kind_available(WT_MEM_DEVICE, cpu), WT_INVALID_ARGUMENT,
                "needs a GPU device (cuda:N), not cpu");
}

/* CUDA's kinds without a usable GPU: a clear error naming the kind and
 * why, never a crash. (Where a GPU answers, the gpu suite covers them.) */
static void test_cuda_kinds_unavailable(void) {
  const wt_device cpu = WT_DEVICE_CPU_INIT;
  const wt_device gpu = {WT_DEVICE_CUDA, 0};
  wt_status *st = wt_mem_kind_available(WT_MEM_PINNED, cpu);
  if (st == NULL) {
    wt_test_skip("CUDA kinds unavailable",
                 "a CUDA device answers here; the gpu suite tests them");
    return;
  }
  fprintf(stdout, "\n  pinned memory here: %s\n", wt_status_message(st));
  CU_ASSERT_EQUAL(wt_status_code(st), WT_FAILED_PRECONDITION);
  CU_ASSERT_PTR_NOT_NULL(strstr(wt_status_message(st),
                                "memory kind 'pinned' on cpu is "
                                "unavailable"));
  CU_ASSERT_PTR_NOT_NULL(strstr(wt_status_message(st), "CUDA"));
  wt_status_free(st);
  WT_ASSERT_ERR(wt_mem_kind_available(WT_MEM_DEVICE, gpu),
                WT_FAILED_PRECONDITION,
                "memory kind 'device' on cuda:0 is unavailable: device "
                "'cuda:0'");
  wt_mem_region r;
  st = wt_mem_alloc(WT_MEM_DEVICE, gpu, 4096, "no-gpu", &r);
  CU_ASSERT_PTR_NOT_NULL(st);
  CU_ASSERT_PTR_NULL(r.base);
  wt_status_free(st);
  wt_mem_bounce b;
  st = wt_mem_bounce_init(&b, 4096);
  CU_ASSERT_PTR_NOT_NULL(st);
  CU_ASSERT_PTR_NOT_NULL(strstr(wt_status_message(st), "pinned bounce"));
  wt_status_free(st);
}

/* Device memory on emulated GPUs: the CPU never touches it (it is mapped
 * PROT_NONE), every copy goes through the pinned bounce buffer in chunks of
 * its size, and copies bind the calling thread first. */
static void test_device_through_bounce(void) {
  fake_cuda_install(2);
  const wt_device g1 = {WT_DEVICE_CUDA, 1};
  WT_ASSERT_OK(wt_mem_kind_available(WT_MEM_DEVICE, g1));
  WT_ASSERT_ERR(
      wt_mem_kind_available(WT_MEM_DEVICE, (wt_device){WT_DEVICE_CUDA, 5}),
      WT_FAILED_PRECONDITION,
      "device 'cuda:5' does not exist: 2 CUDA device(s) visible");
  wt_mem_region r;
  size_t len = 20u << 20;
  WT_ASSERT_OK(wt_mem_alloc(WT_MEM_DEVICE, g1, len, "dev", &r));
  CU_ASSERT_EQUAL(fake_cuda_get_stats().device_bytes[1], len);
  CU_ASSERT_EQUAL(fake_cuda_current(), 1); /* the allocation bound us */
  fake_cuda_stats before = fake_cuda_get_stats();
  roundtrip(&r, 1000, len - 2000);
  fake_cuda_stats after = fake_cuda_get_stats();
  /* 20 MiB in chunks of the 8 MiB bounce buffer. */
  CU_ASSERT(after.copies_in - before.copies_in >= 3);
  CU_ASSERT(after.largest_copy <= WT_MEM_BOUNCE_BYTES);
  CU_ASSERT_EQUAL(after.binding_errors, 0);
  CU_ASSERT_EQUAL(after.host_bytes, 0); /* every bounce buffer freed */

  /* A caller's own bounce buffer, of another size. */
  wt_mem_bounce b;
  WT_ASSERT_OK(wt_mem_bounce_init(&b, 1 << 20));
  unsigned char *buf = malloc(3 << 20);
  memset(buf, 0x5a, 3 << 20);
  uint64_t in0 = fake_cuda_get_stats().copies_in;
  WT_ASSERT_OK(wt_mem_write(&r, 0, buf, 3 << 20, &b));
  CU_ASSERT_EQUAL(fake_cuda_get_stats().copies_in - in0, 3);
  memset(buf, 0, 3 << 20);
  WT_ASSERT_OK(wt_mem_read(&r, 1 << 20, buf, 1 << 20, &b));
  CU_ASSERT_EQUAL(buf[0], 0x5a);
  CU_ASSERT_EQUAL(buf[(1 << 20) - 1], 0x5a);
  /* A device pointer copied to the host, from a thread bound elsewhere. */
  WT_ASSERT_OK(wt_cuda_bind(0));
  unsigned char one = 0;
  WT_ASSERT_OK(wt_mem_copy_to_host(WT_MEM_DEVICE, g1, &one,
                                   (unsigned char *)r.base + 7, 1));
  CU_ASSERT_EQUAL(one, 0x5a);
  wt_mem_bounce_free(&b);
  free(buf);
  wt_mem_free(&r);
  CU_ASSERT_EQUAL(fake_cuda_get_stats().device_bytes[1], 0);

  /* Pinned memory is host memory: no copies through CUDA. */
  WT_ASSERT_OK(wt_mem_alloc(WT_MEM_PINNED, (wt_device)WT_DEVICE_CPU_INIT,
                            1 << 16, "pinned", &r));
  uint64_t copies = fake_cuda_get_stats().copies_in;
  roundtrip(&r, 0, 1 << 16);
  CU_ASSERT_EQUAL(fake_cuda_get_stats().copies_in, copies);
  wt_mem_free(&r);
  CU_ASSERT_EQUAL(fake_cuda_get_stats().host_bytes, 0);
  fake_cuda_uninstall();
}

void wt_test_suite_memory(void);
void wt_test_suite_memory(void) {
  CU_pSuite s = CU_add_suite("memory", NULL, NULL);
  CU_add_test(s, "kind and device names", test_names_and_parsing);
  CU_add_test(s, "host and shared (memfd) regions", test_host_and_shared);
  CU_add_test(s, "pinned and device memory without a GPU",
              test_cuda_kinds_unavailable);
  CU_add_test(s, "device memory through the bounce buffer (emulated GPUs)",
              test_device_through_bounce);
}
