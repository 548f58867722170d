/* example.c: a trainer of three rounds, built against an installed wt
 * (tests/install/CMakeLists.txt with find_package(wt), or pkg-config
 * wt-client). Usage: example HOST:PORT [BACKEND]; the server serves
 * synthetic:tiny. Every parameter's digest on the server is checked
 * against the bytes sent. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <wt/client.h>
#include <wt/pb.h>
#include <wt/trainer.h>

int main(int argc, char **argv) {
  const char *servers[] = {argc > 1 ? argv[1] : "127.0.0.1:50051"};
  const char *backend = argc > 2 ? argv[2] : "grpc";
  wt_sync_client *c = NULL;
  wt_trainer *t = NULL;
  wt_source *src = NULL;
  Wt__V1__WeightTransferInitInfo *info = NULL;
  wt_param_checksum *sums = NULL;
  char(*mine)[WT_DIGEST_HEX_MAX] = NULL;
  size_t nsums = 0, same = 0;
  wt_status *st = wt_sync_client_new(servers, 1, NULL, &c);
  if (!st) st = wt_source_synthetic("tiny", 42, &src);
  if (!st) st = wt_trainer_init_info(backend, NULL, 0, &info);
  if (!st) st = wt_sync_client_init_transfer(c, info, src, &t);
  for (int step = 1; step <= 3 && !st; step++) {
    char version[32];
    snprintf(version, sizeof(version), "example-%d", step);
    st = wt_sync_client_start(c);
    if (!st) st = wt_sync_client_update(c, t, NULL, NULL, NULL);
    if (!st) st = wt_sync_client_finish(c, version);
  }
  if (!st) st = wt_source_checksums(src, WT_HASH_SHA256, &mine);
  if (!st)
    st = wt_sync_client_checksums(c, 0, NULL, 0, WT_HASH_SHA256, true, &sums,
                                  &nsums);
  for (size_t i = 0; !st && i < nsums; i++)
    same += strcmp(sums[i].digest, mine[i % wt_source_count(src)]) == 0;
  if (st)
    fprintf(stderr, "example: %s\n", wt_status_message(st));
  else
    printf("example: 3 rounds over %s; %zu of %zu digests verified\n", backend,
           same, nsums);
  int rc = st || same != nsums || nsums == 0 ? 1 : 0;
  wt_param_checksums_free(sums, nsums);
  free(mine);
  wt_pb_free(info ? &info->base : NULL);
  wt_trainer_destroy(t);
  wt_source_destroy(src);
  wt_sync_client_destroy(c);
  wt_status_free(st);
  return rc;
}
