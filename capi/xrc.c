/*
 * XRC (IBTA Vol. 1 Annex A14): the verbs_context entries that <infiniband/verbs.h>'s
 * static inline ibv_open_xrcd, ibv_close_xrcd, ibv_create_srq_ex and ibv_get_srq_num
 * call (wired in ibv_open_device). The XRC QP types are in qp.c.
 */
#include <errno.h>
#include <stdlib.h>
#include "gv.h"
#include "gv_exports.h"

struct ibv_xrcd *gv_op_open_xrcd(struct ibv_context *context, struct ibv_xrcd_init_attr *attr)
{
	struct gv_xrcd *x;
	int rc;

	if (!context || !attr) {
		errno = EINVAL;
		return NULL;
	}
	/* As rdma-core's ibv_cmd_open_xrcd: unknown bits are EOPNOTSUPP, and both the fd and
	 * the open flags must be given. */
	if (attr->comp_mask >= IBV_XRCD_INIT_ATTR_RESERVED) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(attr->comp_mask & IBV_XRCD_INIT_ATTR_FD) || !(attr->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS)) {
		errno = EINVAL;
		return NULL;
	}
	if (gv_fork_guard())
		return NULL;
	x = calloc(1, sizeof(*x));
	if (!x) {
		errno = ENOMEM;
		return NULL;
	}
	rc = gv_open_xrcd(gv_ctx(context)->h, attr->fd, attr->oflags, &x->h);
	if (rc) {
		free(x);
		errno = rc;
		return NULL;
	}
	x->xrcd.context = context;
	return &x->xrcd;
}

int gv_op_close_xrcd(struct ibv_xrcd *xrcd)
{
	int rc;

	if (!xrcd)
		return EINVAL;
	if (gv_fork_guard())
		return ENOSYS;
	rc = gv_close_xrcd(((struct gv_xrcd *)xrcd)->h);
	if (rc)
		return rc;
	free(xrcd);
	return 0;
}

/*
 * ibv_create_srq_ex reaches here for what ibv_create_srq cannot make: an XRC SRQ (with
 * its PD, XRC domain and CQ), or a basic one described with the extended fields.
 */
struct ibv_srq *gv_op_create_srq_ex(struct ibv_context *context, struct ibv_srq_init_attr_ex *attr)
{
	const uint32_t known = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
			       IBV_SRQ_INIT_ATTR_CQ;
	enum ibv_srq_type type;
	struct gv_srq *s;
	int rc;

	if (!context || !attr || !(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd ||
	    attr->pd->context != context) {
		errno = EINVAL;
		return NULL;
	}
	if (attr->comp_mask & ~known) {
		errno = EOPNOTSUPP; /* tag matching and the like */
		return NULL;
	}
	type = (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) ? attr->srq_type : IBV_SRQT_BASIC;
	if (type == IBV_SRQT_BASIC)
		return ibv_create_srq(attr->pd, (struct ibv_srq_init_attr *)attr);
	if (type != IBV_SRQT_XRC) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) ||
	    !attr->xrcd || !attr->cq || attr->xrcd->context != context || attr->cq->context != context) {
		errno = EINVAL;
		return NULL;
	}
	if (gv_fork_guard())
		return NULL;
	s = calloc(1, sizeof(*s));
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	rc = gv_create_xrc_srq(((struct gv_pd *)attr->pd)->h, ((struct gv_xrcd *)attr->xrcd)->h,
			       ((struct gv_cq *)attr->cq)->h, &attr->attr, &s->srq, &s->h);
	if (rc) {
		free(s);
		errno = rc;
		return NULL;
	}
	return gv_srq_publish(s, attr->pd, attr->srq_context); /* attr->pd->context is context */
}

int gv_op_get_srq_num(struct ibv_srq *srq, uint32_t *srq_num)
{
	if (!srq || !srq_num)
		return EINVAL;
	if (gv_fork_guard())
		return ENOSYS;
	return gv_get_srq_num(((struct gv_srq *)srq)->h, srq_num);
}
