/* checksum.c: placeholder, being written. */
