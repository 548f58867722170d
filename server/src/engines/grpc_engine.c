/* grpc_engine.c: placeholder, being written. */
