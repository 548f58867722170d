/* wt/visibility.h: WT_HIDDEN, the one mark of a function shared between a
 * library's own files and hidden from its users (every internal header of
 * libwt_common, libwt_server and libwt_client uses it). */
#ifndef WT_VISIBILITY_H
#define WT_VISIBILITY_H

#define WT_HIDDEN __attribute__((visibility("hidden")))

#endif /* WT_VISIBILITY_H */
