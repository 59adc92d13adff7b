// The C side of package cm on kernel devices (kernel_ibverbs.go): small wrappers over
// librdmacm that cgo calls, kept whole in one header that file alone includes.

#ifndef GOVERBS_CM_KERNEL_IBVERBS_H
#define GOVERBS_CM_KERNEL_IBVERBS_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <endian.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>

// gv_cm_event is an rdma_cm event flattened for Go: copied out of librdmacm's before
// the event is acknowledged, so nothing in it points into librdmacm's memory but the
// new id of a CONNECT_REQUEST, which lives until it is destroyed.
struct gv_cm_event {
	int event;
	int status;
	uint64_t tok;
	uint64_t listen_tok;
	struct rdma_cm_id *id;
	uint8_t priv[256];
	int priv_len;
	uint8_t responder_resources, initiator_depth, retry_count, rnr_retry_count, srq;
	uint32_t qp_num;
	// ud: the event carries rdma_ud_param, whose address vector and Q_Key follow.
	int ud;
	uint32_t qkey;
	uint8_t dgid[16];
	uint8_t sgid_index, hop_limit, traffic_class, sl, port_num;
	uint32_t flow_label;
	uint8_t local_ip[16], remote_ip[16];
	uint16_t local_port, remote_port;
	int local_family, remote_family;
};

// gv_sockaddr writes an IPv4 or IPv6 socket address as 16 bytes (IPv4-mapped for
// IPv4), a host-order port and the family; other families leave them zero.
static void gv_sockaddr(const struct sockaddr *sa, uint8_t ip[16], uint16_t *port, int *family)
{
	memset(ip, 0, 16);
	*port = 0;
	*family = 0;
	if (sa == NULL)
		return;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		ip[10] = ip[11] = 0xff;
		memcpy(ip + 12, &in->sin_addr, 4);
		*port = ntohs(in->sin_port);
		*family = AF_INET;
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		memcpy(ip, &in6->sin6_addr, 16);
		*port = ntohs(in6->sin6_port);
		*family = AF_INET6;
	}
}

// gv_get_event takes the next event off the channel, copies it and acknowledges it.
// It returns -1 with errno EAGAIN when the (non-blocking) channel is empty.
static int gv_get_event(struct rdma_event_channel *ch, struct gv_cm_event *out)
{
	struct rdma_cm_event *ev;
	const struct rdma_conn_param *p;

	if (rdma_get_cm_event(ch, &ev) != 0)
		return -1;
	memset(out, 0, sizeof(*out));
	out->event = ev->event;
	out->status = ev->status;
	out->tok = (uint64_t)(uintptr_t)ev->id->context;
	if (ev->listen_id != NULL)
		out->listen_tok = (uint64_t)(uintptr_t)ev->listen_id->context;
	if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
		out->id = ev->id;
		gv_sockaddr(rdma_get_local_addr(ev->id), out->local_ip, &out->local_port, &out->local_family);
		gv_sockaddr(rdma_get_peer_addr(ev->id), out->remote_ip, &out->remote_port, &out->remote_family);
	}
	// Connection events carry rdma_conn_param; those of UDP-port-space ids and
	// multicast joins an rdma_ud_param, whose first two fields are the same private
	// data and length.
	p = &ev->param.conn;
	if (p->private_data != NULL && p->private_data_len > 0) {
		out->priv_len = p->private_data_len; // a uint8_t: never past priv
		memcpy(out->priv, p->private_data, out->priv_len);
	}
	if (ev->id->ps == RDMA_PS_UDP || ev->id->ps == RDMA_PS_IPOIB || ev->event == RDMA_CM_EVENT_MULTICAST_JOIN) {
		const struct rdma_ud_param *u = &ev->param.ud;
		out->ud = 1;
		out->qp_num = u->qp_num;
		out->qkey = u->qkey;
		memcpy(out->dgid, u->ah_attr.grh.dgid.raw, 16);
		out->sgid_index = u->ah_attr.grh.sgid_index;
		out->hop_limit = u->ah_attr.grh.hop_limit;
		out->traffic_class = u->ah_attr.grh.traffic_class;
		out->flow_label = u->ah_attr.grh.flow_label;
		out->sl = u->ah_attr.sl;
		out->port_num = u->ah_attr.port_num;
	} else {
		out->responder_resources = p->responder_resources;
		out->initiator_depth = p->initiator_depth;
		out->retry_count = p->retry_count;
		out->rnr_retry_count = p->rnr_retry_count;
		out->srq = p->srq;
		out->qp_num = p->qp_num;
	}
	rdma_ack_cm_event(ev);
	return 0;
}

static int gv_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **id, uint64_t tok, int udp)
{
	return rdma_create_id(ch, id, (void *)(uintptr_t)tok, udp ? RDMA_PS_UDP : RDMA_PS_TCP);
}

static void gv_set_tok(struct rdma_cm_id *id, uint64_t tok) { id->context = (void *)(uintptr_t)tok; }

static socklen_t gv_make_sockaddr(struct sockaddr_storage *ss, int v4, const uint8_t ip[16], uint16_t port)
{
	memset(ss, 0, sizeof(*ss));
	if (v4) {
		struct sockaddr_in *in = (struct sockaddr_in *)ss;
		in->sin_family = AF_INET;
		memcpy(&in->sin_addr, ip + 12, 4);
		in->sin_port = htons(port);
		return sizeof(*in);
	}
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
	in6->sin6_family = AF_INET6;
	memcpy(&in6->sin6_addr, ip, 16);
	in6->sin6_port = htons(port);
	return sizeof(*in6);
}

static int gv_resolve_addr(struct rdma_cm_id *id, int v4, const uint8_t *src, const uint8_t *dst,
			   uint16_t dport, int timeout_ms)
{
	struct sockaddr_storage s, d;
	gv_make_sockaddr(&s, v4, src, 0);
	gv_make_sockaddr(&d, v4, dst, dport);
	return rdma_resolve_addr(id, (struct sockaddr *)&s, (struct sockaddr *)&d, timeout_ms);
}

static int gv_bind_listen(struct rdma_cm_id *id, int v4, const uint8_t *ip, uint16_t port, int backlog,
			  uint16_t *got)
{
	struct sockaddr_storage s;
	gv_make_sockaddr(&s, v4, ip, port);
	if (rdma_bind_addr(id, (struct sockaddr *)&s) != 0)
		return -1;
	if (rdma_listen(id, backlog) != 0)
		return -1;
	*got = ntohs(rdma_get_src_port(id));
	return 0;
}

/* gv_set_option is rdma_set_option at level RDMA_OPTION_ID with the value in the width
 * each option takes: a uint8_t for TOS and ACK_TIMEOUT, an int for REUSEADDR and AFONLY. */
static int gv_set_option(struct rdma_cm_id *id, int opt, uint32_t val)
{
	uint8_t b = (uint8_t)val;
	int i = (int)val;

	switch (opt) {
	case RDMA_OPTION_ID_TOS:
	case RDMA_OPTION_ID_ACK_TIMEOUT:
		return rdma_set_option(id, RDMA_OPTION_ID, opt, &b, sizeof b);
	default:
		return rdma_set_option(id, RDMA_OPTION_ID, opt, &i, sizeof i);
	}
}

static int gv_bind(struct rdma_cm_id *id, int v4, const uint8_t *ip)
{
	struct sockaddr_storage s;
	gv_make_sockaddr(&s, v4, ip, 0);
	return rdma_bind_addr(id, (struct sockaddr *)&s);
}

static int gv_join(struct rdma_cm_id *id, int v4, const uint8_t *ip, int send_only)
{
	struct sockaddr_storage s;
	struct rdma_cm_join_mc_attr_ex mc;

	gv_make_sockaddr(&s, v4, ip, 0);
	if (!send_only)
		return rdma_join_multicast(id, (struct sockaddr *)&s, NULL);
	memset(&mc, 0, sizeof(mc));
	mc.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	mc.join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
	mc.addr = (struct sockaddr *)&s;
	return rdma_join_multicast_ex(id, &mc, NULL);
}

// gv_bound_device binds a throwaway id to ip and names the device the kernel's rdma_cm
// chose for it; NULL when the address is on no RDMA device.
static const char *gv_bound_device(int v4, const uint8_t *ip)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct sockaddr_storage s;
	const char *name = NULL;

	ch = rdma_create_event_channel();
	if (ch == NULL)
		return NULL;
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0) {
		gv_make_sockaddr(&s, v4, ip, 0);
		if (rdma_bind_addr(id, (struct sockaddr *)&s) == 0 && id->verbs != NULL)
			name = ibv_get_device_name(id->verbs->device); // librdmacm's, lives on
		rdma_destroy_id(id);
	}
	rdma_destroy_event_channel(ch);
	return name;
}

static int gv_conn(struct rdma_cm_id *id, int accept, const uint8_t *priv, int priv_len, uint8_t resp_res,
		   uint8_t init_depth, uint8_t retry, uint8_t rnr_retry, uint8_t srq, uint32_t qpn)
{
	struct rdma_conn_param p;
	memset(&p, 0, sizeof(p));
	p.private_data = priv_len > 0 ? priv : NULL;
	p.private_data_len = (uint8_t)priv_len;
	p.responder_resources = resp_res;
	p.initiator_depth = init_depth;
	p.flow_control = 1;
	p.retry_count = retry;
	p.rnr_retry_count = rnr_retry;
	p.srq = srq;
	p.qp_num = qpn;
	return accept ? rdma_accept(id, &p) : rdma_connect(id, &p);
}

static int gv_init_qp_attr(struct rdma_cm_id *id, int state, struct ibv_qp_attr *attr, int *mask)
{
	memset(attr, 0, sizeof(*attr));
	attr->qp_state = state;
	return rdma_init_qp_attr(id, attr, mask);
}

static const char *gv_id_device(struct rdma_cm_id *id, uint64_t *guid)
{
	if (id->verbs == NULL)
		return NULL;
	*guid = be64toh(ibv_get_device_guid(id->verbs->device));
	return ibv_get_device_name(id->verbs->device);
}

static void gv_local_addr(struct rdma_cm_id *id, uint8_t ip[16], uint16_t *port, int *family)
{
	gv_sockaddr(rdma_get_local_addr(id), ip, port, family);
}

#endif
