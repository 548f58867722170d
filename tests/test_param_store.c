/* test_param_store.c: a worker's parameters, shadow and inplace staging, in
 * every memory kind (device memory on an emulated GPU), and a shared store
 * read by a second process. */
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/fake_cuda.h"
#include "support/fixture.h"
#include "wt/checksum.h"
#include "wt/cuda.h"
#include "wt/param_store.h"
#include "wt/safetensors.h"
#include "wt/synthetic.h"
#include "wt_test.h"

/* tiny's tensors by index (see synthetic.c). */
enum { EMBED = 0, LN1 = 1, Q = 2, DOWN = 3, LN2 = 4, NORM = 5, HEAD = 6 };

/* The memory the scenarios below run in (host by default). */
static wt_mem_kind kind = WT_MEM_HOST;
static wt_device device = WT_DEVICE_CPU_INIT;

static wt_param_store *tiny(wt_staging staging) {
  wt_param_store *s = NULL;
  wt_store_config c = {
      .staging = staging, .memory = kind, .device = device, .name = "t"};
  WT_ASSERT_OK(wt_param_store_from_synthetic("tiny", 0, &c, &s));
  CU_ASSERT_EQUAL(wt_param_store_memory(s), kind);
  return s;
}

/* Whether tensor i's committed bytes are the synthetic fill for `seed`. */
static int holds(wt_param_store *s, size_t i, uint64_t seed) {
  const wt_tensor_meta *m = wt_param_store_meta(s, i);
  unsigned char *want = malloc(m->nbytes), *got = malloc(m->nbytes);
  wt_synthetic_fill(m, seed, 0, want, m->nbytes);
  wt_status *st = wt_param_store_read(s, i, 0, got, m->nbytes);
  int same = st == NULL && memcmp(want, got, m->nbytes) == 0;
  wt_status_free(st);
  free(want);
  free(got);
  return same;
}

/* Writes tensor i's contents for `seed` into its staging buffer, whole (or
 * only the first half when `half`). */
static void stage(wt_param_store *s, size_t i, uint64_t seed, int half) {
  const wt_tensor_meta *m = wt_param_store_meta(s, i);
  CU_ASSERT_PTR_NOT_NULL_FATAL(wt_param_store_stage(s, i));
  size_t len = half ? m->nbytes / 2 : m->nbytes;
  unsigned char *src = malloc(m->nbytes);
  wt_synthetic_fill(m, seed, 0, src, len);
  /* Through the store: device memory is not the CPU's to write. */
  WT_ASSERT_OK(wt_param_store_stage_write(s, i, 0, src, len));
  free(src);
  if (!half) wt_param_store_staged(s, i);
}

static void test_layout(void) {
  wt_param_store *s = tiny(WT_STAGING_SHADOW);
  CU_ASSERT_EQUAL(wt_param_store_count(s), 7);
  CU_ASSERT_EQUAL(wt_param_store_total_bytes(s), 6080);
  CU_ASSERT_EQUAL(wt_param_store_staging(s), WT_STAGING_SHADOW);
  size_t idx = 99;
  WT_ASSERT_OK(wt_param_store_find(s, "model.norm.weight", &idx));
  CU_ASSERT_EQUAL(idx, NORM);
  CU_ASSERT_STRING_EQUAL(wt_param_store_meta(s, idx)->name,
                         "model.norm.weight");
  WT_ASSERT_ERR(wt_param_store_find(s, "model.nope", &idx), WT_NOT_FOUND,
                "parameter 'model.nope' is not in the model");
  CU_ASSERT_PTR_NULL(wt_param_store_meta(s, 7));
  for (size_t i = 0; i < 7; i++) CU_ASSERT(holds(s, i, 0));
  CU_ASSERT(wt_param_store_complete(s));
  wt_param_store_destroy(s);
}

static void test_new_rejects_duplicates(void) {
  wt_tensor_meta m[2] = {0};
  int64_t shape[1] = {4};
  WT_ASSERT_OK(wt_tensor_meta_init(&m[0], "w", WT_DTYPE_FLOAT32, shape, 1));
  WT_ASSERT_OK(wt_tensor_meta_init(&m[1], "w", WT_DTYPE_FLOAT32, shape, 1));
  wt_param_store *s = NULL;
  WT_ASSERT_ERR(wt_param_store_new(
                    m, 2, &(wt_store_config){.staging = WT_STAGING_SHADOW}, &s),
                WT_INVALID_ARGUMENT, "parameter 'w' appears twice");
  CU_ASSERT_PTR_NULL(s);
  wt_tensor_meta_clear(&m[0]);
  wt_tensor_meta_clear(&m[1]);
}

/* Sizes that sum (or round up to the alignment) past 64 bits must be an
 * error, not a wrapped, tiny mapping the tensors' bytes would overrun. */
static void test_new_rejects_size_overflow(void) {
  wt_tensor_meta m[2] = {0};
  int64_t half[2] = {INT64_C(1) << 62, 2}; /* 2^63 bytes of uint8 */
  WT_ASSERT_OK(wt_tensor_meta_init(&m[0], "a", WT_DTYPE_UINT8, half, 2));
  WT_ASSERT_OK(wt_tensor_meta_init(&m[1], "b", WT_DTYPE_UINT8, half, 2));
  wt_param_store *s = NULL;
  WT_ASSERT_ERR(
      wt_param_store_new(m, 2,
                         &(wt_store_config){.staging = WT_STAGING_INPLACE}, &s),
      WT_INVALID_ARGUMENT,
      "parameter 'b' (9223372036854775808 bytes): the model's size "
      "overflows 64 bits");
  CU_ASSERT_PTR_NULL(s);
  wt_tensor_meta_clear(&m[0]);
  wt_tensor_meta_clear(&m[1]);

  int64_t almost[2] = {INT64_MAX, 2}; /* 2^64 - 2 bytes: its padding wraps */
  WT_ASSERT_OK(wt_tensor_meta_init(&m[0], "c", WT_DTYPE_UINT8, almost, 2));
  WT_ASSERT_ERR(
      wt_param_store_new(m, 1,
                         &(wt_store_config){.staging = WT_STAGING_INPLACE}, &s),
      WT_INVALID_ARGUMENT,
      "parameter 'c' (18446744073709551614 bytes): the model's size "
      "overflows 64 bits");
  CU_ASSERT_PTR_NULL(s);
  wt_tensor_meta_clear(&m[0]);
}

static void test_staging_names(void) {
  wt_staging st = WT_STAGING_SHADOW;
  WT_ASSERT_OK(wt_staging_parse("inplace", &st));
  CU_ASSERT_EQUAL(st, WT_STAGING_INPLACE);
  WT_ASSERT_OK(wt_staging_parse("shadow", &st));
  CU_ASSERT_EQUAL(st, WT_STAGING_SHADOW);
  CU_ASSERT_STRING_EQUAL(wt_staging_name(WT_STAGING_INPLACE), "inplace");
  WT_ASSERT_ERR(wt_staging_parse("double", &st), WT_INVALID_ARGUMENT,
                "staging 'double' is not one of: shadow, inplace");
}

static void test_shadow_commit_flips(void) {
  wt_param_store *s = tiny(WT_STAGING_SHADOW);
  wt_param_store_begin(s);
  stage(s, NORM, 1, 0);
  stage(s, EMBED, 1, 0);
  /* Readers still see the committed version while the round writes. */
  CU_ASSERT(holds(s, NORM, 0));
  CU_ASSERT(holds(s, EMBED, 0));
  CU_ASSERT(wt_param_store_complete(s));
  size_t staged = 0, partial = 9;
  uint64_t bytes = 0;
  wt_param_store_round_stats(s, &staged, &partial, &bytes);
  CU_ASSERT_EQUAL(staged, 2);
  CU_ASSERT_EQUAL(partial, 0);
  CU_ASSERT_EQUAL(bytes, 64 + 2048);
  WT_ASSERT_OK(wt_param_store_check_commit(s));
  wt_param_store_commit(s);
  CU_ASSERT(holds(s, NORM, 1));
  CU_ASSERT(holds(s, EMBED, 1));
  CU_ASSERT(holds(s, HEAD, 0)); /* untouched */

  /* The next round writes the other buffer: the live one stays. */
  wt_param_store_begin(s);
  stage(s, NORM, 2, 0);
  CU_ASSERT(holds(s, NORM, 1));
  wt_param_store_commit(s);
  CU_ASSERT(holds(s, NORM, 2));
  CU_ASSERT(holds(s, EMBED, 1));
  wt_param_store_destroy(s);
}

static void test_shadow_abort_leaves_bytes(void) {
  wt_param_store *s = tiny(WT_STAGING_SHADOW);
  wt_param_store_begin(s);
  stage(s, Q, 5, 0);
  stage(s, DOWN, 5, 1);
  wt_param_store_abort(s);
  for (size_t i = 0; i < 7; i++) CU_ASSERT(holds(s, i, 0));
  CU_ASSERT(wt_param_store_complete(s));
  /* An abort leaves nothing behind for the next round to commit. */
  wt_param_store_begin(s);
  wt_param_store_commit(s);
  for (size_t i = 0; i < 7; i++) CU_ASSERT(holds(s, i, 0));
  wt_param_store_destroy(s);
}

static void test_partial_tensor_refused(void) {
  wt_param_store *s = tiny(WT_STAGING_SHADOW);
  wt_param_store_begin(s);
  stage(s, NORM, 1, 0);
  stage(s, DOWN, 1, 1); /* half of it landed */
  WT_ASSERT_ERR(wt_param_store_check_commit(s), WT_FAILED_PRECONDITION,
                "parameter 'model.layers.0.mlp.down_proj.weight' was only "
                "partly received");
  /* Sent again in full, within the same round: now it can commit. */
  stage(s, DOWN, 1, 0);
  WT_ASSERT_OK(wt_param_store_check_commit(s));
  /* A staged tensor being rewritten is partial again. */
  stage(s, NORM, 3, 1);
  WT_ASSERT_ERR(wt_param_store_check_commit(s), WT_FAILED_PRECONDITION,
                "'model.norm.weight'");
  stage(s, NORM, 3, 0);
  wt_param_store_commit(s);
  CU_ASSERT(holds(s, NORM, 3));
  CU_ASSERT(holds(s, DOWN, 1));
  wt_param_store_destroy(s);
}

static void test_inplace_incomplete(void) {
  wt_param_store *s = tiny(WT_STAGING_INPLACE);
  CU_ASSERT(wt_param_store_complete(s));
  /* A round that wrote nothing leaves the store complete. */
  wt_param_store_begin(s);
  CU_ASSERT(wt_param_store_complete(s));
  wt_param_store_abort(s);
  CU_ASSERT(wt_param_store_complete(s));

  /* From the first byte written until the finish: incomplete. */
  wt_param_store_begin(s);
  stage(s, NORM, 1, 0);
  CU_ASSERT(!wt_param_store_complete(s));
  CU_ASSERT(holds(s, NORM, 1)); /* in place: readers see the new bytes */
  wt_param_store_commit(s);
  CU_ASSERT(wt_param_store_complete(s));

  /* An aborted round that wrote leaves it incomplete ... */
  wt_param_store_begin(s);
  stage(s, Q, 2, 1);
  stage(s, LN2, 2, 0);
  wt_param_store_abort(s);
  CU_ASSERT(!wt_param_store_complete(s));
  /* ... through a round that repairs only part of the damage ... */
  wt_param_store_begin(s);
  stage(s, Q, 3, 0);
  wt_param_store_commit(s);
  CU_ASSERT(!wt_param_store_complete(s));
  /* ... until every tensor it touched was rewritten and committed. */
  wt_param_store_begin(s);
  stage(s, LN2, 3, 0);
  wt_param_store_commit(s);
  CU_ASSERT(wt_param_store_complete(s));
  CU_ASSERT(holds(s, Q, 3));
  CU_ASSERT(holds(s, LN2, 3));
  wt_param_store_destroy(s);
}

static void test_digest_and_read(void) {
  wt_param_store *s = tiny(WT_STAGING_SHADOW);
  const wt_tensor_meta *m = wt_param_store_meta(s, HEAD);
  unsigned char *want = malloc(m->nbytes);
  wt_synthetic_fill(m, 0, 0, want, m->nbytes);
  char a[WT_DIGEST_HEX_MAX], b[WT_DIGEST_HEX_MAX];
  WT_ASSERT_OK(wt_digest_hex(WT_HASH_SHA256, want, m->nbytes, a));
  wt_param_store_read_lock(s);
  WT_ASSERT_OK(wt_param_store_digest(s, HEAD, WT_HASH_SHA256, b));
  wt_param_store_read_unlock(s);
  CU_ASSERT_STRING_EQUAL(a, b);
  WT_ASSERT_OK(wt_digest_hex(WT_HASH_XXH3_64, want, m->nbytes, a));
  wt_param_store_read_lock(s);
  WT_ASSERT_OK(wt_param_store_digest(s, HEAD, WT_HASH_XXH3_64, b));
  wt_param_store_read_unlock(s);
  CU_ASSERT_STRING_EQUAL(a, b);
  CU_ASSERT_EQUAL(strlen(b), 16);

  unsigned char part[10];
  WT_ASSERT_OK(wt_param_store_read(s, HEAD, 100, part, sizeof(part)));
  CU_ASSERT_EQUAL(memcmp(part, want + 100, sizeof(part)), 0);
  WT_ASSERT_ERR(wt_param_store_read(s, HEAD, m->nbytes - 4, part, 10),
                WT_OUT_OF_RANGE,
                "parameter 'lm_head.weight': bytes [2044, 2054)");
  free(want);
  wt_param_store_destroy(s);
}

/* A reader holding the read lock does not stop a round from writing; only
 * the commit's flip waits for it. */
typedef struct flip_arg {
  wt_param_store *s;
  volatile int done;
} flip_arg;

static void *commit_thread(void *p) {
  flip_arg *a = p;
  wt_param_store_commit(a->s);
  a->done = 1;
  return NULL;
}

static void test_readers_do_not_wait_for_rounds(void) {
  wt_param_store *s = tiny(WT_STAGING_SHADOW);
  wt_param_store_read_lock(s);
  wt_param_store_begin(s);
  stage(s, EMBED, 1, 0); /* writes while the read lock is held */
  const unsigned char *live = wt_param_store_live(s, EMBED);
  unsigned char first[8];
  memcpy(first, live, 8);
  const void *before = live;
  flip_arg a = {.s = s};
  pthread_t t;
  CU_ASSERT_FATAL(pthread_create(&t, NULL, commit_thread, &a) == 0);
  struct timespec ts = {0, 50 * 1000 * 1000};
  nanosleep(&ts, NULL);
  CU_ASSERT_EQUAL(a.done, 0); /* the flip waits for the reader */
  CU_ASSERT_PTR_EQUAL(wt_param_store_live(s, EMBED), before);
  CU_ASSERT_EQUAL(memcmp(first, wt_param_store_live(s, EMBED), 8), 0);
  wt_param_store_read_unlock(s);
  pthread_join(t, NULL);
  CU_ASSERT_EQUAL(a.done, 1);
  CU_ASSERT(holds(s, EMBED, 1));
  wt_param_store_destroy(s);
}

static void test_from_checkpoint(void) {
  char *dir = wt_test_tmpdir();
  CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
  char path[512];
  wtt_write_checkpoint(dir, "model.safetensors", path, sizeof(path));
  wt_checkpoint *ck = NULL;
  WT_ASSERT_OK(wt_checkpoint_open(path, &ck));
  wt_param_store *s = NULL;
  WT_ASSERT_OK(wt_param_store_from_checkpoint(
      ck, &(wt_store_config){.staging = WT_STAGING_INPLACE}, &s));
  wt_checkpoint_close(ck); /* the store holds its own copy */
  CU_ASSERT_EQUAL(wt_param_store_count(s), 2);
  CU_ASSERT_EQUAL(wt_param_store_total_bytes(s), 24 + 6);
  size_t ia = 9, ib = 9;
  WT_ASSERT_OK(wt_param_store_find(s, "a.weight", &ia));
  WT_ASSERT_OK(wt_param_store_find(s, "b.bias", &ib));
  float gw[6];
  uint16_t gb[3];
  WT_ASSERT_OK(wt_param_store_read(s, ia, 0, gw, sizeof(gw)));
  WT_ASSERT_OK(wt_param_store_read(s, ib, 0, gb, sizeof(gb)));
  CU_ASSERT_EQUAL(memcmp(gw, WTT_CKPT_A, sizeof(gw)), 0);
  CU_ASSERT_EQUAL(memcmp(gb, WTT_CKPT_B, sizeof(gb)), 0);
  CU_ASSERT_EQUAL(wt_param_store_meta(s, ib)->dtype, WT_DTYPE_BFLOAT16);
  wt_param_store_destroy(s);
  wt_test_rmtree(dir);
  free(dir);
}

/* Every scenario above once more, in `k` memory. */
static void scenarios_in(wt_mem_kind k, wt_device d) {
  kind = k;
  device = d;
  test_layout();
  test_shadow_commit_flips();
  test_shadow_abort_leaves_bytes();
  test_partial_tensor_refused();
  test_inplace_incomplete();
  test_digest_and_read();
  kind = WT_MEM_HOST;
  device = (wt_device)WT_DEVICE_CPU_INIT;
}

static void test_shared_memory(void) {
  scenarios_in(WT_MEM_SHARED, (wt_device)WT_DEVICE_CPU_INIT);
  wt_store_config c = {.memory = WT_MEM_SHARED, .name = "w0"};
  wt_param_store *s = NULL;
  WT_ASSERT_OK(wt_param_store_from_synthetic("tiny", 0, &c, &s));
  wt_param_region r[WT_PARAM_STORE_MAX_REGIONS];
  CU_ASSERT_EQUAL_FATAL(wt_param_store_regions(s, r), 2);
  for (int i = 0; i < 2; i++) {
    CU_ASSERT_EQUAL(r[i].kind, WT_MEM_SHARED);
    CU_ASSERT(r[i].fd >= 0);
  }
  CU_ASSERT_EQUAL(wt_param_store_bytes_held(s), r[0].len + r[1].len);
  wt_param_store_destroy(s);
}

/* Device memory on an emulated GPU: the CPU never touches it (fake_cuda.h
 * maps it PROT_NONE), so every load, read, write and digest above went
 * through the store's kind. */
static void test_device_memory(void) {
  fake_cuda_install(2);
  wt_device g1 = {WT_DEVICE_CUDA, 1};
  WT_ASSERT_OK(wt_cuda_bind(1));
  scenarios_in(WT_MEM_DEVICE, g1);
  CU_ASSERT_EQUAL(fake_cuda_get_stats().binding_errors, 0);
  CU_ASSERT_EQUAL(fake_cuda_get_stats().device_bytes[1], 0);
  CU_ASSERT_EQUAL(fake_cuda_get_stats().host_bytes, 0);
  wt_store_config c = {.memory = WT_MEM_DEVICE, .device = g1};
  wt_param_store *s = NULL;
  WT_ASSERT_OK(wt_param_store_from_synthetic("small", 0, &c, &s));
  wt_param_region r[WT_PARAM_STORE_MAX_REGIONS];
  CU_ASSERT_EQUAL_FATAL(wt_param_store_regions(s, r), 2);
  CU_ASSERT_EQUAL(r[0].kind, WT_MEM_DEVICE);
  CU_ASSERT_EQUAL(r[0].device.index, 1);
  CU_ASSERT_EQUAL(fake_cuda_get_stats().device_bytes[1],
                  wt_param_store_bytes_held(s));
  /* The bounce buffer is the only host memory a digest takes. */
  wt_param_store_read_lock(s);
  char hex[WT_DIGEST_HEX_MAX];
  WT_ASSERT_OK(wt_param_store_digest(s, 0, WT_HASH_SHA256, hex));
  wt_param_store_read_unlock(s);
  CU_ASSERT(fake_cuda_get_stats().host_bytes <= (8u << 20));
  wt_param_store_destroy(s);
  /* Memory on a GPU that is not there. */
  c.device.index = 3;
  WT_ASSERT_ERR(wt_param_store_from_synthetic("tiny", 0, &c, &s),
                WT_FAILED_PRECONDITION,
                "memory kind 'device' on cuda:3 is unavailable: device "
                "'cuda:3' does not exist");
  fake_cuda_uninstall();
}

/* The digest a second process computes over bytes [off, off + len) of the
 * memfd `fd`, which it gets read-only (as an export would hand it over);
 * *writable says whether it could map it writable. */
static bool second_process_digest(int fd, uint64_t off, uint64_t len,
                                  char hex[WT_DIGEST_HEX_MAX], bool *writable) {
  char path[64], sfd[16], soff[32], slen[32];
  snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  int ro = open(path, O_RDONLY | O_CLOEXEC);
  CU_ASSERT_FATAL(ro >= 0);
  int pipefd[2];
  CU_ASSERT_FATAL(pipe(pipefd) == 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, ro, 3);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
  snprintf(sfd, sizeof(sfd), "3");
  snprintf(soff, sizeof(soff), "%llu", (unsigned long long)off);
  snprintf(slen, sizeof(slen), "%llu", (unsigned long long)len);
  char *argv[] = {(char *)WT_MAP_READER_BIN, sfd, soff, slen, NULL};
  pid_t pid = 0;
  extern char **environ;
  int rc = posix_spawn(&pid, WT_MAP_READER_BIN, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(pipefd[1]);
  close(ro);
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  char out[512] = "";
  size_t got = 0;
  ssize_t r;
  while ((r = read(pipefd[0], out + got, sizeof(out) - 1 - got)) > 0)
    got += (size_t)r;
  out[got] = '\0';
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const char *d = strstr(out, "sha256 ");
  if (d == NULL) {
    fprintf(stderr, "\n  wt_map_reader said: %s\n", out);
    return false;
  }
  snprintf(hex, WT_DIGEST_HEX_MAX, "%.64s", d + 7);
  *writable = strstr(out, "write-map allowed") != NULL;
  return true;
}

/* What the export of committed weights will stand on: another process maps
 * a shared store's memfd read-only, finds each tensor where the store says
 * its committed bytes are, and reads exactly them; after a commit, the new
 * ones (the other buffer set). It cannot map the memory writable. */
static void test_shared_store_read_by_another_process(void) {
  wt_store_config c = {.memory = WT_MEM_SHARED, .name = "export"};
  wt_param_store *s = NULL;
  WT_ASSERT_OK(wt_param_store_from_synthetic("tiny", 0, &c, &s));
  wt_param_region r[WT_PARAM_STORE_MAX_REGIONS];
  size_t nr = wt_param_store_regions(s, r);
  CU_ASSERT_EQUAL_FATAL(nr, 2);
  for (uint64_t seed = 0; seed < 3; seed++) {
    if (seed > 0) {
      wt_param_store_begin(s);
      stage(s, EMBED, seed, 0);
      stage(s, HEAD, seed, 0);
      wt_param_store_commit(s);
    }
    size_t checks[2] = {EMBED, NORM};
    for (size_t k = 0; k < 2; k++) {
      size_t i = checks[k];
      const wt_tensor_meta *m = wt_param_store_meta(s, i);
      uint64_t want_seed = i == EMBED ? seed : 0;
      unsigned char *want = malloc(m->nbytes);
      wt_synthetic_fill(m, want_seed, 0, want, m->nbytes);
      char whex[WT_DIGEST_HEX_MAX], ghex[WT_DIGEST_HEX_MAX];
      WT_ASSERT_OK(wt_digest_hex(WT_HASH_SHA256, want, m->nbytes, whex));
      free(want);
      size_t region = 9;
      uint64_t off = 0;
      wt_param_store_read_lock(s);
      wt_param_store_locate(s, i, &region, &off);
      wt_param_store_read_unlock(s);
      CU_ASSERT_FATAL(region < nr);
      bool writable = true;
      CU_ASSERT_FATAL(
          second_process_digest(r[region].fd, off, m->nbytes, ghex, &writable));
      CU_ASSERT_STRING_EQUAL(ghex, whex);
      CU_ASSERT_FALSE(writable);
    }
  }
  wt_param_store_destroy(s);
}

void wt_test_suite_param_store(void) {
  CU_pSuite s = CU_add_suite("param_store", NULL, NULL);
  CU_add_test(s, "layout, lookup and initial bytes", test_layout);
  CU_add_test(s, "duplicate names are refused", test_new_rejects_duplicates);
  CU_add_test(s, "sizes past 64 bits are refused",
              test_new_rejects_size_overflow);
  CU_add_test(s, "staging names", test_staging_names);
  CU_add_test(s, "shadow: finish flips touched tensors",
              test_shadow_commit_flips);
  CU_add_test(s, "shadow: abort leaves previous bytes",
              test_shadow_abort_leaves_bytes);
  CU_add_test(s, "a partly received tensor cannot commit",
              test_partial_tensor_refused);
  CU_add_test(s, "inplace: incomplete until repaired", test_inplace_incomplete);
  CU_add_test(s, "digests and reads of committed bytes", test_digest_and_read);
  CU_add_test(s, "readers never wait for a round",
              test_readers_do_not_wait_for_rounds);
  CU_add_test(s, "shared memory (memfd): every scenario", test_shared_memory);
  CU_add_test(s, "device memory (emulated GPU): every scenario",
              test_device_memory);
  CU_add_test(s, "a shared store read by another process",
              test_shared_store_read_by_another_process);
  CU_add_test(s, "loaded from a safetensors checkpoint", test_from_checkpoint);
}
