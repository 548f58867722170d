/* wt/visibility.h: which of a library's functions its users see.
 *
 * wt's libraries are built with hidden visibility by default
 * (-fvisibility=hidden): a function is exported only when declared between
 * WT_API_BEGIN and WT_API_END, which every header of a library's interface
 * puts around its declarations (the installed headers, and the private
 * headers one wt library offers another). Each library's version script
 * (cmake/abi.cmake) then puts what an installed header declares in the
 * version node WT_0.1, the ABI, and what a private header declares in
 * WT_PRIVATE_0.1, for wt's own components only (docs/libraries.md, "The
 * ABI"). WT_HIDDEN marks, for the reader, a function shared between one
 * library's own files. */
#ifndef WT_VISIBILITY_H
#define WT_VISIBILITY_H

#if defined(__GNUC__) || defined(__clang__)
#define WT_API_BEGIN _Pragma("GCC visibility push(default)")
#define WT_API_END _Pragma("GCC visibility pop")
#define WT_HIDDEN __attribute__((visibility("hidden")))
#else
#define WT_API_BEGIN
#define WT_API_END
#define WT_HIDDEN
#endif

#endif /* WT_VISIBILITY_H */
