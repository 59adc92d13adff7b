/*
 * rdmacm_opts: rdma_set_option and rdma_notify on goverbs' librdmacm. One process is
 * both sides of a connection on the device at argv[1]: the client sets TOS and
 * ACK_TIMEOUT before resolving, the server its own ACK_TIMEOUT on the new id; both QPs,
 * brought up by librdmacm, must show the traffic class and the ACK timeouts through
 * ibv_query_qp. The server notifies COMM_EST before the client has even read its
 * CONNECT_RESPONSE (so before any RTU was sent): that establishes the server's id; a
 * second COMM_EST is EISCONN, another event EINVAL. A SEND then crosses. Prints "ok".
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/rdma_cma.h>

#define CHECK(c, ...)                                                                                             \
	do {                                                                                                      \
		if (!(c)) {                                                                                       \
			fprintf(stderr, "line %d: ", __LINE__);                                                   \
			fprintf(stderr, __VA_ARGS__);                                                             \
			fprintf(stderr, "\n");                                                                    \
			exit(1);                                                                                  \
		}                                                                                                 \
	} while (0)

/* next returns the channel's next event, which must be of type want. */
static struct rdma_cm_id *next(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *e;
	struct rdma_cm_id *id;

	CHECK(rdma_get_cm_event(ch, &e) == 0, "rdma_get_cm_event: %s", strerror(errno));
	CHECK(e->event == want, "event %s (status %d), want %s", rdma_event_str(e->event), e->status,
	      rdma_event_str(want));
	id = e->id;
	rdma_ack_cm_event(e);
	return id;
}

static void qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a = { .qp_type = IBV_QPT_RC, .cap = { 4, 4, 1, 1, 0 } };

	CHECK(rdma_create_qp(id, NULL, &a) == 0, "rdma_create_qp: %s", strerror(errno));
}

/* path checks a QP's traffic class and ACK timeout. */
static void path(const char *who, struct rdma_cm_id *id, uint8_t tc, uint8_t timeout)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	CHECK(ibv_query_qp(id->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_TIMEOUT, &ia) == 0, "ibv_query_qp");
	CHECK(a.qp_state == IBV_QPS_RTS && a.ah_attr.grh.traffic_class == tc && a.timeout == timeout,
	      "%s's QP: state %d, traffic class %#x, timeout %u; want RTS, %#x, %u", who, a.qp_state,
	      a.ah_attr.grh.traffic_class, a.timeout, tc, timeout);
}

static void poll1(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	int n;

	for (long i = 0; i < 100000000; i++) {
		n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0, "ibv_poll_cq");
		if (n == 1) {
			CHECK(wc.status == IBV_WC_SUCCESS, "completion %s", ibv_wc_status_str(wc.status));
			return;
		}
	}
	CHECK(0, "no completion");
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *sch, *cch;
	struct rdma_cm_id *lid, *cid, *sid;
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct rdma_conn_param p = { .responder_resources = 1, .initiator_depth = 1, .retry_count = 7,
				     .rnr_retry_count = 7 };
	uint8_t tos = 0xb8, ct = 12, st = 16, bad = 32;
	char *buf, *rbuf; /* page-aligned heap buffers: the C flavour maps a registered range's pages */
	struct ibv_mr *smr, *cmr;
	struct ibv_sge sge;
	struct ibv_recv_wr rwr = { .sg_list = &sge, .num_sge = 1 }, *rbad;
	struct ibv_send_wr swr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
			   *sbad;

	CHECK(argc == 2 && inet_pton(AF_INET, argv[1], &a.sin_addr) == 1, "usage: rdmacm_opts ADDR");
	CHECK((sch = rdma_create_event_channel()) && (cch = rdma_create_event_channel()), "channels");
	CHECK(rdma_create_id(sch, &lid, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(rdma_bind_addr(lid, (struct sockaddr *)&a) == 0, "rdma_bind_addr: %s", strerror(errno));
	CHECK(rdma_listen(lid, 4) == 0, "rdma_listen: %s", strerror(errno));
	a.sin_port = rdma_get_src_port(lid);

	CHECK(rdma_create_id(cch, &cid, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	/* before the id has a device: kept, and given to the daemon with the id */
	CHECK(rdma_set_option(cid, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos)) == 0, "TOS: %s",
	      strerror(errno));
	CHECK(rdma_set_option(cid, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &bad, sizeof(bad)) == -1 &&
		      errno == EINVAL,
	      "ACK timeout 32 was taken");
	CHECK(rdma_set_option(cid, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ct, sizeof(ct)) == 0,
	      "ACK_TIMEOUT: %s", strerror(errno));
	CHECK(rdma_resolve_addr(cid, NULL, (struct sockaddr *)&a, 2000) == 0, "rdma_resolve_addr: %s",
	      strerror(errno));
	next(cch, RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(rdma_resolve_route(cid, 2000) == 0, "rdma_resolve_route");
	next(cch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	qp(cid);
	CHECK(rdma_connect(cid, &p) == 0, "rdma_connect: %s", strerror(errno));

	sid = next(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	qp(sid);
	/* on an id the daemon knows: sent at once */
	CHECK(rdma_set_option(sid, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &st, sizeof(st)) == 0,
	      "ACK_TIMEOUT on the new id: %s", strerror(errno));
	CHECK(rdma_notify(sid, IBV_EVENT_COMM_EST) == -1 && errno == EINVAL, "COMM_EST before rdma_accept");
	CHECK(rdma_accept(sid, &p) == 0, "rdma_accept: %s", strerror(errno));
	/* The client has not read its CONNECT_RESPONSE: no RTU yet. COMM_EST establishes. */
	CHECK(rdma_notify(sid, IBV_EVENT_PATH_MIG) == -1 && errno == EINVAL, "PATH_MIG was taken");
	CHECK(rdma_notify(sid, IBV_EVENT_COMM_EST) == 0, "rdma_notify COMM_EST: %s", strerror(errno));
	next(sch, RDMA_CM_EVENT_ESTABLISHED);
	CHECK(rdma_notify(sid, IBV_EVENT_COMM_EST) == -1 && errno == EISCONN, "COMM_EST again: %s",
	      strerror(errno));
	next(cch, RDMA_CM_EVENT_ESTABLISHED);

	path("client", cid, tos, ct);
	path("server", sid, tos, st);

	CHECK(posix_memalign((void **)&buf, 4096, 4096) == 0 && posix_memalign((void **)&rbuf, 4096, 4096) == 0,
	      "posix_memalign");
	memset(rbuf, 0, 64);
	strcpy(buf, "with tos");
	CHECK((smr = ibv_reg_mr(sid->pd, rbuf, 64, IBV_ACCESS_LOCAL_WRITE)), "ibv_reg_mr");
	CHECK((cmr = ibv_reg_mr(cid->pd, buf, 64, IBV_ACCESS_LOCAL_WRITE)), "ibv_reg_mr");
	sge = (struct ibv_sge){ (uintptr_t)rbuf, 64, smr->lkey };
	CHECK(ibv_post_recv(sid->qp, &rwr, &rbad) == 0, "ibv_post_recv");
	sge = (struct ibv_sge){ (uintptr_t)buf, 64, cmr->lkey };
	CHECK(ibv_post_send(cid->qp, &swr, &sbad) == 0, "ibv_post_send");
	poll1(cid->send_cq);
	poll1(sid->recv_cq);
	CHECK(strcmp(rbuf, "with tos") == 0, "received %.64s", rbuf);

	CHECK(rdma_disconnect(cid) == 0, "rdma_disconnect");
	next(cch, RDMA_CM_EVENT_DISCONNECTED);
	next(sch, RDMA_CM_EVENT_DISCONNECTED);
	ibv_dereg_mr(smr);
	ibv_dereg_mr(cmr);
	free(buf);
	free(rbuf);
	rdma_destroy_qp(sid);
	rdma_destroy_qp(cid);
	rdma_destroy_id(sid);
	rdma_destroy_id(cid);
	rdma_destroy_id(lid);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	printf("ok\n");
	return 0;
}
