//go:build ibverbs

#include <endian.h>
#include <string.h>
#include "shim.h"

int gv_post_send(struct ibv_qp *qp, const struct gv_send_wr *in, int n, struct ibv_send_wr *wrs,
		 struct ibv_sge *sges, int max_sge, int *bad)
{
	struct ibv_send_wr *bad_wr = NULL;
	int i, rc;

	for (i = 0; i < n; i++) {
		const struct gv_send_wr *g = &in[i];
		struct ibv_send_wr *w = &wrs[i];

		memset(w, 0, sizeof(*w));
		w->wr_id = g->wr_id;
		w->next = i + 1 < n ? &wrs[i + 1] : NULL;
		w->sg_list = &sges[(size_t)i * max_sge];
		w->num_sge = g->num_sge;
		w->opcode = g->opcode;
		w->send_flags = g->send_flags;
		switch (g->opcode) {
		case IBV_WR_SEND_WITH_IMM:
		case IBV_WR_RDMA_WRITE_WITH_IMM:
			w->imm_data = htobe32(g->imm); // __be32 on the wire and in the WR
			break;
		case IBV_WR_SEND_WITH_INV:
		case IBV_WR_LOCAL_INV:
			w->invalidate_rkey = g->imm;
			break;
		default:
			break;
		}
		switch (g->opcode) {
		case IBV_WR_RDMA_WRITE:
		case IBV_WR_RDMA_WRITE_WITH_IMM:
		case IBV_WR_RDMA_READ:
			w->wr.rdma.remote_addr = g->remote_addr;
			w->wr.rdma.rkey = g->rkey;
			break;
		case IBV_WR_ATOMIC_CMP_AND_SWP:
		case IBV_WR_ATOMIC_FETCH_AND_ADD:
			w->wr.atomic.remote_addr = g->remote_addr;
			w->wr.atomic.rkey = g->rkey;
			w->wr.atomic.compare_add = g->compare_add;
			w->wr.atomic.swap = g->swap;
			break;
		case IBV_WR_BIND_MW:
			w->bind_mw.mw = g->mw;
			w->bind_mw.rkey = g->bind_rkey;
			w->bind_mw.bind_info.mr = g->bind_mr;
			w->bind_mw.bind_info.addr = g->bind_addr;
			w->bind_mw.bind_info.length = g->bind_length;
			w->bind_mw.bind_info.mw_access_flags = g->bind_access;
			break;
		default:
			break;
		}
		w->qp_type.xrc.remote_srqn = g->remote_srqn; // read for XRC_SEND QPs only
		if (g->ah != NULL) { // UD: the destination travels in every WR
			w->wr.ud.ah = g->ah;
			w->wr.ud.remote_qpn = g->remote_qpn;
			w->wr.ud.remote_qkey = g->remote_qkey;
		}
	}
	rc = ibv_post_send(qp, wrs, &bad_wr);
	*bad = bad_wr != NULL ? (int)(bad_wr - wrs) : 0;
	return rc;
}

int gv_post_recv(struct ibv_qp *qp, struct ibv_srq *srq, struct ibv_recv_wr *wrs, int n,
		 struct ibv_sge *sges, int max_sge, int *bad)
{
	struct ibv_recv_wr *bad_wr = NULL;
	int i, rc;

	for (i = 0; i < n; i++) { // wr_id and num_sge are the Go side's
		wrs[i].next = i + 1 < n ? &wrs[i + 1] : NULL;
		wrs[i].sg_list = &sges[(size_t)i * max_sge];
	}
	if (srq != NULL)
		rc = ibv_post_srq_recv(srq, wrs, &bad_wr);
	else
		rc = ibv_post_recv(qp, wrs, &bad_wr);
	*bad = bad_wr != NULL ? (int)(bad_wr - wrs) : 0;
	return rc;
}

int gv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *scratch, struct gv_wc *out, int kernel_flags)
{
	int i, got = ibv_poll_cq(cq, n, scratch);

	for (i = 0; i < got; i++) {
		const struct ibv_wc *w = &scratch[i];
		struct gv_wc *g = &out[i];
		uint32_t flags = w->wc_flags;

		if (kernel_flags && (flags & IBV_WC_IP_CSUM_OK))
			flags = (flags & ~IBV_WC_IP_CSUM_OK) | IBV_WC_WITH_INV;
		g->wr_id = w->wr_id;
		g->status = (uint8_t)w->status;
		g->opcode = (uint8_t)w->opcode;
		g->pad = 0;
		g->byte_len = w->byte_len;
		g->imm = 0;
		if (flags & IBV_WC_WITH_INV)
			g->imm = w->invalidated_rkey;
		else if (flags & IBV_WC_WITH_IMM)
			g->imm = be32toh(w->imm_data);
		g->qp_num = w->qp_num;
		g->src_qp = w->src_qp;
		g->wc_flags = flags & (IBV_WC_GRH | IBV_WC_WITH_IMM | IBV_WC_WITH_INV);
		g->vendor_err = w->vendor_err;
	}
	return got;
}

int gv_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
	return ibv_query_port(ctx, port, attr); // a macro in verbs.h, out of cgo's reach
}

uint64_t gv_device_guid(struct ibv_device *dev) { return be64toh(ibv_get_device_guid(dev)); }

uint64_t gv_be64(uint64_t v) { return be64toh(v); }

int gv_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, uint64_t wr_id, unsigned int flags,
	       struct ibv_mr *mr, uint64_t addr, uint64_t length, unsigned int access,
	       uint32_t *rkey)
{
	struct ibv_mw_bind b;
	int rc;

	memset(&b, 0, sizeof(b));
	b.wr_id = wr_id;
	b.send_flags = flags;
	b.bind_info.mr = mr;
	b.bind_info.addr = addr;
	b.bind_info.length = length;
	b.bind_info.mw_access_flags = access;
	rc = ibv_bind_mw(qp, mw, &b);
	*rkey = mw->rkey;
	return rc;
}

int gv_set_ah(struct ibv_ah_attr *ah, const uint8_t *dgid, uint8_t sgid_index, uint8_t hop_limit,
	      uint8_t traffic_class, uint32_t flow_label, uint8_t sl, uint8_t port)
{
	memset(ah, 0, sizeof(*ah));
	ah->is_global = 1; // RoCE: every packet carries a GRH (IBTA A16/A17)
	memcpy(ah->grh.dgid.raw, dgid, 16);
	ah->grh.sgid_index = sgid_index;
	ah->grh.hop_limit = hop_limit;
	ah->grh.traffic_class = traffic_class;
	ah->grh.flow_label = flow_label;
	ah->sl = sl;
	ah->port_num = port;
	return 0;
}

int gv_async_event(struct ibv_context *ctx, struct ibv_async_event *ev, void **obj, int *port)
{
	if (ibv_get_async_event(ctx, ev) != 0)
		return -1;
	*obj = NULL;
	*port = 0;
	switch (ev->event_type) {
	case IBV_EVENT_CQ_ERR:
		*obj = ev->element.cq;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		*obj = ev->element.srq;
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		*port = ev->element.port_num;
		break;
	case IBV_EVENT_DEVICE_FATAL:
		break;
	default: // the QP events
		*obj = ev->element.qp;
		break;
	}
	return 0;
}

struct ibv_xrcd *gv_open_xrcd(struct ibv_context *ctx, int fd, int oflags)
{
	struct ibv_xrcd_init_attr a = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.fd = fd,
		.oflags = oflags,
	};

	return ibv_open_xrcd(ctx, &a);
}

int gv_close_xrcd(struct ibv_xrcd *xrcd) { return ibv_close_xrcd(xrcd); }

struct ibv_srq *gv_create_xrc_srq(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_xrcd *xrcd,
				  struct ibv_cq *cq, struct ibv_srq_attr *attr)
{
	struct ibv_srq_init_attr_ex a;
	struct ibv_srq *s;

	memset(&a, 0, sizeof(a));
	a.attr = *attr;
	a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
	a.srq_type = IBV_SRQT_XRC;
	a.pd = pd;
	a.xrcd = xrcd;
	a.cq = cq;
	s = ibv_create_srq_ex(ctx, &a);
	if (s)
		*attr = a.attr; // what the device gave
	return s;
}

int gv_get_srq_num(struct ibv_srq *srq, uint32_t *num) { return ibv_get_srq_num(srq, num); }

// gv_create_xrc_qp creates an XRC_RECV QP in xrcd (pd NULL) or an XRC_SEND QP on pd.
struct ibv_qp *gv_create_xrc_qp(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_xrcd *xrcd,
				struct ibv_cq *send_cq, struct ibv_qp_cap *cap, int sq_sig_all)
{
	struct ibv_qp_init_attr_ex a;
	struct ibv_qp *q;

	memset(&a, 0, sizeof(a));
	if (xrcd) {
		a.qp_type = IBV_QPT_XRC_RECV;
		a.comp_mask = IBV_QP_INIT_ATTR_XRCD;
		a.xrcd = xrcd;
	} else {
		a.qp_type = IBV_QPT_XRC_SEND;
		a.comp_mask = IBV_QP_INIT_ATTR_PD;
		a.pd = pd;
		a.send_cq = send_cq;
		a.cap = *cap;
		a.sq_sig_all = sq_sig_all;
	}
	q = ibv_create_qp_ex(ctx, &a);
	if (q)
		*cap = a.cap;
	return q;
}
