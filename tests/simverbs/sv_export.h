/*
 * simverbs: what leaves libibverbs.so.1 and under which version.
 *
 * The library is compiled with -fvisibility=hidden so that the fabric code
 * linked into it stays private; SV_EXPORT marks the few definitions that make
 * up rdma-core's ABI.  libibverbs.map then decides which version node each
 * exported name belongs to.
 */
#ifndef SIMVERBS_SV_EXPORT_H
#define SIMVERBS_SV_EXPORT_H

#define SV_EXPORT __attribute__((visibility("default")))

/*
 * SV_SYMVER(fn, "name@VERSION") binds the already defined function `fn` to a
 * non-default version of `name` (a compat symbol), or with "@@" to its
 * default version.  Write it at file scope, after the definition of `fn`,
 * which must also be SV_EXPORT: a hidden definition would give a hidden
 * versioned symbol, which the dynamic linker never sees.
 *
 * GCC >= 10 has the symver attribute, which also survives LTO; compilers
 * without it (clang 14) get the classic assembler directive.
 */
#if defined(__has_attribute)
#if __has_attribute(symver)
#define SV_HAVE_SYMVER_ATTR 1
#endif
#endif

#ifdef SV_HAVE_SYMVER_ATTR
#define SV_SYMVER(fn, sym) extern __typeof__(fn) fn __attribute__((symver(sym)))
#else
#define SV_SYMVER(fn, sym) __asm__(".symver " #fn ", " sym)
#endif

#endif
