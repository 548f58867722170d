/* Suite "ipc": the GPU-free logic of the ipc backend (ipc_shared.h): picking
 * each tensor's place on a worker's GPU from what a trainer (or a stranger)
 * sent, the cache of opened exports, and the packed ring's accounting. */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/fixture.h"
#include "backends/ipc/ipc_shared.h"

#define GPU_A "GPU-5c2f8a41-0d4e-4f0b-9a57-1b2c3d4e5f60"
#define GPU_B "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"

/* An update of three tensors in two exports per GPU. */
typedef struct fixture {
  unsigned char handle[4][WT_IPC_HANDLE_BYTES];
  Wt__V1__IpcExport ex[4];
  Wt__V1__IpcExport *exs[4];
  Wt__V1__IpcPlace pl[3][2];
  Wt__V1__IpcPlace *pls[3][2];
  Wt__V1__IpcTensor t[3];
  Wt__V1__IpcTensor *ts[3];
  Wt__V1__IpcUpdateInfo ipc;
} fixture;

static const char *const NAMES[3] = {"w.a", "w.b", "w.c"};
static const uint64_t NBYTES[3] = {1024, 512, 4096};

static void fixture_init(fixture *f) {
  memset(f, 0, sizeof(*f));
  wt__v1__ipc_update_info__init(&f->ipc);
  for (int i = 0; i < 4; i++) {
    wt__v1__ipc_export__init(&f->ex[i]);
    memset(f->handle[i], 0x10 + i, WT_IPC_HANDLE_BYTES);
    f->ex[i].id = 100 + (uint64_t)i;
    f->ex[i].handle.data = f->handle[i];
    f->ex[i].handle.len = WT_IPC_HANDLE_BYTES;
    f->ex[i].gpu_uuid = i < 2 ? GPU_A : GPU_B;
    f->ex[i].size_bytes = 8192;
    f->exs[i] = &f->ex[i];
  }
  /* w.a in export 100 (A) / 102 (B) at 0; w.b at 1024 of the same; w.c in
   * 101 (A) / 103 (B) at 4096. */
  const uint64_t exp_a[3] = {100, 100, 101}, off[3] = {0, 1024, 4096};
  for (int k = 0; k < 3; k++) {
    for (int g = 0; g < 2; g++) {
      wt__v1__ipc_place__init(&f->pl[k][g]);
      f->pl[k][g].export_id = exp_a[k] + (uint64_t)(2 * g);
      f->pl[k][g].offset_bytes = off[k];
      f->pls[k][g] = &f->pl[k][g];
    }
    wt__v1__ipc_tensor__init(&f->t[k]);
    f->t[k].n_places = 2;
    f->t[k].places = f->pls[k];
    f->ts[k] = &f->t[k];
  }
  f->ipc.n_exports = 4;
  f->ipc.exports = f->exs;
  f->ipc.n_tensors = 3;
  f->ipc.tensors = f->ts;
}

static wt_status *select_on(const fixture *f, const char *uuid,
                            wt_ipc_place *out) {
  return wt_ipc_select(&f->ipc, 3, NAMES, NBYTES, uuid, out);
}

static void test_select_by_uuid(void) {
  fixture f;
  fixture_init(&f);
  wt_ipc_place out[3];
  WT_ASSERT_OK(select_on(&f, GPU_A, out));
  CU_ASSERT_EQUAL(out[0].export_index, 0);
  CU_ASSERT_EQUAL(out[1].export_index, 0);
  CU_ASSERT_EQUAL(out[1].offset, 1024);
  CU_ASSERT_EQUAL(out[2].export_index, 1);
  CU_ASSERT_EQUAL(out[2].offset, 4096);
  WT_ASSERT_OK(select_on(&f, GPU_B, out));
  CU_ASSERT_EQUAL(out[0].export_index, 2);
  CU_ASSERT_EQUAL(out[2].export_index, 3);
  /* A GPU the trainer has nothing on: named, with the ones it has. */
  WT_ASSERT_ERR(select_on(&f, "GPU-ffffffff-0000-0000-0000-000000000000", out),
                WT_INVALID_ARGUMENT,
                "update_info.ipc.tensors[0] ('w.a'): no place on GPU "
                "GPU-ffffffff-0000-0000-0000-000000000000 (this worker's); the "
                "trainer exported it on: " GPU_A ", " GPU_B);
}

/* Whatever a stranger sends is refused, naming the field. */
static void test_select_refuses(void) {
  fixture f;
  wt_ipc_place out[3];
  WT_ASSERT_ERR(wt_ipc_select(NULL, 3, NAMES, NBYTES, GPU_A, out),
                WT_INVALID_ARGUMENT, "update_info.ipc is missing");

  fixture_init(&f);
  f.ipc.n_tensors = 2;
  WT_ASSERT_ERR(select_on(&f, GPU_A, out), WT_INVALID_ARGUMENT,
                "update_info.ipc.tensors has 2 entries for 3 names");

  fixture_init(&f);
  f.ex[1].handle.len = 63;
  WT_ASSERT_ERR(select_on(&f, GPU_A, out), WT_INVALID_ARGUMENT,
                "update_info.ipc.exports[1] (id 101): handle is 63 bytes; a "
                "cudaIpcMemHandle_t is 64");

  fixture_init(&f);
  f.ex[2].gpu_uuid = "";
  WT_ASSERT_ERR(select_on(&f, GPU_A, out), WT_INVALID_ARGUMENT,
                "update_info.ipc.exports[2] (id 102): gpu_uuid is empty");

  fixture_init(&f);
  f.ex[3].id = 100;
  WT_ASSERT_ERR(select_on(&f, GPU_A, out), WT_INVALID_ARGUMENT,
                "update_info.ipc.exports[3]: id 100 is also exports[0]'s");

  fixture_init(&f);
  f.pl[1][0].export_id = 999;
  WT_ASSERT_ERR(select_on(&f, GPU_A, out), WT_INVALID_ARGUMENT,
                "update_info.ipc.tensors[1].places[0] ('w.b'): export 999 is "
                "not in update_info.ipc.exports");

  /* Past the export's end, and an offset that would wrap around. */
  fixture_init(&f);
  f.pl[2][0].offset_bytes = 4097;
  WT_ASSERT_ERR(select_on(&f, GPU_A, out), WT_INVALID_ARGUMENT,
                "update_info.ipc.tensors[2].places[0] ('w.c'): 4096 bytes at "
                "offset 4097 run past export 101 (8192 bytes)");
  fixture_init(&f);
  f.pl[2][1].offset_bytes = UINT64_MAX - 100;
  WT_ASSERT_ERR(select_on(&f, GPU_A, out), WT_INVALID_ARGUMENT,
                "run past export 103");

  /* Two places of one tensor on one GPU. */
  fixture_init(&f);
  f.pl[0][1].export_id = 101;
  WT_ASSERT_ERR(select_on(&f, GPU_A, out), WT_INVALID_ARGUMENT,
                "update_info.ipc.tensors[0] ('w.a'): places 0 and 1 are both "
                "on GPU " GPU_A "; at most one per GPU");

  /* A tensor with no place at all. */
  fixture_init(&f);
  f.t[1].n_places = 0;
  WT_ASSERT_ERR(select_on(&f, GPU_A, out), WT_INVALID_ARGUMENT,
                "('w.b'): no place on GPU " GPU_A
                " (this worker's); the trainer exported it on: none");
}

/* A flood: more exports or places than an update can use are refused
 * before any is looked at, and the most an update may carry (16 places
 * per tensor, 16 exports per tensor) is checked in well under a second. */
static void test_select_flood(void) {
  fixture f;
  wt_ipc_place out[3];
  fixture_init(&f);
  f.ipc.n_exports = 100000; /* the count is checked before the array */
  WT_ASSERT_ERR(select_on(&f, GPU_A, out), WT_INVALID_ARGUMENT,
                "update_info.ipc.exports has 100000 entries for 3 tensors; "
                "at most 16 per tensor");
  fixture_init(&f);
  f.t[2].n_places = 17;
  WT_ASSERT_ERR(select_on(&f, GPU_A, out), WT_INVALID_ARGUMENT,
                "update_info.ipc.tensors[2] ('w.c') has 17 places; at most 16 "
                "(one per GPU)");

  enum { N = 2000, G = WT_IPC_MAX_PLACES };
  static unsigned char handle[WT_IPC_HANDLE_BYTES];
  static char uuids[G][48];
  Wt__V1__IpcExport *ex = calloc(N * G, sizeof(*ex));
  Wt__V1__IpcExport **exs = calloc(N * G, sizeof(*exs));
  Wt__V1__IpcPlace *pl = calloc(N * G, sizeof(*pl));
  Wt__V1__IpcPlace **pls = calloc(N * G, sizeof(*pls));
  Wt__V1__IpcTensor *ts = calloc(N, sizeof(*ts));
  Wt__V1__IpcTensor **tps = calloc(N, sizeof(*tps));
  const char **names = calloc(N, sizeof(*names));
  uint64_t *nbytes = calloc(N, sizeof(*nbytes));
  wt_ipc_place *places = calloc(N, sizeof(*places));
  CU_ASSERT_FATAL(ex && exs && pl && pls && ts && tps && names && nbytes &&
                  places);
  for (int g = 0; g < G; g++)
    snprintf(uuids[g], sizeof(uuids[g]), "GPU-%08x-0000-0000-0000-000000000000",
             (unsigned)g);
  for (size_t i = 0; i < (size_t)N * G; i++) {
    wt__v1__ipc_export__init(&ex[i]);
    /* Ids in reverse, so that order gives nothing away. */
    ex[i].id = (uint64_t)(N * G - i) * 7919u;
    ex[i].handle.data = handle;
    ex[i].handle.len = WT_IPC_HANDLE_BYTES;
    ex[i].gpu_uuid = uuids[i % G];
    ex[i].size_bytes = 4096;
    exs[i] = &ex[i];
    wt__v1__ipc_place__init(&pl[i]);
    pl[i].export_id = ex[i].id;
    pls[i] = &pl[i];
  }
  for (size_t k = 0; k < N; k++) {
    wt__v1__ipc_tensor__init(&ts[k]);
    ts[k].n_places = G;
    ts[k].places = &pls[k * G];
    tps[k] = &ts[k];
    names[k] = "w";
    nbytes[k] = 64;
  }
  Wt__V1__IpcUpdateInfo ipc = WT__V1__IPC_UPDATE_INFO__INIT;
  ipc.n_exports = (size_t)N * G;
  ipc.exports = exs;
  ipc.n_tensors = N;
  ipc.tensors = tps;
  int64_t t0 = wt_mono_ms();
  WT_ASSERT_OK(wt_ipc_select(&ipc, N, names, nbytes, uuids[G - 1], places));
  int64_t ms = wt_mono_ms() - t0;
  printf("\n  %d tensors x %d places, %d exports: checked in %lld ms", N, G,
         N * G, (long long)ms);
  CU_ASSERT(ms < 1000);
  CU_ASSERT_EQUAL(places[N - 1].export_index, (size_t)N * G - 1);
  free(ex);
  free(exs);
  free(pl);
  free(pls);
  free(ts);
  free(tps);
  free(names);
  free(nbytes);
  free(places);
}

/* --- the cache ------------------------------------------------------------ */

typedef struct opener_log {
  int opens, closes, fail_next;
  unsigned char last[WT_IPC_HANDLE_BYTES];
  char mapped[16][8]; /* what "bases" point at */
  int used;
} opener_log;

static wt_status *log_open(void *ctx, const unsigned char *handle,
                           void **base) {
  opener_log *l = ctx;
  if (l->fail_next) {
    l->fail_next = 0;
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "cudaIpcOpenMemHandle: invalid resource handle");
  }
  l->opens++;
  memcpy(l->last, handle, WT_IPC_HANDLE_BYTES);
  *base = l->mapped[l->used++ % 16];
  return NULL;
}

static void log_close(void *ctx, void *base) {
  opener_log *l = ctx;
  (void)base;
  l->closes++;
}

static void test_cache(void) {
  fixture f;
  fixture_init(&f);
  opener_log log = {0};
  wt_ipc_opener op = {log_open, log_close, &log};
  wt_ipc_cache *c = NULL;
  WT_ASSERT_OK(wt_ipc_cache_new(&op, &c));
  void *a = NULL, *b = NULL, *again = NULL;
  /* Opened once, and kept across rounds. */
  WT_ASSERT_OK(wt_ipc_cache_get(c, &f.ex[0], &a));
  WT_ASSERT_OK(wt_ipc_cache_get(c, &f.ex[1], &b));
  CU_ASSERT_PTR_NOT_EQUAL(a, b);
  for (int round = 0; round < 5; round++) {
    WT_ASSERT_OK(wt_ipc_cache_get(c, &f.ex[0], &again));
    CU_ASSERT_PTR_EQUAL(again, a);
  }
  CU_ASSERT_EQUAL(log.opens, 2);
  CU_ASSERT_EQUAL(wt_ipc_cache_size(c), 2);
  /* The same id with a new handle (the trainer freed and re-exported): the
   * old mapping is closed, the new one opened. */
  unsigned char fresh[WT_IPC_HANDLE_BYTES];
  memset(fresh, 0x77, sizeof(fresh));
  Wt__V1__IpcExport moved = f.ex[0];
  moved.handle.data = fresh;
  WT_ASSERT_OK(wt_ipc_cache_get(c, &moved, &again));
  CU_ASSERT_PTR_NOT_EQUAL(again, a);
  CU_ASSERT_EQUAL(log.closes, 1);
  CU_ASSERT_EQUAL(memcmp(log.last, fresh, sizeof(fresh)), 0);
  CU_ASSERT_EQUAL(wt_ipc_cache_opens(c), 3);
  /* A failed open says which export, and is not cached as open. */
  log.fail_next = 1;
  WT_ASSERT_ERR(wt_ipc_cache_get(c, &f.ex[2], &again), WT_FAILED_PRECONDITION,
                "export 102 (GPU " GPU_B
                "): cudaIpcOpenMemHandle: invalid resource handle");
  CU_ASSERT_EQUAL(wt_ipc_cache_size(c), 2);
  WT_ASSERT_OK(wt_ipc_cache_get(c, &f.ex[2], &again));
  CU_ASSERT_EQUAL(wt_ipc_cache_size(c), 3);
  /* A reopen that fails leaves the id closed; the next get opens it. */
  memset(fresh, 0x78, sizeof(fresh));
  log.fail_next = 1;
  wt_status_free(wt_ipc_cache_get(c, &moved, &again));
  CU_ASSERT_EQUAL(wt_ipc_cache_size(c), 2);
  WT_ASSERT_OK(wt_ipc_cache_get(c, &moved, &again));
  CU_ASSERT_PTR_NOT_NULL(again);
  CU_ASSERT_EQUAL(wt_ipc_cache_size(c), 3);
  /* A sweep closes what was not got since the last one, and keeps the
   * rest; a second sweep with nothing got closes everything it kept. */
  int swept = log.closes;
  CU_ASSERT_EQUAL(wt_ipc_cache_sweep(c), 0); /* all three were got */
  WT_ASSERT_OK(wt_ipc_cache_get(c, &f.ex[2], &again));
  CU_ASSERT_EQUAL(wt_ipc_cache_sweep(c), 2);
  CU_ASSERT_EQUAL(log.closes - swept, 2);
  CU_ASSERT_EQUAL(wt_ipc_cache_size(c), 1);
  WT_ASSERT_OK(wt_ipc_cache_get(c, &f.ex[2], &again)); /* still open */
  CU_ASSERT_EQUAL(log.closes - swept, 2);
  WT_ASSERT_OK(wt_ipc_cache_get(c, &f.ex[0], &again)); /* opened again */
  WT_ASSERT_OK(wt_ipc_cache_get(c, &f.ex[1], &again));
  CU_ASSERT_EQUAL(wt_ipc_cache_size(c), 3);
  /* The trainer is gone: everything closed, each exactly once. */
  int before = log.closes;
  wt_ipc_cache_close_all(c);
  CU_ASSERT_EQUAL(log.closes - before, 3);
  CU_ASSERT_EQUAL(wt_ipc_cache_size(c), 0);
  WT_ASSERT_ERR(
      wt_ipc_cache_get(c, &(Wt__V1__IpcExport){.handle.len = 3}, &again),
      WT_INVALID_ARGUMENT, "handle is 3 bytes, not 64");
  wt_ipc_cache_free(c);
  CU_ASSERT_EQUAL(log.closes - before, 3);
}

/* --- the ring ------------------------------------------------------------- */

static void test_ring(void) {
  wt_ipc_ring r;
  WT_ASSERT_ERR(wt_ipc_ring_init(&r, 1, 2), WT_INVALID_ARGUMENT,
                "packed_num_buffers is 1; the ring needs at least 2");
  WT_ASSERT_OK(wt_ipc_ring_init(&r, 2, 3));
  /* Two buckets fill both slots at once; the third waits for every
   * worker to finish the first. */
  CU_ASSERT_TRUE(wt_ipc_ring_writable(&r, 0));
  CU_ASSERT_TRUE(wt_ipc_ring_writable(&r, 1));
  CU_ASSERT_FALSE(wt_ipc_ring_writable(&r, 2));
  WT_ASSERT_OK(wt_ipc_ring_written(&r, 0));
  WT_ASSERT_OK(wt_ipc_ring_written(&r, 1));
  CU_ASSERT_FALSE(wt_ipc_ring_writable(&r, 2));
  WT_ASSERT_ERR(wt_ipc_ring_written(&r, 2), WT_FAILED_PRECONDITION,
                "bucket 2 written into slot 0 before every worker finished "
                "copying out of it");
  WT_ASSERT_OK(wt_ipc_ring_copied(&r, 0));
  WT_ASSERT_OK(wt_ipc_ring_copied(&r, 0));
  CU_ASSERT_FALSE(wt_ipc_ring_writable(&r, 2)); /* one worker still copies */
  WT_ASSERT_OK(wt_ipc_ring_copied(&r, 0));
  CU_ASSERT_TRUE(wt_ipc_ring_writable(&r, 2)); /* and not a moment later */
  CU_ASSERT_FALSE(wt_ipc_ring_writable(&r, 3));
  /* A fourth report, or one for a bucket not in its slot, is refused. */
  WT_ASSERT_ERR(wt_ipc_ring_copied(&r, 0), WT_FAILED_PRECONDITION,
                "bucket 0 reported copied more times than there are workers "
                "(3)");
  WT_ASSERT_ERR(wt_ipc_ring_copied(&r, 2), WT_FAILED_PRECONDITION,
                "a worker finished bucket 2, which is not in slot 0");
  WT_ASSERT_ERR(wt_ipc_ring_copied(&r, 5), WT_FAILED_PRECONDITION,
                "a worker finished bucket 5, which is not in slot 1");
  WT_ASSERT_OK(wt_ipc_ring_written(&r, 2));
  /* 100 more buckets, workers finishing in any order. */
  for (uint64_t b = 1; b < 100; b++) {
    for (int w = 0; w < 3; w++) WT_ASSERT_OK(wt_ipc_ring_copied(&r, b));
    CU_ASSERT_TRUE_FATAL(wt_ipc_ring_writable(&r, b + 2));
    WT_ASSERT_OK(wt_ipc_ring_written(&r, b + 2));
  }
  wt_ipc_ring_clear(&r);
}

void wt_test_suite_ipc(void) {
  CU_pSuite s = CU_add_suite("ipc", NULL, NULL);
  CU_add_test(s, "a tensor's place on the worker's GPU", test_select_by_uuid);
  CU_add_test(s, "bad exports and places are refused", test_select_refuses);
  CU_add_test(s, "a flood of exports and places", test_select_flood);
  CU_add_test(s, "opened exports are cached across rounds", test_cache);
  CU_add_test(s, "the packed ring never rewrites a slot in use", test_ring);
}
