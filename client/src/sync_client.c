/* sync_client.c: placeholder, being written. */
