/*
 * XRC (IBTA Vol. 1 Annex A14) over the daemon's XRC commands (docs/attach-protocol.md,
 * "XRC"): domains, XRC SRQs and XRC_RECV QPs. capi/xrc.c and capi/qp.c call these, as in
 * the Go flavour; XRC_SEND QPs are gv_create_qp's (gva_qp.c).
 */
#include <errno.h>
#include <stdlib.h>
#include "gva.h"

/*
 * gv_open_xrcd opens the domain of fd's file (every process that opens the same file
 * shares it: the daemon fstat()s the descriptor we pass), or one of our own for fd -1.
 */
int gv_open_xrcd(uintptr_t ch, int fd, int oflags, uintptr_t *out)
{
	struct gva_dev *d = (struct gva_dev *)ch;
	uint8_t buf[GVA_MAX_MSG];
	struct gva_msg m;
	struct gva_rd r;
	struct gva_xrcd *x;
	int rc;

	if (!d || fd < -1)
		return EINVAL;
	x = calloc(1, sizeof(*x));
	if (!x)
		return ENOMEM;
	gva_msg_init(&m);
	gva_put32(&m, (uint32_t)oflags);
	if ((rc = gva_call(d, GVA_OPEN_XRCD, &m, fd >= 0 ? &fd : NULL, fd >= 0 ? 1 : 0, buf, &r, NULL, 0))) {
		free(x);
		return rc;
	}
	x->d = d;
	x->h = gva_get32(&r);
	if (r.short_) {
		gva_simple(d, GVA_CLOSE_XRCD, x->h);
		free(x);
		return EIO;
	}
	*out = (uintptr_t)x;
	return 0;
}

int gv_close_xrcd(uintptr_t h)
{
	struct gva_xrcd *x = (struct gva_xrcd *)h;
	int rc;

	if (!x)
		return EINVAL;
	rc = gva_simple(x->d, GVA_CLOSE_XRCD, x->h);
	if (rc && !gva_usable(x->d))
		return rc; /* EBUSY while SRQs or QPs made through it exist */
	free(x);
	return 0;
}

int gv_create_xrc_srq(uintptr_t ph, uintptr_t xh, uintptr_t cqh, struct ibv_srq_attr *a, void *srq, uintptr_t *out)
{
	struct gva_pd *p = (struct gva_pd *)ph;
	struct gva_xrcd *x = (struct gva_xrcd *)xh;
	struct gva_cq *c = (struct gva_cq *)cqh;
	struct gva_msg m;

	if (!p || !x || !c || x->d != p->d || c->d != p->d || a->max_sge > GVA_MAX_SGE)
		return EINVAL;
	gva_msg_init(&m);
	gva_put32(&m, p->h);
	gva_put32(&m, x->h);
	gva_put32(&m, c->h);
	gva_put32(&m, a->max_wr);
	gva_put32(&m, a->max_sge);
	gva_put32(&m, a->srq_limit);
	return gva_srq_create(p, GVA_CREATE_XRC_SRQ, &m, a, srq, out);
}

int gv_get_srq_num(uintptr_t h, uint32_t *num)
{
	struct gva_srq *s = (struct gva_srq *)h;

	if (!s || !num)
		return EINVAL;
	*num = s->num; /* the daemon numbered it at creation; 0 for a basic SRQ */
	return 0;
}

/* An XRC_RECV QP has no queues: a handle and a number, modified and destroyed as any QP. */
int gv_create_xrc_recv_qp(uintptr_t xh, void *qp, uintptr_t *out, uint32_t *qpn)
{
	struct gva_xrcd *x = (struct gva_xrcd *)xh;
	uint8_t buf[GVA_MAX_MSG];
	struct gva_msg m;
	struct gva_rd r;
	struct gva_qp *q;
	int rc;

	if (!x)
		return EINVAL;
	q = calloc(1, sizeof(*q));
	if (!q)
		return ENOMEM;
	gva_msg_init(&m);
	gva_put32(&m, x->h);
	if ((rc = gva_call(x->d, GVA_CREATE_XRC_RECV_QP, &m, NULL, 0, buf, &r, NULL, 0))) {
		free(q);
		return rc;
	}
	q->d = x->d;
	q->type = IBV_QPT_XRC_RECV;
	q->h = gva_get32(&r);
	q->qpn = gva_get32(&r);
	if (r.short_) {
		gva_simple(x->d, GVA_DESTROY_QP, q->h);
		free(q);
		return EIO;
	}
	q->state = IBV_QPS_RESET;
	q->cobj = qp;
	*qpn = q->qpn;
	gva_track(q->d, GVA_EV_QP, q->h, qp);
	*out = (uintptr_t)q;
	return 0;
}
