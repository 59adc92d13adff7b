/*
 * The gv_* functions the C ABI layer calls: in the Go flavour the Go exports of this
 * package (cgo's generated header), in the C flavour (GOVERBS_ATTACH, capi/attach) C
 * functions over the attach protocol with the same prototypes.
 */
#ifndef GOVERBS_CAPI_GV_EXPORTS_H
#define GOVERBS_CAPI_GV_EXPORTS_H
#ifdef GOVERBS_ATTACH
#include "attach/gva.h"
#else
#include "_cgo_export.h"
#endif
#endif
