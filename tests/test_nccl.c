/* Suite "nccl": the nccl backend's logic that needs no GPU (wt/nccl_seam.h):
 * init-info validation and rank layout, the broadcast schedule a plan
 * gives, vLLM's base64 of the unique id, and every wait's deadline, cancel
 * and abort, on communicators emulated between threads (fake_nccl.h) over
 * the emulated GPU (fake_cuda.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "support/fake_cuda.h"
#include "support/fake_nccl.h"
#include "support/fixture.h"
#include <jansson.h>

#include "wt/bindings.h"
#include "wt/checksum.h"
#include "wt/clock.h"
#include "wt/memory.h"
#include "backends/nccl/nccl_shared.h"
#include "wt/base64.h"
#include "wt/pb.h"
#include "wt/source.h"
#include "wt/synthetic.h"
#include "wt/trainer.h"

/* --- init info ------------------------------------------------------------ */

typedef struct init_fixture {
  Wt__V1__WeightTransferInitInfo info;
  Wt__V1__NcclInitInfo nccl;
  unsigned char id[WT_NCCL_UNIQUE_ID_BYTES];
  Wt__V1__UInt64Value size;
  Wt__V1__UInt32Value nbuf;
} init_fixture;

static void init_fixture_init(init_fixture *f) {
  wt__v1__weight_transfer_init_info__init(&f->info);
  wt__v1__nccl_init_info__init(&f->nccl);
  wt__v1__uint64_value__init(&f->size);
  wt__v1__uint32_value__init(&f->nbuf);
  for (int i = 0; i < WT_NCCL_UNIQUE_ID_BYTES; i++) f->id[i] = (unsigned char)i;
  f->nccl.nccl_unique_id.data = f->id;
  f->nccl.nccl_unique_id.len = sizeof(f->id);
  f->info.backend = "nccl";
  f->info.backend_init_case =
      WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_NCCL;
  f->info.nccl = &f->nccl;
  f->info.world_size = 4; /* the trainer and 3 workers */
  f->info.rank_offset = 2;
}

static void test_check_init(void) {
  init_fixture f;
  init_fixture_init(&f);
  wt_nccl_settings s;
  /* A server of 2 workers at ranks 2 and 3 of 4: vLLM's defaults. */
  WT_ASSERT_OK(wt_nccl_check_init(&f.info, 2, &s));
  CU_ASSERT_EQUAL(s.world_size, 4);
  CU_ASSERT_EQUAL(wt_nccl_worker_rank(&s, 0), 2);
  CU_ASSERT_EQUAL(wt_nccl_worker_rank(&s, 1), 3);
  CU_ASSERT_FALSE(s.packed);
  CU_ASSERT_EQUAL(s.buffer_bytes, 1ull << 30);
  CU_ASSERT_EQUAL(s.num_buffers, 2);
  CU_ASSERT_EQUAL(memcmp(s.unique_id, f.id, sizeof(f.id)), 0);
  /* The trainer's side checks only the world. */
  WT_ASSERT_OK(wt_nccl_check_init(&f.info, 0, &s));

  WT_ASSERT_ERR(wt_nccl_check_init(&f.info, 3, &s), WT_INVALID_ARGUMENT,
                "init_info.rank_offset 2 with 3 worker(s) needs ranks up to "
                "4; init_info.world_size 4 has ranks 0 to 3");
  f.info.rank_offset = 0;
  WT_ASSERT_ERR(wt_nccl_check_init(&f.info, 1, &s), WT_INVALID_ARGUMENT,
                "init_info.rank_offset is 0, the trainer's rank");
  f.info.rank_offset = 1;
  f.info.world_size = 1;
  WT_ASSERT_ERR(wt_nccl_check_init(&f.info, 1, &s), WT_INVALID_ARGUMENT,
                "init_info.world_size is 1; the trainer (rank 0) and at "
                "least one worker make 2");
  f.info.world_size = 1u << 31; /* a stranger's world */
  WT_ASSERT_ERR(wt_nccl_check_init(&f.info, 1, &s), WT_INVALID_ARGUMENT,
                "init_info.world_size is 2147483648; at most 65536");
  f.info.world_size = 2;
  f.nccl.nccl_unique_id.len = 127;
  WT_ASSERT_ERR(wt_nccl_check_init(&f.info, 1, &s), WT_INVALID_ARGUMENT,
                "init_info.nccl.nccl_unique_id is 127 bytes; an ncclUniqueId "
                "is 128");
  f.nccl.nccl_unique_id.len = 128;
  f.nccl.packed_buffer_size_bytes = &f.size;
  WT_ASSERT_ERR(wt_nccl_check_init(&f.info, 1, &s), WT_INVALID_ARGUMENT,
                "init_info.nccl.packed_buffer_size_bytes is 0");
  f.size.value = 4096;
  f.nccl.packed_num_buffers = &f.nbuf;
  f.nbuf.value = 17;
  WT_ASSERT_ERR(wt_nccl_check_init(&f.info, 1, &s), WT_INVALID_ARGUMENT,
                "init_info.nccl.packed_num_buffers is 17; between 1 and 16");
  f.nbuf.value = 3;
  f.nccl.packed = true;
  WT_ASSERT_OK(wt_nccl_check_init(&f.info, 1, &s));
  CU_ASSERT_TRUE(s.packed);
  CU_ASSERT_EQUAL(s.buffer_bytes, 4096);
  CU_ASSERT_EQUAL(s.num_buffers, 3);
  f.info.backend_init_case =
      WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_UCX;
  WT_ASSERT_ERR(wt_nccl_check_init(&f.info, 1, &s), WT_INVALID_ARGUMENT,
                "init_info.nccl is missing");
}

/* --- schedule ------------------------------------------------------------- */

static void test_schedule(void) {
  /* vLLM's plan: 5 buckets with 1 KiB buffers. */
  uint64_t sizes[] = {2048, 64, 1024, 1, 512, 600, 10};
  wt_pack_plan *plan = NULL;
  WT_ASSERT_OK(wt_pack_plan_build(sizes, 7, 1024, &plan));
  CU_ASSERT_EQUAL_FATAL(plan->nbuckets, 4);
  wt_nccl_step *s = NULL;
  WT_ASSERT_OK(wt_nccl_schedule(plan, 2, &s));
  /* Buffer and stream round-robin; a buffer is reused only after the
   * bucket before it on its stream. */
  for (size_t b = 0; b < plan->nbuckets; b++) {
    CU_ASSERT_EQUAL(s[b].bucket, b);
    CU_ASSERT_EQUAL(s[b].buffer, b % 2);
    CU_ASSERT_EQUAL(s[b].waits, b >= 2);
    if (b >= 2) CU_ASSERT_EQUAL(s[b].after, b - 2);
  }
  free(s);
  WT_ASSERT_OK(wt_nccl_schedule(plan, 1, &s));
  for (size_t b = 1; b < plan->nbuckets; b++) {
    CU_ASSERT_EQUAL(s[b].buffer, 0);
    CU_ASSERT_EQUAL(s[b].after, b - 1);
  }
  free(s);
  WT_ASSERT_ERR(wt_nccl_schedule(plan, 0, &s), WT_INVALID_ARGUMENT,
                "num_buffers is 0");
  wt_pack_plan_free(plan);
}

/* --- base64 --------------------------------------------------------------- */

static void test_base64(void) {
  /* RFC 4648's vectors. */
  const char *in[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
  const char *want[] = {"",         "Zg==",     "Zm8=",    "Zm9v",
                        "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
  for (int i = 0; i < 7; i++) {
    char out[16];
    wt_base64_encode((const unsigned char *)in[i], strlen(in[i]), out);
    CU_ASSERT_STRING_EQUAL(out, want[i]);
    unsigned char back[16];
    size_t n = 0;
    WT_ASSERT_OK(wt_base64_decode(want[i], back, sizeof(back), &n, "x"));
    CU_ASSERT_EQUAL(n, strlen(in[i]));
    CU_ASSERT_EQUAL(memcmp(back, in[i], n), 0);
  }
  /* A unique id, both ways, as vLLM's nccl_unique_id_b64. */
  unsigned char id[WT_NCCL_UNIQUE_ID_BYTES], back[WT_NCCL_UNIQUE_ID_BYTES];
  for (int i = 0; i < WT_NCCL_UNIQUE_ID_BYTES; i++)
    id[i] = (unsigned char)(i * 37 + 11);
  char text[4 * ((WT_NCCL_UNIQUE_ID_BYTES + 2) / 3) + 1];
  wt_base64_encode(id, sizeof(id), text);
  CU_ASSERT_EQUAL(strlen(text), 172);
  size_t n = 0;
  WT_ASSERT_OK(
      wt_base64_decode(text, back, sizeof(back), &n, "nccl_unique_id_b64"));
  CU_ASSERT_EQUAL(n, sizeof(id));
  CU_ASSERT_EQUAL(memcmp(back, id, n), 0);
  WT_ASSERT_ERR(wt_base64_decode("Zm9v-A==", back, sizeof(back), &n,
                                 "nccl_unique_id_b64"),
                WT_INVALID_ARGUMENT,
                "nccl_unique_id_b64: character 4 ('-') is not standard "
                "base64 (URL-safe base64 is not accepted)");
  WT_ASSERT_ERR(wt_base64_decode("Zm9", back, sizeof(back), &n, "b"),
                WT_INVALID_ARGUMENT, "b: 3 characters is not standard base64");
  WT_ASSERT_ERR(wt_base64_decode("Zm=v", back, sizeof(back), &n, "b"),
                WT_INVALID_ARGUMENT, "b: character 2 ('=')");
  WT_ASSERT_ERR(wt_base64_decode("Zm9vYmFy", back, 5, &n, "b"),
                WT_INVALID_ARGUMENT, "b: decodes to more than 5 bytes");
}

/* --- waits, on emulated communicators ------------------------------------- */

typedef struct rank_arg {
  unsigned char id[WT_NCCL_UNIQUE_ID_BYTES];
  int rank, nranks, device;
  int64_t deadline_ms;
  bool warm_up;
  size_t bytes; /* broadcast this many from rank 0 (0: none) */
  wt_mem_region buf;
  void *stream;
  void *comm;
  wt_status *st;
} rank_arg;

/* One rank: init, the warm-up all-reduce, one broadcast; every wait with
 * its deadline. The communicator stays for the caller. */
static void *run_rank(void *p) {
  rank_arg *a = p;
  const wt_nccl_api *nccl = NULL;
  const wt_cuda_api *cuda = NULL;
  wt_status *st = wt_nccl_api_get(&nccl);
  if (st == NULL) st = wt_cuda_api_get(&cuda);
  if (st == NULL) st = wt_cuda_bind(a->device);
  if (st == NULL) st = cuda->stream_create(a->device, &a->stream);
  if (st == NULL) st = nccl->comm_init(a->nranks, a->id, a->rank, &a->comm);
  char what[64];
  snprintf(what, sizeof(what), "rank %d of %d: init", a->rank, a->nranks);
  if (st == NULL)
    st = wt_nccl_wait(nccl, cuda, &a->comm, NULL, a->deadline_ms, NULL, what);
  if (st == NULL && a->warm_up) {
    wt_mem_region one;
    wt_device dev = {.type = WT_DEVICE_CUDA, .index = a->device};
    st = wt_mem_alloc(WT_MEM_DEVICE, dev, sizeof(float), "warm-up", &one);
    if (st == NULL)
      st = nccl->all_reduce_f32(one.base, one.base, 1, a->comm, a->stream);
    snprintf(what, sizeof(what), "rank %d: warm-up", a->rank);
    if (st == NULL)
      st = wt_nccl_wait(nccl, cuda, &a->comm, a->stream, a->deadline_ms, NULL,
                        what);
    wt_mem_free(&one);
  }
  if (st == NULL && a->bytes > 0) {
    st = nccl->broadcast(a->buf.base, a->buf.base, a->bytes, 0, a->comm,
                         a->stream);
    snprintf(what, sizeof(what), "rank %d: broadcast", a->rank);
    if (st == NULL)
      st = wt_nccl_wait(nccl, cuda, &a->comm, a->stream, a->deadline_ms, NULL,
                        what);
  }
  a->st = st;
  return NULL;
}

static void test_wait_rendezvous_and_broadcast(void) {
  fake_nccl_stats s0 = fake_nccl_get_stats();
  const wt_nccl_api *nccl = NULL;
  const wt_cuda_api *cuda = NULL;
  WT_ASSERT_OK(wt_nccl_api_get(&nccl));
  WT_ASSERT_OK(wt_cuda_api_get(&cuda));
  rank_arg a[3];
  memset(a, 0, sizeof(a));
  unsigned char id[WT_NCCL_UNIQUE_ID_BYTES];
  WT_ASSERT_OK(nccl->get_unique_id(id));
  enum { BYTES = 4099 };
  for (int r = 0; r < 3; r++) {
    memcpy(a[r].id, id, sizeof(id));
    a[r].rank = r;
    a[r].nranks = 3;
    a[r].device = r == 0 ? 0 : 1;
    a[r].deadline_ms = wt_mono_ms() + 5000;
    a[r].warm_up = true;
    a[r].bytes = BYTES;
    wt_device dev = {.type = WT_DEVICE_CUDA, .index = a[r].device};
    WT_ASSERT_OK(wt_cuda_bind(a[r].device));
    WT_ASSERT_OK(wt_mem_alloc(WT_MEM_DEVICE, dev, BYTES, "test", &a[r].buf));
  }
  unsigned char src[BYTES], got[BYTES];
  for (int i = 0; i < BYTES; i++) src[i] = (unsigned char)(i * 7 + 3);
  WT_ASSERT_OK(wt_mem_write(&a[0].buf, 0, src, BYTES, NULL));
  pthread_t th[3];
  for (int r = 0; r < 3; r++) pthread_create(&th[r], NULL, run_rank, &a[r]);
  for (int r = 0; r < 3; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < 3; r++) {
    WT_ASSERT_OK(a[r].st);
    a[r].st = NULL;
    memset(got, 0, sizeof(got));
    WT_ASSERT_OK(wt_cuda_bind(a[r].device));
    WT_ASSERT_OK(wt_mem_read(&a[r].buf, 0, got, BYTES, NULL));
    CU_ASSERT_EQUAL(memcmp(got, src, BYTES), 0);
  }
  fake_nccl_stats s1 = fake_nccl_get_stats();
  CU_ASSERT_EQUAL(s1.inits - s0.inits, 3);
  CU_ASSERT_EQUAL(s1.all_reduces - s0.all_reduces, 3);
  CU_ASSERT_EQUAL(s1.broadcasts - s0.broadcasts, 3);

  /* Rank 0 goes (killed, or aborted on its own error): the others' next
   * wait sees the remote error and aborts, at once. */
  nccl->comm_abort(a[0].comm);
  a[0].comm = NULL;
  for (int r = 1; r < 3; r++) {
    WT_ASSERT_OK(wt_cuda_bind(a[r].device));
    WT_ASSERT_OK(nccl->broadcast(a[r].buf.base, a[r].buf.base, BYTES, 0,
                                 a[r].comm, a[r].stream));
    int64_t t0 = wt_mono_ms();
    WT_ASSERT_ERR(wt_nccl_wait(nccl, cuda, &a[r].comm, a[r].stream,
                               wt_mono_ms() + 5000, NULL, "rank 1: bucket 0"),
                  WT_UNAVAILABLE,
                  "communicator aborted: rank 1: bucket 0: fake "
                  "ncclCommGetAsyncError: remote process exited");
    CU_ASSERT(wt_mono_ms() - t0 < 1000);
    CU_ASSERT_PTR_NULL(a[r].comm);
  }
  for (int r = 0; r < 3; r++) {
    WT_ASSERT_OK(wt_cuda_bind(a[r].device));
    int done = 0;
    WT_ASSERT_OK(cuda->stream_query(a[r].stream, &done));
    CU_ASSERT_TRUE(done); /* aborting ended what was queued */
    cuda->stream_destroy(a[r].stream);
    wt_mem_free(&a[r].buf);
  }
  CU_ASSERT_EQUAL(fake_nccl_get_stats().comms_now, s0.comms_now);
}

static atomic_bool cancel_flag;

static void *cancel_later(void *p) {
  (void)p;
  struct timespec ts = {0, 100 * 1000 * 1000};
  nanosleep(&ts, NULL);
  atomic_store(&cancel_flag, true);
  return NULL;
}

static void test_wait_deadline_and_cancel(void) {
  const wt_nccl_api *nccl = NULL;
  const wt_cuda_api *cuda = NULL;
  WT_ASSERT_OK(wt_nccl_api_get(&nccl));
  WT_ASSERT_OK(wt_cuda_api_get(&cuda));
  fake_nccl_stats s0 = fake_nccl_get_stats();
  unsigned char id[WT_NCCL_UNIQUE_ID_BYTES];
  WT_ASSERT_OK(nccl->get_unique_id(id));
  /* Rank 1 of 2 whose trainer never comes: aborted at its deadline, with
   * the wait named. */
  void *comm = NULL;
  WT_ASSERT_OK(wt_cuda_bind(0));
  WT_ASSERT_OK(nccl->comm_init(2, id, 1, &comm));
  int64_t t0 = wt_mono_ms();
  WT_ASSERT_ERR(wt_nccl_wait(nccl, cuda, &comm, NULL, wt_mono_ms() + 300, NULL,
                             "rank 1 of 2: the communicator's init"),
                WT_DEADLINE_EXCEEDED,
                "communicator aborted: rank 1 of 2: the communicator's init: "
                "no progress within 300 ms");
  int64_t took = wt_mono_ms() - t0;
  CU_ASSERT(took >= 300 && took < 1000);
  CU_ASSERT_PTR_NULL(comm);
  CU_ASSERT_EQUAL(fake_nccl_get_stats().aborts - s0.aborts, 1);
  /* The same id can be used again once every rank of it is gone. */
  WT_ASSERT_OK(nccl->comm_init(2, id, 1, &comm));
  /* A cancel ends the wait at once, and aborts too. */
  atomic_store(&cancel_flag, false);
  pthread_t th;
  pthread_create(&th, NULL, cancel_later, NULL);
  t0 = wt_mono_ms();
  WT_ASSERT_ERR(wt_nccl_wait(nccl, cuda, &comm, NULL, wt_mono_ms() + 10000,
                             &cancel_flag, "rank 1 of 2: init"),
                WT_CANCELLED, "rank 1 of 2: init: cancelled");
  pthread_join(th, NULL);
  CU_ASSERT(wt_mono_ms() - t0 < 1000);
  CU_ASSERT_PTR_NULL(comm);
  /* Two ranks that say different world sizes: refused at init. */
  WT_ASSERT_OK(nccl->comm_init(2, id, 0, &comm));
  void *other = NULL;
  WT_ASSERT_ERR(nccl->comm_init(3, id, 1, &other), WT_INVALID_ARGUMENT,
                "another rank said another size");
  nccl->comm_abort(comm);
  CU_ASSERT_EQUAL(fake_nccl_get_stats().comms_now, s0.comms_now);
}

/* --- the engines, trainer and workers in this process ----------------------
 */

typedef wtt_device_model dev_model;

static void dev_model_fill(dev_model *d, const wtt_server *s, uint64_t seed) {
  wtt_device_model_fill(d, s, seed, 1);
}

static wtt_server S, S2;

/* The worker states of a server, joined: "ready,needs_init". */
static void states(wt_rpc_channel *ch, char *out, size_t cap) {
  Wt__V1__ServerInfo *si = wtt_info(ch);
  out[0] = '\0';
  for (size_t i = 0; i < si->n_workers; i++)
    snprintf(out + strlen(out), cap - strlen(out), "%s%s", i ? "," : "",
             si->workers[i]->state);
  wt_pb_free(&si->base);
}

/* Rounds to two servers (two GPU workers and one), packed and unpacked:
 * the rendezvous by unique id with the warm-up, the bytes verified on
 * every worker; a trainer that stops broadcasting mid-round: every worker
 * aborts within the data deadline and goes to needs_init, the previous
 * version stays, and a new init's round commits. */
static void test_rounds(void) {
  wt_server_options two = {.devices = "cuda:0,cuda:1"};
  wt_server_options one = {.devices = "cuda:1"};
  wtt_server_start(&S, "tiny", &two);
  wtt_server_start(&S2, "tiny", &one);
  const char *targets[2] = {S.target, S2.target};
  wt_client_options co = {.timeout_ms = 10000, .data_timeout_ms = 10000};
  wt_sync_client *c = NULL;
  WT_ASSERT_OK(wt_sync_client_new(targets, 2, &co, &c));
  dev_model d = {0};
  fake_nccl_stats s0 = fake_nccl_get_stats();
  for (int packed = 0; packed <= 1; packed++) {
    wt_backend_option opts[3] = {{"packed", packed ? "1" : "0"},
                                 {"bucket_size", "1K"},
                                 {"num_buffers", "2"}};
    Wt__V1__WeightTransferInitInfo *info = NULL;
    WT_ASSERT_OK(wt_trainer_init_info("nccl", opts, 3, &info));
    info->timeout_ms = 500;
    wt_trainer *t = NULL;
    WT_ASSERT_OK(wt_cuda_bind(0));
    WT_ASSERT_OK(wt_sync_client_init_transfer(c, info, NULL, &t));
    wt_pb_free(&info->base);
    for (uint64_t seed = 40; seed <= 42; seed++) {
      dev_model_fill(&d, &S, seed + (uint64_t)packed * 10);
      wt_source *src = NULL;
      WT_ASSERT_OK(wt_source_memory(d.t, d.n, &src));
      WT_ASSERT_OK(wt_sync_client_start(c));
      WT_ASSERT_OK(wt_sync_client_update(c, t, src, NULL, NULL));
      WT_ASSERT_OK(wt_sync_client_finish(c, packed ? "packed" : "unpacked"));
      wtt_assert_model_seed(&S, seed + (uint64_t)packed * 10);
      wtt_assert_model_seed(&S2, seed + (uint64_t)packed * 10);
      wt_source_destroy(src);
    }
    wt_trainer_destroy(t);
  }
  fake_nccl_stats s1 = fake_nccl_get_stats();
  /* Two inits of 4 ranks, each with its warm-up. Unpacked: 7 broadcasts a
   * round; packed with 1 KiB buffers, tiny's 7 tensors are 3 buckets. */
  CU_ASSERT_EQUAL(s1.inits - s0.inits, 8);
  CU_ASSERT_EQUAL(s1.all_reduces - s0.all_reduces, 8);
  CU_ASSERT_EQUAL(s1.broadcasts - s0.broadcasts, 4 * (3 * 7 + 3 * 3));
  /* The workers keep the last init's communicators until the next. */
  CU_ASSERT_EQUAL(s1.comms_now - s0.comms_now, 3);

  /* The trainer stops mid-round (its process hung, or died): a server's
   * UpdateWeights with nobody broadcasting. */
  wt_backend_option opts[1] = {{"packed", "1"}};
  Wt__V1__WeightTransferInitInfo *info = NULL;
  WT_ASSERT_OK(wt_trainer_init_info("nccl", opts, 1, &info));
  info->timeout_ms = 300;
  wt_trainer *t = NULL;
  WT_ASSERT_OK(wt_sync_client_init_transfer(c, info, NULL, &t));
  wt_pb_free(&info->base);
  WT_ASSERT_OK(wt_sync_client_start(c));
  wtt_upd u;
  wtt_upd_init(&u, S.metas, NULL, S.n);
  Wt__V1__NcclUpdateInfo nu = WT__V1__NCCL_UPDATE_INFO__INIT;
  u.info.packed = true;
  u.info.backend_update_case =
      WT__V1__WEIGHT_TRANSFER_UPDATE_INFO__BACKEND_UPDATE_NCCL;
  u.info.nccl = &nu;
  int64_t t0 = wt_mono_ms();
  wt_status *ust = wtt_update(S.ch, &u.info, wt_sync_client_round_id(c, 0));
  CU_ASSERT(wt_mono_ms() - t0 < 2000);
  /* The first worker to reach its deadline aborts; its neighbour may see
   * that as the peer gone first. Either way the wait is named. */
  CU_ASSERT_PTR_NOT_NULL_FATAL(ust);
  CU_ASSERT(wt_status_code(ust) == WT_DEADLINE_EXCEEDED ||
            wt_status_code(ust) == WT_UNAVAILABLE);
  CU_ASSERT_PTR_NOT_NULL(
      strstr(wt_status_message(ust), "communicator aborted: nccl worker"));
  CU_ASSERT_PTR_NOT_NULL(strstr(wt_status_message(ust), "the last buckets"));
  wt_status_free(ust);
  char st[128];
  states(S.ch, st, sizeof(st));
  CU_ASSERT_STRING_EQUAL(st, "needs_init,needs_init");
  wtt_assert_model_seed(&S, 52);
  wtt_assert_version(S.ch, "packed", 6);
  wt_status_free(wt_sync_client_abort(c, "test"));
  wt_trainer_destroy(t);

  /* An update info that lies about the init's buffers, or about packing:
   * refused by name before any collective; the server answers and the
   * committed bytes stay. */
  {
    Wt__V1__UInt32Value nb = WT__V1__UINT32_VALUE__INIT;
    Wt__V1__UInt64Value bb = WT__V1__UINT64_VALUE__INIT;
    const struct {
      bool packed;
      Wt__V1__UInt32Value *num;
      Wt__V1__UInt64Value *size;
      const char *want;
    } lies[] = {
        {true, &nb, NULL,
         "update_info.nccl.packed_num_buffers is 7; this init "
         "has 2"},
        {true, NULL, &bb, "update_info.nccl.packed_buffer_size_bytes is 0"},
        {false, NULL, NULL, "update_info.packed is false; this init is packed"},
    };
    nb.value = 7;
    for (size_t i = 0; i < sizeof(lies) / sizeof(lies[0]); i++) {
      WT_ASSERT_OK(wt_trainer_init_info("nccl", opts, 1, &info));
      info->timeout_ms = 500;
      WT_ASSERT_OK(wt_sync_client_init_transfer(c, info, NULL, &t));
      wt_pb_free(&info->base);
      WT_ASSERT_OK(wt_sync_client_start(c));
      nu.packed_num_buffers = lies[i].num;
      nu.packed_buffer_size_bytes = lies[i].size;
      u.info.packed = lies[i].packed;
      WT_ASSERT_ERR(wtt_update(S.ch, &u.info, wt_sync_client_round_id(c, 0)),
                    WT_INVALID_ARGUMENT, lies[i].want);
      wtt_assert_serving(S.ch, 2);
      wtt_assert_model_seed(&S, 52);
      wt_status_free(wt_sync_client_abort(c, "test"));
      wt_trainer_destroy(t);
    }
    nu.packed_num_buffers = NULL;
    nu.packed_buffer_size_bytes = NULL;
  }
  /* A new init: a new communicator, and the round commits. */
  WT_ASSERT_OK(wt_trainer_init_info("nccl", opts, 1, &info));
  info->timeout_ms = 500;
  WT_ASSERT_OK(wt_sync_client_init_transfer(c, info, NULL, &t));
  wt_pb_free(&info->base);
  dev_model_fill(&d, &S, 60);
  wt_source *src = NULL;
  WT_ASSERT_OK(wt_source_memory(d.t, d.n, &src));
  WT_ASSERT_OK(wt_sync_client_start(c));
  WT_ASSERT_OK(wt_sync_client_update(c, t, src, NULL, NULL));
  WT_ASSERT_OK(wt_sync_client_finish(c, "after-stop"));
  wtt_assert_model_seed(&S, 60);
  wtt_assert_model_seed(&S2, 60);
  states(S.ch, st, sizeof(st));
  CU_ASSERT_STRING_EQUAL(st, "ready,ready");
  wt_source_destroy(src);
  wt_trainer_destroy(t);

  /* A host tensor is refused, naming it, before a collective. */
  WT_ASSERT_OK(wt_trainer_init_info("nccl", opts, 1, &info));
  WT_ASSERT_OK(wt_sync_client_init_transfer(c, info, NULL, &t));
  wt_pb_free(&info->base);
  WT_ASSERT_OK(wt_source_synthetic("tiny", 3, &src));
  WT_ASSERT_OK(wt_sync_client_start(c));
  WT_ASSERT_ERR(wt_sync_client_update(c, t, src, NULL, NULL),
                WT_INVALID_ARGUMENT, "backend 'nccl'");
  wt_source_destroy(src);
  wt_trainer_destroy(t);
  wt_mem_free(&d.r);
  wt_sync_client_destroy(c);
  wtt_server_stop(&S2);
  wtt_server_stop(&S);
  CU_ASSERT_EQUAL(fake_nccl_get_stats().comms_now, s0.comms_now);
}

/* An init whose other ranks never come: every worker gives up within the
 * init's deadline, naming the wait, and the server still serves. A bad
 * init info is refused by name before anything starts. */
static void test_init_strangers(void) {
  wt_server_options two = {.devices = "cuda:0,cuda:1"};
  wtt_server_start(&S, "tiny", &two);
  init_fixture f;
  init_fixture_init(&f);
  f.info.world_size = 3;
  f.info.rank_offset = 1;
  f.info.timeout_ms = 300;
  int64_t t0 = wt_mono_ms();
  WT_ASSERT_ERR(wtt_init(S.ch, &f.info, NULL), WT_DEADLINE_EXCEEDED,
                "joining the trainer's communicator (3 ranks): no progress "
                "within 300 ms");
  CU_ASSERT(wt_mono_ms() - t0 < 2000);
  f.info.world_size = 2; /* two workers do not fit in 2 ranks */
  WT_ASSERT_ERR(wtt_init(S.ch, &f.info, NULL), WT_INVALID_ARGUMENT,
                "init_info.rank_offset 1 with 2 worker(s) needs ranks up to 2");
  f.info.world_size = 3;
  f.nccl.nccl_unique_id.len = 127;
  WT_ASSERT_ERR(wtt_init(S.ch, &f.info, NULL), WT_INVALID_ARGUMENT,
                "nccl_unique_id is 127 bytes");
  wtt_assert_serving(S.ch, 2);
  CU_ASSERT_EQUAL(fake_nccl_get_stats().comms_now, 0);
  wtt_server_stop(&S);
}

/* ---- an unmodified vLLM worker's dicts
 * ----------------------------------------- */

/* A stand-in for a vLLM worker behind vLLM's routes: it takes the dicts a
 * vLLM worker takes, joins the NCCL group from nccl_unique_id_b64 as rank
 * rank_offset of world_size (with the warm-up all-reduce), and receives
 * each tensor of update_info by broadcast from rank 0, as vLLM's unpacked
 * receive does; it hashes what arrived. */
typedef struct vllm_stand_in {
  pthread_mutex_t mu;
  json_t *init, *update, *finish;
  rank_arg a;
  const wtt_server *layout;
  uint64_t seed;
  size_t received, right;
} vllm_stand_in;

#define TRY(x)                 \
  do {                         \
    wt_status *e_ = (x);       \
    if (e_ != NULL) return e_; \
  } while (0)

static wt_status *stand_in_receive(vllm_stand_in *w, json_t *info) {
  const wt_nccl_api *nccl = NULL;
  const wt_cuda_api *cuda = NULL;
  TRY(wt_nccl_api_get(&nccl));
  TRY(wt_cuda_api_get(&cuda));
  TRY(wt_cuda_bind(w->a.device));
  json_t *names = json_object_get(info, "names");
  json_t *dtypes = json_object_get(info, "dtype_names");
  json_t *shapes = json_object_get(info, "shapes");
  for (size_t i = 0; i < json_array_size(names); i++) {
    const char *name = json_string_value(json_array_get(names, i));
    size_t idx = wtt_layout_index(w->layout, name);
    wt_dtype dt;
    TRY(wt_dtype_from_torch_name(json_string_value(json_array_get(dtypes, i)),
                                 &dt));
    uint64_t n = wt_dtype_itemsize(dt);
    json_t *dims = json_array_get(shapes, i);
    for (size_t d = 0; d < json_array_size(dims); d++)
      n *= (uint64_t)json_integer_value(json_array_get(dims, d));
    wt_mem_region buf;
    wt_device dev = {.type = WT_DEVICE_CUDA, .index = w->a.device};
    TRY(wt_mem_alloc(WT_MEM_DEVICE, dev, n ? n : 1, "stand-in", &buf));
    wt_status *st =
        nccl->broadcast(buf.base, buf.base, n, 0, w->a.comm, w->a.stream);
    if (st == NULL)
      st = wt_nccl_wait(nccl, cuda, &w->a.comm, w->a.stream,
                        wt_mono_ms() + 5000, NULL, "stand-in: a tensor");
    unsigned char *host = malloc(n ? n : 1);
    if (st == NULL) st = wt_mem_read(&buf, 0, host, n, NULL);
    if (st == NULL && idx != (size_t)-1) {
      char got[WT_DIGEST_HEX_MAX], want[WT_DIGEST_HEX_MAX];
      wt_status_free(wt_digest_hex(WT_HASH_SHA256, host, n, got));
      wtt_expected_digest(&w->layout->metas[idx], w->seed, WT_HASH_SHA256,
                          want);
      w->right += strcmp(got, want) == 0;
    }
    w->received++;
    free(host);
    wt_mem_free(&buf);
    if (st != NULL) return st;
  }
  return NULL;
}

static void stand_in_cb(void *user, size_t k, int m, const char *req,
                        wt_control_reply *reply) {
  (void)k;
  vllm_stand_in *w = user;
  json_t *j = json_loads(req, 0, NULL);
  wt_status *st = NULL;
  pthread_mutex_lock(&w->mu);
  if (m == WT_CONTROL_INIT) {
    json_decref(w->init);
    w->init = json_incref(json_object_get(j, "init_info"));
    size_t n = 0;
    st = wt_base64_decode(
        json_string_value(json_object_get(w->init, "nccl_unique_id_b64")),
        w->a.id, sizeof(w->a.id), &n, "nccl_unique_id_b64");
    w->a.rank =
        (int)json_integer_value(json_object_get(w->init, "rank_offset"));
    w->a.nranks =
        (int)json_integer_value(json_object_get(w->init, "world_size"));
    w->a.device = 1;
    w->a.warm_up = true;
    w->a.bytes = 0;
    w->a.deadline_ms = wt_mono_ms() + 5000;
    if (st == NULL) {
      run_rank(&w->a); /* joins beside the trainer's connect */
      st = w->a.st;
      w->a.st = NULL;
    }
  } else if (m == WT_CONTROL_UPDATE) {
    json_decref(w->update);
    w->update = json_incref(json_object_get(j, "update_info"));
    st = stand_in_receive(w, w->update);
  } else if (m == WT_CONTROL_FINISH) {
    json_decref(w->finish);
    w->finish = json_incref(j);
  }
  pthread_mutex_unlock(&w->mu);
  json_decref(j);
  if (st == NULL)
    wt_control_reply_ok(reply, NULL); /* vLLM's routes answer nothing */
  else
    wt_control_reply_error(reply, (int)wt_status_code(st),
                           wt_status_message(st));
  wt_status_free(st);
}

/* The keys and JSON types of a vLLM dict, as vLLM's dataclasses declare
 * them (nccl_common.NCCLWeightTransferInitInfo, kw_only, with the
 * unique-id rendezvous: master_address and master_port left out;
 * nccl_engine.NCCLWeightTransferUpdateInfo). */
static const struct {
  const char *key;
  json_type type;
} vllm_init_fields[] = {{"nccl_unique_id_b64", JSON_STRING},
                        {"rank_offset", JSON_INTEGER},
                        {"world_size", JSON_INTEGER},
                        {"packed", JSON_TRUE},
                        {"packed_buffer_size_bytes", JSON_INTEGER},
                        {"packed_num_buffers", JSON_INTEGER}},
  vllm_update_fields[] = {{"names", JSON_ARRAY},
                          {"dtype_names", JSON_ARRAY},
                          {"shapes", JSON_ARRAY}};

static bool has_fields(json_t *o, const void *table, size_t n) {
  const struct {
    const char *key;
    json_type type;
  } *t = table;
  if (!json_is_object(o) || json_object_size(o) != n) return false;
  for (size_t i = 0; i < n; i++) {
    json_t *v = json_object_get(o, t[i].key);
    json_type ty = v ? json_typeof(v) : JSON_NULL;
    if (ty == JSON_FALSE) ty = JSON_TRUE;
    if (v == NULL || ty != t[i].type) return false;
  }
  return true;
}

/* wt's nccl trainer engine driven through a control plane of vLLM's shape
 * (its routes' dicts, answers of nothing): the dicts have exactly vLLM's
 * fields and types, the unique id is vLLM's base64, the ranks are vLLM's;
 * a stand-in worker that reads only those dicts joins, receives every
 * tensor, and hashes the trainer's bytes. A backend vLLM cannot receive is
 * refused by name, and a wrong NCCL version too. */
static void test_vllm_dicts(void) {
  wtt_server L;
  wt_server_options one = {.devices = "cuda:0"};
  wtt_server_start(&L, "tiny", &one); /* for the layout only */
  static vllm_stand_in w;
  memset(&w, 0, sizeof(w));
  pthread_mutex_init(&w.mu, NULL);
  w.layout = &L;
  w.seed = 61;
  const char *targets[] = {"http://vllm-stand-in:8000"};
  wt_control_plane cp;
  WT_ASSERT_OK(wt_control_callback_new(targets, 1, WT_CONTROL_REQUIRED,
                                       WT_CONTROL_VLLM_DICTS, stand_in_cb, &w,
                                       &cp));
  wt_sync_client *c = NULL;
  WT_ASSERT_OK(wt_bindings_client_new_with(&cp, 10000, 10000, &c));
  Wt__V1__WeightTransferInitInfo *info = NULL;
  WT_ASSERT_OK(wt_trainer_init_info("nccl", NULL, 0, &info));
  info->timeout_ms = 2000;
  wt_trainer *t = NULL;
  WT_ASSERT_OK(wt_cuda_bind(0));
  WT_ASSERT_OK(wt_sync_client_init_transfer(c, info, NULL, &t));
  wt_pb_free(&info->base);
  CU_ASSERT(has_fields(w.init, vllm_init_fields, 6));
  CU_ASSERT_EQUAL(json_integer_value(json_object_get(w.init, "rank_offset")),
                  1);
  CU_ASSERT_EQUAL(json_integer_value(json_object_get(w.init, "world_size")), 2);
  CU_ASSERT_EQUAL(
      strlen(json_string_value(json_object_get(w.init, "nccl_unique_id_b64"))),
      172);
  CU_ASSERT_EQUAL(
      json_integer_value(json_object_get(w.init, "packed_buffer_size_bytes")),
      1073741824);
  dev_model d = {0};
  dev_model_fill(&d, &L, w.seed);
  wt_source *src = NULL;
  WT_ASSERT_OK(wt_source_memory(d.t, d.n, &src));
  WT_ASSERT_OK(wt_sync_client_start(c));
  WT_ASSERT_OK(wt_sync_client_update(c, t, src, NULL, NULL));
  WT_ASSERT_OK(wt_sync_client_finish(c, "vllm-1"));
  CU_ASSERT(has_fields(w.update, vllm_update_fields, 3));
  json_t *shape0 = json_array_get(json_object_get(w.update, "shapes"), 0);
  CU_ASSERT(json_is_array(shape0) &&
            json_is_integer(json_array_get(shape0, 0)));
  CU_ASSERT_STRING_EQUAL(json_string_value(json_array_get(
                             json_object_get(w.update, "dtype_names"), 0)),
                         "bfloat16");
  CU_ASSERT_STRING_EQUAL(
      json_string_value(json_object_get(w.finish, "weight_version")), "vllm-1");
  CU_ASSERT_EQUAL(w.received, L.n);
  CU_ASSERT_EQUAL(w.right, L.n); /* the stand-in received the trainer's bytes */
  printf(
      "\n  a vLLM stand-in joined from vLLM's dicts and hashed %zu of %zu "
      "tensors as the trainer's\n",
      w.right, L.n);
  wt_source_destroy(src);
  wt_trainer_destroy(t);
  t = NULL;
  /* A backend a vLLM worker cannot receive, refused by name. */
  Wt__V1__WeightTransferInitInfo *ipc = NULL;
  WT_ASSERT_OK(wt_trainer_init_info("ipc", NULL, 0, &ipc));
  WT_ASSERT_ERR(wt_sync_client_init_transfer(c, ipc, NULL, &t),
                WT_INVALID_ARGUMENT,
                "backend 'ipc' to a vLLM control plane: a vLLM worker receives "
                "only nccl");
  wt_pb_free(&ipc->base);
  wt_sync_client_destroy(c);
  if (w.a.comm) {
    const wt_nccl_api *nccl = NULL;
    WT_ASSERT_OK(wt_nccl_api_get(&nccl));
    WT_ASSERT_OK(wt_cuda_bind(1));
    nccl->comm_destroy(w.a.comm);
  }
  if (w.a.stream) {
    const wt_cuda_api *cuda = NULL;
    WT_ASSERT_OK(wt_cuda_api_get(&cuda));
    cuda->stream_destroy(w.a.stream);
  }
  json_decref(w.init);
  json_decref(w.update);
  json_decref(w.finish);
  wt_mem_free(&d.r);
  wtt_server_stop(&L);

  /* The NCCL a trainer loads must be its peers': a mismatch is named. */
  int code = 0;
  WT_ASSERT_OK(wt_nccl_version_parse("2.27.3", &code));
  CU_ASSERT_EQUAL(code, 22703);
  WT_ASSERT_ERR(wt_nccl_version_parse("2.27", &code), WT_INVALID_ARGUMENT,
                "nccl_version '2.27'");
  fake_nccl_set_version(22809);
  WT_ASSERT_OK(wt_nccl_select(NULL, "2.28.9"));
  WT_ASSERT_ERR(wt_nccl_select(NULL, "2.27.3"), WT_FAILED_PRECONDITION,
                "NCCL 2.28.9 is loaded here (fake), the peers run 2.27.3");
  WT_ASSERT_ERR(wt_nccl_select("/nonexistent/libnccl.so.2", NULL),
                WT_FAILED_PRECONDITION,
                "nccl_library /nonexistent/libnccl.so.2");
  fake_nccl_set_version(0);
}

/* The real module, where this build has one: it loads lazily, names its
 * NCCL, and draws a unique id (which needs no GPU); elsewhere the error
 * says why. */
static void test_module(void) {
  wt_nccl_api_override(NULL);
  const wt_nccl_api *api = NULL;
  wt_status *st = wt_nccl_api_get(&api);
  if (st != NULL) {
    printf("\n  no NCCL module here: %s\n", wt_status_message(st));
    WT_ASSERT_ERR(st, WT_FAILED_PRECONDITION, "NCCL is unavailable");
  } else {
    unsigned char id[WT_NCCL_UNIQUE_ID_BYTES] = {0}, zero[sizeof(id)] = {0};
    int v = api->version_code();
    printf("\n  %s (ncclGetVersion %d)\n", api->name, v);
    CU_ASSERT(v >= 21800);
    CU_ASSERT_PTR_NOT_NULL(strstr(api->name, "NCCL 2."));
    WT_ASSERT_OK(api->get_unique_id(id));
    CU_ASSERT_NOT_EQUAL(memcmp(id, zero, sizeof(id)), 0);
  }
  fake_nccl_install();
}

static int suite_init(void) {
  fake_cuda_install(2);
  fake_nccl_install();
  return 0;
}

static int suite_clean(void) {
  fake_nccl_uninstall();
  fake_cuda_uninstall();
  return 0;
}

void wt_test_suite_nccl(void);
void wt_test_suite_nccl(void) {
  CU_pSuite s = CU_add_suite("nccl", suite_init, suite_clean);
  CU_add_test(s, "init info: ranks, unique id, buffers", test_check_init);
  CU_add_test(s, "the broadcast schedule of a plan", test_schedule);
  CU_add_test(s, "vLLM's base64 of the unique id", test_base64);
  CU_add_test(s, "vLLM's dicts from the nccl trainer engine", test_vllm_dicts);
  CU_add_test(s, "rendezvous, warm-up, broadcast, a peer gone",
              test_wait_rendezvous_and_broadcast);
  CU_add_test(s, "a wait's deadline and cancel abort",
              test_wait_deadline_and_cancel);
  CU_add_test(s, "rounds packed and unpacked, a trainer that stops",
              test_rounds);
  CU_add_test(s, "an init whose peers never come, bad init infos",
              test_init_strangers);
  CU_add_test(s, "the NCCL module, where built", test_module);
}
