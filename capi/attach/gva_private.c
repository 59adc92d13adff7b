/*
 * GOVERBS_PRIVATE_1: what goverbs' own librdmacm.so.1 (capi/rdmacm) needs of this
 * library, and nothing else may rely on. librdmacm speaks the daemon's rdma_cm service
 * (docs/attach-protocol.md, ops 29-45, 50 and 51) on the connection of the context it opened, so
 * that the QPs it connects are that connection's, and it runs its event thread as one
 * of the library's threads (which never touch the program's memory, see gva_mem.c).
 * A separate file so that the rest of capi/attach is untouched by the rdma_cm work.
 */
#include <errno.h>
#include <string.h>
#include "gva.h"
#include "../gv.h"

/*
 * goverbs_attach_command sends one command (op, with the payload req of reqlen bytes)
 * on ctx's control connection and reads its reply: 0 with the payload copied into rep
 * (*replen bytes, at most repcap) and exactly want_fds descriptors in fds; else a
 * positive errno (the daemon's, or EIO once it is gone). Only the rdma_cm ops (29-45,
 * 50, 51) are allowed: verbs objects (XRC's 46-49 among them) are this library's to make.
 */
int goverbs_attach_command(struct ibv_context *ctx, unsigned op, const void *req, size_t reqlen, void *rep,
			   size_t repcap, size_t *replen, int *fds, int want_fds)
{
	struct gva_msg m;
	struct gva_rd r;
	uint8_t buf[GVA_MAX_MSG];
	struct gva_dev *d;
	int rc;

	if (!ctx || op < 29 || (op > 45 && op != 50 && op != 51) || (reqlen && !req) || want_fds < 0 ||
	    want_fds > GVA_MAX_FDS || (want_fds && !fds))
		return EINVAL;
	d = (struct gva_dev *)gv_ctx(ctx)->h;
	if (!d)
		return EINVAL;
	gva_msg_init(&m);
	gva_putn(&m, req, reqlen);
	if ((rc = gva_call(d, (uint16_t)op, &m, NULL, 0, buf, &r, fds, want_fds)))
		return rc;
	if (r.n > repcap)
		return EPROTO;
	if (r.n)
		memcpy(rep, r.p, r.n);
	if (replen)
		*replen = r.n;
	return 0;
}

/*
 * goverbs_attach_qp says whether qp is a live QP of ctx (0, with its daemon handle and
 * number) or not (ENOENT), without reading through qp: librdmacm asks before it touches
 * an id's QP, which a program may have destroyed with ibv_destroy_qp (rping does).
 */
int goverbs_attach_qp(struct ibv_context *ctx, struct ibv_qp *qp, uint32_t *handle, uint32_t *qpn)
{
	struct gva_dev *d;
	int rc = ENOENT;

	if (!ctx || !qp)
		return EINVAL;
	d = (struct gva_dev *)gv_ctx(ctx)->h;
	if (!d)
		return EINVAL;
	pthread_mutex_lock(&d->objmu);
	for (size_t i = 0; i < d->nobjs; i++) {
		if (d->objs[i].kind == GVA_EV_QP && d->objs[i].obj == (void *)qp) {
			if (handle)
				*handle = d->objs[i].h;
			rc = 0;
			break;
		}
	}
	pthread_mutex_unlock(&d->objmu);
	if (!rc && qpn)
		*qpn = qp->qp_num;
	return rc;
}

/* goverbs_attach_thread starts a library thread (signals blocked, not counted as the program's). */
int goverbs_attach_thread(pthread_t *t, void *(*fn)(void *), void *arg)
{
	return gva_thread(t, fn, arg);
}

/* goverbs_attach_join joins a thread goverbs_attach_thread started. */
void goverbs_attach_join(pthread_t t)
{
	gva_join(t);
}

/*
 * Parked threads. A program thread blocked inside librdmacm's rdma_get_cm_event (rping's
 * cm_thread) cannot write the program's memory until it returns, so while it is parked
 * there, registering a buffer that shares its pages is as safe as in a program of one
 * thread (gva_mem.c). It parks with goverbs_attach_park before it blocks and unparks with
 * goverbs_attach_unpark before it returns to the program; unparking waits while a
 * registration moves pages (gva_move_begin/end hold the lock for writing).
 */
static int gva_parked, gva_parking;
static pthread_rwlock_t gva_move_rw = PTHREAD_RWLOCK_INITIALIZER;

void goverbs_attach_park(void)
{
	__atomic_store_n(&gva_parking, 1, __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&gva_parked, 1, __ATOMIC_SEQ_CST);
}

void goverbs_attach_unpark(void)
{
	pthread_rwlock_rdlock(&gva_move_rw);
	__atomic_sub_fetch(&gva_parked, 1, __ATOMIC_SEQ_CST);
	pthread_rwlock_unlock(&gva_move_rw);
}

int gva_parked_threads(void)
{
	return __atomic_load_n(&gva_parked, __ATOMIC_SEQ_CST);
}

int gva_parking_used(void)
{
	return __atomic_load_n(&gva_parking, __ATOMIC_SEQ_CST);
}

void gva_move_begin(void)
{
	pthread_rwlock_wrlock(&gva_move_rw);
}

void gva_move_end(void)
{
	pthread_rwlock_unlock(&gva_move_rw);
}
